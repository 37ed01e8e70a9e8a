//! A session's state as this process holds it: the cached run and the store version
//! it matches ([`SessionCore`]), shared by every handle on the session
//! ([`SessionShared`]), the agent's registry of them ([`LiveSessions`]), how the cache
//! is brought up to date with the store, and what a reader is shown ([`SessionView`]).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use reins_memory::{MemoryStore, SessionState};
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::error::Result;
use crate::requirement::Requirement;
use crate::run::{Phase, Run, RunConfig};
use crate::view::ViewToken;

/// A session as one read saw it: what a person deciding is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionView {
    /// The session id.
    pub session_id: String,
    /// The stored version the view was read at.
    pub version: u64,
    /// Where the session's run is.
    pub phase: Phase,
    /// Whether it waits for decisions, results or `resume()`.
    pub paused: bool,
    /// What it waits for (empty unless paused).
    pub requirements: Vec<Requirement>,
    /// The token to act on exactly this view: `session.resume().at(&token)`,
    /// `session.resolve(decisions).at(&token)`.
    pub token: ViewToken,
}

impl SessionView {
    /// Whether the run is at work: the model or tools (here or on another instance).
    pub fn is_running(&self) -> bool {
        matches!(
            self.phase,
            Phase::Reasoning | Phase::Acting | Phase::Summarizing
        )
    }

    /// How the run stands once it no longer runs (`None` while it does): paused, or
    /// how it finished (a session with no run in progress: completed).
    pub fn outcome(&self) -> Option<crate::RunStatus> {
        match self.phase {
            Phase::Reasoning | Phase::Acting | Phase::Summarizing => None,
            Phase::Paused => Some(crate::RunStatus::Paused),
            Phase::Finished(status) => Some(status),
            Phase::Idle => Some(crate::RunStatus::Completed),
        }
    }
}

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

/// The session held by one run (or one verb) of this process: the lock on its
/// [`SessionCore`] and the [`SessionShared`] it belongs to. Holding the shared state
/// keeps it in the agent's [`LiveSessions`] for as long as the run holds the lock, so
/// every handle opened meanwhile — even after every handle the run started from is
/// gone — finds this very lock taken and is refused, rather than a fresh copy of the
/// session that nobody holds. (The store's lock cannot tell: this process is its owner
/// for both.)
pub(crate) struct ClaimedCore {
    // Field order is drop order: the lock goes before the registration it depends on.
    core: OwnedMutexGuard<SessionCore>,
    _shared: Arc<SessionShared>,
}

impl std::ops::Deref for ClaimedCore {
    type Target = SessionCore;

    fn deref(&self) -> &SessionCore {
        &self.core
    }
}

impl std::ops::DerefMut for ClaimedCore {
    fn deref_mut(&mut self) -> &mut SessionCore {
        &mut self.core
    }
}

impl SessionShared {
    /// Takes the session's lock in this process, or `None` when a run (or a verb)
    /// holds it.
    pub(crate) fn try_claim(self: &Arc<Self>) -> Option<ClaimedCore> {
        let core = self.core.clone().try_lock_owned().ok()?;
        Some(ClaimedCore {
            core,
            _shared: self.clone(),
        })
    }

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
        Ok(Self {
            run: Run::stored(&state.id, config, state.messages, state.run_state)?,
            version: state.version,
            stale: false,
        })
    }

    /// The view a reader of this state is shown.
    pub(crate) fn view_of(&self, session_id: &str) -> SessionView {
        let paused = self.run.is_paused();
        SessionView {
            session_id: session_id.to_owned(),
            version: self.version,
            phase: self.run.phase(),
            paused,
            requirements: if paused {
                self.run.requirements()
            } else {
                Vec::new()
            },
            token: self.run.view(),
        }
    }
}

/// Weak handles on the sessions in use. Dead entries are swept when the map has
/// doubled since the last sweep, so opening a session costs O(1) amortized.
#[derive(Default)]
pub(crate) struct LiveSessions {
    map: HashMap<String, Weak<SessionShared>>,
    sweep_at: usize,
}

impl LiveSessions {
    pub(crate) fn get(&self, id: &str) -> Option<&Weak<SessionShared>> {
        self.map.get(id)
    }

    pub(crate) fn insert(&mut self, id: &str, shared: &Arc<SessionShared>) {
        if self.map.len() >= self.sweep_at {
            self.map.retain(|_, w| w.strong_count() > 0);
            self.sweep_at = (self.map.len() * 2).max(64);
        }
        self.map.insert(id.to_owned(), Arc::downgrade(shared));
    }
}

/// Brings the cached run up to date with the store: one version read; a full load only
/// when the version moved (or the cache is marked stale). A session deleted meanwhile
/// reads as new and empty.
pub(crate) async fn sync_with_store(
    store: &Arc<dyn MemoryStore>,
    config: RunConfig,
    id: &str,
    core: &mut SessionCore,
) -> Result<()> {
    let stored = store.session_version(id).await?;
    sync_to_version(store, config, id, core, stored).await
}

/// [`sync_with_store`] with the stored version already read (`None`: no such session).
pub(crate) async fn sync_to_version(
    store: &Arc<dyn MemoryStore>,
    config: RunConfig,
    id: &str,
    core: &mut SessionCore,
    stored: Option<u64>,
) -> Result<()> {
    match stored {
        Some(v) if v == core.version && !core.stale => Ok(()),
        Some(_) => reload_if_needed(store, config, id, core, true).await,
        None => {
            let state = store.open_session(id).await?;
            *core = SessionCore::from_state(state, config)?;
            Ok(())
        }
    }
}

/// Reloads the cached run from the store when it is marked stale, or when `always`.
pub(crate) async fn reload_if_needed(
    store: &Arc<dyn MemoryStore>,
    config: RunConfig,
    id: &str,
    core: &mut SessionCore,
    always: bool,
) -> Result<()> {
    if !(always || core.stale) {
        return Ok(());
    }
    let state = store.load_session(id).await?;
    *core = SessionCore::from_state(state, config)?;
    Ok(())
}
