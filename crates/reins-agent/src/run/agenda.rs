//! Every obligation a step: the run's phases say what comes next (reason, act, pause,
//! finish); around them, the run hands out what a driver must also do — check a new
//! call's input (after following child sessions and settling a crash's calls), close
//! what a new message closed, announce events, tell the hooks, store what it
//! recorded — as [`Step`]s of their own, in one order for every driver.
//!
//! | around | the steps, in order |
//! |---|---|
//! | a call's input ([`Event::Begin`]) | `Follow` (a paused run's sub-agent calls), `Settle` (a crash's calls a new message closes), then `Refuse`, or `Commit(Begin)`, `Close`, `Announce(Started)`, `Notify(PreCall)` |
//! | a summary | `Commit(Step)`, `Compress` |
//! | a model call | `Commit(Step)` (none when the last batch's results ride with the next commit), `Announce(Context)`, `Announce(Repaired)`, `Reason` |
//! | a tool batch | `Commit(Step)` (before sub-agent calls and answers), `Delegate`, `Ask`, `Prepare`, `Commit(Started)`, `Execute` (one per call when the agent runs them one after another), then `Commit(Acted)` unless the results ride with the next commit |
//! | calls served from a fork's record | `Commit(Step)`, `Notify(ToolReplayed)`, `Announce(Replayed)` |
//! | a pause | `Commit(Pause)`, `Announce(Paused)`, `Notify(PostCall)`, `Pause` |
//! | the end (an interrupt too) | (`Announce(Repaired)`), `Commit(End)`, `Announce(Ended)`, `Notify(PostCall)`, `Finish` |
//!
//! A hook step is handed out only when one of the agent's hooks listens.

use std::collections::VecDeque;

use reins_hook::{HookEvent, HookEventKind};
use reins_message::{Msg, Role, ToolResult};
use reins_tool::Concurrency;

use super::{
    Announcement, Batch, Call, Checkpoint, Close, CommitAt, ExecOutcome, Execution, Flush, Follow,
    Notify, Prepared, Refusal, Refuse, Run, RunInput, Step,
};
use crate::error::AgentError;
use crate::output::RunStatus;

/// What the run's phases ask for next (see [`Run::next`]): wrapped in the obligations
/// around it before it is handed out.
#[allow(
    clippy::large_enum_variant,
    reason = "one value per step, moved once: boxing would only add an allocation"
)]
pub(super) enum Core {
    Consult(super::Consult),
    Compress(super::Compress),
    Reason(
        super::Reason,
        Option<super::ContextCheck>,
        reins_memory::RepairReport,
    ),
    Execute(Vec<Execution>),
    Replayed(Vec<ToolResult>),
    Pause(Vec<crate::requirement::Requirement>),
    Finish(RunStatus),
}

/// One obligation on the agenda.
#[allow(
    clippy::large_enum_variant,
    reason = "a few per step, moved once: boxing would only add an allocation"
)]
#[derive(Debug, Clone)]
enum Due {
    /// A step as it is.
    Step(Step),
    /// A commit, made when it is handed out (what is recorded by then).
    Commit(CommitAt),
}

/// What the run has handed out or owes in the current call (not stored: a call
/// begins again after a restart).
#[derive(Debug, Default)]
pub(crate) struct Pending {
    /// Obligations before the phase's next step, in order.
    agenda: VecDeque<Due>,
    /// A call whose input is not checked yet: after `Follow` and `Settle`.
    call: Option<Call>,
    followed: bool,
    settled: bool,
    /// The refusal handed out with a `Step::Refuse`, returned once it is answered.
    refused: Option<AgentError>,
    /// What a new message closed, for the `Step::Close` after its commit.
    pub(super) close: Option<Close>,
    /// The tool batch in progress.
    batch: Option<BatchState>,
    /// The last batch's results ride with the next commit.
    carried: bool,
    /// The pause's or the end's obligations were handed out.
    closed: bool,
    /// The calls of the `Step::Prepare` handed out, as the model made them.
    prepare: Vec<Execution>,
    /// When the last part of the batch in progress ended.
    now: Option<chrono::DateTime<chrono::Utc>>,
}

impl Clone for Pending {
    /// A copy of what is owed, without a refusal in flight (an error is not copied).
    fn clone(&self) -> Self {
        Self {
            agenda: self.agenda.clone(),
            call: self.call.clone(),
            followed: self.followed,
            settled: self.settled,
            refused: None,
            close: self.close.clone(),
            batch: self.batch.clone(),
            carried: self.carried,
            closed: self.closed,
            prepare: self.prepare.clone(),
            now: self.now,
        }
    }
}

/// A tool batch whose parts are handed out one by one: its outcomes are applied
/// together, as one tool message, once every part is answered.
#[derive(Debug, Clone)]
struct BatchState {
    /// The calls' ids in the model's order (the outcomes are put in it).
    order: Vec<String>,
    outcomes: Vec<ExecOutcome>,
    stop: bool,
    /// Every result so far is the tool-call ledger's record, and nothing but
    /// executions ran (sub-agents, answers and hook rejections are stored at once).
    recorded: bool,
    /// Parts handed out and not answered yet, and parts on the agenda.
    parts: usize,
}

impl Run {
    /// What must be done next. The step carries everything needed for it; its
    /// outcome goes back through [`Run::apply`]. Crate-private: only the interpreter
    /// (`reins_agent::interpret`) steps a run (sans-IO tests do it by hand through the
    /// `testing` module).
    // Not an `Iterator`: a run never runs out of steps (a finished run keeps
    // answering `Finish`), and each step waits for its outcome through `apply`.
    #[allow(clippy::should_implement_trait)]
    pub(crate) fn next(&mut self) -> Step {
        loop {
            if let Some(due) = self.pending.agenda.pop_front() {
                match due {
                    Due::Step(Step::Prepare(batch)) => {
                        self.pending.prepare.clone_from(&batch.calls);
                        return Step::Prepare(batch);
                    }
                    Due::Step(step) => return step,
                    Due::Commit(at) => {
                        if let Some(step) = self.checkpoint(at) {
                            return step;
                        }
                        continue;
                    }
                }
            }
            if self.pending.call.is_some() {
                if let Some(step) = self.begin_step() {
                    return step;
                }
                continue;
            }
            let core = self.core_next();
            if let Some(step) = self.wrap(core) {
                return step;
            }
        }
    }

    /// The commit at `at`, when it is due: a commit before a step's I/O or after a
    /// batch only when something is recorded; the others always (a driver marks,
    /// confirms or releases with them).
    fn checkpoint(&mut self, at: CommitAt) -> Option<Step> {
        let commit = match at {
            CommitAt::Step | CommitAt::Started => self.take_commit(Flush::Recorded),
            CommitAt::Begin | CommitAt::Acted | CommitAt::Pause(_) | CommitAt::End => {
                self.take_commit(Flush::All)
            }
        };
        if commit.is_none() && matches!(at, CommitAt::Step | CommitAt::Acted) {
            return None;
        }
        Some(Step::Commit(Checkpoint { commit, at }))
    }

    fn due(&mut self, step: Step) {
        self.pending.agenda.push_back(Due::Step(step));
    }

    fn due_commit(&mut self, at: CommitAt) {
        self.pending.agenda.push_back(Due::Commit(at));
    }

    /// Whether one of the agent's hooks listens to `kind`.
    fn listens(&self, kind: HookEventKind) -> bool {
        self.call.listening.wants(kind)
    }

    // ----- a call's input ------------------------------------------------------------

    /// Takes a call's start ([`Event::Begin`]): its input is checked once the child
    /// sessions are followed and a crash's calls settled.
    pub(super) fn take_call(&mut self, call: Call) {
        self.pending.agenda.clear();
        self.pending.batch = None;
        self.pending.carried = false;
        self.pending.closed = false;
        self.pending.followed = false;
        self.pending.settled = false;
        self.pending.refused = None;
        self.pending.close = None;
        self.pending.call = Some(call);
    }

    /// The next step of a call whose input is not checked yet.
    fn begin_step(&mut self) -> Option<Step> {
        if !self.pending.followed {
            self.pending.followed = true;
            if self.is_paused() {
                let calls = self.state.delegated_calls();
                if !calls.is_empty() {
                    return Some(Step::Follow(Follow { calls }));
                }
            }
        }
        if !self.pending.settled {
            self.pending.settled = true;
            let calls = match &self.pending.call {
                Some(call) => self.state.settle_before(call.input()),
                None => Vec::new(),
            };
            if !calls.is_empty() {
                return Some(Step::Settle(Batch {
                    iteration: self.state.iteration,
                    calls,
                }));
            }
        }
        let call = self.pending.call.take()?;
        let resumed = !matches!(call.input(), RunInput::Message(m) if m.role != Role::Tool);
        let pre_call = match call.input() {
            RunInput::Message(m) if m.role != Role::Tool && self.listens_to(&call) => {
                Some(m.clone())
            }
            _ => None,
        };
        let late = super::refuse::late(&call);
        match self.begin_call(call) {
            Err(Refusal { error, audit }) => {
                let step = Refuse {
                    message: error.to_string(),
                    iteration: self.state.iteration,
                    audit,
                    late: late.and_then(|l| l.of(&error)),
                };
                self.pending.refused = Some(error);
                Some(Step::Refuse(step))
            }
            Ok(()) => {
                self.due_commit(CommitAt::Begin);
                if let Some(close) = self.pending.close.take() {
                    self.due(Step::Close(close));
                }
                self.due(Step::Announce(Announcement::Started { resumed }));
                if self.listens(HookEventKind::PreCall) {
                    self.due(Step::Notify(Notify {
                        iteration: self.state.iteration,
                        events: vec![HookEvent::PreCall { input: pre_call }],
                    }));
                }
                None
            }
        }
    }

    /// Whether `call`'s agent has a `PreCall` hook (read before the call's rules are
    /// the run's).
    fn listens_to(&self, call: &Call) -> bool {
        call.listening.wants(HookEventKind::PreCall)
    }

    /// Answers a [`Step::Refuse`]: the refusal to return.
    pub(super) fn refused(&mut self, decided: Option<(String, crate::error::Decided)>) -> Refusal {
        let error = match decided {
            Some((id, decided)) => AgentError::AlreadyDecided {
                id,
                decided: Box::new(decided),
            },
            None => self.pending.refused.take().unwrap_or_else(|| {
                AgentError::Internal("a refusal was answered that was not handed out".to_owned())
            }),
        };
        self.pending.refused = None;
        Refusal {
            error,
            audit: Vec::new(),
        }
    }

    // ----- around the phases' steps --------------------------------------------------

    /// The obligations around a phase's step; the first of them (or the step itself)
    /// to hand out, `None` when there is nothing to hand out yet.
    fn wrap(&mut self, core: Core) -> Option<Step> {
        match core {
            Core::Consult(c) => Some(Step::Consult(c)),
            Core::Compress(c) => {
                self.pending.carried = false;
                self.due_commit(CommitAt::Step);
                self.due(Step::Compress(c));
                None
            }
            Core::Reason(mut r, context, repairs) => {
                r.unsaved = std::mem::take(&mut self.pending.carried);
                if !r.unsaved {
                    self.due_commit(CommitAt::Step);
                }
                if let Some(check) = context {
                    if check.compressed.is_some() || check.over_budget {
                        self.due(Step::Announce(Announcement::Context(check)));
                    }
                }
                if !repairs.is_empty() {
                    self.due(Step::Announce(Announcement::Repaired(repairs)));
                }
                self.due(Step::Reason(r));
                None
            }
            Core::Execute(calls) => {
                self.pending.carried = false;
                self.batch(calls);
                None
            }
            Core::Replayed(results) => {
                self.pending.carried = false;
                self.due_commit(CommitAt::Step);
                if self.listens(HookEventKind::ToolReplayed) {
                    let events = results
                        .iter()
                        .map(|r| HookEvent::ToolReplayed { result: r.clone() })
                        .collect();
                    self.due(Step::Notify(Notify {
                        iteration: self.state.iteration,
                        events,
                    }));
                }
                self.due(Step::Announce(Announcement::Replayed(results)));
                None
            }
            Core::Pause(requirements) => {
                if std::mem::replace(&mut self.pending.closed, true) {
                    return Some(Step::Pause(requirements));
                }
                self.pending.carried = false;
                self.keep_call_summary();
                if let Some(tp) = self.call.traceparent.clone() {
                    self.state.traceparent = Some(tp);
                }
                let ids = requirements.iter().map(|r| r.id.clone()).collect();
                self.due_commit(CommitAt::Pause(ids));
                self.due(Step::Announce(Announcement::Paused));
                self.due_post_call();
                self.due(Step::Pause(requirements));
                None
            }
            Core::Finish(status) => {
                if std::mem::replace(&mut self.pending.closed, true) {
                    return Some(Step::Finish(status));
                }
                self.pending.carried = false;
                self.keep_call_summary();
                self.due_commit(CommitAt::End);
                self.due(Step::Announce(Announcement::Ended(status)));
                self.due_post_call();
                self.due(Step::Finish(status));
                None
            }
        }
    }

    /// The `PostCall` hooks with the call's last message, when one listens.
    fn due_post_call(&mut self) {
        if !self.listens(HookEventKind::PostCall) {
            return;
        }
        let output = self
            .call
            .last_assistant
            .clone()
            .unwrap_or_else(|| Msg::new(Role::Assistant, Vec::new()));
        self.due(Step::Notify(Notify {
            iteration: self.state.iteration,
            events: vec![HookEvent::PostCall { output }],
        }));
    }

    /// The steps of a tool batch: answers to questions first, then the `PreActing`
    /// hooks on the calls to run (sub-agent calls included), then the sub-agent calls,
    /// then the others (the started mark, the calls).
    fn batch(&mut self, calls: Vec<Execution>) {
        let iteration = self.state.iteration;
        let order = calls.iter().map(|e| e.tool_use.id.clone()).collect();
        let (asked, to_run): (Vec<Execution>, Vec<Execution>) =
            calls.into_iter().partition(|e| e.answer.is_some());
        let nested = !asked.is_empty() || to_run.iter().any(|e| self.delegates(e));
        let mut parts = 0;
        if !asked.is_empty() {
            self.due_commit(CommitAt::Step);
            parts += 1;
            self.due(Step::Ask(Batch {
                iteration,
                calls: asked,
            }));
        }
        if !to_run.is_empty() {
            if self.listens(HookEventKind::PreActing) {
                parts += 1;
                self.due(Step::Prepare(Batch {
                    iteration,
                    calls: to_run,
                }));
            } else {
                parts += self.due_calls(iteration, to_run);
            }
        }
        self.pending.batch = Some(BatchState {
            order,
            outcomes: Vec::new(),
            stop: false,
            recorded: !nested,
            parts,
        });
    }

    /// Whether `e` is a sub-agent call.
    fn delegates(&self, e: &Execution) -> bool {
        e.routed.is_some() || self.call.tools.0.delegates(&e.tool_use.name)
    }

    /// The sub-agent calls of `calls` (their child sessions find their sub-agent
    /// through the parent's stored call: stored first), then the others; how many
    /// parts that is.
    fn due_calls(&mut self, iteration: u32, calls: Vec<Execution>) -> usize {
        let (delegated, run): (Vec<Execution>, Vec<Execution>) =
            calls.into_iter().partition(|e| self.delegates(e));
        let mut parts = 0;
        if !delegated.is_empty() {
            self.due_commit(CommitAt::Step);
            parts += 1;
            self.due(Step::Delegate(Batch {
                iteration,
                calls: delegated,
            }));
        }
        parts + self.due_executions(iteration, run)
    }

    /// The started mark and the executions of `calls` (all at once, or one at a time
    /// when the agent runs them one after another); how many parts that is.
    fn due_executions(&mut self, iteration: u32, calls: Vec<Execution>) -> usize {
        if calls.is_empty() {
            self.due_commit(CommitAt::Step);
            return 0;
        }
        self.due_commit(CommitAt::Started);
        match self.call.concurrency {
            Concurrency::Sequential if calls.len() > 1 => {
                let n = calls.len();
                for e in calls {
                    self.due(Step::Execute(Batch {
                        iteration,
                        calls: vec![e],
                    }));
                }
                n
            }
            _ => {
                self.due(Step::Execute(Batch { iteration, calls }));
                1
            }
        }
    }

    /// Answers a [`Step::Prepare`]: calls a hook rejected have their results; the
    /// others run with the arguments the hooks left.
    pub(super) fn prepared(&mut self, prepared: Vec<Prepared>) {
        let mut run = Vec::new();
        let mut rejected = Vec::new();
        let calls = std::mem::take(&mut self.pending.prepare);
        for (mut e, p) in calls.into_iter().zip(prepared) {
            match p {
                Prepared::Run(to_run) => {
                    let edited = to_run.input != e.tool_use.input
                        || to_run.raw_input != e.tool_use.raw_input;
                    if edited {
                        e.input = to_run.input;
                        e.edited = true;
                    }
                    run.push(e);
                }
                Prepared::Rejected(r) => rejected.push(ExecOutcome::Done(r)),
            }
        }
        let iteration = self.state.iteration;
        let more = self.due_calls(iteration, run);
        if let Some(b) = self.pending.batch.as_mut() {
            b.parts = b.parts - 1 + more;
            if !rejected.is_empty() {
                b.recorded = false;
                b.outcomes.extend(rejected);
            }
        }
        self.batch_done();
    }

    /// Answers a part of a tool batch ([`Step::Execute`], [`Step::Delegate`],
    /// [`Step::Ask`]). Once every part is answered the outcomes are applied, as one
    /// tool message in the model's order.
    pub(super) fn acted(
        &mut self,
        outcomes: Vec<ExecOutcome>,
        stop: bool,
        recorded: bool,
        now: chrono::DateTime<chrono::Utc>,
    ) {
        let Some(b) = self.pending.batch.as_mut() else {
            // A batch handed out before this call (a test driving the run by hand).
            self.on_tool_results(outcomes, stop, now);
            return;
        };
        b.outcomes.extend(outcomes);
        b.stop |= stop;
        b.recorded &= recorded;
        b.parts = b.parts.saturating_sub(1);
        self.pending.now = Some(now);
        self.batch_done();
    }

    /// Applies a batch whose every part is answered, and owes its commit (unless its
    /// results ride with the next one).
    fn batch_done(&mut self) {
        if self.pending.batch.as_ref().is_none_or(|b| b.parts > 0) {
            return;
        }
        let Some(b) = self.pending.batch.take() else {
            return;
        };
        let now = self.pending.now.take().unwrap_or_else(chrono::Utc::now);
        let mut outcomes = b.outcomes;
        let at = |o: &ExecOutcome| {
            let id = match o {
                ExecOutcome::Done(r) => &r.id,
                ExecOutcome::Delegated { id, .. }
                | ExecOutcome::Asking { id, .. }
                | ExecOutcome::Suspended { id, .. } => id,
            };
            b.order.iter().position(|x| x == id).unwrap_or(usize::MAX)
        };
        outcomes.sort_by_key(at);
        let deferrable = b.recorded
            && !b.stop
            && !outcomes.is_empty()
            && outcomes.iter().all(|o| matches!(o, ExecOutcome::Done(_)))
            && self.call.defer_results;
        self.on_tool_results(outcomes, b.stop, now);
        if deferrable {
            self.pending.carried = true;
        } else {
            self.due_commit(CommitAt::Acted);
        }
    }

    /// Applies what a batch in progress has so far (an interrupt came): its outcomes
    /// are kept; the rest of the batch is dropped.
    pub(super) fn flush_batch(&mut self, now: chrono::DateTime<chrono::Utc>) {
        self.pending.agenda.clear();
        self.pending.carried = false;
        if let Some(b) = self.pending.batch.take() {
            if !b.outcomes.is_empty() {
                self.on_tool_results(b.outcomes, b.stop, now);
            }
        }
    }

    /// The steps of an interrupted run's end: its repairs are announced first.
    pub(super) fn interrupted_repairs(&mut self) {
        if !self.call.repairs.is_empty() {
            self.due(Step::Announce(Announcement::Repaired(
                self.call.repairs.clone(),
            )));
        }
    }
}

impl Close {
    /// Whether there is nothing to close.
    pub fn is_empty(&self) -> bool {
        self.children.is_empty() && self.asking.is_empty()
    }
}
