//! Approvals where the approvers are: by email ([`EmailApprovals`]: a signed,
//! single-use link to a confirmation page) and in Slack ([`SlackApprovals`]: a message
//! with Approve / Reject / Edit buttons). Both decide through the same checks as every
//! other door (who may decide on which tool, what is pending, the view, expiry, the
//! arguments' fingerprint, quorums), and the audit trail records the door in the
//! actor's metadata (`via: email`, `via: slack`) beside the approver's name and roles.
//! [`Waiting`] escalates calls that wait too long and applies an action to those whose
//! time to live passed (`via: expiry`).
//! See `docs/notifications.md`.

#[cfg(any(feature = "email", feature = "slack"))]
mod channel;
#[cfg(feature = "email")]
pub(crate) mod email;
#[cfg(feature = "email")]
mod link;
#[cfg(feature = "email")]
mod page;
#[cfg(feature = "slack")]
pub(crate) mod slack;
pub(crate) mod waiting;

use std::collections::HashMap;

use axum::Router;
#[cfg(any(feature = "email", feature = "slack"))]
use serde_json::Value;

#[cfg(feature = "email")]
pub use email::{EmailApprovals, EmailApprovalsBuilder};
#[cfg(feature = "slack")]
pub use slack::{SlackApprovals, SlackApprovalsBuilder};
pub use waiting::{Clock, ExpiryAction, SystemClock, WaitPolicy, Waiting};

#[cfg(any(feature = "email", feature = "slack"))]
use crate::auth::Principal;
use std::sync::Arc;

use crate::state::{AppState, Recipients};

/// A setting of an approval channel that is missing or invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ApprovalConfigError(pub(crate) String);

/// The approval channels a server has.
#[derive(Debug, Clone, Default)]
pub(crate) struct Approvals {
    #[cfg(feature = "email")]
    pub(crate) email: Option<EmailApprovals>,
    #[cfg(feature = "slack")]
    pub(crate) slack: Option<SlackApprovals>,
    pub(crate) waiting: Waiting,
}

impl Approvals {
    /// The notification channels of the configured doors (`email`, `slack`).
    pub(crate) fn channels(
        &self,
        sessions: &std::sync::Arc<dyn reins_agent::port::Sessions>,
        auth: &std::sync::Arc<crate::auth::Auth>,
    ) -> Vec<std::sync::Arc<dyn crate::notify::Channel>> {
        #[cfg_attr(not(any(feature = "email", feature = "slack")), allow(unused_mut))]
        let mut out: Vec<std::sync::Arc<dyn crate::notify::Channel>> = Vec::new();
        #[cfg(any(feature = "email", feature = "slack"))]
        let lookup = channel::Lookup {
            sessions: std::sync::Arc::clone(sessions),
            auth: std::sync::Arc::clone(auth),
        };
        #[cfg(feature = "email")]
        if let Some(email) = &self.email {
            out.push(std::sync::Arc::new(channel::EmailChannel {
                email: email.clone(),
                lookup: lookup.clone(),
            }));
        }
        #[cfg(feature = "slack")]
        if let Some(slack) = &self.slack {
            out.push(std::sync::Arc::new(channel::SlackChannel {
                slack: slack.clone(),
                lookup: lookup.clone(),
            }));
        }
        #[cfg(not(any(feature = "email", feature = "slack")))]
        let _ = (sessions, auth);
        out
    }
}

/// The state of the approval channels' routes: the server's, and the channels with
/// their settings (the server's state knows them only as [`Recipients`]).
#[derive(Clone)]
#[cfg_attr(not(any(feature = "email", feature = "slack")), allow(dead_code))]
pub(crate) struct ApprovalsState {
    pub(crate) app: AppState,
    pub(crate) approvals: Arc<Approvals>,
}

impl ApprovalsState {
    /// The routes' state without a [`Server`](crate::Server) (`EmailApprovals::router`,
    /// `SlackApprovals::router`): see [`AppState::standalone`].
    #[cfg(any(feature = "email", feature = "slack"))]
    pub(crate) fn standalone(
        sessions: Arc<dyn reins_agent::port::Sessions>,
        auth: crate::auth::Auth,
        approvals: Approvals,
    ) -> Self {
        let approvals = Arc::new(approvals);
        Self {
            app: AppState::standalone(sessions, auth, approvals.clone()),
            approvals,
        }
    }
}

/// The routes of the approval channels: the email links' confirmation page and the
/// Slack interactivity endpoint, with their state given (they merge into a router of
/// any state).
#[cfg_attr(
    not(any(feature = "email", feature = "slack")),
    allow(unused_variables)
)]
pub(crate) fn router<S: Clone + Send + Sync + 'static>(state: ApprovalsState) -> Router<S> {
    let router = Router::new();
    #[cfg(feature = "email")]
    let router = router.route(
        "/inbox/email/{token}",
        axum::routing::get(email::get_link).post(email::post_link),
    );
    #[cfg(feature = "slack")]
    let router = router.route(
        "/v1/slack/interactions",
        axum::routing::post(slack::post_interaction),
    );
    router.with_state(state)
}

/// What closed a call that a refusal says was decided (the `decided` of a 409
/// `already_decided`), when no one decided on it: a new message in its session, the
/// end of its run at its budget, the parent session moving on. Such a call no longer
/// waits; a link or a button for it says so rather than "already decided".
#[cfg(any(feature = "email", feature = "slack"))]
pub(crate) fn closed_by(decided: &Value) -> Option<&'static str> {
    serde_json::from_value::<reins_agent::Decided>(decided.clone())
        .ok()
        .and_then(|d| d.closed_by())
}

/// The actor a channel decides as: the approver with its roles (what quorums check),
/// the door (`via`), and what else the door records (`extra`'s fields).
#[cfg(any(feature = "email", feature = "slack"))]
pub(crate) fn actor(who: &Principal, via: &str, extra: Value) -> reins_agent::Actor {
    let mut actor = who.actor();
    let mut meta = actor
        .metadata
        .take()
        .and_then(|m| match m {
            Value::Object(o) => Some(o),
            _ => None,
        })
        .unwrap_or_default();
    meta.insert("via".to_owned(), Value::String(via.to_owned()));
    if let Value::Object(extra) = extra {
        meta.extend(extra);
    }
    actor.metadata = Some(Value::Object(meta));
    actor
}

/// A session id for a URL query or path segment.
#[cfg(any(feature = "email", feature = "slack"))]
pub(crate) fn enc_path(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The deliveries of the notices about the requirements of `sessions`, oldest first,
/// by (session, requirement): one store call for a page of the inbox. Empty when the
/// store keeps no outbox or cannot list it (the inbox shows the requirements without).
pub(crate) async fn deliveries_of(
    state: &AppState,
    sessions: impl IntoIterator<Item = impl Into<String>>,
) -> HashMap<(String, String), Vec<reins_memory::Delivery>> {
    let filter = reins_memory::DeliveryFilter::all().sessions(sessions);
    let Ok(deliveries) = state.sessions.record().deliveries(&filter).await else {
        return HashMap::new();
    };
    let mut by: HashMap<(String, String), Vec<reins_memory::Delivery>> = HashMap::new();
    // Newest first from the store: each list is reversed by pushing in reverse.
    for d in deliveries.into_iter().rev() {
        if let (Some(session), Some(req)) = (&d.notice.session, &d.notice.requirement) {
            by.entry((session.clone(), req.clone()))
                .or_default()
                .push(d);
        }
    }
    by
}

/// The inbox's view of the deliveries about a waiting requirement (from
/// [`deliveries_of`]): which channel, whom it reaches, where it stands.
pub(crate) fn notified(
    state: &AppState,
    deliveries: &[reins_memory::Delivery],
    req: &reins_agent::Requirement,
) -> Vec<crate::types::Notified> {
    deliveries
        .iter()
        .map(|d| crate::types::Notified {
            to: state.approvals.recipients(
                &state.auth,
                &d.destination,
                &d.notice,
                &req.tool_use.name,
            ),
            channel: d.destination.clone(),
            notice: d.notice.kind.as_str().to_owned(),
            state: d.state.as_str().to_owned(),
            attempts: d.attempts,
            at: d.updated_at,
            error: d.last_error.clone(),
        })
        .collect()
}

impl Recipients for Approvals {
    /// Whom a delivery reaches: the approvers the email channel mails for this notice,
    /// the Slack channel, or the notice's principals.
    fn recipients(
        &self,
        auth: &crate::auth::Auth,
        destination: &str,
        notice: &reins_memory::Notice,
        tool: &str,
    ) -> Vec<String> {
        #[cfg(feature = "email")]
        if let ("email", Some(email)) = (destination, &self.email) {
            return email
                .approvers
                .keys()
                .filter(|name| notice.principals.is_empty() || notice.principals.contains(name))
                .filter(|name| auth.by_name(name).is_some_and(|p| p.may_decide(tool)))
                .cloned()
                .collect();
        }
        #[cfg(feature = "slack")]
        if let ("slack", Some(slack)) = (destination, &self.slack) {
            return vec![slack.channel().to_owned()];
        }
        let _ = (auth, destination, tool);
        notice.principals.clone()
    }
}
