//! Interactive mode: a prompt, streamed answers, a spinner, decisions on pending
//! calls, ESC to interrupt a run (raw mode only while one is in flight), Ctrl-C to
//! quit.

use std::collections::VecDeque;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::style::Stylize;
use reins::agent::Interrupter;
use reins::prelude::*;
use serde_json::Value;

use crate::out::say;
use crate::render::{self, Printer, Style};
use crate::{AGENT, Setup};

const HELP: &str = "\
commands:
  /help      this text
  /history   the conversation so far (as stored)
  /sandbox   the files the tools can touch
  /resume    answer the calls the agent is waiting for
  /quit      leave (a pending call stays stored: `cargo xtask demo --resume`)
keys while the agent works: ESC interrupts it, Ctrl-C interrupts and quits.
try: `delete temp.txt`, `email bob@example.com about lunch`, `search for tea`,
     `do a slow search for tea` (then press ESC), `what happened?`";

/// What the person did while a run was in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keys {
    None,
    Esc,
    CtrlC,
}

/// Watches the keyboard in raw mode while a run is in flight; restores the terminal
/// when stopped or dropped.
struct KeyWatcher {
    stop: Arc<AtomicBool>,
    pressed: Arc<AtomicU8>,
    /// Fires once when ESC or Ctrl-C is pressed, so the screen can say so at once.
    keys: tokio::sync::mpsc::UnboundedReceiver<Keys>,
    /// What the person typed while the agent worked: finished lines, and the rest.
    typed: Arc<Mutex<(Vec<String>, String)>>,
    task: Option<tokio::task::JoinHandle<()>>,
    raw: bool,
}

impl KeyWatcher {
    fn start(interrupter: Interrupter) -> Self {
        let raw = crossterm::terminal::enable_raw_mode().is_ok();
        let stop = Arc::new(AtomicBool::new(false));
        let pressed = Arc::new(AtomicU8::new(0));
        let (tx, keys) = tokio::sync::mpsc::unbounded_channel();
        let typed = Arc::new(Mutex::new((Vec::new(), String::new())));
        let task = raw.then(|| {
            let (stop, pressed, typed) = (stop.clone(), pressed.clone(), typed.clone());
            tokio::task::spawn_blocking(move || {
                while !stop.load(Ordering::Relaxed) {
                    match event::poll(Duration::from_millis(40)) {
                        Ok(true) => {}
                        Ok(false) => continue,
                        Err(_) => return,
                    }
                    let Ok(Event::Key(k)) = event::read() else {
                        continue;
                    };
                    if k.kind != KeyEventKind::Press {
                        continue;
                    }
                    let ctrl_c =
                        k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if let Ok(mut t) = typed.lock() {
                        match k.code {
                            KeyCode::Char(c) if !k.modifiers.contains(KeyModifiers::CONTROL) => {
                                t.1.push(c);
                            }
                            KeyCode::Backspace => {
                                t.1.pop();
                            }
                            KeyCode::Enter => {
                                let line = std::mem::take(&mut t.1);
                                t.0.push(line);
                            }
                            _ => {}
                        }
                    }
                    if k.code == KeyCode::Esc || ctrl_c {
                        pressed.store(if ctrl_c { 2 } else { 1 }, Ordering::Relaxed);
                        interrupter.interrupt();
                        let _ = tx.send(if ctrl_c { Keys::CtrlC } else { Keys::Esc });
                    }
                }
            })
        });
        Self {
            stop,
            pressed,
            keys,
            typed,
            task,
            raw,
        }
    }

    fn pressed(&self) -> Keys {
        match self.pressed.load(Ordering::Relaxed) {
            1 => Keys::Esc,
            2 => Keys::CtrlC,
            _ => Keys::None,
        }
    }

    /// Stops watching and restores the terminal; returns the keys pressed and what
    /// was typed meanwhile.
    async fn stop(mut self) -> (Keys, Vec<String>, String) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        self.restore();
        let (lines, rest) = self
            .typed
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        (self.pressed(), lines, rest)
    }

    fn restore(&mut self) {
        if self.raw {
            self.raw = false;
            let _ = crossterm::terminal::disable_raw_mode();
        }
    }
}

impl Drop for KeyWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.restore();
    }
}

/// Reads a line in cooked mode. `None` on end of input or Ctrl-C.
async fn read_line(prompt: &str) -> Option<String> {
    crate::out::write(format_args!("{prompt}"));
    let read = tokio::task::spawn_blocking(|| {
        let mut s = String::new();
        match std::io::stdin().read_line(&mut s) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(s.trim_end_matches(['\n', '\r']).to_owned()),
        }
    });
    tokio::select! {
        r = read => r.ok().flatten(),
        _ = tokio::signal::ctrl_c() => {
            say!();
            None
        }
    }
}

struct Chat<'a> {
    setup: &'a Setup,
    session: Session,
    printer: Printer,
    quit: bool,
    /// Lines typed while the agent worked, sent at the next prompt.
    queued: VecDeque<String>,
}

/// Runs the chat until `/quit`, end of input or Ctrl-C.
pub async fn run(setup: &Setup, resume: bool) -> ExitCode {
    let (_agent, session) = match setup.open().await {
        Ok(x) => x,
        Err(e) => {
            eprintln!("demo: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut lines = setup.banner();
    let title = lines.remove(0);
    say!("{}", title.bold());
    for l in lines {
        say!("{}", l.dark_grey());
    }
    say!(
        "{}",
        "Type a request (try `delete temp.txt`), /help for commands, ESC interrupts, Ctrl-C quits."
            .dark_grey()
    );
    let mut chat = Chat {
        setup,
        session,
        printer: Printer::new(Style::Terminal, AGENT),
        quit: false,
        queued: VecDeque::new(),
    };
    match chat.session.requirements().await {
        Ok(p) if !p.is_empty() && resume => {
            chat.printer
                .line(&format!("\nResuming session `{}`:", setup.session_id));
            chat.decide(p).await;
        }
        Ok(p) if !p.is_empty() => chat.printer.note(&format!(
            "\nThis session waits for your decision on {} call(s): type /resume to answer, \
             or send a new message (the pending call is then rejected).",
            p.len()
        )),
        Ok(_) if resume => chat
            .printer
            .note("\nNothing is pending in this session; carry on."),
        Ok(_) => {}
        Err(e) => chat.printer.line(&format!("error: {e}")),
    }
    while !chat.quit {
        let prompt = format!("\n{} ", "you>".bold().blue());
        let line = match chat.queued.pop_front() {
            Some(l) => {
                // Typed while the agent worked: show it as if typed now.
                say!("{prompt}{l}");
                l
            }
            None => match read_line(&prompt).await {
                Some(l) => l,
                None => break,
            },
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with('/') {
            chat.command(line).await;
            continue;
        }
        match chat.session.send(Msg::user(line)).start().await {
            Ok(h) => chat.drive(h).await,
            Err(e) => chat.printer.line(&format!("error: {e}")),
        }
    }
    chat.goodbye().await;
    ExitCode::SUCCESS
}

impl Chat<'_> {
    async fn command(&mut self, line: &str) {
        let cmd = line.split_whitespace().next().unwrap_or(line);
        match cmd {
            "/quit" | "/exit" | "/q" => self.quit = true,
            "/help" | "/?" => self.printer.line(HELP),
            "/history" => match self.session.messages().await {
                Ok(m) => {
                    for l in render::history(&m, AGENT) {
                        self.printer.line(&l);
                    }
                }
                Err(e) => self.printer.line(&format!("error: {e}")),
            },
            "/sandbox" => {
                let sb = &self.setup.sandbox;
                self.printer.line(&format!("{}:", sb.root().display()));
                let files = sb.list();
                if files.is_empty() {
                    self.printer.line("  (empty)");
                }
                for (name, size) in files {
                    self.printer.line(&format!("  {name:<32} {size:>6} bytes"));
                }
            }
            "/resume" => match self.session.requirements().await {
                Ok(p) if p.is_empty() => self.printer.line("Nothing is pending."),
                Ok(p) => self.decide(p).await,
                Err(e) => self.printer.line(&format!("error: {e}")),
            },
            other => self
                .printer
                .line(&format!("unknown command `{other}`; /help lists them")),
        }
    }

    /// Streams a run, watching for ESC, then handles how it ended.
    async fn drive(&mut self, mut h: RunHandle) {
        let mut watcher = KeyWatcher::start(h.interrupter());
        self.printer.raw = watcher.raw;
        self.printer.partial_text = false;
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let mut announced = false;
        loop {
            tokio::select! {
                biased;
                Some(k) = watcher.keys.recv(), if !announced => {
                    announced = true;
                    self.printer.note(if k == Keys::CtrlC {
                        "⏹ interrupting, then quitting…"
                    } else {
                        "⏹ interrupting…"
                    });
                }
                ev = h.next_event() => match ev {
                    Some(ev) => self.printer.event(&ev),
                    None => break,
                },
                _ = tick.tick() => self.printer.tick(),
            }
        }
        let out = h.wait().await;
        let (keys, lines, rest) = watcher.stop().await;
        self.printer.raw = false;
        self.printer.finish();
        self.queued
            .extend(lines.into_iter().filter(|l| !l.trim().is_empty()));
        if !rest.trim().is_empty() {
            self.printer.note(&format!(
                "(not sent — typed without Enter while the agent worked: {rest:?})"
            ));
        }
        if keys == Keys::CtrlC {
            self.quit = true;
        }
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                self.printer.line(&format!("error: {e}"));
                return;
            }
        };
        match out.status {
            RunStatus::Completed if out.empty_answer => self
                .printer
                .note("(the model returned an empty answer; try again or rephrase)"),
            RunStatus::Completed => {}
            RunStatus::MaxIterations => self
                .printer
                .note("(the agent reached its step limit and summarized)"),
            RunStatus::Cancelled => {
                let summary = match self.session.messages().await {
                    Ok(m) => render::interrupt_summary(&m, self.printer.partial_text),
                    Err(e) => format!("interrupted (could not read the transcript: {e})"),
                };
                self.printer
                    .line(&format!("{}", format!("⏹ {summary}").yellow()));
            }
            RunStatus::Paused if self.quit => {}
            RunStatus::Paused if out.requirements.is_empty() => {
                // A hook stopped the run after its tools ran: go on.
                match self.session.resume().start().await {
                    Ok(h) => Box::pin(self.drive(h)).await,
                    Err(e) => self.printer.line(&format!("error: {e}")),
                }
            }
            RunStatus::Paused => Box::pin(self.decide(out.requirements)).await,
        }
    }

    /// Asks the person about each pending call, then resolves them.
    async fn decide(&mut self, pending: Vec<Requirement>) {
        // A decision needs an answer given after seeing the question.
        if !self.queued.is_empty() {
            let n = self.queued.len();
            self.queued.clear();
            self.printer.note(&format!(
                "(dropped {n} line(s) typed while the agent worked: a pending call needs a fresh answer)"
            ));
        }
        let mut decisions = Vec::new();
        for r in &pending {
            self.printer
                .line(&format!("{}", render::requirement(r, AGENT).magenta()));
            match self.ask(r).await {
                Some(Some(d)) => decisions.push(d),
                Some(None) => {
                    self.printer.note(
                        "Left pending. /resume answers it later; a new message rejects it; \
                         after /quit, `cargo xtask demo --resume` brings it back.",
                    );
                    return;
                }
                None => {
                    self.quit = true;
                    return;
                }
            }
        }
        match self.session.resolve(decisions).start().await {
            Ok(h) => self.drive(h).await,
            Err(e) => self.printer.line(&format!("error: {e}")),
        }
    }

    /// `Some(Some(decision))`, `Some(None)` to leave it pending, `None` to quit.
    async fn ask(&mut self, r: &Requirement) -> Option<Option<Decision>> {
        loop {
            let q = format!(
                "{} ",
                "[a]pprove / [r]eject / [e]dit arguments / [l]ater?".bold()
            );
            let answer = read_line(&q).await?;
            match answer.trim().to_lowercase().as_str() {
                "a" | "approve" | "y" | "yes" => {
                    return Some(Some(Decision::approve(&r.id).by("you")));
                }
                "r" | "reject" | "n" | "no" => {
                    let note = read_line("note for the agent (optional, Enter to skip): ").await?;
                    return Some(Some(Decision::reject(&r.id, note.trim()).by("you")));
                }
                "e" | "edit" => {
                    if let Some(args) = self.edit(&r.tool_use.input).await? {
                        return Some(Some(Decision::approve_with(&r.id, args).by("you")));
                    }
                }
                "l" | "later" => return Some(None),
                other => self
                    .printer
                    .line(&format!("`{other}` is not an answer: type a, r, e or l")),
            }
        }
    }

    /// Asks for new arguments until they are a JSON object. `Some(None)` goes back.
    async fn edit(&mut self, current: &Value) -> Option<Option<Value>> {
        self.printer.note(&format!(
            "current arguments: {}\nType the new arguments as one line of JSON (empty line to go back).",
            current
        ));
        loop {
            let text = read_line("new arguments> ").await?;
            let text = text.trim();
            if text.is_empty() {
                return Some(None);
            }
            match serde_json::from_str::<Value>(text) {
                Ok(v) if v.is_object() => return Some(Some(v)),
                Ok(_) => self
                    .printer
                    .line("the arguments must be a JSON object, like {\"path\": \"notes.md\"}"),
                Err(e) => self
                    .printer
                    .line(&format!("not valid JSON ({e}); try again")),
            }
        }
    }

    async fn goodbye(&mut self) {
        let pending = self
            .session
            .requirements()
            .await
            .map(|p| p.len())
            .unwrap_or(0);
        if pending > 0 {
            self.printer.line(&format!(
                "\nBye. {pending} call(s) still wait for you in session `{}`; \
                 `cargo xtask demo --resume` continues right there.",
                self.setup.session_id
            ));
        } else {
            self.printer.line(&format!(
                "\nBye. The conversation is stored in {}.",
                self.setup.db_path().display()
            ));
        }
    }
}
