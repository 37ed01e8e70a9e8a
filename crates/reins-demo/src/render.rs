//! Printing a run as it happens: streamed text, tool activity, a spinner while the
//! agent waits (in a terminal), and the summaries both modes share.

use std::io::Write;

use crossterm::style::Stylize;
use reins::memory::current_turn_start;
use reins::message::{Role, ToolOutcome, ToolResult};
use reins::prelude::*;
use serde_json::Value;

/// How the output looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Plain lines (script mode, CI logs).
    Plain,
    /// Colors and a spinner (interactive mode).
    Terminal,
}

const FRAMES: &[&str] = &["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// Prints a run's events.
pub struct Printer {
    style: Style,
    agent: String,
    /// Raw mode is on: a newline must also return the carriage.
    pub raw: bool,
    in_text: bool,
    spinner: Option<String>,
    frame: usize,
    /// Text of a message still streaming when the run stopped (it is dropped).
    pub partial_text: bool,
}

impl Printer {
    /// A printer for `agent`'s runs.
    pub fn new(style: Style, agent: &str) -> Self {
        Self {
            style,
            agent: agent.to_owned(),
            raw: false,
            in_text: false,
            spinner: None,
            frame: 0,
            partial_text: false,
        }
    }

    /// Writes text as is (newlines adjusted for raw mode) and flushes.
    pub fn write(&mut self, s: &str) {
        let mut out = std::io::stdout().lock();
        let r = if self.raw {
            out.write_all(s.replace('\n', "\r\n").as_bytes())
        } else {
            out.write_all(s.as_bytes())
        };
        // A closed stdout (e.g. `| head`) is not worth a crash.
        let _ = r.and_then(|()| out.flush());
    }

    fn clear_spinner(&mut self) {
        if self.spinner.take().is_some() && self.style == Style::Terminal {
            self.write("\r\x1b[2K");
        }
    }

    fn end_text(&mut self) {
        if self.in_text {
            self.in_text = false;
            self.write("\n");
        }
    }

    /// Prints a whole line (after ending any streamed text and clearing the spinner).
    pub fn line(&mut self, s: &str) {
        self.clear_spinner();
        self.end_text();
        self.write(&format!("{s}\n"));
    }

    /// A secondary line (dimmed in a terminal).
    pub fn note(&mut self, s: &str) {
        let s = match self.style {
            Style::Terminal => format!("{}", s.dark_grey()),
            Style::Plain => s.to_owned(),
        };
        self.line(&s);
    }

    fn wait(&mut self, label: String) {
        self.end_text();
        self.spinner = Some(label);
        self.tick();
    }

    /// Redraws the spinner (call it every ~100 ms while a run is in flight).
    pub fn tick(&mut self) {
        if self.style != Style::Terminal {
            return;
        }
        if let Some(label) = self.spinner.clone() {
            self.frame = (self.frame + 1) % FRAMES.len();
            let f = FRAMES[self.frame];
            self.write(&format!(
                "\r\x1b[2K{} {}",
                f.cyan(),
                format!("{label}   (ESC to interrupt)").dark_grey()
            ));
        }
    }

    /// Ends the run's output (clears the spinner, ends a streamed line).
    pub fn finish(&mut self) {
        self.clear_spinner();
        self.end_text();
    }

    /// Prints one event.
    pub fn event(&mut self, ev: &RunEvent) {
        match ev {
            RunEvent::ReasoningStarted { .. } => {
                self.partial_text = false;
                self.wait("thinking".to_owned());
            }
            RunEvent::TextDelta { text } => {
                self.clear_spinner();
                if !self.in_text {
                    let name = match self.style {
                        Style::Terminal => format!("{}", format!("{}>", self.agent).green().bold()),
                        Style::Plain => format!("{}>", self.agent),
                    };
                    self.write(&format!("{name} "));
                    self.in_text = true;
                }
                self.partial_text = true;
                self.write(text);
            }
            RunEvent::ToolCallReady { tool_use } => {
                self.note(&format!(
                    "  → {} {}",
                    tool_use.name,
                    compact(&tool_use.input)
                ));
            }
            RunEvent::ToolExecutionStarted { name, .. } => {
                self.partial_text = false;
                match self.style {
                    Style::Terminal => self.wait(format!("running {name}")),
                    Style::Plain => self.note(&format!("  … running {name}")),
                }
            }
            RunEvent::ToolExecutionChunk { text, .. } => match self.style {
                Style::Terminal => {
                    if self.spinner.is_some() {
                        self.spinner = Some(text.clone());
                        self.tick();
                    }
                }
                Style::Plain => self.note(&format!("    {text}")),
            },
            RunEvent::ToolExecutionFinished { result } => {
                let l = result_line(result);
                self.line(&l);
            }
            RunEvent::Repaired { report } => {
                self.note(&format!("  (transcript repaired: {report})"));
            }
            RunEvent::Paused { .. } | RunEvent::Completed { .. } | RunEvent::Cancelled => {
                self.finish();
            }
            RunEvent::Failed { error } => self.line(&format!("  ! the run failed: {error}")),
            _ => {}
        }
    }
}

/// JSON on one line, shortened for display.
pub fn compact(v: &Value) -> String {
    shorten(&v.to_string(), 120)
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let cut: String = s.chars().take(max).collect();
        format!("{cut}…")
    }
}

/// A mark for an outcome.
pub fn mark(o: &ToolOutcome) -> &'static str {
    match o {
        ToolOutcome::Success => "✓",
        ToolOutcome::Error => "✗",
        ToolOutcome::Rejected { .. } => "⊘",
        ToolOutcome::Cancelled => "–",
        ToolOutcome::Interrupted => "⏹",
        _ => "?",
    }
}

/// One line about a tool result.
pub fn result_line(r: &ToolResult) -> String {
    let text = r.text();
    let first = text.lines().next().unwrap_or("");
    let more = text.lines().count().saturating_sub(1);
    let more = if more > 0 {
        format!(" (+{more} lines)")
    } else {
        String::new()
    };
    format!(
        "  {} {} [{}] {}{more}",
        mark(&r.outcome),
        r.name,
        r.outcome.label(),
        shorten(first, 100)
    )
}

/// What an interrupt kept, from the stored transcript's current turn.
pub fn interrupt_summary(msgs: &[Msg], partial_text: bool) -> String {
    let turn = &msgs[current_turn_start(msgs).min(msgs.len())..];
    let (mut finished, mut stopped, mut not_run) = (0, 0, 0);
    for r in turn.iter().flat_map(Msg::tool_results_iter) {
        match r.outcome {
            ToolOutcome::Interrupted => stopped += 1,
            ToolOutcome::Cancelled => not_run += 1,
            ToolOutcome::Success | ToolOutcome::Error => finished += 1,
            _ => {}
        }
    }
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            format!("{n} {one}")
        } else {
            format!("{n} {many}")
        }
    };
    let mut parts = vec![format!(
        "kept {}",
        plural(finished, "finished tool result", "finished tool results")
    )];
    if stopped > 0 {
        parts.push(plural(
            stopped,
            "call stopped mid-run",
            "calls stopped mid-run",
        ));
    }
    if not_run > 0 {
        parts.push(plural(not_run, "call not run", "calls not run"));
    }
    if partial_text {
        parts.push("the partial answer was dropped".to_owned());
    }
    format!(
        "interrupted: {}; the session is ready for your next message",
        parts.join("; ")
    )
}

/// The transcript, one block per message.
pub fn history(msgs: &[Msg], agent: &str) -> Vec<String> {
    let mut out = Vec::new();
    for m in msgs {
        match m.role {
            Role::User => out.push(format!("you> {}", m.text())),
            Role::Assistant => {
                let t = m.text();
                if !t.is_empty() {
                    out.push(format!("{agent}> {t}"));
                }
                for u in m.tool_uses() {
                    out.push(format!("  → {} {}", u.name, compact(&u.input)));
                }
            }
            Role::Tool => out.extend(m.tool_results_iter().map(result_line)),
            Role::System => out.push(format!("(system) {}", m.text())),
        }
    }
    if out.is_empty() {
        out.push("(the session is empty)".to_owned());
    }
    out
}

/// A pending call, for a person to decide on.
pub fn requirement(r: &Requirement, agent: &str) -> String {
    let args = serde_json::to_string_pretty(&r.tool_use.input)
        .unwrap_or_else(|_| r.tool_use.input.to_string());
    let args = args.replace('\n', "\n    ");
    format!(
        "⏸ {agent} wants to run `{}` ({})\n    {args}",
        r.tool_use.name, r.reason
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use reins::message::{ContentBlock, ToolUse};
    use serde_json::json;

    #[test]
    fn the_interrupt_summary_counts_the_current_turn_only() {
        let u = ToolUse::new("a", "search_web", json!({}));
        let v = ToolUse::new("b", "delete_file", json!({}));
        let msgs = vec![
            Msg::user("old"),
            Msg::assistant("").with_block(ContentBlock::ToolUse(ToolUse::new(
                "z",
                "search_web",
                json!({}),
            ))),
            Msg::tool_results([ToolResult::success("z", "search_web", "x")]),
            Msg::user("new"),
            Msg::assistant("")
                .with_block(ContentBlock::ToolUse(u))
                .with_block(ContentBlock::ToolUse(v)),
            Msg::tool_results([
                ToolResult::success("a", "search_web", "ok"),
                ToolResult::cancelled("b", "delete_file", "not run: interrupted"),
            ]),
        ];
        assert_eq!(
            interrupt_summary(&msgs, false),
            "interrupted: kept 1 finished tool result; 1 call not run; the session is ready for your next message"
        );
    }
}
