//! Script mode: replay a scripted session without a terminal, printing the transcript,
//! and (with `--check`) assert every `expect…` line.
//!
//! The format is described in `crates/reins-demo/scripts/README.md`.

use std::process::ExitCode;

use reins::message::Role;
use reins::prelude::*;
use serde_json::Value;

use crate::out::say;
use crate::render::{self, Printer, Style};
use crate::{AGENT, Setup};

/// What a script line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    User(String),
    Approve,
    Reject(Option<String>),
    Edit(Value),
    InterruptAfter(String),
    Restart,
    Resume,
    Expect(RunStatus),
    ExpectFileMissing(String),
    ExpectFilePresent(String),
    ExpectOutbox(usize),
    ExpectReply(String),
    ExpectOutcome(String),
    ExpectValid,
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub no: usize,
    pub text: String,
    pub step: Step,
}

/// Events `interrupt-after:` may name.
const EVENTS: &[&str] = &[
    "run_started",
    "resumed",
    "reasoning_started",
    "text_delta",
    "thinking_delta",
    "tool_call_started",
    "tool_call_ready",
    "tool_execution_started",
    "tool_execution_chunk",
    "tool_execution_finished",
];

const OUTCOMES: &[&str] = &[
    "success",
    "error",
    "rejected",
    "cancelled",
    "interrupted",
    "unknown",
];

/// Parses a script; the error names the line and what is wrong with it.
pub fn parse(src: &str) -> Result<Vec<Line>, String> {
    let mut out = Vec::new();
    for (i, raw) in src.lines().enumerate() {
        let no = i + 1;
        let text = raw.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let (key, arg) = match text.split_once(':') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (text, None),
        };
        let err = |what: &str| format!("line {no}: {what}\n  {no} | {text}");
        let need = |arg: Option<&str>| -> Result<String, String> {
            match arg {
                Some(a) if !a.is_empty() => Ok(a.to_owned()),
                _ => Err(err(&format!("`{key}:` needs a value after the colon"))),
            }
        };
        let step = match key.to_ascii_lowercase().as_str() {
            "user" => Step::User(need(arg)?),
            "approve" => Step::Approve,
            "reject" => Step::Reject(arg.filter(|a| !a.is_empty()).map(str::to_owned)),
            "edit" => {
                let a = need(arg)?;
                match serde_json::from_str::<Value>(&a) {
                    Ok(v) if v.is_object() => Step::Edit(v),
                    Ok(_) => {
                        return Err(err(
                            "`edit:` needs a JSON object, like {\"path\":\"notes.md\"}",
                        ));
                    }
                    Err(e) => return Err(err(&format!("`edit:` is not valid JSON: {e}"))),
                }
            }
            "interrupt-after" => {
                let a = need(arg)?;
                if !EVENTS.contains(&a.as_str()) {
                    return Err(err(&format!(
                        "unknown event `{a}`; one of: {}",
                        EVENTS.join(", ")
                    )));
                }
                Step::InterruptAfter(a)
            }
            "restart" => Step::Restart,
            "resume" => Step::Resume,
            "expect" => Step::Expect(match need(arg)?.as_str() {
                "paused" => RunStatus::Paused,
                "completed" => RunStatus::Completed,
                "cancelled" => RunStatus::Cancelled,
                "max_iterations" => RunStatus::MaxIterations,
                other => {
                    return Err(err(&format!(
                        "unknown status `{other}`; one of: paused, completed, cancelled, max_iterations"
                    )));
                }
            }),
            "expect-file-missing" => Step::ExpectFileMissing(need(arg)?),
            "expect-file-present" => Step::ExpectFilePresent(need(arg)?),
            "expect-outbox" => {
                let a = need(arg)?;
                Step::ExpectOutbox(
                    a.parse()
                        .map_err(|_| err(&format!("`{a}` is not a number of mails")))?,
                )
            }
            "expect-reply" => Step::ExpectReply(need(arg)?),
            "expect-outcome" => {
                let a = need(arg)?;
                if !OUTCOMES.contains(&a.as_str()) {
                    return Err(err(&format!(
                        "unknown outcome `{a}`; one of: {}",
                        OUTCOMES.join(", ")
                    )));
                }
                Step::ExpectOutcome(a)
            }
            "expect-valid" => Step::ExpectValid,
            other => {
                return Err(err(&format!(
                    "unknown directive `{other}` (known: user, approve, reject, edit, \
                     interrupt-after, restart, resume, expect, expect-file-missing, \
                     expect-file-present, expect-outbox, expect-reply, expect-outcome, expect-valid)"
                )));
            }
        };
        out.push(Line {
            no,
            text: text.to_owned(),
            step,
        });
    }
    if out.is_empty() {
        return Err("the script has no steps".to_owned());
    }
    Ok(out)
}

struct Replay<'a> {
    setup: &'a Setup,
    agent: Option<Agent>,
    session: Session,
    printer: Printer,
    status: Option<RunStatus>,
    reply: String,
    interrupt_after: Option<String>,
    check: bool,
    checks: usize,
    failures: Vec<String>,
}

/// Replays `lines`; the exit code is 1 when a check failed (with `check`) or the
/// agent failed.
pub async fn replay(setup: &Setup, name: &str, lines: &[Line], check: bool) -> ExitCode {
    for l in setup.banner() {
        say!("{l}");
    }
    say!(
        "script:  {name} ({} steps{})\n",
        lines.len(),
        if check { ", checked" } else { "" }
    );
    let (agent, session) = match setup.open().await {
        Ok(x) => x,
        Err(e) => {
            eprintln!("demo: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut r = Replay {
        setup,
        agent: Some(agent),
        session,
        printer: Printer::new(Style::Plain, AGENT),
        status: None,
        reply: String::new(),
        interrupt_after: None,
        check,
        checks: 0,
        failures: Vec::new(),
    };
    for line in lines {
        if let Err(e) = r.step(line).await {
            let msg = format!("line {}: `{}`: {e}", line.no, line.text);
            r.printer.line(&format!("  ✗ {msg}"));
            r.failures.push(msg);
        }
        if r.check && !r.failures.is_empty() {
            break;
        }
    }
    drop(r.agent.take());
    say!();
    if r.failures.is_empty() {
        say!(
            "script finished: {} steps, {} checks passed{}",
            lines.len(),
            r.checks,
            if check {
                ""
            } else {
                " (not enforced: add --check)"
            }
        );
        ExitCode::SUCCESS
    } else if check {
        eprintln!("demo: the script failed:");
        for f in &r.failures {
            eprintln!("  {f}");
        }
        ExitCode::FAILURE
    } else {
        say!(
            "script finished with {} difference(s) (not enforced: add --check to fail on them)",
            r.failures.len()
        );
        ExitCode::SUCCESS
    }
}

impl Replay<'_> {
    async fn step(&mut self, line: &Line) -> Result<(), String> {
        match &line.step {
            Step::User(text) => {
                self.printer.line(&format!("\nyou> {text}"));
                let h = self
                    .session
                    .send(Msg::user(text.clone()))
                    .start()
                    .await
                    .map_err(|e| e.to_string())?;
                self.drive(h).await
            }
            Step::Approve | Step::Reject(_) | Step::Edit(_) => {
                let pending = self
                    .session
                    .requirements()
                    .await
                    .map_err(|e| e.to_string())?;
                let Some(first) = pending.first() else {
                    return Err(
                        "nothing is pending: the session does not wait for a decision".into(),
                    );
                };
                let d = match &line.step {
                    Step::Reject(note) => {
                        Decision::reject(&first.id, note.clone().unwrap_or_default())
                    }
                    Step::Edit(v) => Decision::approve_with(&first.id, v.clone()),
                    _ => Decision::approve(&first.id),
                };
                self.printer.line(&format!(
                    "> {}   (answers the pending `{}` call)",
                    line.text, first.tool_use.name
                ));
                let h = self
                    .session
                    .resolve(vec![d.by("script")])
                    .start()
                    .await
                    .map_err(|e| e.to_string())?;
                self.drive(h).await
            }
            Step::InterruptAfter(ev) => {
                self.interrupt_after = Some(ev.clone());
                Ok(())
            }
            Step::Restart => {
                self.printer.line(&format!(
                    "\n[restart] dropping the agent and reopening {} (as a new process would)",
                    self.setup.db_path().display()
                ));
                drop(self.agent.take());
                let (agent, session) = self.setup.open().await?;
                self.agent = Some(agent);
                self.session = session;
                self.status = None;
                self.reply.clear();
                Ok(())
            }
            Step::Resume => {
                let pending = self
                    .session
                    .requirements()
                    .await
                    .map_err(|e| e.to_string())?;
                if pending.is_empty() {
                    self.printer
                        .line("[resume] nothing is pending in this session");
                } else {
                    self.printer.line(&format!(
                        "[resume] the session waits for {} decision(s):",
                        pending.len()
                    ));
                    for p in &pending {
                        self.printer.line(&render::requirement(p, AGENT));
                    }
                    self.status = Some(RunStatus::Paused);
                }
                Ok(())
            }
            _ => self.expect(line).await,
        }
    }

    async fn drive(&mut self, mut h: RunHandle) -> Result<(), String> {
        let trigger = self.interrupt_after.take();
        let mut fired = false;
        self.printer.partial_text = false;
        while let Some(ev) = h.next_event().await {
            self.printer.event(&ev);
            if let Some(t) = &trigger
                && !fired
                && event_name(&ev) == *t
            {
                fired = true;
                self.printer
                    .note(&format!("  [ESC] interrupting after `{t}`"));
                h.interrupt();
            }
        }
        let out = h.wait().await.map_err(|e| e.to_string())?;
        self.printer.finish();
        self.status = Some(out.status);
        self.reply = out.message.text();
        match out.status {
            RunStatus::Paused => {
                for r in &out.requirements {
                    self.printer.line(&render::requirement(r, AGENT));
                }
            }
            RunStatus::Cancelled => {
                let msgs = self.session.messages().await.map_err(|e| e.to_string())?;
                let s = render::interrupt_summary(&msgs, self.printer.partial_text);
                self.printer.line(&format!("  ⏹ {s}"));
            }
            RunStatus::Completed if out.empty_answer => {
                self.printer.note("  (the model returned an empty answer)")
            }
            RunStatus::Completed | RunStatus::MaxIterations => {}
        }
        if let Some(t) = trigger
            && !fired
        {
            return Err(format!(
                "`interrupt-after: {t}` never fired: the run had no such event"
            ));
        }
        Ok(())
    }

    async fn expect(&mut self, line: &Line) -> Result<(), String> {
        let root = self.setup.sandbox.root();
        let problem: Option<String> = match &line.step {
            Step::Expect(want) => match self.status {
                Some(got) if got == *want => None,
                Some(got) => Some(format!("the last run ended {}", label(got))),
                None => Some("no run has ended since the start (or the last restart)".into()),
            },
            Step::ExpectFileMissing(p) => root
                .join(p)
                .exists()
                .then(|| format!("`{p}` is still in the sandbox")),
            Step::ExpectFilePresent(p) => {
                (!root.join(p).exists()).then(|| format!("`{p}` is not in the sandbox"))
            }
            Step::ExpectOutbox(n) => {
                let got = self.setup.sandbox.outbox_len();
                (got != *n).then(|| format!("the outbox holds {got} mail(s)"))
            }
            Step::ExpectReply(want) => (!self.reply.to_lowercase().contains(&want.to_lowercase()))
                .then(|| format!("the last reply was: {:?}", self.reply)),
            Step::ExpectOutcome(want) => {
                let msgs = self.session.messages().await.map_err(|e| e.to_string())?;
                let last = msgs.iter().flat_map(Msg::tool_results_iter).last();
                match last {
                    Some(r) if r.outcome.label() == want => None,
                    Some(r) => Some(format!(
                        "the last tool result ({}) is `{}`",
                        r.name,
                        r.outcome.label()
                    )),
                    None => Some("the transcript has no tool result".into()),
                }
            }
            Step::ExpectValid => {
                let msgs = self.session.messages().await.map_err(|e| e.to_string())?;
                let p = transcript_problems(&msgs);
                (!p.is_empty()).then(|| p.join("; "))
            }
            _ => None,
        };
        self.checks += 1;
        match problem {
            None => {
                self.printer.note(&format!("  ✔ {}", line.text));
                Ok(())
            }
            Some(p) if self.check => Err(format!("check failed: {p}")),
            Some(p) => {
                self.printer
                    .line(&format!("  ≠ {} — differs: {p}", line.text));
                self.failures
                    .push(format!("line {}: `{}`: {p}", line.no, line.text));
                Ok(())
            }
        }
    }
}

fn label(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Completed => "completed",
        RunStatus::Paused => "paused",
        RunStatus::Cancelled => "cancelled",
        RunStatus::MaxIterations => "max_iterations",
    }
}

/// The event's name as in its JSON form (`tool_execution_started`, ...).
pub fn event_name(ev: &RunEvent) -> String {
    serde_json::to_value(ev)
        .ok()
        .and_then(|v| v.get("event").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default()
}

/// Where a transcript breaks the provider rules: a tool use without exactly one result
/// before the next assistant message, or a result without its use.
pub fn transcript_problems(msgs: &[Msg]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut open: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for m in msgs {
        if m.role == Role::Assistant {
            if !open.is_empty() {
                problems.push(format!("tool uses {open:?} have no result"));
                open.clear();
            }
            for u in m.tool_uses() {
                if !seen.insert(u.id.clone()) {
                    problems.push(format!("tool use id {} appears twice", u.id));
                }
                open.push(u.id.clone());
            }
        } else {
            for r in m.tool_results_iter() {
                match open.iter().position(|id| *id == r.id) {
                    Some(i) => {
                        open.remove(i);
                    }
                    None => problems.push(format!("tool result {} has no pending tool use", r.id)),
                }
            }
            if m.role == Role::User && !open.is_empty() {
                problems.push(format!("a user message while {open:?} wait for results"));
                open.clear();
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_script_parses() {
        let lines = parse(include_str!("../scripts/builtin.txt")).unwrap();
        assert!(lines.iter().any(|l| l.step == Step::Restart));
        assert!(
            lines
                .iter()
                .any(|l| matches!(l.step, Step::InterruptAfter(_)))
        );
    }

    #[test]
    fn bad_lines_are_named() {
        let e = parse("user: hi\nedit: {not json}\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("not valid JSON"), "{e}");
        let e = parse("dance").unwrap_err();
        assert!(e.contains("unknown directive `dance`"), "{e}");
        let e = parse("expect: done").unwrap_err();
        assert!(e.contains("unknown status"), "{e}");
        let e = parse("interrupt-after: lunch").unwrap_err();
        assert!(e.contains("tool_execution_started"), "{e}");
        assert!(parse("# only a comment\n").is_err());
        assert_eq!(
            parse("reject").unwrap()[0].step,
            Step::Reject(None),
            "a note is optional"
        );
    }
}
