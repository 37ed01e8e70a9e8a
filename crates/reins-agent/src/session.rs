//! [`Session`]: one conversation, and the entry points that run it.

use std::sync::Arc;

use reins_message::Msg;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::error::{AgentError, Result};
use crate::handle::RunHandle;
use crate::output::RunOutput;
use crate::requirement::{Decision, Requirement};
use crate::run::{Run, RunInput};
use crate::state::{SessionCore, SessionShared, SessionView, sync_with_store};
use crate::view::{Actor, DecisionRecord, ViewToken};

mod verbs;

pub use verbs::{ResolveBuilder, ResumeBuilder, SendBuilder};

impl Agent {
    /// Opens a session: loads it from the store, or creates it.
    pub async fn session(&self, id: &str) -> Result<Session> {
        if id.trim().is_empty() {
            return Err(AgentError::InvalidInput(
                "a session id cannot be empty".to_owned(),
            ));
        }
        if let Some(shared) = self.live_session(id) {
            return Session::open(self.clone(), shared).await;
        }
        let state = self.runtime.store.open_session(id).await?;
        let shared = SessionShared::from_state(id, state, self.config.run)?;
        let (shared, fresh) = {
            let mut map = self
                .runtime
                .sessions
                .lock()
                .map_err(|_| AgentError::Internal("session map poisoned".to_owned()))?;
            // Another task may have opened it meanwhile: keep theirs.
            if let Some(existing) = map.get(id).and_then(std::sync::Weak::upgrade) {
                (existing, false)
            } else {
                map.insert(id, &shared);
                (shared, true)
            }
        };
        if fresh {
            // Just loaded: no need to read the version again.
            Session::open_loaded(self.clone(), shared).await
        } else {
            Session::open(self.clone(), shared).await
        }
    }

    fn live_session(&self, id: &str) -> Option<Arc<SessionShared>> {
        self.runtime
            .sessions
            .lock()
            .ok()
            .and_then(|m| m.get(id).and_then(std::sync::Weak::upgrade))
    }

    /// Sends a message on the default session (`"default"`), opened when the run
    /// starts: await the builder, or `.start()` it. See [`SendBuilder`].
    pub fn send(&self, msg: Msg) -> SendBuilder<'_> {
        SendBuilder::on_default(self, msg)
    }
}

/// One conversation of an [`Agent`]. Cheap to clone; every handle on the same id
/// shares one cached state, and every read checks the store's version first, so a
/// handle sees what other workers did (in this process or another sharing the store).
/// Two runs at once on one session are refused with [`AgentError::SessionBusy`], in
/// this process and across processes sharing a store.
///
/// A handle has a **view**: what its last read (or its last run) showed. `resume()`
/// approves exactly the requirements in that view and is refused with
/// [`AgentError::StaleView`] when the session waits for something else by then; see
/// `docs/human-in-the-loop.md`. Clones share the view; `agent.session(id)` gives a new
/// handle whose view is what is pending when it opens.
#[derive(Clone)]
pub struct Session {
    pub(crate) agent: Agent,
    pub(crate) shared: Arc<SessionShared>,
    view: Arc<std::sync::Mutex<ViewToken>>,
    actor: Option<Actor>,
    trace_parent: Option<String>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.shared.id)
            .field("agent", &self.agent.name())
            .field("view", &self.current_view())
            .field("actor", &self.actor)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// A handle on `shared` whose view is what the session waits for now (a running
    /// session waits for nothing).
    pub(crate) async fn open(agent: Agent, shared: Arc<SessionShared>) -> Result<Self> {
        Self::open_checked(agent, shared, true).await
    }

    /// [`Session::open`] on a state just loaded from the store: no version read.
    pub(crate) async fn open_loaded(agent: Agent, shared: Arc<SessionShared>) -> Result<Self> {
        Self::open_checked(agent, shared, false).await
    }

    async fn open_checked(agent: Agent, shared: Arc<SessionShared>, check: bool) -> Result<Self> {
        let session = Self {
            agent,
            shared,
            view: Arc::new(std::sync::Mutex::new(ViewToken::new(
                false,
                Vec::<String>::new(),
            ))),
            actor: None,
            trace_parent: None,
        };
        // A run in flight in this process holds the state: it waits for nothing now,
        // and the first read after it ends sees its result.
        if let Ok(mut core) = session.shared.core.clone().try_lock_owned() {
            if check {
                session.refresh(&mut core).await?;
            }
            session.set_view(core.run.view());
        }
        Ok(session)
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The agent this session belongs to.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// A handle acting for `actor`: its decisions (and `resume()`) are recorded in the
    /// audit trail with this actor, unless a [`Decision`] names its own `by`. Shares
    /// this handle's view.
    #[must_use]
    pub fn as_actor(&self, actor: Actor) -> Self {
        Self {
            actor: Some(actor),
            ..self.clone()
        }
    }

    /// A handle whose runs join the caller's trace: `traceparent` (W3C Trace Context,
    /// as an HTTP `traceparent` header or an MCP request's `_meta` carries it) becomes
    /// the parent of each turn's `invoke_agent` span (with reins-agent's `otel`
    /// feature and an OpenTelemetry layer installed; a malformed one is ignored).
    /// Shares the view with `self`.
    #[must_use]
    pub fn with_trace_parent(&self, traceparent: impl Into<String>) -> Self {
        Self {
            trace_parent: Some(traceparent.into()),
            ..self.clone()
        }
    }

    /// The actor this handle acts for, if set.
    pub fn actor(&self) -> Option<&Actor> {
        self.actor.as_ref()
    }

    /// Sends a message: await the returned builder to run until the run completes,
    /// pauses or is cancelled, or `.start()` it for a [`RunHandle`].
    ///
    /// - A user message starts a new run; if the session was paused, the pending tool
    ///   calls are closed with `Rejected` results noting the new message.
    /// - `Msg::tool_results(..)` answers pending calls with the caller's results
    ///   (cancelled ones, or externally executed ones) and goes on.
    ///
    /// `.output::<T>()` asks for a typed answer, `.at(&token)` acts only on a view.
    /// Dropping the awaited future interrupts the run (the turn is sanitized and
    /// stored, as with [`RunHandle::interrupt`]). See [`SendBuilder`].
    pub fn send(&self, msg: Msg) -> SendBuilder<'_> {
        SendBuilder::on_session(self, msg)
    }

    /// Goes on after a pause: approves the pending confirmations this handle was shown
    /// (AgentScope's `call()` with no message), or continues after a hook stopped the
    /// run. Requirements that need input or an external result stay pending. When the
    /// session waits for something other than this handle's view (or the one named
    /// with `.at(&token)`) by now, fails with [`AgentError::StaleView`], changes
    /// nothing and runs nothing. Await it, or `.start()` it; see [`ResumeBuilder`].
    pub fn resume(&self) -> ResumeBuilder<'_> {
        ResumeBuilder::new(self)
    }

    /// Answers pending requirements. Decisions naming no pending requirement, of the
    /// wrong kind, or for an expired one are refused and change nothing. Resolved calls
    /// run; the rest stay pending, and the model is called only when every tool use
    /// of the turn has a result. A decision names its requirement's id, which is never
    /// reused within a session, so it cannot apply to a requirement raised after the
    /// caller looked. Await it, or `.start()` it; `.at(&token)` refuses it with
    /// [`AgentError::StaleView`] unless the session waits for exactly what that view
    /// showed. See [`ResolveBuilder`].
    pub fn resolve(&self, decisions: Vec<Decision>) -> ResolveBuilder<'_> {
        ResolveBuilder::new(self, decisions)
    }

    async fn start_full(
        &self,
        input: RunInput,
        view: Option<ViewToken>,
        asks: crate::drive::Asks,
        client_tools: Vec<reins_message::ToolSpec>,
    ) -> Result<RunHandle> {
        let parts = Parts {
            input,
            view,
            asks,
            client_tools,
        };
        self.deciding(parts, |parts| async move {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            // A started run takes the lock before its handle exists, so that nothing
            // of the run has happened when the caller gets the handle: an interrupt
            // sent right away (A2A's cancel of a paused task rejects its calls and
            // interrupts) stops the run before the model is asked again.
            let (args, active) = self.prepare(parts, Some(tx), false).await?;
            let cancel = args.cancel.clone();
            let task = tokio::spawn(drive_future(args, active));
            Ok(RunHandle::new(self.id().to_owned(), cancel, rx, task))
        })
        .await
    }

    /// Runs to the end on the caller's task (no task spawned, no event channel).
    /// Dropping the returned future before it ends interrupts the run: the unfinished
    /// run moves to a task of its own, stops at its next checkpoint and stores a
    /// sanitized turn, as a dropped [`RunHandle`] does.
    async fn run_inline(
        &self,
        input: RunInput,
        view: Option<ViewToken>,
        asks: crate::drive::Asks,
        client_tools: Vec<reins_message::ToolSpec>,
    ) -> Result<RunOutput> {
        let parts = Parts {
            input,
            view,
            asks,
            client_tools,
        };
        self.deciding(parts, |parts| async move {
            let (args, active) = self.prepare(parts, None, true).await?;
            InlineRun {
                cancel: args.cancel.clone(),
                run: Some(drive_future(args, active)),
            }
            .await
        })
        .await
    }

    /// Makes one `attempt` of a call, and for decisions made while the session is
    /// busy, more: a run in flight may be the one that applies another approver's
    /// decision on the same requirement. A decision that lost that race is refused as
    /// [`AgentError::AlreadyDecided`] and recorded in the audit trail, whatever the
    /// timing ([`crate::busy_refusal`]: the rule every driver applies); a session busy
    /// with anything else is still refused with [`AgentError::SessionBusy`] after a
    /// short bounded wait ([`crate::BUSY_DECISION_WAIT`]). (A refusal as busy — by the
    /// lock taken first or by the run's first commit — wrote nothing, so an attempt can
    /// be made again.)
    async fn deciding<T, F, Fut>(&self, parts: Parts, mut attempt: F) -> Result<T>
    where
        F: FnMut(Parts) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        if !matches!(&parts.input, RunInput::Decisions(_)) {
            return attempt(parts).await;
        }
        let store = &self.agent.runtime.store;
        let deadline = tokio::time::Instant::now() + crate::follow::BUSY_DECISION_WAIT;
        loop {
            match attempt(parts.clone()).await {
                Err(AgentError::SessionBusy { .. }) => {
                    let call = self
                        .agent
                        .begin(
                            self.id().to_owned(),
                            self.stamp_actor(parts.input.clone()),
                            chrono::Utc::now(),
                        )
                        .with_actor(self.actor.clone())
                        .with_view(parts.view.clone());
                    // Looked up once here: the attempt is made again while the wait
                    // lasts (the session may be free by then).
                    let refusal = crate::follow::busy_refusal(
                        store,
                        self.id(),
                        &call,
                        std::time::Duration::ZERO,
                    )
                    .await;
                    if matches!(refusal.error, AgentError::AlreadyDecided { .. }) {
                        crate::follow::record_refusal(store, self.id(), refusal.audit).await;
                        return Err(refusal.error);
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return Err(refusal.error);
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                other => return other,
            }
        }
    }

    /// Claims the session in this process and assembles a run. With `fold`, the lock
    /// in the store rides in the run's first commit where the store can take it there
    /// and the cached session is not known to be stale
    /// ([`crate::lock::StoreLock::pending`]); otherwise it is taken here, with the
    /// stored version.
    async fn prepare(
        &self,
        parts: Parts,
        events: Option<tokio::sync::mpsc::UnboundedSender<crate::output::RunEvent>>,
        fold: bool,
    ) -> Result<(crate::drive::DriveArgs, crate::remote::ActiveRun)> {
        let Parts {
            input,
            view,
            asks,
            client_tools,
        } = parts;
        let input = self.stamp_actor(input);
        let Some(guard) = self.shared.try_claim() else {
            return Err(AgentError::SessionBusy {
                session: self.id().to_owned(),
            });
        };
        let (store, owner) = (&self.agent.runtime.store, &self.agent.runtime.owner);
        let lease = self.agent.config.session_lease;
        let lock = if fold && !guard.stale && store.commit_takes_lock() {
            crate::lock::StoreLock::pending(store, owner, lease, self.id())
        } else {
            crate::lock::StoreLock::acquire(store, owner, lease, self.id()).await?
        };
        let cancel = CancellationToken::new();
        let active = crate::remote::ActiveRun::register(
            &self.agent.runtime.remote,
            &self.agent.runtime.store,
            &self.agent.runtime.owner,
            self.id(),
            &cancel,
        )
        .await;
        let args = crate::drive::DriveArgs {
            agent: self.agent.clone(),
            session: self.id().to_owned(),
            core: guard,
            lock,
            input,
            actor: self.actor.clone(),
            view,
            handle_view: self.view.clone(),
            asks,
            cancel,
            events,
            client_tools,
            trace_parent: self.trace_parent.clone(),
        };
        Ok((args, active))
    }

    /// Records this handle's actor on decisions and tool results that name nobody.
    fn stamp_actor(&self, input: RunInput) -> RunInput {
        let Some(actor) = &self.actor else {
            return input;
        };
        match input {
            RunInput::Decisions(ds) => RunInput::Decisions(
                ds.into_iter()
                    .map(|d| {
                        if d.decided_by().is_none() {
                            d.by(actor.principal.clone())
                        } else {
                            d
                        }
                    })
                    .collect(),
            ),
            RunInput::Message(mut m) if m.role == reins_message::Role::Tool => {
                for b in &mut m.content {
                    if let reins_message::ContentBlock::ToolResult(r) = b {
                        r.metadata
                            .entry("decided_by".to_owned())
                            .or_insert_with(|| serde_json::Value::String(actor.principal.clone()));
                    }
                }
                RunInput::Message(m)
            }
            other => other,
        }
    }

    /// The transcript as stored (waits for a run in flight in this process to end).
    pub async fn messages(&self) -> Result<Vec<Msg>> {
        self.read(|run| run.messages().to_vec()).await
    }

    /// The context summaries in the transcript, oldest first (see
    /// [`ContextPolicy`](crate::ContextPolicy)). The last one stands in for the
    /// messages it covers in requests; the originals stay in [`messages`](Self::messages).
    pub async fn summaries(&self) -> Result<Vec<crate::compression::ContextSummary>> {
        self.read(|run| {
            run.messages()
                .iter()
                .filter_map(crate::compression::ContextSummary::from_msg)
                .collect()
        })
        .await
    }

    /// What the session waits for, when it is paused. Updates this handle's view.
    pub async fn requirements(&self) -> Result<Vec<Requirement>> {
        self.read(|run| {
            if run.is_paused() {
                run.requirements()
            } else {
                Vec::new()
            }
        })
        .await
    }

    /// Whether the session is paused.
    pub async fn is_paused(&self) -> Result<bool> {
        self.read(Run::is_paused).await
    }

    /// The session as stored now — phase, pending requirements and the token to act
    /// on exactly this view (`session.resume().at(&token)`, `.resolve(..).at(&token)`).
    pub async fn view(&self) -> Result<SessionView> {
        let mut core = self.shared.core.lock().await;
        self.refresh(&mut core).await?;
        let view = core.view_of(self.id());
        self.set_view(view.token.clone());
        Ok(view)
    }

    /// The view this handle holds now (what its last read or run showed), without
    /// reading the store.
    pub fn current_view(&self) -> ViewToken {
        self.view
            .lock()
            .map(|v| v.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    fn set_view(&self, token: ViewToken) {
        match self.view.lock() {
            Ok(mut v) => *v = token,
            Err(p) => *p.into_inner() = token,
        }
    }

    /// The session's audit trail: every decision made about its requirements, applied
    /// or refused, oldest first, with who made it.
    pub async fn decisions(&self) -> Result<Vec<DecisionRecord>> {
        self.agent
            .runtime
            .store
            .decisions(self.id())
            .await?
            .into_iter()
            .map(|e| DecisionRecord::from_entry(self.id(), e))
            .collect()
    }

    /// The decision that took effect on requirement `id`, if one did (from the audit
    /// trail; a nested id is looked up in the child session where it may have been
    /// answered directly). What a late decision on `id` is refused with, as
    /// [`AgentError::AlreadyDecided`].
    pub async fn decided(&self, id: &str) -> Result<Option<crate::error::Decided>> {
        let found =
            crate::follow::already_decided(&self.agent.runtime.store, self.id(), &[id.to_owned()])
                .await?;
        Ok(found.and_then(|(e, _)| match e {
            AgentError::AlreadyDecided { decided, .. } => Some(*decided),
            _ => None,
        }))
    }

    /// Asks the run in flight on this session to stop, wherever it executes: in this
    /// process it is interrupted at once; in another worker sharing the store, that
    /// worker notices at its next checkpoint (through the store's change feed). The
    /// run then ends `Cancelled` with its turn sanitized, as with
    /// [`RunHandle::interrupt`]. Returns whether a run was in flight.
    pub async fn request_interrupt(&self) -> Result<bool> {
        let local = self.agent.runtime.remote.interrupt_local(self.id());
        let remote = self
            .agent
            .runtime
            .store
            .request_interrupt(self.id())
            .await?;
        Ok(local || remote)
    }

    /// Reads the cached run after checking it against the store, and updates the view.
    pub(crate) async fn read<T>(&self, f: impl FnOnce(&Run) -> T) -> Result<T> {
        let mut core = self.shared.core.lock().await;
        self.refresh(&mut core).await?;
        self.set_view(core.run.view());
        Ok(f(&core.run))
    }

    /// Closes this (child) session because its parent session `parent` closed the
    /// sub-agent call it serves: every pending call is rejected with a note saying so,
    /// recorded in the transcript and the audit trail (by `actor`), the run ends
    /// `Cancelled` without a model call, and its own paused sub-agents are closed in
    /// turn. Nothing happens when the session is not paused.
    pub(crate) async fn close_for_parent(
        &self,
        parent: &str,
        note: &str,
        actor: Option<Actor>,
    ) -> Result<()> {
        let Some(mut core) = self.shared.try_claim() else {
            return Err(AgentError::SessionBusy {
                session: self.id().to_owned(),
            });
        };
        let rt = &self.agent.runtime;
        let config = self.agent.config.run;
        let lock = crate::lock::StoreLock::acquire(
            &rt.store,
            &rt.owner,
            self.agent.config.session_lease,
            self.id(),
        )
        .await?;
        let note = format!("closed: the parent session `{parent}` moved on ({note})");
        let closed = async {
            crate::state::sync_to_version(
                &rt.store,
                config,
                self.id(),
                &mut core,
                lock.seen_version(),
            )
            .await?;
            crate::follow::follow_children(&rt.store, config, self.id(), &mut core.run).await?;
            let by = actor.as_ref().map(|a| a.principal.clone());
            let Some(children) =
                core.run
                    .close_for_parent(&note, by.as_deref(), chrono::Utc::now())
            else {
                return Ok(Vec::new());
            };
            if let Some(mut commit) = core.run.take_commit(crate::run::Flush::All) {
                commit.expected_version = core.version;
                match rt.store.commit(self.id(), commit).await {
                    Ok(v) => core.version = v,
                    Err(e) => {
                        core.stale = true;
                        return Err(AgentError::from(e));
                    }
                }
            }
            self.set_view(core.run.view());
            Ok(children)
        }
        .await;
        drop(core);
        lock.release().await;
        for call in closed? {
            if let Some(sub) = rt.subagents.get(&call.name) {
                sub.close(self.id(), &call, &note, actor.clone()).await?;
            }
        }
        Ok(())
    }

    /// Reloads from the store when the store's version moved (one cheap read).
    /// A paused sub-agent call shows what its child session waits for in the store.
    pub(crate) async fn refresh(&self, core: &mut SessionCore) -> Result<()> {
        let store = &self.agent.runtime.store;
        sync_with_store(store, self.agent.config.run, self.id(), core).await?;
        crate::follow::follow_children(store, self.agent.config.run, self.id(), &mut core.run)
            .await?;
        Ok(())
    }
}

/// What the caller gives one call: its input, the view it acts on, what it asks of
/// the run, its own tools.
#[derive(Clone)]
struct Parts {
    input: RunInput,
    view: Option<ViewToken>,
    asks: crate::drive::Asks,
    client_tools: Vec<reins_message::ToolSpec>,
}

/// A run's drive future, boxed and type-erased: a run can start runs of other
/// sessions (sub-agents), and naming the future's type here keeps that recursion from
/// becoming a cycle in the compiler's `Send` reasoning.
type DriveFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<RunOutput>> + Send>>;

fn drive_future(args: crate::drive::DriveArgs, active: crate::remote::ActiveRun) -> DriveFuture {
    crate::boxed::boxed(move || crate::drive::drive(args, active))
}

/// A run driven by the task that awaits it. Dropped unfinished, it cancels the run and
/// hands the rest to a new task, which stops at the next checkpoint and stores the
/// sanitized turn (without a runtime, the run is dropped and its lease expires). A
/// panic in the run becomes [`AgentError::Internal`], as a failed task would.
struct InlineRun {
    cancel: CancellationToken,
    run: Option<DriveFuture>,
}

impl std::future::Future for InlineRun {
    type Output = Result<RunOutput>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let Some(run) = self.run.as_mut() else {
            return Poll::Ready(Err(AgentError::Internal(
                "a finished run was polled again".to_owned(),
            )));
        };
        let polled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run.as_mut().poll(cx)));
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(out)) => {
                self.run = None;
                Poll::Ready(out)
            }
            Err(panic) => {
                self.run = None;
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Poll::Ready(Err(AgentError::Internal(format!(
                    "the run ended abnormally: it panicked: {what}"
                ))))
            }
        }
    }
}

impl Drop for InlineRun {
    fn drop(&mut self) {
        let Some(run) = self.run.take() else { return };
        self.cancel.cancel();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(run);
        }
    }
}
