//! Interactive mode: a prompt, streamed answers, a spinner, decisions on pending
//! calls, ESC to interrupt a run (raw mode only while one is in flight), Ctrl-C to
//! quit.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::style::Stylize;
use reins::agent::Interrupter;
use reins::prelude::*;
use serde_json::Value;

use super::render::{self, Printer, Style};
use super::{AGENT, Setup};

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
    task: Option<tokio::task::JoinHandle<()>>,
    raw: bool,
}

impl KeyWatcher {
    fn start(interrupter: Interrupter) -> Self {
        let raw = crossterm::terminal::enable_raw_mode().is_ok();
        let stop = Arc::new(AtomicBool::new(false));
        let pressed = Arc::new(AtomicU8::new(0));
        let task = raw.then(|| {
            let (stop, pressed) = (stop.clone(), pressed.clone());
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
                    if k.code == KeyCode::Esc || ctrl_c {
                        pressed.store(if ctrl_c { 2 } else { 1 }, Ordering::Relaxed);
                        interrupter.interrupt();
                    }
                }
            })
        });
        Self {
            stop,
            pressed,
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

    async fn stop(mut self) -> Keys {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        self.restore();
        self.pressed()
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
    print!("{prompt}");
    let _ = std::io::Write::flush(&mut std::io::stdout());
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
            println!();
            None
        }
    }
}

struct Chat<'a> {
    setup: &'a Setup,
    session: Session,
    printer: Printer,
    quit: bool,
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
    println!("{}", title.bold());
    for l in lines {
        println!("{}", l.dark_grey());
    }
    println!(
        "{}",
        "Type a request (try `delete temp.txt`), /help for commands, ESC interrupts, Ctrl-C quits."
            .dark_grey()
    );
    let mut chat = Chat {
        setup,
        session,
        printer: Printer::new(Style::Terminal, AGENT),
        quit: false,
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
        let Some(line) = read_line(&prompt).await else {
            break;
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with('/') {
            chat.command(line).await;
            continue;
        }
        match chat.session.start(Msg::user(line)).await {
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
        let watcher = KeyWatcher::start(h.interrupter());
        self.printer.raw = watcher.raw;
        self.printer.partial_text = false;
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let mut announced = false;
        loop {
            tokio::select! {
                ev = h.next_event() => match ev {
                    Some(ev) => self.printer.event(&ev),
                    None => break,
                },
                _ = tick.tick() => {
                    if !announced && watcher.pressed() != Keys::None {
                        announced = true;
                        self.printer.note("⏹ interrupting…");
                    }
                    self.printer.tick();
                }
            }
        }
        let out = h.wait().await;
        let keys = watcher.stop().await;
        self.printer.raw = false;
        self.printer.finish();
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
                match self.session.start_resume().await {
                    Ok(h) => Box::pin(self.drive(h)).await,
                    Err(e) => self.printer.line(&format!("error: {e}")),
                }
            }
            RunStatus::Paused => Box::pin(self.decide(out.requirements)).await,
        }
    }

    /// Asks the person about each pending call, then resolves them.
    async fn decide(&mut self, pending: Vec<Requirement>) {
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
        match self.session.start_resolve(decisions).await {
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
