//! Running tool calls: one at a time or as a batch, with timeouts, cancellation and a
//! grace period, and with every failure turned into a result the model can read.

use std::any::Any;
use std::time::Duration;

use reins_message::{ContentBlock, ToolOutcome, ToolResult, ToolUse};
use serde_json::Value;
use tokio::task::{JoinError, JoinHandle};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::output::ToolOutput;
use crate::toolkit::Toolkit;

/// Whether a batch of tool calls runs at once or one after another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Concurrency {
    /// All calls run at the same time (each in its own task).
    #[default]
    Parallel,
    /// Calls run one after another, in the model's order.
    Sequential,
}

/// How tool calls are executed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct ExecOptions {
    /// Parallel (default) or sequential batches.
    pub concurrency: Concurrency,
    /// How long a cancelled tool may take to stop on its own before it is aborted
    /// (default 2 s).
    pub grace: Duration,
    /// The timeout for tools whose policy sets none (default: no timeout).
    pub default_timeout: Option<Duration>,
    /// The most bytes of output a result may carry (default
    /// [`DEFAULT_MAX_OUTPUT_BYTES`], 1 MiB; `None`: unbounded). Text, thinking and
    /// media blocks count by their size; a larger output is cut at a character
    /// boundary and ends with a note telling the model how much was cut, so one
    /// runaway tool cannot flood the transcript, the store and the next request.
    pub max_output_bytes: Option<usize>,
}

/// The default bound on a tool result's output: 1 MiB.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1024 * 1024;

impl Default for ExecOptions {
    fn default() -> Self {
        Self {
            concurrency: Concurrency::Parallel,
            grace: Duration::from_secs(2),
            default_timeout: None,
            max_output_bytes: Some(DEFAULT_MAX_OUTPUT_BYTES),
        }
    }
}

impl ExecOptions {
    /// Sets the concurrency.
    pub fn concurrency(mut self, concurrency: Concurrency) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Sets the grace period.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Sets the default timeout.
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = Some(timeout);
        self
    }

    /// Sets the bound on a result's output (`None`: unbounded).
    pub fn max_output_bytes(mut self, max: Option<usize>) -> Self {
        self.max_output_bytes = max;
        self
    }
}

/// How one tool call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolCallOutcome {
    /// The call has a result (success, error, interrupted, cancelled, ...).
    Done(ToolResult),
    /// The tool suspended itself ([`ToolError::Suspend`]): the run should pause, and the
    /// caller finishes the call.
    Suspended {
        /// The call that suspended.
        tool_use: ToolUse,
        /// Why, in the tool's words.
        reason: String,
    },
}

impl ToolCallOutcome {
    /// The result, if the call has one.
    pub fn result(&self) -> Option<&ToolResult> {
        match self {
            Self::Done(r) => Some(r),
            Self::Suspended { .. } => None,
        }
    }

    /// The result, if the call has one.
    pub fn into_result(self) -> Option<ToolResult> {
        match self {
            Self::Done(r) => Some(r),
            Self::Suspended { .. } => None,
        }
    }

    /// Whether the tool suspended itself.
    pub fn is_suspended(&self) -> bool {
        matches!(self, Self::Suspended { .. })
    }
}

/// `2 s`, `1.5 s`, `250 ms`.
pub(crate) fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 1000 == 0 {
        format!("{} s", ms / 1000)
    } else if ms >= 1000 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{ms} ms")
    }
}

/// Aborts the task when dropped, so a dropped `execute` never leaves a tool running.
pub(crate) struct AbortOnDrop<T>(pub(crate) JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "no message".to_owned()
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(max).collect();
        format!("{cut}…")
    }
}

/// The bytes a block occupies in a result (text by its length; media by their
/// source's size; anything else by its JSON form).
fn block_size(block: &ContentBlock) -> usize {
    match block {
        ContentBlock::Text { text } => text.len(),
        ContentBlock::Thinking { thinking, .. } => thinking.len(),
        other => serde_json::to_string(other).map_or(0, |s| s.len()),
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn prefix_at_most(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Cuts a result's output to at most `max` bytes (plus a short note saying what was
/// cut). Returns how many bytes were cut, or `None` when the output fit.
pub(crate) fn bound_output(result: &mut ToolResult, max: usize) -> Option<usize> {
    let total: usize = result.output.iter().map(block_size).sum();
    if total <= max {
        return None;
    }
    let mut kept = Vec::new();
    let mut used = 0usize;
    let mut dropped_blocks = 0usize;
    let mut cutting = false;
    for block in std::mem::take(&mut result.output) {
        let size = block_size(&block);
        if cutting {
            // Nothing after the first block that did not fit is kept: the model reads
            // the output in order, and a later block without its predecessor misleads.
            dropped_blocks += 1;
            continue;
        }
        if used + size <= max {
            used += size;
            kept.push(block);
            continue;
        }
        cutting = true;
        match block {
            ContentBlock::Text { text } if max > used => {
                let head = prefix_at_most(&text, max - used);
                used += head.len();
                kept.push(ContentBlock::text(head));
            }
            _ => dropped_blocks += 1,
        }
    }
    let shown: usize = kept.iter().map(block_size).sum();
    let cut = total - shown;
    let blocks = if dropped_blocks > 0 {
        format!(" ({dropped_blocks} later block(s) dropped whole)")
    } else {
        String::new()
    };
    kept.push(ContentBlock::text(format!(
        "\n[output truncated: the tool produced {total} bytes; the first {shown} are shown \
         and {cut} bytes were cut{blocks}. Ask for a narrower result (a filter, a range, \
         a summary) if you need the rest.]"
    )));
    result.output = kept;
    result
        .metadata
        .insert("truncated_bytes".to_owned(), Value::from(cut));
    Some(cut)
}

enum Ending {
    Finished(Result<Result<ToolOutput, ToolError>, JoinError>),
    Cancelled,
    TimedOut(Duration),
}

async fn sleep_or_never(timeout: Option<Duration>) {
    match timeout {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

impl Toolkit {
    /// Runs one tool call and reports how it ended. Never panics and never fails: every
    /// problem becomes a result the model can read. The tool's policy gate is not
    /// consulted here (see [`Toolkit::gate`]); the caller has already decided.
    pub async fn execute(
        &self,
        tool_use: &ToolUse,
        ctx: ToolContext,
        opts: &ExecOptions,
    ) -> ToolCallOutcome {
        let name = tool_use.name.as_str();
        let error = |text: String| {
            ToolCallOutcome::Done(ToolResult::for_use(tool_use, ToolOutcome::Error, text))
        };

        let Some(entry) = self.entry(name).cloned() else {
            return error(self.unknown_tool_message(name));
        };
        if !self.entry_is_active(&entry) {
            let group = entry.group.as_deref().unwrap_or_default();
            return error(format!(
                "tool `{name}` is not available now: its group `{group}` is not active; \
                 use one of the tools you were offered"
            ));
        }
        if let Some(raw) = &tool_use.raw_input {
            let problem = match serde_json::from_str::<Value>(raw) {
                Err(e) => e.to_string(),
                Ok(_) => "it could not be read".to_owned(),
            };
            return error(format!(
                "the arguments for `{name}` are not valid JSON ({problem}); \
                 send one JSON object that matches the tool's schema. You sent: {}",
                truncate(raw, 200)
            ));
        }
        if ctx.is_cancelled() {
            return ToolCallOutcome::Done(ToolResult::cancelled(
                &tool_use.id,
                name,
                "not run: interrupted",
            ));
        }

        let input = match &tool_use.input {
            Value::Null => Value::Object(Default::default()),
            other => other.clone(),
        };
        let mut call_ctx = ctx.child();
        if !call_ctx.has_idempotency_key() {
            call_ctx = call_ctx.with_args_fingerprint(reins_message::fingerprint(&tool_use.input));
        }
        let future = match entry.runner.clone().prepare(input, call_ctx.clone()) {
            Ok(f) => f,
            Err(problem) => {
                return error(format!(
                    "invalid arguments for `{name}`: {problem}. Fix the arguments and call the tool again."
                ));
            }
        };

        let timeout = entry.policy.timeout.or(opts.default_timeout);
        tracing::debug!(tool = name, tool_use_id = %tool_use.id, "tool call started");
        let mut task = AbortOnDrop(tokio::spawn(future));
        let ending = tokio::select! {
            biased;
            r = &mut task.0 => Ending::Finished(r),
            () = ctx.cancel.cancelled() => Ending::Cancelled,
            () = sleep_or_never(timeout) => Ending::TimedOut(timeout.unwrap_or_default()),
        };

        let outcome = match ending {
            // Cancellation fired while the call ended: the tool saw the token, so its
            // result is reported as interrupted (with whatever it returned).
            Ending::Finished(r)
                if ctx.is_cancelled() && !matches!(r, Ok(Err(ToolError::Suspend(_)))) =>
            {
                ToolCallOutcome::Done(interrupted(tool_use, Some(r), opts.grace))
            }
            Ending::Finished(r) => self.finished(tool_use, r),
            Ending::TimedOut(limit) => {
                call_ctx.cancel.cancel();
                task.0.abort();
                tracing::warn!(tool = name, tool_use_id = %tool_use.id, "tool call timed out");
                error(format!(
                    "tool `{name}` timed out after {} and was stopped",
                    human_duration(limit)
                ))
            }
            Ending::Cancelled => {
                let stopped = tokio::select! {
                    biased;
                    r = &mut task.0 => Some(r),
                    () = tokio::time::sleep(opts.grace) => None,
                };
                task.0.abort();
                ToolCallOutcome::Done(interrupted(tool_use, stopped, opts.grace))
            }
        };
        let mut outcome = outcome;
        if let (ToolCallOutcome::Done(result), Some(max)) = (&mut outcome, opts.max_output_bytes) {
            if let Some(cut) = bound_output(result, max) {
                tracing::warn!(tool = name, tool_use_id = %tool_use.id, cut, max, "tool output truncated");
            }
        }
        tracing::debug!(tool = name, tool_use_id = %tool_use.id, suspended = outcome.is_suspended(),
            outcome = outcome.result().map(|r| r.outcome.label()), "tool call ended");
        outcome
    }

    fn finished(
        &self,
        tool_use: &ToolUse,
        r: Result<Result<ToolOutput, ToolError>, JoinError>,
    ) -> ToolCallOutcome {
        let name = tool_use.name.as_str();
        let with = |outcome: ToolOutcome, text: String| {
            ToolCallOutcome::Done(ToolResult::for_use(tool_use, outcome, text))
        };
        match r {
            Ok(Ok(out)) => {
                let mut result =
                    ToolResult::new(&tool_use.id, name, ToolOutcome::Success, out.content);
                result.metadata = out.metadata;
                ToolCallOutcome::Done(result)
            }
            Ok(Err(ToolError::Suspend(reason))) => ToolCallOutcome::Suspended {
                tool_use: tool_use.clone(),
                reason,
            },
            Ok(Err(ToolError::Failed(m))) => with(ToolOutcome::Error, m),
            Ok(Err(ToolError::InvalidArgs(m))) => with(
                ToolOutcome::Error,
                format!("invalid arguments for `{name}`: {m}"),
            ),
            Ok(Err(ToolError::Timeout(d))) => with(
                ToolOutcome::Error,
                format!("tool `{name}` timed out after {}", human_duration(d)),
            ),
            Ok(Err(ToolError::Cancelled)) => with(
                ToolOutcome::Interrupted,
                format!("interrupted: `{name}` stopped before finishing"),
            ),
            Ok(Err(ToolError::Unknown(m))) => with(ToolOutcome::Unknown, m),
            Err(e) if e.is_panic() => {
                let message = panic_message(e.into_panic().as_ref());
                tracing::error!(tool = name, tool_use_id = %tool_use.id, panic = %message, "tool panicked");
                with(
                    ToolOutcome::Error,
                    format!("tool `{name}` crashed while running: {message}"),
                )
            }
            Err(_) => with(
                ToolOutcome::Interrupted,
                format!("interrupted: `{name}` was stopped before finishing"),
            ),
        }
    }

    /// Runs a batch of tool calls and returns their outcomes in the model's order.
    /// `ctx_for` makes each call's context (typically sharing one cancellation token).
    pub async fn execute_batch(
        &self,
        uses: &[ToolUse],
        ctx_for: impl Fn(&ToolUse) -> ToolContext,
        opts: &ExecOptions,
    ) -> Vec<ToolCallOutcome> {
        match opts.concurrency {
            Concurrency::Parallel => {
                futures::future::join_all(uses.iter().map(|u| self.execute(u, ctx_for(u), opts)))
                    .await
            }
            Concurrency::Sequential => {
                let mut out = Vec::with_capacity(uses.len());
                for u in uses {
                    out.push(self.execute(u, ctx_for(u), opts).await);
                }
                out
            }
        }
    }
}

/// The result of a call that was running when the run was interrupted: `stopped` is
/// what the tool returned within the grace period, `None` if it had to be aborted.
fn interrupted(
    tool_use: &ToolUse,
    stopped: Option<Result<Result<ToolOutput, ToolError>, JoinError>>,
    grace: Duration,
) -> ToolResult {
    let name = tool_use.name.as_str();
    let mut content = Vec::new();
    let headline = match stopped {
        None => format!(
            "interrupted: `{name}` was running when the run was interrupted; it did not stop \
             within {} and was aborted, so its effects may be partial",
            human_duration(grace)
        ),
        Some(r) => {
            let base = format!("interrupted: `{name}` was stopped because the run was interrupted");
            match r {
                Ok(Ok(out)) => {
                    content = out.content;
                    format!("{base}; its output so far follows")
                }
                Ok(Err(ToolError::Cancelled)) => base,
                Ok(Err(e)) => format!("{base} ({e})"),
                Err(e) if e.is_panic() => {
                    format!(
                        "{base} (it crashed while stopping: {})",
                        panic_message(e.into_panic().as_ref())
                    )
                }
                Err(_) => base,
            }
        }
    };
    content.insert(0, ContentBlock::text(headline));
    ToolResult::new(&tool_use.id, name, ToolOutcome::Interrupted, content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(Duration::from_secs(2)), "2 s");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(human_duration(Duration::from_millis(250)), "250 ms");
    }

    #[test]
    fn output_within_the_bound_is_untouched() {
        let mut r = ToolResult::success("c1", "t", "hello");
        assert_eq!(bound_output(&mut r, 5), None);
        assert_eq!(r.text(), "hello");
    }

    #[test]
    fn oversized_output_is_cut_at_a_char_boundary_with_a_note() {
        let mut r = ToolResult::success("c1", "t", "ééééé"); // 10 bytes
        assert_eq!(bound_output(&mut r, 5), Some(6));
        assert_eq!(r.output[0], ContentBlock::text("éé"));
        let note = r.output[1].as_text().unwrap();
        assert!(note.contains("produced 10 bytes"), "{note}");
        assert!(
            note.contains("first 4 are shown and 6 bytes were cut"),
            "{note}"
        );
        assert_eq!(r.metadata["truncated_bytes"], Value::from(6));
    }

    #[test]
    fn blocks_after_the_bound_are_dropped_and_counted() {
        let mut r = ToolResult::new(
            "c1",
            "t",
            ToolOutcome::Success,
            vec![
                ContentBlock::text("abc"),
                ContentBlock::text("defgh"),
                ContentBlock::text("ij"),
            ],
        );
        assert_eq!(bound_output(&mut r, 4), Some(6));
        assert_eq!(r.output[0], ContentBlock::text("abc"));
        assert_eq!(r.output[1], ContentBlock::text("d"));
        assert_eq!(r.output.len(), 3);
    }

    #[test]
    fn long_raw_input_is_cut() {
        assert_eq!(truncate("abcdef", 3), "abc…");
        assert_eq!(truncate("abc", 3), "abc");
    }
}
