//! The run's data: limits, gates, phases, slots, steps and inputs, and the stored
//! [`RunState`].

use std::sync::Arc;

use reins_message::{Msg, ToolOutcome, ToolResult, ToolUse};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::output::RunStatus;
use crate::requirement::{Decision, Requirement};

/// Limits of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunConfig {
    /// Reasoning steps before the run summarizes and stops.
    pub max_iters: u32,
    /// How long a requirement stays answerable (`None`: forever).
    pub requirement_ttl_secs: Option<u64>,
    /// How many of the latest turns (each starting at a user message) are sent to the
    /// model (`None`: the whole history). The store always keeps everything.
    #[serde(default)]
    pub history_turns: Option<u32>,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            max_iters: 10,
            requirement_ttl_secs: None,
            history_turns: None,
        }
    }
}

/// The hook's verdict after a reasoning step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AfterReasoning {
    /// `stop_agent()`: pause before any tool runs.
    pub stop: bool,
    /// `goto_reasoning(msgs)`: append these and reason again.
    pub goto: Vec<Msg>,
}

/// Where the run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", content = "status", rename_all = "snake_case")]
pub enum Phase {
    /// No run in progress.
    Idle,
    /// The model is to be called.
    Reasoning,
    /// Tool uses of the last assistant message are being executed.
    Acting,
    /// Waiting for decisions, tool results or `resume()`.
    Paused,
    /// The iteration limit was reached; one last call without tools.
    Summarizing,
    /// The run ended.
    Finished(RunStatus),
}

/// One tool use of the current assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ToolSlot {
    /// The call as the model made it (shared with the executions dispatched for it
    /// and with every copy of the run state).
    pub(crate) tool_use: Arc<ToolUse>,
    /// Where it is.
    pub(crate) status: SlotStatus,
}

/// Where one tool use is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "slot", rename_all = "snake_case")]
pub(crate) enum SlotStatus {
    /// Waiting for a person or the caller.
    Waiting {
        /// What for.
        requirement: Requirement,
    },
    /// Cleared to run with these arguments.
    Ready {
        /// The arguments to execute with (edited or merged ones included).
        input: Value,
        /// Whether they differ from the model's.
        edited: bool,
        /// Who approved it, when a person did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approved_by: Option<String>,
        /// Handed to the runner in the current process (not stored: after a restart
        /// the call is dispatched again and the ledger decides).
        #[serde(skip)]
        dispatched: bool,
    },
    /// The call is a sub-agent whose child session paused: the parent waits for the
    /// child's requirements (see the `subagent` module).
    Delegated {
        /// The child's requirements as the parent shows them: ids qualified by
        /// [`Requirement::path`].
        requirements: Vec<Requirement>,
        /// Answers for the child, routed here by `resolve`/`resume` and not yet handed
        /// to it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        routed: Option<ChildInput>,
        /// Handed to the runner in the current process (not stored).
        #[serde(skip)]
        dispatched: bool,
    },
    /// The call is running and asked a person a question ([`reins_tool::ToolContext::ask`],
    /// e.g. an MCP server's elicitation): the run pauses with this user-input
    /// requirement while the call stays in flight in the process that started it.
    Asking {
        /// The question as a requirement (its id is not the tool use's).
        requirement: Requirement,
        /// The answer, once given, not yet handed to the call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<reins_tool::QuestionAnswer>,
        /// Handed to the runner in the current process (not stored).
        #[serde(skip)]
        dispatched: bool,
    },
    /// Has its result in the transcript.
    Done {
        /// The result's outcome.
        outcome: ToolOutcome,
    },
}

/// A tool call the runner must execute, with everything it hands the call.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    /// The call as the model made it (shared with the run's own record of it).
    pub tool_use: Arc<ToolUse>,
    /// The arguments to run it with.
    pub input: Value,
    /// Whether `input` differs from the model's arguments.
    pub edited: bool,
    /// For a paused sub-agent's call: the answers routed to its child session, to hand
    /// to the child with this dispatch.
    pub routed: Option<ChildInput>,
    /// For a call in flight that asked a question: the person's answer, to hand to the
    /// waiting call.
    pub answer: Option<reins_tool::QuestionAnswer>,
}

impl Execution {
    /// A call cleared to run with these arguments (nothing routed, no answer).
    pub fn new(tool_use: impl Into<Arc<ToolUse>>, input: Value, edited: bool) -> Self {
        Self {
            tool_use: tool_use.into(),
            input,
            edited,
            routed: None,
            answer: None,
        }
    }

    /// The model's call dispatched again as the model made it (a sub-agent's or a
    /// question's call, or one whose fate the ledger must tell).
    pub fn again(tool_use: &Arc<ToolUse>) -> Self {
        Self::new(Arc::clone(tool_use), tool_use.input.clone(), false)
    }

    /// The tool use to execute: the model's call with the executed arguments (the
    /// model's call itself, shared, when they were not edited).
    pub fn effective_use(&self) -> Arc<ToolUse> {
        if !self.edited {
            return Arc::clone(&self.tool_use);
        }
        let mut u = (*self.tool_use).clone();
        u.input = self.input.clone();
        u.raw_input = None;
        Arc::new(u)
    }
}

/// What a tool execution produced (serializable: a driver that journals its steps
/// keeps it).
// Made and consumed once per tool call: boxing the question's requirement would only
// add an allocation per call.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecOutcome {
    /// A result (of any outcome).
    Done(ToolResult),
    /// The call is a sub-agent whose child session paused with these requirements
    /// (already qualified by their path).
    Delegated {
        /// The tool use id (of the sub-agent call).
        id: String,
        /// What the child waits for.
        requirements: Vec<Requirement>,
    },
    /// The call asked a person a question and waits for the answer, in flight.
    Asking {
        /// The tool use id.
        id: String,
        /// The question as a user-input requirement.
        requirement: Requirement,
    },
    /// The tool suspended itself: the caller must execute it.
    Suspended {
        /// The tool use id.
        id: String,
        /// Why, from the tool.
        reason: String,
    },
}

impl ExecOutcome {
    /// Its kind, as the telemetry counts tool outcomes: the result's outcome for a
    /// call that ran, else `suspended`, `asking` or `delegated`.
    pub fn label(&self) -> &'static str {
        match self {
            ExecOutcome::Done(r) => r.outcome.label(),
            ExecOutcome::Suspended { .. } => "suspended",
            ExecOutcome::Asking { .. } => "asking",
            ExecOutcome::Delegated { .. } => "delegated",
        }
    }
}

/// What the caller hands a session.
#[derive(Debug, Clone, PartialEq)]
pub enum RunInput {
    /// A new message: user text (which rejects pending calls), or tool results for
    /// pending calls (role `Tool`).
    Message(Msg),
    /// Go on: approve every pending confirmation, or continue after a stop.
    Resume,
    /// Answers to pending requirements.
    Decisions(Vec<Decision>),
}

/// What a parent run hands a paused sub-agent's child session when it dispatches the
/// sub-agent call again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "input", rename_all = "snake_case")]
pub enum ChildInput {
    /// Go on after a pause without requirements (a hook stopped the child).
    Resume,
    /// Answers to the child's requirements, with the child's own ids.
    Decisions {
        /// The decisions.
        decisions: Vec<Decision>,
    },
}

/// The serializable part of a run that is stored with the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Where the run is.
    pub(crate) phase: Phase,
    /// Reasoning steps taken in the current run.
    pub(crate) iteration: u32,
    /// The tool uses of the current assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) slots: super::calls::Calls,
    /// A hook stopped the run after tools ran.
    #[serde(default)]
    pub(crate) stop_after_acting: bool,
    /// Requirement ids recorded in the store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) stored_requirements: Vec<String>,
    /// The structured answer this run must end with, when one was asked for (stored,
    /// so a run resumed elsewhere still returns it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) output: Option<OutputState>,
    /// A fork's record of its source's finished calls (see [`super::Record`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) replay: Option<super::Record>,
    /// Who the session acts for in the current turn: the actor of the message that
    /// started it (what standing grants scoped to a principal are matched against).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) principal: Option<String>,
    /// What the session spent, its own limit and a pending budget requirement (see
    /// [`crate::budget`]); absent while no budget was ever in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) budget: Option<super::budget::BudgetState>,
    /// The W3C `traceparent` of the turn that paused (with the `otel` feature and an
    /// OpenTelemetry layer installed): the turn that resumes it links to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) traceparent: Option<String>,
    /// What the last call to pause or end tallied (see [`CallSummary`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_call: Option<CallSummary>,
}

/// What one call of a run tallied, stored with the state when the call pauses or
/// ends: the output a driver answers with, for whoever reads the store.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub(crate) struct CallSummary {
    /// The id of the call's last assistant message (`None`: it has none, e.g. an
    /// interrupt before the model answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) answer: Option<String>,
    /// Tokens its model calls used.
    #[serde(default)]
    pub(crate) usage: reins_message::Usage,
    /// Model calls it made.
    #[serde(default)]
    pub(crate) iterations: u32,
    /// What transcript repair changed.
    #[serde(default, skip_serializing_if = "reins_memory::RepairReport::is_empty")]
    pub(crate) repairs: reins_memory::RepairReport,
    /// The structured answer, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) structured: Option<serde_json::Value>,
    /// The model answered with nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) empty_answer: bool,
}

/// A run's structured-output progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OutputState {
    /// The schema and how to ask for it.
    pub(crate) spec: crate::structured::OutputSpec,
    /// Invalid answers sent back so far.
    #[serde(default)]
    pub(crate) attempts: u32,
    /// The mode the last request used (decided from the model's capabilities).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) asked: Option<crate::structured::OutputMode>,
}

impl RunState {
    /// The record a fork serves tool calls from, when the session is a fork.
    pub fn record(&self) -> Option<&super::Record> {
        self.replay.as_ref()
    }

    /// Where the run is.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Reasoning steps taken in the current run.
    pub fn iteration(&self) -> u32 {
        self.iteration
    }

    /// Who the session acts for in the current turn: the principal of the actor that
    /// sent the message starting it (`None` when that message named no actor).
    /// Standing grants scoped to a principal match against it.
    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// The W3C `traceparent` of the turn that paused, when one was stored (see
    /// [`crate::telemetry`]).
    pub fn traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }

    /// The calls a driver must settle from its tool-call ledger before it begins a
    /// call with `input` (and feed back as [`Event::Settled`](super::Event::Settled)):
    /// after a crash in the middle of tool execution, a new message closes the turn,
    /// and calls that were cleared to run may have run. Empty in every other case.
    pub fn settle_before(&self, input: &RunInput) -> Vec<Execution> {
        if self.phase != Phase::Acting || !matches!(input, RunInput::Message(_)) {
            return Vec::new();
        }
        self.slots.unsettled()
    }

    /// The tool use ids of calls in flight waiting for an answer to a question (they
    /// stay live in the process that runs them only while the run waits).
    pub fn asking(&self) -> Vec<String> {
        self.slots.asking()
    }

    /// What the last call to pause or end tallied.
    pub(crate) fn last_call(&self) -> Option<&CallSummary> {
        self.last_call.as_ref()
    }
}

impl Default for RunState {
    fn default() -> Self {
        Self {
            phase: Phase::Idle,
            iteration: 0,
            slots: super::calls::Calls::default(),
            stop_after_acting: false,
            stored_requirements: Vec::new(),
            output: None,
            replay: None,
            principal: None,
            budget: None,
            traceparent: None,
            last_call: None,
        }
    }
}
