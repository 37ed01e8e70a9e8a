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
}

impl Default for ExecOptions {
    fn default() -> Self {
        Self {
            concurrency: Concurrency::Parallel,
            grace: Duration::from_secs(2),
            default_timeout: None,
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
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
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
        let call_ctx = ctx.child();
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
    fn long_raw_input_is_cut() {
        assert_eq!(truncate("abcdef", 3), "abc…");
        assert_eq!(truncate("abc", 3), "abc");
    }
}
