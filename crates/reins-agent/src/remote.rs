//! Interrupts asked for elsewhere: [`Session::request_interrupt`](crate::Session::request_interrupt)
//! flags the run's lock in the store; the worker running it learns of the flag through
//! the store's change feed and cancels the run, which then stops at its next
//! checkpoint like any interrupt.
//!
//! Each agent keeps the cancellation tokens of its runs in flight and, from its first
//! run on, one listener task on the store's change feed (not one per run). A change
//! notice that may concern one of its runs costs one query
//! ([`MemoryStore::interrupt_requests`](reins_memory::MemoryStore::interrupt_requests)),
//! however many runs are in flight.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use reins_memory::{ChangeFeed, MemoryStore};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

/// The runs of one agent in flight, and its listener: the agent's registry of
/// interruptible runs. Cheap to clone (one shared state).
#[derive(Clone, Default)]
pub(crate) struct RemoteInterrupts(Arc<Shared>);

#[derive(Default)]
struct Shared {
    active: std::sync::Mutex<HashMap<String, CancellationToken>>,
    listener: tokio::sync::Mutex<Option<Listener>>,
}

struct Listener(tokio::task::JoinHandle<()>);

impl Drop for Listener {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl RemoteInterrupts {
    /// Interrupts this agent's run of `session` in this process, if there is one.
    pub(crate) fn interrupt_local(&self, session: &str) -> bool {
        self.0
            .active
            .lock()
            .ok()
            .and_then(|m| m.get(session).cloned())
            .map(|t| t.cancel())
            .is_some()
    }
}

/// A run registered as in flight; unregistered when dropped.
pub(crate) struct ActiveRun {
    registry: Weak<Shared>,
    session: String,
}

impl ActiveRun {
    /// Registers the run of `session` (cancelled through `cancel`) and makes sure the
    /// agent listens for the interrupt requests `store` holds for `owner` (the agent
    /// instance's lock owner). A store whose change feed cannot be opened still runs;
    /// remote interrupts then reach this worker only through
    /// [`RemoteInterrupts::interrupt_local`] (logged).
    pub(crate) async fn register(
        remote: &RemoteInterrupts,
        store: &Arc<dyn MemoryStore>,
        owner: &str,
        session: &str,
        cancel: &CancellationToken,
    ) -> Self {
        let shared = &remote.0;
        if let Ok(mut map) = shared.active.lock() {
            map.insert(session.to_owned(), cancel.clone());
        }
        let mut listener = shared.listener.lock().await;
        if listener.as_ref().is_none_or(|l| l.0.is_finished()) {
            match store.interrupt_notices().await {
                Ok(feed) => {
                    let weak = Arc::downgrade(shared);
                    let task = listen(weak, store.clone(), owner.to_owned(), feed);
                    *listener = Some(Listener(tokio::spawn(task)));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the store's change feed is unavailable: interrupts requested by other workers will not reach this one");
                }
            }
        }
        Self {
            registry: Arc::downgrade(shared),
            session: session.to_owned(),
        }
    }
}

impl Drop for ActiveRun {
    fn drop(&mut self) {
        if let Some(shared) = self.registry.upgrade() {
            if let Ok(mut map) = shared.active.lock() {
                map.remove(&self.session);
            }
        }
    }
}

async fn listen(
    registry: Weak<Shared>,
    store: Arc<dyn MemoryStore>,
    owner: String,
    mut feed: ChangeFeed,
) {
    loop {
        let concerns = match feed.recv().await {
            Ok(change) => change.session,
            Err(RecvError::Lagged(_)) => None,
            Err(RecvError::Closed) => break,
        };
        let Some(shared) = registry.upgrade() else {
            break;
        };
        let candidates: Vec<(String, CancellationToken)> = match shared.active.lock() {
            Ok(map) => match &concerns {
                Some(s) => map
                    .get(s)
                    .map(|t| (s.clone(), t.clone()))
                    .into_iter()
                    .collect(),
                None => map.iter().map(|(s, t)| (s.clone(), t.clone())).collect(),
            },
            Err(_) => Vec::new(),
        };
        if candidates.is_empty() {
            continue;
        }
        match store.interrupt_requests(&owner).await {
            Ok(flagged) => {
                for (session, token) in candidates {
                    if flagged.contains(&session) {
                        tracing::info!(%session, "interrupt requested by another worker");
                        token.cancel();
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not read interrupt requests"),
        }
    }
}
