//! How long a call may wait ([`Waiting`]), and the sweep that applies it ([`Sweep`]):
//! per tool, after a while the next group of approvers is told (a
//! `requirement.escalated` notice naming them, which an email channel mails to them and
//! webhooks receive), and once its time to live has passed the configured action
//! applies: rejected with a note (audited `via: expiry`, by `reins`), or left waiting (a
//! `requirement.expired` notice only).
//!
//! The sweep reads the sessions through the session port ([`Sessions`]), so it runs
//! wherever the sessions can be read: a program that runs agents itself, beside a
//! Restate service, in every reins-server instance (which runs one). It looks at the
//! pending calls every [`Waiting::every`]; each notice's id is a UUIDv7 made from its
//! kind, the session and the requirement ([`Notice::keyed`], timed at the requirement's
//! creation), so that two processes, or two sweeps, compute the same id and the outbox
//! writes it once. Time comes from a [`Clock`], which tests control.
//!
//! The notices are written to the store's outbox; a [`Dispatcher`](crate::Dispatcher)
//! on the same store delivers them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use reins_agent::port::{Decide, Sessions};
use reins_agent::{Actor, AgentError, Decision, Requirement, RunEvent};
use reins_memory::{Notice, NoticeKind};
use serde_json::json;

use crate::Error;

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

    fn as_str(&self) -> &'static str {
        match self {
            Self::Reject { .. } => "reject",
            Self::LeaveWaiting => "leave_waiting",
        }
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

/// The waiting rules: per tool, when to escalate a waiting call to the next group and
/// what happens once its time to live passed. A [`Sweep`] applies them every
/// [`every`](Waiting::every), on the [`Clock`] given (tests move theirs); each
/// escalation and expiry notice is written once, however many sweeps and processes
/// look. reins-server takes them with `Server::waiting` and runs the sweep itself.
///
/// ```
/// use std::time::Duration;
/// use reins_notify::waiting::{ExpiryAction, WaitPolicy, Waiting};
///
/// let waiting = Waiting::new().tool(
///     "delete_file",
///     WaitPolicy::new()
///         .escalate_after(Duration::from_secs(600), ["ops-lead"])
///         .expire_after(Duration::from_secs(3600), ExpiryAction::reject("nobody answered")),
/// );
/// assert!(!waiting.is_empty());
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

    /// Whether no tool has rules (a sweep would do nothing).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// Why the rejection of an expired call did not apply ([`Decisions::decide`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The call no longer waits as the sweep saw it — decided meanwhile (by a person,
    /// or another process's sweep), its session busy, or the agent's own approval
    /// lifetime passed first: the next sweep looks again.
    #[error("{0}")]
    Skipped(String),
    /// Anything else: this look ends with the error (logged by [`Sweep::spawn`]).
    #[error("{0}")]
    Failed(String),
}

impl Refusal {
    /// The refusal of an [`AgentError`]: a decision that lost a race, or was refused
    /// for what the call is now, is [`Skipped`](Refusal::Skipped).
    pub fn of(e: &AgentError) -> Self {
        let message = e.to_string();
        match e {
            AgentError::SessionBusy { .. }
            | AgentError::ToolInFlight { .. }
            | AgentError::NothingToResume { .. }
            | AgentError::StaleView { .. }
            | AgentError::AlreadyDecided { .. }
            | AgentError::ShownArgumentsChanged { .. }
            | AgentError::AlreadyApproved { .. }
            | AgentError::WrongDecision { .. }
            | AgentError::DuplicateDecision { .. }
            | AgentError::RequirementExpired { .. } => Self::Skipped(message),
            _ => Self::Failed(message),
        }
    }
}

/// Where the sweep sends the rejection of a call whose time to live passed. The
/// default ([`Sweep::new`]) is the session port's one decision path
/// ([`Sessions::decide`]): it returns once the run took the decision (its first event)
/// and lets the run go on. reins-server gives its own, which follows the run as every
/// door's decisions are followed.
#[async_trait]
pub trait Decisions: Send + Sync + 'static {
    /// Submits `decide` for `session`; returns once the run took it, or why not.
    ///
    /// # Errors
    ///
    /// [`Refusal::Skipped`] when the call changed meanwhile, [`Refusal::Failed`]
    /// otherwise.
    async fn decide(&self, session: &str, decide: Decide) -> Result<(), Refusal>;
}

/// The session port as [`Decisions`].
struct Port(Arc<dyn Sessions>);

#[async_trait]
impl Decisions for Port {
    async fn decide(&self, session: &str, decide: Decide) -> Result<(), Refusal> {
        let mut run = self
            .0
            .decide(session, decide)
            .await
            .map_err(|e| Refusal::of(&e))?;
        // The run checks the decision as it begins: its first event says it took it;
        // a refusal ends it without one.
        match run.next_event().await {
            // Refused: the run's end carries the typed error.
            Some(RunEvent::Failed { .. }) | None => {
                run.wait().await.map(|_| ()).map_err(|e| Refusal::of(&e))
            }
            // `run_started`, or anything after it: taken; the run goes on.
            Some(_) => {
                run.detach();
                Ok(())
            }
        }
    }
}

/// The sweep of waiting calls: the rules of a [`Waiting`] applied to the sessions of a
/// session port ([`Sessions`]: an [`Agent`](reins_agent::Agent), or
/// [`Relayed`](reins_agent::Relayed) over a Restate deployment). Its notices go to
/// the port's store's outbox; turn the outbox on with a
/// [`Dispatcher`](crate::Dispatcher) on that store, which delivers them.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use reins_agent::Agent;
/// use reins_model::{ScriptedModel, ScriptedResponse};
/// use reins_notify::waiting::{ExpiryAction, Sweep, WaitPolicy, Waiting};
///
/// let agent = Agent::builder()
///     .model(ScriptedModel::new([ScriptedResponse::text("Hello!")]))
///     .build()?;
/// let waiting = Waiting::new().tool(
///     "delete_file",
///     WaitPolicy::new().expire_after(Duration::from_secs(3600), ExpiryAction::reject("nobody answered")),
/// );
/// let sweep = Sweep::new(Arc::new(agent), waiting);
/// sweep.once().await?; // one look; `spawn` looks every `Waiting::every`
/// let _sweeping = sweep.spawn(); // stops when dropped
/// # Ok(()) }
/// ```
#[must_use]
pub struct Sweep {
    sessions: Arc<dyn Sessions>,
    waiting: Waiting,
    decisions: Arc<dyn Decisions>,
}

impl std::fmt::Debug for Sweep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sweep")
            .field("agent", &self.sessions.card().name)
            .field("waiting", &self.waiting)
            .finish_non_exhaustive()
    }
}

/// A running sweep ([`Sweep::spawn`]): it stops when this is dropped.
#[derive(Debug)]
pub struct Sweeping(tokio::task::JoinHandle<()>);

impl Drop for Sweeping {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Sweep {
    /// A sweep of `sessions` by `waiting`'s rules; expired calls are rejected through
    /// the port ([`Sessions::decide`]).
    pub fn new(sessions: Arc<dyn Sessions>, waiting: Waiting) -> Self {
        Self {
            decisions: Arc::new(Port(Arc::clone(&sessions))),
            sessions,
            waiting,
        }
    }

    /// Where expired calls' rejections go instead of the port.
    pub fn decisions(mut self, decisions: Arc<dyn Decisions>) -> Self {
        self.decisions = decisions;
        self
    }

    /// Looks every [`Waiting::every`] on the current runtime, until the returned
    /// handle is dropped; a failed look is logged and the next one goes on. `None`
    /// outside a Tokio runtime, or when no tool has rules.
    pub fn spawn(self) -> Option<Sweeping> {
        if self.waiting.is_empty() {
            return None;
        }
        let rt = tokio::runtime::Handle::try_current().ok()?;
        Some(Sweeping(rt.spawn(async move {
            loop {
                if let Err(e) = self.once().await {
                    tracing::warn!(error = %e, "the sweep of waiting calls failed; it goes on");
                }
                tokio::time::sleep(self.waiting.every).await;
            }
        })))
    }

    /// One look at every pending call with rules: escalation notices for those that
    /// waited past their `escalate_after`, expiry notices (and the rejection) for those
    /// past their `expire_after`. Sessions that cannot be read (gone, or a stored run
    /// state that does not decode) are left out with a warning.
    ///
    /// # Errors
    ///
    /// The store failed, or a rejection failed for another reason than the call having
    /// changed meanwhile.
    pub async fn once(&self) -> Result<(), Error> {
        if self.waiting.is_empty() {
            return Ok(());
        }
        let now = self.waiting.clock.now();
        let store = self.sessions.record();
        for s in store.list_sessions().await? {
            if !s.has_open_requirements {
                continue;
            }
            let view = match self.sessions.view(&s.id).await {
                Ok(v) => v,
                Err(
                    e @ (AgentError::Store(reins_memory::Error::SessionNotFound { .. })
                    | AgentError::CorruptRunState { .. }),
                ) => {
                    tracing::warn!(session = %s.id, error = %e, "the sweep of waiting calls leaves out a session it cannot read");
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            // What waits for a person: a paused session's requirements.
            if view.is_running() || !view.paused {
                continue;
            }
            for req in view.requirements {
                let Some(policy) = self.waiting.tools.get(&req.tool_use.name) else {
                    continue;
                };
                let waited = (now - req.created_at).to_std().unwrap_or_default();
                if let Some((after, group)) = &policy.escalate
                    && waited >= *after
                {
                    let mut n = notice(NoticeKind::RequirementEscalated, &s.id, &req, now);
                    n.principals.clone_from(group);
                    n.payload = json!({"requirement": req, "waited_seconds": waited.as_secs(), "group": group});
                    store.append_notices(vec![n]).await?;
                }
                if let Some((ttl, action)) = &policy.expire
                    && waited >= *ttl
                {
                    self.expire(&s.id, &req, action, waited, now).await?;
                }
            }
        }
        Ok(())
    }

    async fn expire(
        &self,
        session: &str,
        req: &Requirement,
        action: &ExpiryAction,
        waited: Duration,
        now: DateTime<Utc>,
    ) -> Result<(), Error> {
        let mut n = notice(NoticeKind::RequirementExpired, session, req, now);
        n.payload = json!({
            "requirement": req,
            "waited_seconds": waited.as_secs(),
            "action": action.as_str(),
        });
        self.sessions.record().append_notices(vec![n]).await?;
        let ExpiryAction::Reject { note } = action else {
            return Ok(());
        };
        let actor = Actor::new("reins").with_metadata(json!({"via": "expiry"}));
        let decide = Decide::new(actor, vec![Decision::reject(&req.id, note.clone())]);
        match self.decisions.decide(session, decide).await {
            // Decided meanwhile (a person, or another process's sweep), its session
            // busy, or refused by the agent (its own approval lifetime passed first):
            // the next sweep looks again.
            Ok(()) | Err(Refusal::Skipped(_)) => Ok(()),
            Err(Refusal::Failed(why)) => Err(Error::Expiry {
                session: session.to_owned(),
                requirement: req.id.clone(),
                why,
            }),
        }
    }
}

/// A notice about `req` whose id is the same on every sweep and process: keyed by its
/// kind, the session and the requirement, at the requirement's creation (a time every
/// process reads alike; the sweep's own clock is not).
fn notice(kind: NoticeKind, session: &str, req: &Requirement, now: DateTime<Utc>) -> Notice {
    let key = format!("{kind}:{session}:{}", req.id);
    let mut n = Notice::keyed(kind, &key, req.created_at)
        .session(session)
        .requirement(&req.id)
        .tool(&req.tool_use.name);
    n.created_at = now;
    n
}
