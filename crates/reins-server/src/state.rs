//! The state every handler shares.

use std::sync::Arc;
use std::time::Duration;

use reins_agent::port::Sessions;

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

/// Whom a notice's delivery through an approval channel reaches (the inbox shows it
/// beside each delivery). The approval channels implement it, so that the state names
/// none of their types (the channels' routes use the state).
pub(crate) trait Recipients: Send + Sync {
    /// The principals (or the Slack channel) a delivery to `destination` of `notice`
    /// about a call of `tool` reaches.
    fn recipients(
        &self,
        auth: &Auth,
        destination: &str,
        notice: &reins_memory::Notice,
        tool: &str,
    ) -> Vec<String>;
}

#[derive(Clone)]
pub(crate) struct AppState {
    /// The session port: every read, input, decision, interrupt, fork and replay goes
    /// through it, whichever driver runs the sessions (the local driver, or a Restate
    /// deployment behind [`reins_agent::Relayed`]).
    pub(crate) sessions: Arc<dyn Sessions>,
    pub(crate) auth: Arc<Auth>,
    pub(crate) hub: Arc<Hub>,
    pub(crate) limits: Arc<Limits>,
    /// Whom the approval channels (email links, Slack buttons) reach, for the inbox;
    /// their routes have a state of their own (`approvals::ApprovalsState`).
    pub(crate) approvals: Arc<dyn Recipients>,
    /// The sweep of waiting calls (escalation, expiry), stopped when the last clone of
    /// the state that holds it is dropped (the sweep's own clone holds none).
    pub(crate) _sweeping: Option<Arc<reins_notify::waiting::Sweeping>>,
    /// The dispatcher's task, stopped when the last clone of the state is dropped.
    pub(crate) _dispatching: Option<Arc<reins_notify::Dispatching>>,
    /// The Cedar policies whose shadow differences `/v1/policy/shadow` lists.
    pub(crate) policy: Option<reins_policy::CedarPolicy>,
    /// The policies kept in directories (`GET /v1/policy`, `POST /v1/policy/reload`).
    pub(crate) policy_dir: Option<Arc<reins_policy::PolicyDir>>,
    /// The policies' reload triggers (`policy::ReloadTasks`), stopped with the last
    /// clone of the state: held only to be dropped, so the state names no type of the
    /// routes that use it.
    pub(crate) _reloading: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// The webhook subscribers.
    pub(crate) webhooks: Arc<reins_notify::webhook::Webhooks>,
}

impl AppState {
    /// The state of an approval channel's routes mounted without a [`Server`](crate::Server)
    /// (`EmailApprovals::router`, `SlackApprovals::router`): the port and the principals
    /// the program gives, and a hub of its own that follows the runs its decisions
    /// continue. No dispatcher, no sweep, no policy.
    #[cfg(any(feature = "email", feature = "slack"))]
    pub(crate) fn standalone(
        sessions: Arc<dyn Sessions>,
        auth: Auth,
        approvals: Arc<dyn Recipients>,
    ) -> Self {
        let store = Arc::clone(sessions.record());
        Self {
            webhooks: Arc::new(reins_notify::webhook::Webhooks::new(store)),
            sessions,
            auth: Arc::new(auth),
            hub: Arc::new(Hub::new(Duration::from_secs(2))),
            limits: Arc::new(Limits {
                body_limit: 1024 * 1024,
                request_timeout: Duration::from_secs(300),
                body_timeout: Duration::from_secs(15),
                keep_alive: Duration::from_secs(15),
            }),
            approvals,
            _sweeping: None,
            _dispatching: None,
            policy: None,
            policy_dir: None,
            _reloading: None,
        }
    }
}
