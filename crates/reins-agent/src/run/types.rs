//! The run's data: limits, gates, phases, slots, steps and inputs, and the stored
//! [`RunState`].

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
pub struct ToolSlot {
    /// The call as the model made it.
    pub tool_use: ToolUse,
    /// Where it is.
    pub status: SlotStatus,
}

/// Where one tool use is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "slot", rename_all = "snake_case")]
pub enum SlotStatus {
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
    /// child's requirements (see [`crate::subagent`]).
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

/// A tool call the runner must execute.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    /// The call as the model made it.
    pub tool_use: ToolUse,
    /// The arguments to run it with.
    pub input: Value,
    /// Whether `input` differs from the model's arguments.
    pub edited: bool,
}

impl Execution {
    /// The tool use to execute: the model's call with the executed arguments.
    pub fn effective_use(&self) -> ToolUse {
        let mut u = self.tool_use.clone();
        if self.edited {
            u.input = self.input.clone();
            u.raw_input = None;
        }
        u
    }
}

/// What a tool execution produced.
#[derive(Debug, Clone, PartialEq)]
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

/// What the runner must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Call the model. `summary`: the iteration limit was reached; call without tools
    /// and ask for a summary.
    Reason {
        /// Whether this is the final summary call.
        summary: bool,
    },
    /// Execute these tool calls (concurrently where allowed), then report with
    /// [`Run::on_tool_results`](crate::run::Run::on_tool_results).
    Execute(Vec<Execution>),
    /// Stop and wait for these requirements (none: `resume()` goes on).
    Pause(Vec<Requirement>),
    /// The run ended.
    Finish(RunStatus),
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
    pub phase: Phase,
    /// Reasoning steps taken in the current run.
    pub iteration: u32,
    /// The tool uses of the current assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<ToolSlot>,
    /// A hook stopped the run after tools ran.
    #[serde(default)]
    pub stop_after_acting: bool,
    /// Requirement ids recorded in the store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stored_requirements: Vec<String>,
    /// The structured answer this run must end with, when one was asked for (stored,
    /// so a run resumed elsewhere still returns it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputState>,
}

/// A run's structured-output progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputState {
    /// The schema and how to ask for it.
    pub spec: crate::structured::OutputSpec,
    /// Invalid answers sent back so far.
    #[serde(default)]
    pub attempts: u32,
    /// The mode the last request used (decided from the model's capabilities).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked: Option<crate::structured::OutputMode>,
}

impl Default for RunState {
    fn default() -> Self {
        Self {
            phase: Phase::Idle,
            iteration: 0,
            slots: Vec::new(),
            stop_after_acting: false,
            stored_requirements: Vec::new(),
            output: None,
        }
    }
}
