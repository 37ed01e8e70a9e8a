//! How long a call may wait ([`Waiting`]): per tool, after a while the next group of
//! approvers is told (a `requirement.escalated` notice naming them, which the email
//! channel mails to them and webhooks receive), and once its time to live has passed
//! the configured action applies: rejected with a note (audited `via: expiry`, by
//! `reins`), or left waiting (a `requirement.expired` notice only).
//!
//! A sweep on every instance looks at the pending calls every [`Waiting::every`]; each
//! notice's id is a UUIDv7 made from its kind, the session and the requirement
//! ([`Notice::keyed`], timed at the requirement's creation), so that two instances, or
//! two sweeps, compute the same id and the outbox writes it once. Time comes from a
//! [`Clock`], which tests control.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reins_memory::{Notice, NoticeKind};
use serde_json::json;

use crate::auth::{AccessRole, Principal};
use crate::state::AppState;
use crate::types::{Action, DecisionItem};

/// Where the sweep reads the time.
pub trait Clock: Send + Sync + 'static {
    /// Now.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// What happens to a call whose time to live passed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExpiryAction {
    /// Rejected with this note for the model, audited `via: expiry` by `reins`.
    Reject {
        /// Why, for the model.
        note: String,
    },
    /// Left waiting; a `requirement.expired` notice says it is overdue.
    LeaveWaiting,
}

impl ExpiryAction {
    /// Reject with `note`.
    pub fn reject(note: impl Into<String>) -> Self {
        Self::Reject { note: note.into() }
    }
}

/// The waiting rules of one tool's calls.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct WaitPolicy {
    escalate: Option<(Duration, Vec<String>)>,
    expire: Option<(Duration, ExpiryAction)>,
}

impl WaitPolicy {
    /// No escalation, no expiry.
    pub fn new() -> Self {
        Self::default()
    }

    /// After waiting `after`, the principals of `group` are told (once).
    pub fn escalate_after<S: Into<String>>(
        mut self,
        after: Duration,
        group: impl IntoIterator<Item = S>,
    ) -> Self {
        self.escalate = Some((after, group.into_iter().map(Into::into).collect()));
        self
    }

    /// After waiting `ttl`, `action` applies (once).
    pub fn expire_after(mut self, ttl: Duration, action: ExpiryAction) -> Self {
        self.expire = Some((ttl, action));
        self
    }
}

/// The waiting rules of a server, given with [`Server::waiting`](crate::Server::waiting):
/// per tool, when to escalate a waiting call to the next group and what happens once
/// its time to live passed. A sweep on every instance applies them every
/// [`every`](Waiting::every), on the [`Clock`] given (tests move theirs); each
/// escalation and expiry notice is written once, however many sweeps and instances look.
///
/// ```
/// use std::time::Duration;
/// use reins_server::{ExpiryAction, WaitPolicy, Waiting};
///
/// let waiting = Waiting::new().tool(
///     "delete_file",
///     WaitPolicy::new()
///         .escalate_after(Duration::from_secs(600), ["ops-lead"])
///         .expire_after(Duration::from_secs(3600), ExpiryAction::reject("nobody answered")),
/// );
/// # let _ = waiting;
/// ```
#[derive(Clone)]
#[must_use]
pub struct Waiting {
    tools: BTreeMap<String, WaitPolicy>,
    every: Duration,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiting")
            .field("tools", &self.tools)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

impl Default for Waiting {
    fn default() -> Self {
        Self::new()
    }
}

impl Waiting {
    /// No rules; sweeps every 15 s on the system clock.
    pub fn new() -> Self {
        Self {
            tools: BTreeMap::new(),
            every: Duration::from_secs(15),
            clock: Arc::new(SystemClock),
        }
    }

    /// The rules for calls to `tool`.
    pub fn tool(mut self, tool: impl Into<String>, policy: WaitPolicy) -> Self {
        self.tools.insert(tool.into(), policy);
        self
    }

    /// How often pending calls are looked at (default 15 s).
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    /// The clock (default: the system's).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// Stops the sweep when the last handle is dropped.
#[derive(Debug)]
pub(crate) struct SweepTask(tokio::task::JoinHandle<()>);

impl Drop for SweepTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the sweep on the current runtime (`None` outside one, or without rules).
pub(crate) fn spawn(state: AppState, waiting: Waiting) -> Option<SweepTask> {
    if waiting.is_empty() {
        return None;
    }
    let rt = tokio::runtime::Handle::try_current().ok()?;
    Some(SweepTask(rt.spawn(async move {
        loop {
            if let Err(e) = sweep(&state, &waiting).await {
                tracing::warn!(error = %e, "the sweep of waiting calls failed; it goes on");
            }
            tokio::time::sleep(waiting.every).await;
        }
    })))
}

/// One look at every pending call with rules.
pub(crate) async fn sweep(state: &AppState, waiting: &Waiting) -> crate::Result<()> {
    let now = waiting.clock.now();
    let store = state.sessions.record();
    for s in store.list_sessions().await? {
        if !s.has_open_requirements {
            continue;
        }
        let read = crate::view::load(&*state.sessions, &s.id, false, false).await;
        let Some((_, pending)) = crate::ServerError::or_skip(read, &s.id, "the escalation sweep")?
        else {
            continue;
        };
        for req in pending {
            let Some(policy) = waiting.tools.get(&req.tool_use.name) else {
                continue;
            };
            let waited = (now - req.created_at).to_std().unwrap_or_default();
            if let Some((after, group)) = &policy.escalate
                && waited >= *after
            {
                let mut n = notice(NoticeKind::RequirementEscalated, &s.id, &req, now);
                n.principals.clone_from(group);
                n.payload =
                    json!({"requirement": req, "waited_seconds": waited.as_secs(), "group": group});
                store.append_notices(vec![n]).await?;
            }
            if let Some((ttl, action)) = &policy.expire
                && waited >= *ttl
            {
                expire(state, &s.id, &req, action, waited, now).await?;
            }
        }
    }
    Ok(())
}

/// A notice about `req` whose id is the same on every sweep and instance: keyed by
/// its kind, the session and the requirement, at the requirement's creation (a time
/// every instance reads alike; the sweep's own clock is not).
pub(crate) fn notice(
    kind: NoticeKind,
    session: &str,
    req: &reins_agent::Requirement,
    now: DateTime<Utc>,
) -> Notice {
    let key = format!("{kind}:{session}:{}", req.id);
    let mut n = Notice::keyed(kind, &key, req.created_at)
        .session(session)
        .requirement(&req.id)
        .tool(&req.tool_use.name);
    n.created_at = now;
    n
}

async fn expire(
    state: &AppState,
    session: &str,
    req: &reins_agent::Requirement,
    action: &ExpiryAction,
    waited: Duration,
    now: DateTime<Utc>,
) -> crate::Result<()> {
    let mut n = notice(NoticeKind::RequirementExpired, session, req, now);
    n.payload = json!({
        "requirement": req,
        "waited_seconds": waited.as_secs(),
        "action": match action { ExpiryAction::Reject { .. } => "reject", ExpiryAction::LeaveWaiting => "leave_waiting" },
    });
    state.sessions.record().append_notices(vec![n]).await?;
    let ExpiryAction::Reject { note } = action else {
        return Ok(());
    };
    let reins = Principal::new("reins", [AccessRole::Admin]);
    let actor = reins_agent::Actor::new("reins").with_metadata(json!({"via": "expiry"}));
    let item = DecisionItem {
        requirement_id: req.id.clone(),
        action: Action::Reject,
        edited_args: None,
        note: Some(note.clone()),
        values: None,
        output: None,
        is_error: None,
        shown_fingerprint: None,
    };
    match crate::sessions::decide::decide_as(state, &reins, actor, session, &[item]).await {
        Ok(()) => Ok(()),
        // Decided meanwhile (a person, or another instance's sweep), or its session is
        // busy: the next sweep looks again.
        // An agent whose own approval TTL passed first refuses it (422): it stays as
        // the agent keeps it.
        Err(e)
            if matches!(
                e.status(),
                axum::http::StatusCode::CONFLICT | axum::http::StatusCode::UNPROCESSABLE_ENTITY
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}
