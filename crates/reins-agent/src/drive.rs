//! The local driver: one drive function that performs each [`Step`] of a [`Run`] —
//! hooks, model streaming, the ledger, tools, the store — feeds each outcome back as
//! one [`Event`], and publishes [`RunEvent`]s. It serves both an awaited verb
//! (`session.send(msg).await`) and a started one (`.start()`, a `RunHandle`).

use chrono::Utc;
use reins_hook::{Control, HookEvent, HookEventKind};
use reins_memory::Error as StoreError;
use reins_message::{Role, ToolResult};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::error::{AgentError, Result};
use crate::lock::StoreLock;
use crate::output::{RunEvent, RunOutput, RunStatus};
use crate::remote::ActiveRun;
use crate::run::{Call, Event, Flush, RunInput, Step};
use crate::state::{ClaimedCore, SessionCore, reload_if_needed, sync_to_version};
use crate::structured::OutputSpec;
use crate::view::{Actor, ViewToken};
use std::sync::Arc;
use tracing::Instrument;

mod act;
mod ask;
mod compress;
mod reason;

pub use ask::ASKED_ELSEWHERE;

/// Everything one call needs.
pub(crate) struct DriveArgs {
    pub(crate) agent: Agent,
    pub(crate) session: String,
    /// The session, held in this process until the call ends.
    pub(crate) core: ClaimedCore,
    pub(crate) lock: StoreLock,
    pub(crate) input: RunInput,
    /// Who the call acts for.
    pub(crate) actor: Option<Actor>,
    /// The view the call must act on, when it names one.
    pub(crate) view: Option<ViewToken>,
    /// The calling handle's view: set to what the run ends with.
    pub(crate) handle_view: Arc<std::sync::Mutex<ViewToken>>,
    /// What the caller asks of a run this call's message starts.
    pub(crate) asks: Asks,
    pub(crate) cancel: CancellationToken,
    /// Where events go (`None`: nobody listens, as in an awaited `send`).
    pub(crate) events: Option<UnboundedSender<RunEvent>>,
    /// Tools the caller declared for this call and executes itself (see
    /// [`SendBuilder::client_tools`](crate::SendBuilder::client_tools)).
    pub(crate) client_tools: Vec<reins_message::ToolSpec>,
    /// The caller's W3C `traceparent`: the parent of the turn's `invoke_agent` span.
    pub(crate) trace_parent: Option<String>,
}

/// What the caller asks of the run a message starts, beside the agent's own rules.
#[derive(Debug, Clone, Default)]
pub(crate) struct Asks {
    /// The structured answer the run must end with (`None`: the agent's default).
    pub(crate) output: Option<OutputSpec>,
    /// The session's own budget limit, stored with it (`None`: as it is).
    pub(crate) budget: Option<crate::budget::Budget>,
}

/// Drives one call to its end.
pub(crate) async fn drive(args: DriveArgs, active: ActiveRun) -> Result<RunOutput> {
    let DriveArgs {
        agent,
        session,
        mut core,
        lock,
        input,
        actor,
        view,
        handle_view,
        asks,
        cancel,
        events,
        client_tools,
        trace_parent,
    } = args;
    let mut d = Driver {
        agent,
        session,
        cancel,
        events,
        lock,
        client_tools,
        trace_parent,
        ledgered: std::sync::Mutex::new(Vec::new()),
        deferred: std::sync::atomic::AtomicBool::new(false),
    };
    let call = d.call(input, actor, view, asks);
    let result = d.run(&mut core, call).await;
    match &result {
        Ok(_) => {
            let now = core.run.view();
            match handle_view.lock() {
                Ok(mut v) => *v = now,
                Err(p) => *p.into_inner() = now,
            }
        }
        // Refused by the commit that was to take the lock: the run never started (as
        // when the lock is taken before the run).
        Err(AgentError::SessionBusy { .. }) if !d.lock.is_held() => {}
        Err(e) => {
            d.emit(|| RunEvent::Failed {
                error: e.to_string(),
            });
            crate::effects::hooks::failed(
                &d.agent,
                &d.session,
                core.run.state().iteration(),
                &e.to_string(),
            )
            .await;
        }
    }
    // Calls that asked a question stay live only while the run waits for the answer.
    d.agent
        .runtime
        .live_calls
        .keep_only(&d.session, &core.run.state().asking());
    drop(active);
    d.lock.release().await;
    // A failure of the run itself, not a refused input (a stale view, a decision
    // already taken, ...), which changed nothing and is answered to its sender.
    if let Err(
        e @ (AgentError::Model(_)
        | AgentError::Hook(_)
        | AgentError::Store(_)
        | AgentError::Summarization(_)
        | AgentError::InvalidOutput { .. }
        | AgentError::CorruptRunState { .. }
        | AgentError::Backend(_)
        | AgentError::Internal(_)),
    ) = &result
    {
        crate::effects::run_failed(d.agent.store().as_ref(), &d.session, &e.to_string()).await;
    }
    result
}

struct Driver {
    agent: Agent,
    session: String,
    cancel: CancellationToken,
    events: Option<UnboundedSender<RunEvent>>,
    lock: StoreLock,
    /// The caller's own tools for this call: offered to the model beside the toolkit's
    /// (a toolkit tool of the same name wins), and always external (the run pauses
    /// with an `External` requirement for each call; the caller answers with its
    /// result).
    client_tools: Vec<reins_message::ToolSpec>,
    /// The caller's W3C `traceparent`, the parent of the turn's `invoke_agent` span.
    trace_parent: Option<String>,
    /// Calls of the batch in flight whose result is exactly what the ledger recorded
    /// (finished here and left as they were by `PostActing` hooks, or served from the
    /// ledger): a crash before their results are stored loses nothing.
    ledgered: std::sync::Mutex<Vec<String>>,
    /// The last batch's results wait for the next commit (see [`Driver::act`]).
    deferred: std::sync::atomic::AtomicBool,
}

impl Driver {
    /// Sends an event to the caller's listener; the event is made only when one
    /// listens (most runs have none, and events copy messages and tool calls).
    fn emit(&self, ev: impl FnOnce() -> RunEvent) {
        if let Some(tx) = &self.events {
            let _ = tx.send(ev());
        }
    }

    /// Whether any hook listens for `kind`.
    fn wants(&self, kind: HookEventKind) -> bool {
        crate::effects::hooks::wants(&self.agent, kind)
    }

    async fn hooks(&self, event: &mut HookEvent, iteration: u32) -> Result<Control> {
        crate::effects::hooks::run(&self.agent, &self.session, iteration, event).await
    }

    /// The start of a call: the agent's (every rule it carries), with the caller's
    /// part.
    fn call(
        &mut self,
        input: RunInput,
        actor: Option<Actor>,
        view: Option<ViewToken>,
        asks: Asks,
    ) -> Call {
        let mut call = self
            .agent
            .begin(self.session.clone(), input, Utc::now())
            .with_actor(actor)
            .with_view(view)
            .with_client_tools(std::mem::take(&mut self.client_tools));
        if let Some(spec) = asks.output {
            call = call.with_output(spec);
        }
        if let Some(limit) = asks.budget {
            call = call.with_budget(limit);
        }
        call
    }

    /// One turn, in its `invoke_agent` span (see [`crate::telemetry`]).
    async fn run(&mut self, core: &mut SessionCore, call: Call) -> Result<RunOutput> {
        let resumed = !matches!(call.input(), RunInput::Message(m) if m.role != Role::Tool);
        // The link to a paused turn is made once `begin` has the stored state.
        let span = crate::telemetry::turn(
            &self.agent,
            &self.session,
            resumed,
            self.trace_parent.as_deref(),
            None,
        );
        let out = self
            .turn(core, call, resumed)
            .instrument(span.clone())
            .await;
        crate::telemetry::run_ended(
            &span,
            out.as_ref()
                .map(|o| o.status)
                .map_err(crate::telemetry::error_type),
        );
        out
    }

    async fn turn(
        &mut self,
        core: &mut SessionCore,
        call: Call,
        resumed: bool,
    ) -> Result<RunOutput> {
        // Copied for the `PreCall` hooks only when one listens.
        let pre_input = match call.input() {
            RunInput::Message(m) if self.wants(HookEventKind::PreCall) => Some(m.clone()),
            _ => None,
        };
        let waiting_children = self.begin(core, &call).await?;
        if resumed && let Some(tp) = core.run.state().traceparent() {
            crate::telemetry::link_to_traceparent(&tracing::Span::current(), tp);
        }

        self.close_children(&waiting_children, &call).await;
        self.emit(|| RunEvent::RunStarted {
            session_id: self.session.clone(),
        });
        if resumed {
            self.emit(|| RunEvent::Resumed);
        }
        let mut ev = HookEvent::PreCall { input: pre_input };
        self.hooks(&mut ev, core.run.state().iteration()).await?;

        let status = self.steps(core).await?;
        self.finish_run(core, status).await
    }

    /// The run's steps after `Begin`, to its end.
    async fn steps(&self, core: &mut SessionCore) -> Result<RunStatus> {
        let deferred = || {
            self.deferred
                .swap(false, std::sync::atomic::Ordering::AcqRel)
        };
        let status = loop {
            self.lock.renew_if_due().await;
            if self.cancel.is_cancelled() {
                break self.interrupt(core, Vec::new()).await?;
            }
            // What the last step left uncommitted (the model's message) is written
            // before the next model call or tool call; a change of the run state alone
            // waits for the next commit, as it did when reasoning committed its own
            // message. A run's last commit carries the lock's release.
            match core.run.next() {
                Step::Compress(step) => {
                    deferred();
                    self.commit_if_recorded(core).await?;
                    // Boxed, here and for `act`: a branch's future is part of the
                    // run's own (moved whole when the run is boxed) unless it is.
                    if let Some(status) = Box::pin(self.compress(core, step)).await? {
                        break status;
                    }
                }
                Step::Reason(step) => {
                    // A batch whose every result the ledger holds as it is rides with
                    // the next commit (a crash meanwhile is settled from the ledger).
                    let carried = deferred();
                    if !carried {
                        self.commit_if_recorded(core).await?;
                    }
                    match self.reason(core, step).await {
                        Ok(Some(status)) => break status,
                        Ok(None) => {}
                        Err(e) => {
                            if carried && !core.stale {
                                // Stored before the error is returned, as they would
                                // have been before the model call.
                                if let Err(ce) = self.commit_releasing(core).await {
                                    tracing::warn!(session = %self.session, error = %ce, "could not store a batch's results after the run failed");
                                }
                            }
                            return Err(e);
                        }
                    }
                }
                Step::Execute(batch) => {
                    deferred();
                    self.commit_if_recorded(core).await?;
                    if let Some(status) = Box::pin(self.act(core, batch)).await? {
                        break status;
                    }
                }
                Step::Replayed(results) => {
                    // Served from a fork's record: the results are in the transcript;
                    // nothing runs. They are stored, then announced.
                    deferred();
                    self.commit_if_recorded(core).await?;
                    for result in results {
                        if self.wants(HookEventKind::ToolReplayed) {
                            let mut ev = HookEvent::ToolReplayed {
                                result: result.clone(),
                            };
                            self.hooks(&mut ev, core.run.state().iteration()).await?;
                        }
                        self.emit(|| RunEvent::ToolReplayed { result });
                    }
                }
                Step::Consult(step) => {
                    let consulted =
                        crate::effects::consult(&self.agent, &self.session, &step).await;
                    core.run.apply(consulted.into())?;
                }
                Step::Pause(reqs) => {
                    deferred();
                    // The turn that resumes this one links to it.
                    core.run
                        .keep_traceparent(crate::telemetry::current_traceparent());
                    self.commit_releasing(core).await?;
                    self.emit(|| RunEvent::Paused { requirements: reqs });
                    break RunStatus::Paused;
                }
                Step::Finish(status) => {
                    deferred();
                    self.commit_releasing(core).await?;
                    break status;
                }
            }
        };
        Ok(status)
    }

    /// The end of a run: its output, the last events and the `PostCall` hooks.
    async fn finish_run(&self, core: &mut SessionCore, status: RunStatus) -> Result<RunOutput> {
        let out = core.run.output(status)?;
        match status {
            RunStatus::Completed | RunStatus::MaxIterations if self.events.is_some() => {
                self.emit(|| RunEvent::Completed {
                    message: out.message.clone(),
                    status,
                });
            }
            RunStatus::Completed | RunStatus::MaxIterations => {}
            RunStatus::Cancelled => self.emit(|| RunEvent::Cancelled),
            RunStatus::Paused => {}
        }
        if !out.repairs.is_empty() {
            tracing::info!(session = %self.session, repairs = ?out.repairs, "transcript repaired");
        }
        if self.wants(HookEventKind::PostCall) {
            let mut ev = HookEvent::PostCall {
                output: out.message.clone(),
            };
            self.hooks(&mut ev, core.run.state().iteration()).await?;
        }
        Ok(out)
    }

    /// The start of a run: the lock, the cache brought up to date, the input validated
    /// and applied (`Begin`), and stored. Returns the paused sub-agent calls the input
    /// closed (their child sessions are closed once the run goes on).
    ///
    /// Where the lock is not taken yet ([`StoreLock::pending`]), the run first tries
    /// [`Driver::begin_unlocked`]: `Begin` on the cached session, stored by a commit
    /// that takes the lock. Anything else — and that, when it finds the cache stale —
    /// takes the lock first, reading the stored version with it.
    async fn begin(
        &mut self,
        core: &mut SessionCore,
        call: &Call,
    ) -> Result<Vec<reins_message::ToolUse>> {
        if !self.lock.is_held() {
            if let Some(children) = self.begin_unlocked(core, call).await? {
                return Ok(children);
            }
            self.lock.acquire_now().await?;
        }
        // Another worker may have written since this process last looked: the version
        // read with the lock, and a reload only when it moved.
        let seen = self.lock.seen_version();
        sync_to_version(
            &self.agent.runtime.store,
            self.agent.config.run,
            &self.session,
            core,
            seen,
        )
        .await?;
        // A paused sub-agent call is decided against what its child session waits for
        // in the store (someone may have answered the child directly).
        crate::follow::follow_children(
            &self.agent.runtime.store,
            self.agent.config.run,
            &self.session,
            &mut core.run,
        )
        .await?;

        // Begin: validate and apply the input; store it. A stale cache (another process
        // wrote since we loaded) shows as a conflict: reload once and try again.
        // Paused sub-agent calls a new user message closes: their child sessions are
        // closed once the message is stored.
        let mut attempt = 0;
        loop {
            let waiting_children = closed_children(core, call);
            self.settle_from_ledger(core, call.input()).await?;
            if let Err(refusal) = core.run.apply(Event::Begin(call.clone())) {
                let refusal = self.late(refusal, call).await;
                self.record_refusal(refusal.audit).await;
                return Err(refusal.error);
            }
            match self.commit(core).await {
                Ok(()) => return Ok(waiting_children),
                Err(AgentError::Store(StoreError::Conflict { .. })) if attempt == 0 => {
                    attempt += 1;
                    reload_if_needed(
                        &self.agent.runtime.store,
                        self.agent.config.run,
                        &self.session,
                        core,
                        true,
                    )
                    .await?;
                }
                // `commit` marked the cache stale: the next call reloads what the
                // store holds.
                Err(e) => return Err(e),
            }
        }
    }

    /// `Begin` on the cached session before the lock is held, stored by a commit that
    /// takes the lock: one store call where the locked path makes two. Only what is
    /// safe without the lock runs here — reading child sessions, and applying the input
    /// to the cache; nothing is written before that commit. `Ok(None)` when the run
    /// must take the lock first: the cache is marked stale, a crash left tool calls to
    /// settle from the ledger (that writes), the input is refused (a refusal is decided
    /// and recorded under the lock, on a cache known to be current), or the commit found
    /// the cache stale (another worker wrote; nothing was written, and the cache is
    /// reloaded under the lock). Another owner's live lock is `SessionBusy`, as it is
    /// on the locked path.
    async fn begin_unlocked(
        &mut self,
        core: &mut SessionCore,
        call: &Call,
    ) -> Result<Option<Vec<reins_message::ToolUse>>> {
        if core.stale || !core.run.state().settle_before(call.input()).is_empty() {
            return Ok(None);
        }
        crate::follow::follow_children(
            &self.agent.runtime.store,
            self.agent.config.run,
            &self.session,
            &mut core.run,
        )
        .await?;
        let Some(request) = self.lock.take_in_commit() else {
            return Ok(None);
        };
        let waiting_children = closed_children(core, call);
        // A refused input leaves the run as it was.
        if core.run.apply(Event::Begin(call.clone())).is_err() {
            return Ok(None);
        }
        // Written even when `Begin` changed nothing: the commit's version check is what
        // tells that the cache is current.
        let mut commit = core
            .run
            .take_commit(Flush::All)
            .unwrap_or_else(|| reins_memory::Commit::at(core.version));
        commit.expected_version = core.version;
        commit.acquire_lock = Some(request);
        let at = std::time::Instant::now();
        match self.agent.runtime.store.commit(&self.session, commit).await {
            Ok(v) => {
                core.version = v;
                self.lock.taken_by_commit(at);
                Ok(Some(waiting_children))
            }
            Err(e) => {
                // `Begin` is applied to the cache but not stored.
                core.stale = true;
                match e {
                    StoreError::SessionLocked { .. } => Err(AgentError::SessionBusy {
                        session: self.session.clone(),
                    }),
                    StoreError::Conflict { .. } | StoreError::SessionNotFound { .. } => Ok(None),
                    e => {
                        // The outcome is unknown (a lost connection): release what
                        // may have been taken.
                        self.lock.taken_by_commit(at);
                        Err(e.into())
                    }
                }
            }
        }
    }

    /// A refusal of a decision whose requirement someone else already decided, made
    /// [`AgentError::AlreadyDecided`] (see [`crate::late_refusal`]).
    async fn late(&self, refusal: crate::run::Refusal, call: &Call) -> crate::run::Refusal {
        crate::follow::late_refusal(&self.agent.runtime.store, &self.session, refusal, call).await
    }

    /// Records a refused input in the audit trail (without touching the session's
    /// version: other callers' views stay valid). A failure to record is logged; the
    /// caller gets the refusal either way.
    async fn record_refusal(&self, records: Vec<crate::view::DecisionRecord>) {
        crate::follow::record_refusal(&self.agent.runtime.store, &self.session, records).await;
    }

    /// A new message closed paused sub-agent calls: their child sessions are closed
    /// too, so nothing stays approvable there (in the child's transcript and audit
    /// trail as rejections noting the parent moved on). A failure is logged: the
    /// parent's own turn is already stored, and the child shows as closed once retried.
    async fn close_children(&self, children: &[reins_message::ToolUse], call: &Call) {
        crate::nested::close_children(&self.agent, &self.session, children, call).await;
    }

    /// Writes the run's changes as one store transaction.
    async fn commit(&self, core: &mut SessionCore) -> Result<()> {
        self.commit_with(core, Flush::All, false).await
    }

    /// Commits when there is more to write than the run state.
    async fn commit_if_recorded(&self, core: &mut SessionCore) -> Result<()> {
        self.commit_with(core, Flush::Recorded, false).await
    }

    /// The run's last commit: also releases the session lock where the store can.
    async fn commit_releasing(&self, core: &mut SessionCore) -> Result<()> {
        self.commit_with(core, Flush::All, true).await
    }

    async fn commit_with(&self, core: &mut SessionCore, flush: Flush, last: bool) -> Result<()> {
        let Some(mut commit) = core.run.take_commit(flush) else {
            return Ok(());
        };
        commit.expected_version = core.version;
        let release = if last {
            self.lock.release_in_commit()
        } else {
            None
        };
        commit.release_lock = release.map(str::to_owned);
        let started = std::time::Instant::now();
        let stored = self.agent.runtime.store.commit(&self.session, commit).await;
        crate::telemetry::store_call("commit", started.elapsed());
        match stored {
            Ok(v) => {
                core.version = v;
                if release.is_some() {
                    self.lock.released_by_commit();
                }
                Ok(())
            }
            Err(e) => {
                core.stale = true;
                Err(e.into())
            }
        }
    }

    async fn interrupt(
        &self,
        core: &mut SessionCore,
        results: Vec<ToolResult>,
    ) -> Result<RunStatus> {
        core.run.apply(Event::Interrupted(results))?;
        if let Ok(out) = core.run.output(RunStatus::Cancelled) {
            if !out.repairs.is_empty() {
                self.emit(|| RunEvent::Repaired {
                    report: out.repairs,
                });
            }
        }
        self.commit(core).await?;
        Ok(RunStatus::Cancelled)
    }

    /// After a crash in the middle of tool execution, before a new message closes the
    /// turn: the calls it cut short, settled from the ledger
    /// ([`crate::effects::settle_from_ledger`]).
    async fn settle_from_ledger(&self, core: &mut SessionCore, input: &RunInput) -> Result<()> {
        let calls = core.run.state().settle_before(input);
        if calls.is_empty() {
            return Ok(());
        }
        let iteration = core.run.state().iteration();
        // Boxed: after a crash only, and the largest part of `begin`'s future.
        let results = Box::pin(crate::effects::settle_from_ledger(
            &self.agent,
            &self.session,
            iteration,
            calls,
            &self.cancel,
            self,
        ))
        .await?;
        if !results.is_empty() {
            core.run.apply(Event::Settled {
                results,
                now: Utc::now(),
            })?;
        }
        Ok(())
    }
}

/// The local driver's events go to the caller's listener; a long effect keeps the
/// session lock alive.
#[async_trait::async_trait]
impl crate::effects::Witness for Driver {
    fn listening(&self) -> bool {
        self.events.is_some()
    }

    fn send(&self, event: RunEvent) {
        if let Some(tx) = &self.events {
            let _ = tx.send(event);
        }
    }

    async fn progress(&self) {
        self.lock.renew_if_due().await;
    }

    fn wants_progress(&self) -> bool {
        self.lock.is_due()
    }
}

/// The paused sub-agent calls `call`'s input closes (a user message closes them).
fn closed_children(core: &SessionCore, call: &Call) -> Vec<reins_message::ToolUse> {
    crate::nested::closed_by(&core.run, call.input())
}
