//! The state every handler shares.

use std::sync::Arc;
use std::time::Duration;

use reins_agent::{Agent, SessionBackend};

use crate::approvals::Approvals;
use crate::auth::Auth;
use crate::hub::Hub;

/// Limits and intervals (see [`Server`](crate::Server)'s setters).
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub(crate) body_limit: usize,
    pub(crate) request_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) keep_alive: Duration,
}

#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) agent: Agent,
    /// Where runs, decisions and interrupts go when sessions run elsewhere (a Restate
    /// deployment); `None`: the local driver, in this process.
    pub(crate) backend: Option<Arc<dyn SessionBackend>>,
    pub(crate) auth: Arc<Auth>,
    pub(crate) hub: Arc<Hub>,
    pub(crate) limits: Arc<Limits>,
    /// The approval channels (email links, Slack buttons) this server takes decisions
    /// from.
    pub(crate) approvals: Arc<Approvals>,
    /// The sweep of waiting calls (escalation, expiry), stopped when the last clone of
    /// the state that holds it is dropped (the sweep's own clone holds none).
    pub(crate) _sweeping: Option<Arc<crate::approvals::waiting::SweepTask>>,
    /// The dispatcher's task, stopped when the last clone of the state is dropped.
    pub(crate) _dispatching: Option<Arc<crate::notify::DispatcherTask>>,
    /// The webhook subscribers.
    pub(crate) webhooks: Arc<crate::notify::webhook::Webhooks>,
}

impl AppState {
    /// What runs the sessions: the backend when the server fronts one, else the
    /// agent (the local driver, in this process).
    pub(crate) fn sessions(&self) -> Arc<dyn SessionBackend> {
        match &self.backend {
            Some(b) => Arc::clone(b),
            None => Arc::new(self.agent.clone()),
        }
    }
}
