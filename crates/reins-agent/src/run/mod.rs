//! The sans-IO run state machine, and the contract every driver is written against.
//!
//! [`Run`] holds a session's transcript and the current turn's state, and answers
//! "what next?" with a [`Step`]; the driver performs the step's I/O and feeds the
//! outcome back as one [`Event`]. Every rule about ordering, pending tool uses,
//! decisions, interrupts, structured answers and context compression lives here, with
//! no async and no I/O, so it can be property-tested on its own.
//!
//! Every obligation of a call is a step: checking its input (after following child
//! sessions and settling a crash's calls), the model call (with the request
//! finished), tool calls, sub-agent calls, answers to a tool's question, the hooks,
//! the events to announce and the commits. `reins_agent::interpret::drive` answers them
//! for every driver; a driver only says where each runs. The table of steps, their
//! effects and the events that answer them is in docs/architecture.md ("The run
//! contract").
//!
//! The run is stepped by the interpreter only (its stepping methods are
//! crate-private): a driver hands its run to `reins_agent::interpret::drive`. The
//! whole conversation, step by step, is shown in `reins_agent::testing::by_hand`
//! (feature `testing`), where sans-IO tests step a run by hand.

mod agenda;
mod answer;
mod budget;
mod calls;
use tally::{CallTally, ReqOps};
mod audit;
mod commit;
mod decide;
mod event;
mod follow;
mod input;
mod quorum;
mod receive;
mod refuse;
mod replay;
mod request;
mod step;
mod tally;
mod types;

pub use budget::{BUDGET_ENDED_MARK, requested_limit};
pub(crate) use follow::qualify;
#[cfg(test)]
pub(crate) use input::child_id;
pub use quorum::{AutoDecision, Consulted};
pub(crate) use refuse::late_of;

pub(crate) use event::{AgentRules, Listening, Prompts, ToolCatalog, Tools};
pub use event::{Call, Compression, Event, Flush, Refusal};
/// What a tool's policy says about one concrete call: the runner asks the toolkit
/// (`Toolkit::gate`) and hands the answers to the run with [`Event::Reasoned`].
pub use reins_tool::GateDecision;
pub use replay::{NOT_IN_RECORD, Record, RecordedCall};
pub use step::{
    Announcement, Batch, Checkpoint, Close, CommitAt, Compress, Compressed, Consult, ContextCheck,
    Follow, Followed, Late, Notify, Prepared, Reason, Refuse, Step,
};
pub use types::{
    AfterReasoning, ChildInput, ExecOutcome, Execution, Phase, RunConfig, RunInput, RunState,
};
pub(crate) use types::{OutputState, SlotStatus, ToolSlot};

use chrono::{DateTime, Utc};
use reins_memory::RequirementRecord;
use reins_message::{Msg, Role, ToolResult};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) use crate::error::clip;
use crate::output::{RunOutput, RunStatus};
use crate::requirement::Requirement;
use crate::structured::OutputSpec;
use crate::transcript::Transcript;

/// A decision a refused input attempted: (requirement id, decision label, by).
pub(crate) type Attempt = (String, String, Option<String>);

/// The text a tool use gets when it never ran because the run was interrupted.
pub const NOT_RUN_INTERRUPTED: &str = "not run: interrupted";

/// The text a tool use gets (`Cancelled`) when it never ran because a person ended
/// the run at its budget: held back by the budget, or waiting for a decision.
pub const NOT_RUN_BUDGET_ENDED: &str =
    "not run: the session's budget was reached and the run was ended";

/// The text a call gets when it was stopped while waiting for an answer to its
/// question (its side effects so far may be partial).
pub const ASKING_INTERRUPTED: &str =
    "stopped while waiting for an answer to its question; what it did so far may be partial";

/// The run state machine over a session's transcript.
///
/// A driver makes one ([`Run::stored`], [`Run::new`]), reads it, and hands it to
/// `reins_agent::interpret::drive`, which steps it; it cannot step it itself. The
/// boundary is the compiler's: stepping is crate-private.
///
/// ```compile_fail
/// # let mut run = reins_agent::Run::new(Default::default());
/// let step = run.next(); // only the interpreter hands out steps
/// ```
///
/// ```compile_fail
/// # let mut run = reins_agent::Run::new(Default::default());
/// # let event = reins_agent::run::Event::Usage(Default::default());
/// run.apply(event); // only the interpreter feeds outcomes
/// ```
///
/// ```compile_fail
/// # let mut run = reins_agent::Run::new(Default::default());
/// let commit = run.take_commit(reins_agent::run::Flush::All); // commits are steps
/// ```
///
/// ```
/// # let mut run = reins_agent::Run::new(Default::default());
/// // What a driver may do with a run: read it.
/// assert!(run.requirements().is_empty());
/// assert_eq!(run.state().iteration(), 0);
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    config: RunConfig,
    state: RunState,
    /// The messages, and what the next commit writes of them.
    #[serde(flatten)]
    transcript: Transcript,
    /// Requirement store operations for the next commit.
    #[serde(skip)]
    req_ops: ReqOps,
    /// This call's tallies.
    #[serde(skip)]
    call: CallTally,
    /// The structured answer the next run (started by a message) must end with.
    #[serde(skip)]
    next_output: Option<OutputSpec>,

    /// The state as last written to the store (a commit writes it only when changed;
    /// `None`: the empty state, as a new session's, see [`Run::committed`]).
    #[serde(skip)]
    committed: Option<std::sync::Arc<RunState>>,
    /// What the current call owes besides the phase's next step (see the `agenda`
    /// module).
    #[serde(skip)]
    pending: agenda::Pending,
}

impl Run {
    /// A run over a stored transcript and, when the session had one, its stored state.
    pub fn restore(config: RunConfig, messages: Vec<Msg>, state: Option<RunState>) -> Self {
        let (state, committed) = match state {
            // A new session's: nothing committed yet stands for the empty state (no
            // clone, no allocation when a session is opened).
            None => (RunState::default(), None),
            Some(mut state) => {
                for slot in state.slots.iter_mut() {
                    if let SlotStatus::Ready { dispatched, .. }
                    | SlotStatus::Delegated { dispatched, .. } = &mut slot.status
                    {
                        *dispatched = false;
                    }
                }
                let committed = Some(std::sync::Arc::new(state.clone()));
                (state, committed)
            }
        };
        Self {
            config,
            committed,
            state,
            transcript: Transcript::stored(messages),
            req_ops: ReqOps::default(),
            call: CallTally::default(),
            next_output: None,
            pending: agenda::Pending::default(),
        }
    }

    /// Begins a call with this input and nothing else, checked at once (unit tests:
    /// no child sessions to follow, nothing to settle, the begin's own steps dropped).
    #[cfg(test)]
    pub(crate) fn begin(
        &mut self,
        input: RunInput,
        now: DateTime<Utc>,
    ) -> crate::error::Result<()> {
        self.begin_call(Call::bare("test", input, now))
            .map_err(|r| r.error)?;
        self.pending = agenda::Pending::default();
        Ok(())
    }

    /// The next step that is not bookkeeping (a commit, an announcement, a hook, a
    /// close): the run's unit tests follow its phases with it.
    #[cfg(test)]
    pub(crate) fn next_core(&mut self) -> Step {
        loop {
            match self.next() {
                Step::Commit(_) | Step::Announce(_) | Step::Notify(_) | Step::Close(_) => {}
                step => return step,
            }
        }
    }

    /// The run of session `session` as the store holds it: its transcript and its run
    /// state as stored (JSON; `None` or `null`: none yet). Every driver reads a stored
    /// session with this.
    ///
    /// # Errors
    /// [`AgentError::CorruptRunState`](crate::AgentError::CorruptRunState) when the
    /// stored state does not read.
    pub fn stored(
        session: &str,
        config: RunConfig,
        messages: Vec<Msg>,
        run_state: Option<Value>,
    ) -> crate::error::Result<Self> {
        let state = match run_state {
            None | Some(Value::Null) => None,
            Some(v) => Some(serde_json::from_value::<RunState>(v).map_err(|e| {
                crate::error::AgentError::CorruptRunState {
                    session: session.to_owned(),
                    detail: e.to_string(),
                }
            })?),
        };
        Ok(Self::restore(config, messages, state))
    }

    /// An empty run.
    pub fn new(config: RunConfig) -> Self {
        Self::restore(config, Vec::new(), None)
    }

    /// The transcript.
    pub fn messages(&self) -> &[Msg] {
        self.transcript.messages()
    }

    /// The state as last written to the store.
    fn committed(&self) -> &RunState {
        match &self.committed {
            Some(committed) => committed,
            None => empty_state(),
        }
    }

    /// The stored part of the state.
    pub fn state(&self) -> &RunState {
        &self.state
    }

    /// Where the run is.
    pub fn phase(&self) -> Phase {
        self.state.phase
    }

    /// The limits.
    pub fn config(&self) -> RunConfig {
        self.config
    }

    /// Whether the run waits for decisions, results or `resume()`.
    pub fn is_paused(&self) -> bool {
        self.state.phase == Phase::Paused
    }

    /// Whether a run is in progress (not idle, not finished, not paused).
    pub(crate) fn is_active(&self) -> bool {
        matches!(
            self.state.phase,
            Phase::Reasoning | Phase::Acting | Phase::Summarizing
        )
    }

    /// The requirements a paused run waits for, in the model's order; a sub-agent's
    /// requirements (with their [`Requirement::path`]) stand where its call is.
    pub fn requirements(&self) -> Vec<Requirement> {
        let mut out = self.state.slots.requirements();
        if let Some(b) = self.budget_requirement() {
            out.push(b.clone());
        }
        out
    }

    /// The answers routed to the sub-agent call `id`, when it is one that waits to be
    /// dispatched again with them.
    #[cfg(test)]
    pub(crate) fn routed_input(&self, id: &str) -> Option<ChildInput> {
        self.state.slots.routed_input(id)
    }

    // ----- the loop --------------------------------------------------------------

    /// What the call that pauses or ends here tallied, kept in the stored state
    /// ([`RunState::last_call`]) so that whoever reads the store — a door following
    /// a run another process drives — gets the same output as the driver.
    pub(super) fn keep_call_summary(&mut self) {
        let summary = types::CallSummary {
            answer: self.call.last_assistant.as_ref().map(|m| m.id.clone()),
            usage: self.call.usage,
            iterations: self.call.iterations,
            repairs: self.call.repairs.clone(),
            structured: self.call.structured.clone(),
            empty_answer: self.call.empty_answer,
        };
        if self.state.last_call.as_ref() != Some(&summary) {
            self.state.last_call = Some(summary);
        }
    }

    /// What the run's phases ask for next (wrapped by the `agenda` module in the
    /// obligations around it).
    fn core_next(&mut self) -> agenda::Core {
        loop {
            match self.state.phase {
                Phase::Reasoning => {
                    if self.state.iteration >= self.config.max_iters {
                        self.state.phase = Phase::Summarizing;
                        continue;
                    }
                    // The budget is checked before the model is called, never during.
                    if self.budget_pause(false) {
                        continue;
                    }
                    return self.reason_step(false);
                }
                Phase::Summarizing => {
                    if self.budget_pause(false) {
                        continue;
                    }
                    return self.reason_step(true);
                }
                Phase::Acting => {
                    if !self.call.replayed.is_empty() {
                        for r in &self.call.replayed {
                            crate::telemetry::replayed(&r.name, &r.id);
                        }
                        return agenda::Core::Replayed(std::mem::take(&mut self.call.replayed));
                    }
                    // The budget is checked before a tool starts: calls beyond it are
                    // held back (answers for calls already running still go).
                    let (batch, fresh, held) =
                        self.state.slots.dispatch_within(self.budget_calls_left());
                    self.budget_started(fresh);
                    if !batch.is_empty() {
                        return agenda::Core::Execute(batch);
                    }
                    if held && self.budget_pause(true) {
                        continue;
                    }
                    let waiting = self.requirements();
                    if self.state.slots.has_waiting() {
                        self.state.phase = Phase::Paused;
                        self.record_requirements(&waiting);
                        if let Some(c) = self.consult_step(&waiting) {
                            return agenda::Core::Consult(c);
                        }
                        return agenda::Core::Pause(waiting);
                    }
                    let unreported = self.state.slots.undispatch();
                    if unreported {
                        continue;
                    }
                    self.end_turn_slots();
                    if self.state.stop_after_acting {
                        self.state.stop_after_acting = false;
                        self.state.phase = Phase::Paused;
                        return agenda::Core::Pause(Vec::new());
                    }
                    self.state.phase = Phase::Reasoning;
                }
                Phase::Paused => {
                    let waiting = self.requirements();
                    self.record_requirements(&waiting);
                    if let Some(c) = self.consult_step(&waiting) {
                        return agenda::Core::Consult(c);
                    }
                    return agenda::Core::Pause(waiting);
                }
                Phase::Idle => return agenda::Core::Finish(RunStatus::Completed),
                Phase::Finished(status) => return agenda::Core::Finish(status),
            }
        }
    }

    fn record_requirements(&mut self, waiting: &[Requirement]) {
        let ids: Vec<String> = waiting.iter().map(|r| r.id.clone()).collect();
        if ids == self.state.stored_requirements {
            return;
        }
        for r in waiting
            .iter()
            .filter(|r| !self.state.stored_requirements.contains(&r.id))
        {
            crate::telemetry::requirement_pending(r);
        }
        self.req_ops.clear = true;
        self.req_ops.add = waiting.iter().map(requirement_record).collect();
        self.req_ops.supersede_decided();
        // A notice for each requirement that starts waiting now (not for those
        // rewritten with it), where the store records them.
        self.req_ops.waiting = if self.call.notices {
            let session = &self.call.session;
            waiting
                .iter()
                .filter(|r| !self.state.stored_requirements.contains(&r.id))
                .map(|r| waiting_notice(session, r))
                .collect()
        } else {
            Vec::new()
        };
        self.state.stored_requirements = ids;
    }

    /// Settles calls whose fate the ledger decided without running them (after a
    /// crash): their recorded results are appended.
    pub(crate) fn settle(&mut self, results: Vec<ToolResult>, now: DateTime<Utc>) {
        self.on_tool_results(
            results.into_iter().map(ExecOutcome::Done).collect(),
            false,
            now,
        );
    }

    /// Interrupts the run: every call without a result gets an honest one (`results`
    /// from tools stopped mid-run, `Cancelled` for the rest), the turn is sanitized,
    /// and the run ends `Cancelled`. A no-op when no run is in progress.
    pub(crate) fn interrupt(&mut self, results: Vec<ToolResult>) -> bool {
        if !self.is_active() {
            return false;
        }
        // What a batch in progress has so far is kept; the rest of it is dropped.
        self.flush_batch(Utc::now());
        let mut out = Vec::new();
        for slot in &mut self.state.slots {
            if matches!(slot.status, SlotStatus::Done { .. }) {
                continue;
            }
            let r = results
                .iter()
                .find(|r| r.id == slot.tool_use.id)
                .cloned()
                .unwrap_or_else(|| match slot.status {
                    SlotStatus::Asking { .. } => ToolResult::interrupted(
                        &slot.tool_use.id,
                        &slot.tool_use.name,
                        ASKING_INTERRUPTED,
                    ),
                    _ => ToolResult::cancelled(
                        &slot.tool_use.id,
                        &slot.tool_use.name,
                        NOT_RUN_INTERRUPTED,
                    ),
                });
            slot.status = SlotStatus::Done {
                outcome: r.outcome.clone(),
            };
            out.push(r);
        }
        if !out.is_empty() {
            self.push(Msg::tool_results(out));
        }
        let (repaired, report) = reins_memory::sanitize_after_interrupt(self.transcript.messages());
        if !report.is_empty() {
            self.transcript.apply_repair(repaired);
            self.call.repairs.merge(report);
        }
        self.finish(RunStatus::Cancelled);
        self.interrupted_repairs();
        true
    }

    fn finish(&mut self, status: RunStatus) {
        self.end_turn_slots();
        self.state.phase = Phase::Finished(status);
        self.state.stop_after_acting = false;
    }

    fn end_turn_slots(&mut self) {
        self.state.slots.clear();
        if !self.state.stored_requirements.is_empty() {
            self.state.stored_requirements.clear();
            // The rows go; what was decided and recorded is still reported.
            self.req_ops.supersede_decided();
            self.req_ops = ReqOps {
                clear: true,
                log: std::mem::take(&mut self.req_ops.log),
                decided: std::mem::take(&mut self.req_ops.decided),
                ..ReqOps::default()
            };
        }
    }

    // ----- results of a call -----------------------------------------------------

    /// The output of the call so far, with this status; the call's error when its
    /// structured answer stayed invalid after every retry
    /// ([`AgentError::InvalidOutput`](crate::AgentError::InvalidOutput)).
    pub fn output(&self, status: RunStatus) -> crate::error::Result<RunOutput> {
        if let Some((raw, problems, attempts)) = &self.call.output_failure {
            return Err(crate::error::AgentError::InvalidOutput {
                raw: raw.clone(),
                problems: problems.clone(),
                attempts: *attempts,
            });
        }
        Ok(RunOutput {
            session_id: self.call.session.clone(),
            status,
            message: self
                .call
                .last_assistant
                .clone()
                .unwrap_or_else(|| Msg::new(Role::Assistant, Vec::new())),
            requirements: if status == RunStatus::Paused {
                self.requirements()
            } else {
                Vec::new()
            },
            usage: self.call.usage,
            repairs: self.call.repairs.clone(),
            iterations: self.call.iterations,
            structured: self.call.structured.clone(),
            empty_answer: self.call.empty_answer && status == RunStatus::Completed,
        })
    }

    /// Feeds one outcome. Only [`Event::DecidedWithoutAsking`] (one that answers no
    /// [`Step::Consult`], or decides what it did not ask about or what no longer
    /// fits) and [`Event::Refused`] (which answers with the refusal to return) can be
    /// refused: a refused input changes nothing and comes back fully formed. A call's
    /// input ([`Event::Begin`]) is checked once the steps before it are answered; a
    /// refused one comes as a [`Step::Refuse`].
    pub(crate) fn apply(&mut self, event: Event) -> Result<(), Refusal> {
        match event {
            Event::Begin(call) => self.take_call(call),
            Event::Followed(followed) => {
                for (id, waiting) in followed.children {
                    self.follow_child(&id, waiting);
                }
            }
            Event::Refused { decided } => return Err(self.refused(decided)),
            Event::DecidedWithoutAsking {
                decisions,
                asked,
                now,
            } => {
                self.budget_tick(now);
                return self
                    .answer_consult(decisions, asked, now)
                    .map_err(Refusal::from);
            }
            Event::Settled { results, now } => self.settle(results, now),
            Event::Reasoned {
                message,
                gates,
                after,
                usage,
                now,
            } => self.on_model_message(message, gates, after, usage, now),
            Event::Prepared(prepared) => self.prepared(prepared),
            Event::Acted {
                outcomes,
                stop,
                recorded,
                now,
            } => self.acted(outcomes, stop, recorded, now),
            Event::Summarized(summary) => self.add_summary(summary),
            Event::Usage(usage) => {
                self.call.usage += usage;
                self.budget_usage(&usage);
            }
            Event::Interrupted(results) => {
                if self.is_active() {
                    crate::telemetry::interrupted(&self.call.session);
                }
                self.interrupt(results);
            }
        }
        Ok(())
    }

    // ----- helpers -----------------------------------------------------------------

    fn push(&mut self, msg: Msg) {
        self.transcript.push(msg);
    }
}

/// The store record of a requirement.
/// The notice of a requirement that starts waiting.
fn waiting_notice(session: &str, r: &Requirement) -> reins_memory::Notice {
    reins_memory::Notice::new(reins_memory::NoticeKind::RequirementWaiting)
        .session(session)
        .requirement(&r.id)
        .tool(&r.tool_use.name)
        .payload(serde_json::to_value(r).unwrap_or(Value::Null))
}

pub(crate) fn requirement_record(r: &Requirement) -> RequirementRecord {
    RequirementRecord {
        id: r.id.clone(),
        kind: r.kind.label().to_owned(),
        payload: serde_json::to_value(r).unwrap_or(Value::Null),
        created_at: r.created_at,
        expires_at: r.expires_at,
        decision: None,
        decided_at: None,
    }
}

/// The state of a session that has none stored: what a new run's first commit is
/// compared with.
fn empty_state() -> &'static RunState {
    static EMPTY: std::sync::LazyLock<RunState> = std::sync::LazyLock::new(RunState::default);
    &EMPTY
}
