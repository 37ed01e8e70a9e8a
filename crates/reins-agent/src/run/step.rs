//! What `Run::next` hands a driver: one [`Step`] per obligation,
//! each carrying everything needed to perform it. The table of steps, their effects
//! and the events that answer them is in docs/architecture.md ("The run contract").

use reins_hook::HookEvent;
use reins_memory::{Commit, RepairReport};
use reins_message::{ToolResult, ToolUse};
use serde::{Deserialize, Serialize};

use super::Execution;
use crate::output::RunStatus;
use crate::requirement::Requirement;
use crate::view::{Actor, DecisionRecord, ViewToken};

/// What the driver must do next: the whole of what it needs for that step travels in
/// the step. Steps that do I/O are performed by `reins_agent::effects::perform` and
/// answered with the [`Event`](super::Event) it returns; [`Step::Announce`],
/// [`Step::Commit`], [`Step::Pause`] and [`Step::Finish`] are the driver's own (where
/// events go, how a commit is written, how a paused run waits) and answered with
/// nothing: the driver asks `Run::next` again.
// Made and consumed once per step: boxing would only add an allocation per step.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Before an input is checked: the paused sub-agent calls whose child sessions to
    /// read (someone may have answered a child directly). Answer with
    /// [`Event::Followed`](super::Event::Followed).
    Follow(Follow),
    /// Before a new message closes a turn a crash cut short: the calls that were
    /// cleared to run, to settle from the tool-call ledger. Answer with
    /// [`Event::Settled`](super::Event::Settled).
    Settle(Batch),
    /// The input was refused: a decision someone else already took is told apart,
    /// the refusal is recorded in the audit trail and the `Error` hooks are told.
    /// Answer with [`Event::Refused`](super::Event::Refused), which
    /// `Run::apply` answers with the refusal to return.
    Refuse(Refuse),
    /// A new message closed paused sub-agent calls and calls waiting on a question:
    /// close their child sessions, record the calls' results in the ledger, stop the
    /// calls. Nothing is fed back.
    Close(Close),
    /// Run events to announce to whoever listens. Nothing is fed back.
    Announce(Announcement),
    /// Hooks of an event the run only reports (`PreCall`, `PostCall`,
    /// `ToolReplayed`): what they decide changes nothing. Nothing is fed back.
    Notify(Notify),
    /// What the run recorded, to store as one transaction. Nothing is fed back.
    Commit(Checkpoint),
    /// Confirmations this call's reasoning raised, to put to the application's
    /// approval policy and the standing grants before anyone is asked (see
    /// [`crate::approval`]): answer with
    /// [`Event::DecidedWithoutAsking`](super::Event::DecidedWithoutAsking) carrying
    /// what they decided (nothing: people are asked). Until it is answered,
    /// `Run::next` hands out the same step again; the run stays
    /// paused meanwhile.
    Consult(Consult),
    /// The next request is over the context budget: summarize these messages, then
    /// feed [`Event::Summarized`](super::Event::Summarized) (and the summarizer's
    /// [`Event::Usage`](super::Event::Usage)).
    Compress(Compress),
    /// Call the model with this request, then feed
    /// [`Event::Reasoned`](super::Event::Reasoned).
    Reason(Reason),
    /// The `PreActing` hooks on tool calls about to run (only when a hook listens):
    /// answer with [`Event::Prepared`](super::Event::Prepared).
    Prepare(Batch),
    /// Execute these tool calls (at the same time: the run hands out a batch one call
    /// at a time when the agent runs them one after another), each through the
    /// tool-call ledger and the `PostActing` hooks, then feed
    /// [`Event::Acted`](super::Event::Acted).
    Execute(Batch),
    /// Dispatch these sub-agent calls: each one's child session is started, answered,
    /// resumed or read, and runs until it pauses or ends; feed
    /// [`Event::Acted`](super::Event::Acted).
    Delegate(Batch),
    /// Hand these calls in flight the answers to their questions and wait for each
    /// one's result (or its next question); feed [`Event::Acted`](super::Event::Acted).
    Ask(Batch),
    /// Wait for these requirements (none: `resume()` goes on). The call ends here;
    /// the next input is the next call's [`Event::Begin`](super::Event::Begin).
    Pause(Vec<Requirement>),
    /// The run ended.
    Finish(RunStatus),
}

impl Step {
    /// The step's name, as docs/architecture.md lists it (`follow`, `settle`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Step::Follow(_) => "follow",
            Step::Settle(_) => "settle",
            Step::Refuse(_) => "refuse",
            Step::Close(_) => "close",
            Step::Announce(_) => "announce",
            Step::Notify(_) => "notify",
            Step::Commit(_) => "commit",
            Step::Consult(_) => "consult",
            Step::Compress(_) => "compress",
            Step::Reason(_) => "reason",
            Step::Prepare(_) => "prepare",
            Step::Execute(_) => "execute",
            Step::Delegate(_) => "delegate",
            Step::Ask(_) => "ask",
            Step::Pause(_) => "pause",
            Step::Finish(_) => "finish",
        }
    }
}

/// Tool calls of the current turn, handed out together, with the reasoning step they
/// belong to (the hooks are told it).
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The reasoning step (iteration) the calls belong to.
    pub iteration: u32,
    /// The calls, in the model's order.
    pub calls: Vec<Execution>,
}

/// What a [`Step::Follow`] reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Follow {
    /// The paused sub-agent calls whose child sessions the run shows.
    pub calls: Vec<ToolUse>,
}

/// What a [`Step::Refuse`] records.
#[derive(Debug, Clone, PartialEq)]
pub struct Refuse {
    /// The refusal, as the `Error` hooks are told it.
    pub message: String,
    /// The reasoning step the run is at.
    pub iteration: u32,
    /// The refusal's audit records (stale or expired decisions, ...).
    pub audit: Vec<DecisionRecord>,
    /// When the refused input named requirements that are no longer pending: the
    /// decisions to look up in the audit trail (a decision someone else already took
    /// makes the refusal [`AgentError::AlreadyDecided`](crate::AgentError::AlreadyDecided)).
    pub late: Option<Late>,
}

/// A refused input's decisions on requirements that are no longer pending (see
/// [`Refuse::late`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Late {
    /// (requirement id, decision label, by) of each decision the input made.
    pub named: Vec<(String, String, Option<String>)>,
    /// The ids among them that are no longer pending.
    pub gone: Vec<String>,
    /// How they were given (`resolve`, `tool_results`).
    pub via: &'static str,
    /// Who gave them.
    pub actor: Option<Actor>,
    /// The view they were given on.
    pub view: Option<ViewToken>,
    /// When.
    pub now: chrono::DateTime<chrono::Utc>,
}

/// What a [`Step::Close`] closes.
#[derive(Debug, Clone, PartialEq)]
pub struct Close {
    /// Paused sub-agent calls: their child sessions are closed.
    pub children: Vec<ToolUse>,
    /// Calls that were waiting on a question, with the results the run gave them:
    /// recorded in the tool-call ledger, the calls stopped.
    pub asking: Vec<ToolResult>,
    /// Why (the child sessions record it with their rejections).
    pub note: String,
    /// Who sent the message.
    pub actor: Option<Actor>,
}

/// Run events a [`Step::Announce`] stands for (the driver makes them only when
/// someone listens).
#[derive(Debug, Clone, PartialEq)]
pub enum Announcement {
    /// A call started (`RunStarted`; `Resumed` too unless it brings a new message).
    Started {
        /// The input is not a new message.
        resumed: bool,
    },
    /// The request's context check: the summary made for it (`ContextCompressed`), a
    /// request still over budget (`ContextOverBudget`).
    Context(ContextCheck),
    /// The transcript was repaired (`Repaired`).
    Repaired(RepairReport),
    /// Calls served from a fork's record (`ToolReplayed` each).
    Replayed(Vec<ToolResult>),
    /// The run paused (`Paused`, with what it waits for).
    Paused,
    /// The run ended (`Completed` with its answer, or `Cancelled`).
    Ended(RunStatus),
}

/// The hooks a [`Step::Notify`] tells.
#[derive(Debug, Clone, PartialEq)]
pub struct Notify {
    /// The reasoning step they run at.
    pub iteration: u32,
    /// The events, in order.
    pub events: Vec<HookEvent>,
}

impl Notify {
    /// The hook point's name (`pre-call`, `post-call`, `replayed`).
    pub fn name(&self) -> &'static str {
        match self.events.first() {
            Some(HookEvent::PreCall { .. }) => "pre-call",
            Some(HookEvent::PostCall { .. }) => "post-call",
            Some(HookEvent::ToolReplayed { .. }) => "replayed",
            _ => "notify",
        }
    }
}

/// What a [`Step::Commit`] writes, and where in the run it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The commit (`None`: nothing to write). The driver sets `expected_version`,
    /// and takes or releases the session's lock in it where it can.
    pub commit: Option<Commit>,
    /// Where it stands.
    pub at: CommitAt,
}

/// Where a [`Checkpoint`] stands in the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommitAt {
    /// A call's input, applied (handed out even when there is nothing to write: a
    /// driver may confirm its copy of the session with it).
    Begin,
    /// What is recorded, before a step's I/O.
    Step,
    /// Before tool calls run (handed out even when there is nothing to write): a
    /// journaling driver marks here that the calls may have started.
    Started,
    /// A tool batch's results.
    Acted,
    /// The pause, waiting for these requirement ids: the call's last commit.
    Pause(Vec<String>),
    /// The run's end: the call's last commit.
    End,
}

impl CommitAt {
    /// Whether it is the call's last commit (a driver releases what it holds).
    pub fn is_last(&self) -> bool {
        matches!(self, CommitAt::Pause(_) | CommitAt::End)
    }
}

/// What a [`Step::Consult`] puts to the approval policy and the standing grants.
#[derive(Debug, Clone, PartialEq)]
pub struct Consult {
    /// The confirmations to decide (top-level, raised by this call's reasoning; not
    /// those a hook's `stop_agent()` raised), in the model's order.
    pub requirements: Vec<Requirement>,
    /// Who the session acts for in this turn ([`RunState::principal`](super::RunState::principal)):
    /// what grants scoped to a principal, and the policy, are asked about.
    pub principal: Option<String>,
}

/// A model call, with the request finished: the agent's system prompt, the
/// transcript window (repaired, the active context summary standing in for what it
/// covers), the tools (the agent's and the caller's; none for the summary at the
/// iteration limit, which ends with the summary prompt), the options and the
/// structured answer asked for. The driver sends it as it is (the `PreReasoning`
/// hooks may still edit it).
#[derive(Debug, Clone, PartialEq)]
pub struct Reason {
    /// The reasoning step this call is (1-based within the run).
    pub iteration: u32,
    /// The iteration limit was reached: the call asks for a summary, without tools.
    pub summary: bool,
    /// The request. Its transcript part is repaired to be provider-valid (the repair
    /// is in the run's transcript already, and announced).
    pub request: reins_model::ChatRequest,
    /// How the run's structured answer is asked for, when it wants one (its JSON is
    /// reported as it streams).
    pub output: Option<crate::structured::OutputMode>,
    /// The caller's own tools the request offers (see
    /// [`Call::with_client_tools`](super::Call::with_client_tools)): a call of one is
    /// external.
    pub external: Vec<String>,
    /// The tool results before this call are not stored yet (they ride with the
    /// commit after it: every one is the tool-call ledger's record). Should the call
    /// fail, the driver stores them before it returns the error.
    pub unsaved: bool,
}

/// The request's size against the agent's context budget.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextCheck {
    /// Tokens of the request as it will be sent.
    pub tokens: usize,
    /// The policy's budget.
    pub budget: usize,
    /// The request stays over budget (sent anyway; worth a warning).
    pub over_budget: bool,
    /// The summary made for this request by the [`Step::Compress`] before it.
    pub compressed: Option<Compressed>,
}

/// A summary stored for this request, and what it saved.
#[derive(Debug, Clone, PartialEq)]
pub struct Compressed {
    /// The stored summary.
    pub summary: crate::compression::ContextSummary,
    /// Tokens of the request before the summary.
    pub tokens_before: usize,
}

/// What the summarizer must read to bring the next request within budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Compress {
    /// The reasoning step the summary is made for.
    pub iteration: u32,
    /// The active summary, folded into the new one.
    pub earlier: Option<crate::compression::ContextSummary>,
    /// The messages to summarize, in order (summaries excluded; never empty).
    pub messages: Vec<reins_message::Msg>,
    /// Tokens of those messages (and of the earlier summary).
    pub covered_tokens: usize,
    /// Tokens of the request before the summary.
    pub tokens_before: usize,
    /// Whether the cut falls inside a turn because no cut between turns was enough.
    pub mid_turn: bool,
}

/// What the `PreActing` hooks made of one call of a [`Step::Prepare`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prepared {
    /// Run it as the hooks left it (its arguments may be edited; its id and name are
    /// the model's).
    Run(ToolUse),
    /// A hook rejected it: its result.
    Rejected(ToolResult),
}

/// What the child sessions of paused sub-agent calls wait for in the store (the
/// answer to a [`Step::Follow`]): per delegated call id, the child's requirements
/// with its own ids (empty when the child is not paused). Serializable, so a driver
/// can journal it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Followed {
    /// (delegated call id, what its child waits for).
    pub children: Vec<(String, Vec<Requirement>)>,
}
