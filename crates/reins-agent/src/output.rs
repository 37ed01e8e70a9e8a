//! What a run returns ([`RunOutput`], [`RunStatus`]) and publishes ([`RunEvent`]).

use reins_memory::RepairReport;
use reins_message::{Msg, ToolResult, ToolUse, Usage};
use serde::{Deserialize, Serialize};

use crate::requirement::Requirement;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// The model answered without calling more tools.
    Completed,
    /// The run waits: see [`RunOutput::requirements`] (empty when a hook stopped the run
    /// after tools ran; `resume()` goes on).
    Paused,
    /// The run was interrupted; the turn was sanitized and the session is ready for the
    /// next call.
    Cancelled,
    /// The iteration limit was reached; the message is the model's summary.
    MaxIterations,
}

/// The result of one call on a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOutput {
    /// The session the run belongs to.
    pub session_id: String,
    /// How the run ended.
    pub status: RunStatus,
    /// The last assistant message of the run (an empty assistant message when there is
    /// none, e.g. after an interrupt before the model answered).
    pub message: Msg,
    /// What a paused run waits for (empty otherwise).
    pub requirements: Vec<Requirement>,
    /// Tokens used by the run's model calls.
    pub usage: Usage,
    /// What transcript repair changed during the run (empty when nothing was repaired).
    pub repairs: RepairReport,
    /// Model calls made during the run.
    pub iterations: u32,
    /// The structured answer, validated against the run's output schema, when the run
    /// asked for one and completed (see [`RunOutput::parsed`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<serde_json::Value>,
    /// The run completed because the model answered with nothing: no text (thinking
    /// alone counts as nothing) and no tool call. The empty answer is not stored (the
    /// transcript stays provider-valid); show the person that nothing came back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub empty_answer: bool,
}

impl RunOutput {
    /// The structured answer as a `T`. Fails when the run has none (it paused, was
    /// cancelled, or asked for free text) or when it does not deserialize into `T`.
    pub fn parsed<T: serde::de::DeserializeOwned>(&self) -> crate::Result<T> {
        let Some(v) = &self.structured else {
            return Err(crate::AgentError::InvalidInput(format!(
                "the run has no structured answer: it ended {:?}{}",
                self.status,
                if self.status == RunStatus::Paused {
                    " (resolve its requirements first)"
                } else {
                    " without an output schema"
                }
            )));
        };
        serde_json::from_value(v.clone()).map_err(|e| crate::AgentError::InvalidOutput {
            raw: v.to_string(),
            problems: vec![format!(
                "it does not deserialize into the requested type: {e}"
            )],
            attempts: 0,
        })
    }
}

/// What a running [`RunHandle`](crate::RunHandle) publishes, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunEvent {
    /// The run began.
    RunStarted {
        /// The session id.
        session_id: String,
    },
    /// A paused run goes on (after `resume`, `resolve` or tool results).
    Resumed,
    /// The model is being called (iteration counts from 1).
    ReasoningStarted {
        /// The iteration.
        iteration: u32,
    },
    /// More answer text.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// More of the structured answer's JSON as the model streams it (the text of a
    /// native-schema answer, or the `final_answer` call's arguments). Partial: parse
    /// the final answer from the output, not from these.
    OutputDelta {
        /// The new JSON text.
        json: String,
    },
    /// More reasoning text.
    ThinkingDelta {
        /// The new text.
        text: String,
    },
    /// The model began a tool call.
    ToolCallStarted {
        /// The tool use id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// A tool call is complete (arguments included).
    ToolCallReady {
        /// The call.
        tool_use: ToolUse,
    },
    /// A tool began executing.
    ToolExecutionStarted {
        /// The tool use id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// Partial output from a running tool.
    ToolExecutionChunk {
        /// The tool use id.
        id: String,
        /// The partial output's text.
        text: String,
    },
    /// A call of a fork was served from the record of the session it was forked
    /// from: it did not run again (see [`Session::fork`](crate::Session::fork)).
    ToolReplayed {
        /// The result, addressed to this session's tool use; its metadata names the
        /// source's call (`replayed_from`) and session (`replayed_session`).
        result: ToolResult,
    },
    /// A tool call has its result.
    ToolExecutionFinished {
        /// The result.
        result: ToolResult,
    },
    /// A call whose outcome was unknown (the process running it stopped mid-call) was
    /// reconciled: reins asked the tool whether the effect happened
    /// ([`Tool::reconcile`](reins_tool::Tool::reconcile)). The verdict is in the
    /// session's audit trail (a [`DecisionRecord`](crate::DecisionRecord) of kind
    /// `reconcile`); the call's result follows as `ToolExecutionFinished`, or, when the
    /// call runs again, as its `ToolExecutionStarted` / `ToolExecutionFinished`.
    Reconciled {
        /// The tool use id.
        id: String,
        /// The tool's name.
        name: String,
        /// `happened` (the result is the one the tool found), `not_run` (the call runs
        /// again) or `cannot_tell` (it stays `Unknown`).
        verdict: String,
        /// The call's idempotency key, the one the tool was asked about.
        idempotency_key: String,
    },
    /// The transcript was repaired.
    Repaired {
        /// What changed.
        report: RepairReport,
    },
    /// Older turns were summarized to keep the request within the agent's context
    /// budget ([`ContextPolicy`](crate::ContextPolicy)); the summary is stored as a
    /// message and stands in for them from now on.
    ContextCompressed {
        /// What the summary covers (its text included).
        summary: crate::compression::ContextSummary,
        /// Tokens of the request before.
        tokens_before: usize,
        /// Tokens of the request after (the summary included).
        tokens_after: usize,
    },
    /// The request stays over the context budget even after compression (the current
    /// turn alone is too large); it is sent anyway.
    ContextOverBudget {
        /// Tokens of the request.
        tokens: usize,
        /// The budget.
        budget: usize,
    },
    /// The run paused.
    Paused {
        /// What it waits for.
        requirements: Vec<Requirement>,
    },
    /// The run completed.
    Completed {
        /// The final message.
        message: Msg,
        /// `completed` or `max_iterations`.
        status: RunStatus,
    },
    /// The run was interrupted.
    Cancelled,
    /// The run failed.
    Failed {
        /// The error, as text.
        error: String,
    },
}

impl RunEvent {
    /// The event's name: its `event` tag in JSON (`run_started`, `text_delta`, …),
    /// e.g. the SSE event name a server relays it under.
    pub fn name(&self) -> &'static str {
        match self {
            Self::RunStarted { .. } => "run_started",
            Self::Resumed => "resumed",
            Self::ReasoningStarted { .. } => "reasoning_started",
            Self::TextDelta { .. } => "text_delta",
            Self::OutputDelta { .. } => "output_delta",
            Self::ThinkingDelta { .. } => "thinking_delta",
            Self::ToolCallStarted { .. } => "tool_call_started",
            Self::ToolCallReady { .. } => "tool_call_ready",
            Self::ToolExecutionStarted { .. } => "tool_execution_started",
            Self::ToolExecutionChunk { .. } => "tool_execution_chunk",
            Self::ToolExecutionFinished { .. } => "tool_execution_finished",
            Self::ToolReplayed { .. } => "tool_replayed",
            Self::Reconciled { .. } => "reconciled",
            Self::Repaired { .. } => "repaired",
            Self::ContextCompressed { .. } => "context_compressed",
            Self::ContextOverBudget { .. } => "context_over_budget",
            Self::Paused { .. } => "paused",
            Self::Completed { .. } => "completed",
            Self::Cancelled => "cancelled",
            Self::Failed { .. } => "failed",
        }
    }

    /// Whether the event marks a step that is in the store: someone who watches the
    /// session from elsewhere (another process, the store) finds something new when it
    /// reads the store now. True for
    ///
    /// - [`RunStarted`](Self::RunStarted) and [`Resumed`](Self::Resumed): the run's
    ///   input (the message, the decisions) is committed;
    /// - [`ReasoningStarted`](Self::ReasoningStarted): everything before the model call
    ///   (tool results, a context summary) is committed;
    /// - [`ToolExecutionStarted`](Self::ToolExecutionStarted): the model's message with
    ///   the tool calls is committed;
    /// - [`Reconciled`](Self::Reconciled): the verdict is in the audit trail (and a
    ///   found or unknown result in the tool ledger);
    /// - [`ToolExecutionFinished`](Self::ToolExecutionFinished): the call's result is in
    ///   the store's tool ledger (the transcript gets it when the batch commits, before
    ///   the next `ReasoningStarted`);
    /// - [`ToolReplayed`](Self::ToolReplayed): the served result is in the transcript;
    /// - [`Paused`](Self::Paused), [`Completed`](Self::Completed),
    ///   [`Cancelled`](Self::Cancelled) and [`Failed`](Self::Failed): the run is over
    ///   and what it committed is all there is.
    ///
    /// False for the others: deltas, chunks and tool-call announcements are not
    /// stored; [`Repaired`](Self::Repaired) reports a repair of the request, or one the
    /// next commit stores; [`ContextOverBudget`](Self::ContextOverBudget) is about the
    /// request; and [`ContextCompressed`](Self::ContextCompressed) follows the commit
    /// of its summary, but the `ReasoningStarted` (or `Cancelled`) that comes next,
    /// before anything else is written, marks the same stored state.
    pub fn marks_committed_step(&self) -> bool {
        match self {
            Self::RunStarted { .. }
            | Self::Resumed
            | Self::ReasoningStarted { .. }
            | Self::ToolExecutionStarted { .. }
            | Self::ToolExecutionFinished { .. }
            | Self::ToolReplayed { .. }
            | Self::Reconciled { .. }
            | Self::Paused { .. }
            | Self::Completed { .. }
            | Self::Cancelled
            | Self::Failed { .. } => true,
            Self::TextDelta { .. }
            | Self::OutputDelta { .. }
            | Self::ThinkingDelta { .. }
            | Self::ToolCallStarted { .. }
            | Self::ToolCallReady { .. }
            | Self::ToolExecutionChunk { .. }
            | Self::Repaired { .. }
            | Self::ContextCompressed { .. }
            | Self::ContextOverBudget { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use chrono::Utc;
    use reins_message::{Msg, ToolResult, ToolUse};
    use serde_json::json;

    use super::*;
    use crate::compression::ContextSummary;

    /// One event of each kind.
    fn one_of_each() -> Vec<RunEvent> {
        let tool_use = ToolUse::new("c1", "search", json!({"q": "x"}));
        vec![
            RunEvent::RunStarted {
                session_id: "s".to_owned(),
            },
            RunEvent::Resumed,
            RunEvent::ReasoningStarted { iteration: 1 },
            RunEvent::TextDelta {
                text: "a".to_owned(),
            },
            RunEvent::OutputDelta {
                json: "{".to_owned(),
            },
            RunEvent::ThinkingDelta {
                text: "b".to_owned(),
            },
            RunEvent::ToolCallStarted {
                id: "c1".to_owned(),
                name: "search".to_owned(),
            },
            RunEvent::ToolCallReady {
                tool_use: tool_use.clone(),
            },
            RunEvent::ToolExecutionStarted {
                id: "c1".to_owned(),
                name: "search".to_owned(),
            },
            RunEvent::ToolExecutionChunk {
                id: "c1".to_owned(),
                text: "partial".to_owned(),
            },
            RunEvent::ToolExecutionFinished {
                result: ToolResult::success("c1", "search", "found"),
            },
            RunEvent::Reconciled {
                id: "c1".to_owned(),
                name: "send_email".to_owned(),
                verdict: "happened".to_owned(),
                idempotency_key: "1ac43a02-05b9-8e07-b145-cb8a3edaf670".to_owned(),
            },
            RunEvent::Repaired {
                report: RepairReport::default(),
            },
            RunEvent::ContextCompressed {
                summary: ContextSummary {
                    id: "m9".to_owned(),
                    first: "m1".to_owned(),
                    last: "m8".to_owned(),
                    messages: 8,
                    builds_on: None,
                    covered_tokens: 900,
                    summary_tokens: 40,
                    counter: "estimate".to_owned(),
                    created_at: Utc::now(),
                    text: "earlier".to_owned(),
                },
                tokens_before: 1000,
                tokens_after: 140,
            },
            RunEvent::ContextOverBudget {
                tokens: 2000,
                budget: 1000,
            },
            RunEvent::Paused {
                requirements: Vec::new(),
            },
            RunEvent::Completed {
                message: Msg::assistant("done"),
                status: RunStatus::Completed,
            },
            RunEvent::Cancelled,
            RunEvent::Failed {
                error: "boom".to_owned(),
            },
        ]
    }

    #[test]
    fn an_events_name_is_its_json_tag() {
        let events = one_of_each();
        let mut names: Vec<&str> = events.iter().map(RunEvent::name).collect();
        for (ev, name) in events.iter().zip(&names) {
            let json = serde_json::to_value(ev).unwrap();
            assert_eq!(json["event"], *name, "{json}");
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), events.len(), "one name per kind");
    }

    #[test]
    fn a_reconciled_event_reads_as_documented() {
        let ev = one_of_each()
            .into_iter()
            .find(|e| e.name() == "reconciled")
            .unwrap();
        assert_eq!(
            serde_json::to_value(&ev).unwrap(),
            serde_json::json!({
                "event": "reconciled",
                "id": "c1",
                "name": "send_email",
                "verdict": "happened",
                "idempotency_key": "1ac43a02-05b9-8e07-b145-cb8a3edaf670",
            })
        );
    }

    #[test]
    fn the_run_boundaries_and_tool_steps_mark_committed_steps() {
        let marked: Vec<&str> = one_of_each()
            .iter()
            .filter(|e| e.marks_committed_step())
            .map(RunEvent::name)
            .collect();
        assert_eq!(
            marked,
            [
                "run_started",
                "resumed",
                "reasoning_started",
                "tool_execution_started",
                "tool_execution_finished",
                "reconciled",
                "paused",
                "completed",
                "cancelled",
                "failed",
            ]
        );
    }
}
