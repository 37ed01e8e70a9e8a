//! [`Session`]: one conversation, and the entry points that run it.

use std::sync::Arc;

use reins_memory::SessionState;
use reins_message::Msg;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::error::{AgentError, Result};
use crate::handle::RunHandle;
use crate::output::RunOutput;
use crate::requirement::{Decision, Requirement};
use crate::run::{Run, RunConfig, RunInput, RunState};
use crate::snapshot::SessionSnapshot;

/// The state shared by every handle on one session of one agent.
pub(crate) struct SessionShared {
    pub(crate) id: String,
    pub(crate) core: Arc<Mutex<SessionCore>>,
}

/// The cached run and the store version it matches.
pub(crate) struct SessionCore {
    pub(crate) run: Run,
    pub(crate) version: u64,
    /// The cache may differ from the store (a write failed): reload before use.
    pub(crate) stale: bool,
}

impl SessionShared {
    pub(crate) fn from_state(
        id: &str,
        state: SessionState,
        config: RunConfig,
    ) -> Result<Arc<Self>> {
        let core = SessionCore::from_state(state, config)?;
        Ok(Arc::new(Self {
            id: id.to_owned(),
            core: Arc::new(Mutex::new(core)),
        }))
    }
}

impl SessionCore {
    pub(crate) fn from_state(state: SessionState, config: RunConfig) -> Result<Self> {
        let run_state = match state.run_state {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(serde_json::from_value::<RunState>(v).map_err(|e| {
                AgentError::CorruptRunState {
                    session: state.id.clone(),
                    detail: e.to_string(),
                }
            })?),
        };
        Ok(Self {
            run: Run::restore(config, state.messages, run_state),
            version: state.version,
            stale: false,
        })
    }
}

/// One conversation of an [`Agent`]. Cheap to clone; every clone (and every
/// `agent.session(id)` for the same id) shares one state. Two runs at once on one
/// session are refused with [`AgentError::SessionBusy`], in this process and across
/// processes sharing a store.
#[derive(Clone)]
pub struct Session {
    pub(crate) agent: Agent,
    pub(crate) shared: Arc<SessionShared>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.shared.id)
            .field("agent", &self.agent.name())
            .finish_non_exhaustive()
    }
}

impl Session {
    pub(crate) fn from_shared(agent: Agent, shared: Arc<SessionShared>) -> Self {
        Self { agent, shared }
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The agent this session belongs to.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// Sends a message and runs until the run completes, pauses or is cancelled.
    ///
    /// - A user message starts a new run; if the session was paused, the pending tool
    ///   calls are closed with `Rejected` results noting the new message.
    /// - `Msg::tool_results(..)` answers pending calls with the caller's results
    ///   (cancelled ones, or externally executed ones) and goes on.
    ///
    /// Dropping the returned future interrupts the run (the turn is sanitized and
    /// stored, as with [`RunHandle::interrupt`]).
    pub async fn call(&self, msg: Msg) -> Result<RunOutput> {
        self.start(msg).await?.wait().await
    }

    /// Goes on after a pause: approves every pending confirmation (AgentScope's
    /// `call()` with no message), or continues after a hook stopped the run.
    /// Requirements that need input or an external result stay pending.
    pub async fn resume(&self) -> Result<RunOutput> {
        self.start_input(RunInput::Resume).await?.wait().await
    }

    /// Answers pending requirements. Decisions naming no pending requirement, of the
    /// wrong kind, or for an expired one are refused and change nothing. Resolved calls
    /// run; the rest stay pending, and the model is called only when every tool use
    /// of the turn has a result.
    pub async fn resolve(&self, decisions: Vec<Decision>) -> Result<RunOutput> {
        self.start_input(RunInput::Decisions(decisions))
            .await?
            .wait()
            .await
    }

    /// Starts a run and returns at once with a [`RunHandle`] to stream its events and
    /// interrupt it.
    pub async fn start(&self, msg: Msg) -> Result<RunHandle> {
        self.start_input(RunInput::Message(msg)).await
    }

    /// [`Session::resume`], as a [`RunHandle`].
    pub async fn start_resume(&self) -> Result<RunHandle> {
        self.start_input(RunInput::Resume).await
    }

    /// [`Session::resolve`], as a [`RunHandle`].
    pub async fn start_resolve(&self, decisions: Vec<Decision>) -> Result<RunHandle> {
        self.start_input(RunInput::Decisions(decisions)).await
    }

    /// Starts any input. The session is claimed before this returns: a second start
    /// while a run is in flight fails with [`AgentError::SessionBusy`].
    pub async fn start_input(&self, input: RunInput) -> Result<RunHandle> {
        let Ok(guard) = self.shared.core.clone().try_lock_owned() else {
            return Err(AgentError::SessionBusy {
                session: self.id().to_owned(),
            });
        };
        let lock = crate::lock::StoreLock::acquire(&self.agent, self.id()).await?;
        let cancel = CancellationToken::new();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(Box::pin(crate::drive::drive(
            self.agent.clone(),
            self.id().to_owned(),
            guard,
            lock,
            input,
            cancel.clone(),
            tx,
        )));
        Ok(RunHandle::new(self.id().to_owned(), cancel, rx, task))
    }

    /// The transcript as stored (waits for a run in flight to end).
    pub async fn messages(&self) -> Result<Vec<Msg>> {
        let mut core = self.shared.core.lock().await;
        self.refresh(&mut core).await?;
        Ok(core.run.messages().to_vec())
    }

    /// What the session waits for, when it is paused.
    pub async fn requirements(&self) -> Result<Vec<Requirement>> {
        let mut core = self.shared.core.lock().await;
        self.refresh(&mut core).await?;
        Ok(if core.run.is_paused() {
            core.run.requirements()
        } else {
            Vec::new()
        })
    }

    /// Whether the session is paused.
    pub async fn is_paused(&self) -> Result<bool> {
        let mut core = self.shared.core.lock().await;
        self.refresh(&mut core).await?;
        Ok(core.run.is_paused())
    }

    /// Exports the session (transcript, run state, requirements) as a versioned,
    /// portable snapshot. See `docs/persistence.md` for the format.
    pub async fn snapshot(&self) -> Result<SessionSnapshot> {
        let mut core = self.shared.core.lock().await;
        self.refresh(&mut core).await?;
        Ok(SessionSnapshot::of(self.id(), &core.run))
    }

    /// Reloads from the store when the cache may be out of date.
    pub(crate) async fn refresh(&self, core: &mut SessionCore) -> Result<()> {
        reload_if_needed(&self.agent, self.id(), core, false).await
    }
}

/// Reloads the cached run from the store when it is marked stale, or when `always`.
pub(crate) async fn reload_if_needed(
    agent: &Agent,
    id: &str,
    core: &mut SessionCore,
    always: bool,
) -> Result<()> {
    if !(always || core.stale) {
        return Ok(());
    }
    let state = agent.inner.store.load_session(id).await?;
    *core = SessionCore::from_state(state, agent.inner.config)?;
    Ok(())
}
