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

use reins_memory::ChangeFeed;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentInner};

/// The runs of one agent in flight, and its listener.
#[derive(Default)]
pub(crate) struct RemoteInterrupts {
    active: std::sync::Mutex<HashMap<String, CancellationToken>>,
    listener: tokio::sync::Mutex<Option<Listener>>,
}

struct Listener(tokio::task::JoinHandle<()>);

impl Drop for Listener {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A run registered as in flight; unregistered when dropped.
pub(crate) struct ActiveRun {
    agent: Weak<AgentInner>,
    session: String,
}

impl ActiveRun {
    /// Registers the run of `session` (cancelled through `cancel`) and makes sure the
    /// agent listens for interrupt requests. A store whose change feed cannot be
    /// opened still runs; remote interrupts then reach this worker only through
    /// [`interrupt_local`] (logged).
    pub(crate) async fn register(agent: &Agent, session: &str, cancel: &CancellationToken) -> Self {
        let remote = &agent.inner.remote;
        if let Ok(mut map) = remote.active.lock() {
            map.insert(session.to_owned(), cancel.clone());
        }
        let mut listener = remote.listener.lock().await;
        if listener.as_ref().is_none_or(|l| l.0.is_finished()) {
            match agent.inner.store.interrupt_notices().await {
                Ok(feed) => {
                    let weak = Arc::downgrade(&agent.inner);
                    *listener = Some(Listener(tokio::spawn(listen(weak, feed))));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the store's change feed is unavailable: interrupts requested by other workers will not reach this one");
                }
            }
        }
        Self {
            agent: Arc::downgrade(&agent.inner),
            session: session.to_owned(),
        }
    }
}

impl Drop for ActiveRun {
    fn drop(&mut self) {
        if let Some(inner) = self.agent.upgrade() {
            if let Ok(mut map) = inner.remote.active.lock() {
                map.remove(&self.session);
            }
        }
    }
}

/// Interrupts this agent's run of `session` in this process, if there is one.
pub(crate) fn interrupt_local(agent: &Agent, session: &str) -> bool {
    agent
        .inner
        .remote
        .active
        .lock()
        .ok()
        .and_then(|m| m.get(session).cloned())
        .map(|t| t.cancel())
        .is_some()
}

async fn listen(agent: Weak<AgentInner>, mut feed: ChangeFeed) {
    loop {
        let concerns = match feed.recv().await {
            Ok(change) => change.session,
            Err(RecvError::Lagged(_)) => None,
            Err(RecvError::Closed) => break,
        };
        let Some(inner) = agent.upgrade() else { break };
        let candidates: Vec<(String, CancellationToken)> = match inner.remote.active.lock() {
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
        match inner.store.interrupt_requests(&inner.owner).await {
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
