//! [`Sessions`]: the one port every door holds — an HTTP API, an approval inbox,
//! AG-UI, A2A, an MCP server, an editor over ACP, an email link, a Slack button —
//! whichever driver runs the sessions.
//!
//! A door holds an `Arc<dyn Sessions>`, its own authentication and its own encoding;
//! nothing else. Through the port it
//!
//! - reads sessions as typed values ([`Sessions::view`], [`Sessions::read`],
//!   [`Sessions::audit`], [`Sessions::decided`], [`Sessions::grants`], and the store's
//!   pages of heads and pending requirements), each computed once here for every
//!   driver;
//! - hands sessions their inputs ([`Sessions::start`] for a message, `resume()` or
//!   tool results; [`Sessions::decide`] for decisions, the one decision path) and
//!   follows the run an input starts with a [`RunHandle`] — its typed [`RunEvent`]s,
//!   its [`RunOutput`] or typed error, and its interrupt — whether the run executes in
//!   this process or in the driver's own processes;
//! - follows sessions as they change, whoever changes them ([`Sessions::subscribe`]: a
//!   stream of typed [`SessionEvent`]s — a session's version, message count and open
//!   requirements after it moved — for every driver, with no poller of the door's own);
//! - interrupts, forks, replays, and creates and revokes grants.
//!
//! Two implementations: the local driver ([`Agent`] is a `Sessions`: runs execute in
//! this process), and [`Relayed`]: an [`Agent`] as configuration beside a
//! [`SessionBackend`] whose own processes run the sessions (reins-restate's
//! `RestateClient`: a Restate deployment). The runs of a relayed backend are followed
//! through the store they share and the live events their processes relay
//! ([`Sessions::relay`]).
//!
//! ## One decision path
//!
//! Every decision, from every door, goes through [`Sessions::decide`]: the door turns
//! its own encoding into reins [`Decision`]s and names who decides ([`Decide::actor`],
//! with the door's scope: the roles and the tools that actor may decide on). The run
//! checks everything else, once, on both drivers, as it begins: that each decision names
//! a pending requirement (or one someone decided already: refused
//! [`AgentError::AlreadyDecided`] and audited, whatever the timing), its kind, expiry,
//! fingerprint, quorum, the actor's scope and the eligibility policy. A door re-checks
//! nothing.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use reins_agent::port::{Decide, Sessions};
//! use reins_agent::{Actor, Agent, Decision, RunInput, RunStatus, Submission};
//! use reins_message::Msg;
//! use reins_model::{ScriptedModel, ScriptedResponse};
//! use reins_tool::{ToolPolicy, Toolkit};
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct DeleteArgs {
//!     /// The file to delete.
//!     path: String,
//! }
//! let mut tools = Toolkit::new();
//! tools.add(
//!     Toolkit::function("delete_file", "Delete a file", |a: DeleteArgs, _ctx| async move {
//!         Ok::<_, reins_tool::ToolError>(format!("deleted {}", a.path))
//!     })
//!     .policy(ToolPolicy::confirm()),
//! )?;
//! let model = ScriptedModel::new([
//!     ScriptedResponse::tool_call_with_id("call_1", "delete_file", json!({"path": "a.txt"})),
//!     ScriptedResponse::text("a.txt is gone."),
//! ]);
//! let agent = Agent::builder().name("Ops").model(model).toolkit(tools).build()?;
//!
//! // A door holds the port, never the agent.
//! let sessions: Arc<dyn Sessions> = Arc::new(agent);
//! assert_eq!(sessions.card().name, "Ops");
//! let run = sessions
//!     .start("ana/1", Submission::new(RunInput::Message(Msg::user("delete a.txt"))))
//!     .await?;
//! let out = run.wait().await?;
//! assert_eq!(out.status, RunStatus::Paused);
//!
//! // The one decision path: who decides, on the view they were shown.
//! let view = sessions.view("ana/1").await?;
//! let decide = Decide::new(Actor::new("ana"), vec![Decision::approve("call_1")]).at(view.token);
//! let out = sessions.decide("ana/1", decide).await?.wait().await?;
//! assert_eq!(out.message.text(), "a.txt is gone.");
//! // A late second approval is refused, naming the first, and audited.
//! let late = Decide::new(Actor::new("ben"), vec![Decision::approve("call_1")]);
//! let refused = sessions.decide("ana/1", late).await;
//! let refused = match refused {
//!     Ok(run) => run.wait().await.map(|_| ()),
//!     Err(e) => Err(e),
//! };
//! assert!(matches!(refused, Err(reins_agent::AgentError::AlreadyDecided { .. })));
//! assert_eq!(sessions.audit("ana/1").await?.len(), 2);
//! # Ok(()) }
//! ```

mod local;
pub mod relayed;
pub mod watch;

use std::sync::Arc;

use async_trait::async_trait;
use reins_memory::{MemoryStore, PendingFilter, PendingRequirement, SessionFilter, SessionHead};
use reins_message::Msg;
use tokio::sync::mpsc::UnboundedSender;

pub use crate::card::AgentCard;
pub use relayed::{LiveEvent, Relayed};
pub use watch::{OpenRequirement, Scope, SessionChange, SessionEvent, SessionEvents, Watch};

use crate::approval::{Grant, GrantFilter, NewGrant};
use crate::backend::Submission;
use crate::error::{AgentError, Decided, Result};
use crate::fork::{ForkOrigin, ForkPoint, ReplayReport, ReplayTurn};
use crate::handle::RunHandle;
use crate::requirement::Decision;
use crate::run::RunInput;
use crate::state::SessionView;
use crate::view::{Actor, DecisionRecord, ViewToken};

#[cfg(doc)]
use crate::{Agent, RunEvent, RunOutput, SessionBackend};

/// Decisions one actor makes through a door ([`Sessions::decide`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Decide {
    /// Who decides: recorded with every decision, and what the run checks the
    /// decisions against (the scope a door puts in the metadata: `roles`, and `tools`
    /// — the tools this actor may decide on; absent: every tool).
    pub actor: Actor,
    /// The decisions, in the door's order.
    pub decisions: Vec<Decision>,
    /// The view they were made on: a different one is refused
    /// ([`AgentError::StaleView`]).
    pub view: Option<ViewToken>,
    /// Makes a retried request harmless where the driver keeps keys.
    pub idempotency_key: Option<String>,
    /// The caller's W3C `traceparent`.
    pub trace_parent: Option<String>,
    /// The caller's own tools, offered to the model as the run goes on (AG-UI).
    pub client_tools: Vec<reins_message::ToolSpec>,
}

impl Decide {
    /// `decisions` made by `actor` (each decision not naming its author is stamped
    /// with the actor's principal).
    pub fn new(actor: Actor, decisions: Vec<Decision>) -> Self {
        Self {
            actor,
            decisions,
            view: None,
            idempotency_key: None,
            trace_parent: None,
            client_tools: Vec::new(),
        }
    }

    /// Made on this view.
    #[must_use]
    pub fn at(mut self, view: ViewToken) -> Self {
        self.view = Some(view);
        self
    }

    /// With an idempotency key.
    #[must_use]
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// The submission these decisions are: each decision names its author.
    pub fn into_submission(self) -> Submission {
        let by = self.actor.principal.clone();
        let decisions = self
            .decisions
            .into_iter()
            .map(|d| {
                if d.decided_by().is_none() {
                    d.by(by.clone())
                } else {
                    d
                }
            })
            .collect();
        let mut s = Submission::new(RunInput::Decisions(decisions));
        s.actor = Some(self.actor);
        s.view = self.view;
        s.idempotency_key = self.idempotency_key;
        s.trace_parent = self.trace_parent;
        s.client_tools = self.client_tools;
        s
    }
}

/// Where an interrupt went ([`Sessions::interrupt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupted {
    /// The run executes in this process and was stopped at once.
    Here,
    /// The run executes in another worker sharing the store: the request is stored
    /// for it (it stops at its next checkpoint).
    Stored,
    /// The driver's own processes run it; the driver delivered the interrupt.
    Delivered,
    /// No run was in flight: nothing to interrupt.
    Idle,
}

impl Interrupted {
    /// Whether a run was in flight and was asked to stop.
    pub fn requested(self) -> bool {
        self != Interrupted::Idle
    }

    /// `here`, `stored`, `delivered` or `idle`.
    pub fn label(self) -> &'static str {
        match self {
            Interrupted::Here => "here",
            Interrupted::Stored => "stored",
            Interrupted::Delivered => "delivered",
            Interrupted::Idle => "idle",
        }
    }
}

/// A session as stored, read through the port: its view (the one computation of where
/// its run is and what it waits for), its transcript when asked for, and when it last
/// changed.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    /// Where its run is and what it waits for.
    pub view: SessionView,
    /// Its transcript (empty unless asked for).
    pub messages: Vec<Msg>,
    /// How many messages it holds.
    pub message_count: usize,
    /// When it was last committed to.
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

/// A fork of a session ([`Sessions::fork`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForkRequest {
    /// Where: before a turn, or the whole session.
    pub at: ForkPoint,
    /// The new session's id.
    pub new_session: String,
    /// Run every tool call again instead of serving the recorded results.
    pub rerun_side_effects: bool,
    /// Who forks (the `Forked` hooks and the audit are told).
    pub actor: Option<Actor>,
}

impl ForkRequest {
    /// A fork at `at` into `new_session`, serving recorded results.
    pub fn new(at: ForkPoint, new_session: impl Into<String>) -> Self {
        Self {
            at,
            new_session: new_session.into(),
            rerun_side_effects: false,
            actor: None,
        }
    }
}

/// The one port every door holds (see the [module docs](self)).
///
/// Refusals are the local driver's errors whatever the driver: an unknown session is
/// `AgentError::Store(SessionNotFound)` (a message creates it), a stale view
/// [`AgentError::StaleView`], a decision someone took first
/// [`AgentError::AlreadyDecided`], an input while a run is in flight
/// [`AgentError::SessionBusy`]. A refused input changes nothing.
#[async_trait]
pub trait Sessions: Send + Sync {
    /// The agent the sessions run with, as a door describes it.
    fn card(&self) -> &AgentCard;

    /// The record: the store the sessions, their audit trails, grants and notices are
    /// kept in. Doors read sessions through the typed reads of this trait; the layers
    /// that keep tables of their own in the store (notifications, evidence) hold it.
    fn record(&self) -> &Arc<dyn MemoryStore>;

    /// Hands the session an input and follows the run it starts: a [`RunHandle`] with
    /// the run's events, its output or the error it ended with, and its interrupt,
    /// wherever the run executes. A refused input is an error here or the handle's
    /// error; nothing changed then. For decisions use [`Sessions::decide`].
    async fn start(&self, session: &str, submission: Submission) -> Result<RunHandle>;

    /// Interrupts the session's run wherever it executes.
    async fn interrupt(&self, session: &str) -> Result<Interrupted>;

    /// Replays the recorded session with the driver's own agent on a scratch store
    /// (see [`crate::replay`]); each replayed turn goes to `turns` as it is made.
    async fn replay(
        &self,
        session: &str,
        turns: Option<UnboundedSender<ReplayTurn>>,
    ) -> Result<ReplayReport>;

    /// Forks the session (see [`crate::Session::fork`]); the fork's runs go to the
    /// driver like any other session's.
    async fn fork(&self, session: &str, request: ForkRequest) -> Result<ForkOrigin>;

    /// Creates a standing grant on behalf of `actor`, after the eligibility policy
    /// agreed ([`AgentError::NotEligible`] otherwise; nothing stored).
    async fn create_grant(&self, grant: NewGrant, actor: &Actor) -> Result<Grant>;

    /// Revokes a grant, recording who.
    async fn revoke_grant(&self, id: &str, by: &Actor) -> Result<Grant>;

    /// Whether the runs this port starts execute in this process (the local driver).
    fn runs_here(&self) -> bool;

    /// Takes the live events of the steps a driver's own processes run (reins-server's
    /// `POST /v1/sessions/{id}/live`) and passes them to the runs and listeners that
    /// follow the session here. Refused where runs execute in this process.
    fn relay(&self, session: &str, events: Vec<LiveEvent>) -> Result<usize> {
        let _ = (session, events);
        Err(AgentError::InvalidInput(
            "this port runs its sessions in this process: it takes no relayed events".to_owned(),
        ))
    }

    /// The live events relayed for `session` from now on (`None` where runs execute in
    /// this process: their events come with their [`RunHandle`]).
    fn live(&self, session: &str) -> Option<tokio::sync::broadcast::Receiver<LiveEvent>> {
        let _ = session;
        None
    }

    /// Decisions through the one decision path (see the [module docs](self)): the
    /// run checks them as it begins, on every driver; the handle follows the run they
    /// continue. A decision someone took first is [`AgentError::AlreadyDecided`],
    /// recorded in the audit trail as refused.
    async fn decide(&self, session: &str, decide: Decide) -> Result<RunHandle> {
        if decide.decisions.is_empty() {
            return Err(AgentError::InvalidInput("no decisions given".to_owned()));
        }
        self.start(session, decide.into_submission()).await
    }

    /// Follows the sessions `watch` names as the store changes: a stream of typed
    /// [`SessionEvent`]s — each session whose stored state moved, once per move seen,
    /// with its version, message count, `updated_at` and open requirements; a session
    /// removed; or, when the store could not be read, a sign to read again (see
    /// [`watch`]). Every change committed after this returns is reported, whichever
    /// process or driver made it; dropping the stream stops the subscription.
    ///
    /// The provided method follows [`Sessions::record`] (its change feed, comparing
    /// stored versions when the feed cannot name the session, falls behind, and every
    /// [`Watch::recheck`]), so every driver offers it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use futures::StreamExt;
    /// use reins_agent::port::{SessionEvent, Sessions, Watch};
    /// use reins_agent::{Agent, RunInput, Submission};
    /// use reins_message::Msg;
    /// use reins_model::{ScriptedModel, ScriptedResponse};
    ///
    /// let model = ScriptedModel::new([ScriptedResponse::text("hello")]);
    /// let sessions: Arc<dyn Sessions> = Arc::new(Agent::builder().model(model).build()?);
    /// let mut events = sessions.subscribe(Watch::prefix("ana/")).await?;
    /// let run = sessions
    ///     .start("ana/1", Submission::new(RunInput::Message(Msg::user("hi"))))
    ///     .await?;
    /// run.wait().await?;
    /// // Each commit of the run is a change; the last one holds the answer.
    /// loop {
    ///     match events.next().await {
    ///         Some(SessionEvent::Changed(c)) if c.message_count == 2 => {
    ///             assert_eq!(c.session, "ana/1");
    ///             assert!(!c.is_waiting());
    ///             break;
    ///         }
    ///         Some(_) => {}
    ///         None => unreachable!("the subscription ends only when dropped"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    async fn subscribe(&self, watch: Watch) -> Result<SessionEvents> {
        SessionEvents::follow(Arc::clone(self.record()), watch).await
    }

    /// The session as stored: phase, pending requirements and the view token.
    async fn view(&self, session: &str) -> Result<SessionView> {
        let state = self.record().load_session(session).await?;
        crate::follow::stored_view(self.record(), state).await
    }

    /// The session as stored, with its transcript when `with_messages`.
    async fn read(&self, session: &str, with_messages: bool) -> Result<SessionRecord> {
        let state = self.record().load_session(session).await?;
        let updated_at = state.updated_at;
        let message_count = state.messages.len();
        let messages = if with_messages {
            state.messages.clone()
        } else {
            Vec::new()
        };
        let view = crate::follow::stored_view(self.record(), state).await?;
        Ok(SessionRecord {
            view,
            messages,
            message_count,
            updated_at,
        })
    }

    /// The view of a session read without its transcript.
    async fn view_of_head(&self, head: SessionHead) -> Result<SessionView> {
        crate::follow::stored_view(self.record(), head.into_state()).await
    }

    /// Every session's id and version (see [`MemoryStore::list_sessions`]).
    async fn list(&self) -> Result<Vec<reins_memory::SessionSummary>> {
        Ok(self.record().list_sessions().await?)
    }

    /// The heads of the sessions `filter` admits (a page, newest activity first).
    async fn heads(&self, filter: &SessionFilter) -> Result<Vec<SessionHead>> {
        Ok(self.record().session_heads_page(filter).await?)
    }

    /// The heads of these sessions (those that exist).
    async fn heads_of(&self, ids: &[String]) -> Result<Vec<SessionHead>> {
        Ok(self.record().session_heads(ids).await?)
    }

    /// The pending requirements `filter` admits (a page of the inbox).
    async fn pending(&self, filter: &PendingFilter) -> Result<Vec<PendingRequirement>> {
        Ok(self.record().pending_requirements(filter).await?)
    }

    /// The session's audit trail, oldest first.
    async fn audit(&self, session: &str) -> Result<Vec<DecisionRecord>> {
        let entries = self.record().decisions(session).await?;
        if entries.is_empty() {
            // An unknown session is an error, not an empty trail.
            stored(self.record().as_ref(), session).await?;
        }
        entries
            .into_iter()
            .map(|e| {
                DecisionRecord::from_entry(session, e)
                    .map_err(|e| AgentError::Internal(format!("an audit record: {e}")))
            })
            .collect()
    }

    /// The decision that took effect on `requirement` of `session`, when one did
    /// (following sub-agents' child sessions).
    async fn decided(&self, session: &str, requirement: &str) -> Result<Option<Decided>> {
        Ok(
            crate::follow::already_decided(self.record(), session, &[requirement.to_owned()])
                .await?
                .and_then(|(e, _)| match e {
                    AgentError::AlreadyDecided { decided, .. } => Some(*decided),
                    _ => None,
                }),
        )
    }

    /// Where the session was forked from, when it is a fork.
    async fn origin(&self, session: &str) -> Result<Option<ForkOrigin>> {
        let state = self.record().load_session(session).await?;
        crate::fork::origin_of(&state)
    }

    /// The grants `filter` admits, oldest first.
    async fn grants(&self, filter: &GrantFilter) -> Result<Vec<Grant>> {
        Ok(self.record().list_grants(filter).await?)
    }

    /// One grant.
    async fn grant(&self, id: &str) -> Result<Option<Grant>> {
        Ok(self.record().grant(id).await?)
    }

    /// The verifying keys of the receipts this driver signs (empty when it signs none):
    /// what a door publishes as a JWKS and puts in an evidence bundle.
    fn evidence_keys(&self) -> reins_evidence::Keyring {
        reins_evidence::Keyring::new()
    }

    /// The session's evidence, as a self-contained bundle (its chain from the record,
    /// with [`Sessions::evidence_keys`]; see docs/evidence.md). An unknown session is
    /// `SessionNotFound`.
    async fn evidence(&self, session: &str) -> Result<reins_evidence::Bundle> {
        stored(self.record().as_ref(), session).await?;
        let chain = self.record().evidence(session).await?;
        Ok(reins_evidence::Bundle::new(
            session,
            chain,
            self.evidence_keys(),
        ))
    }
}

#[async_trait]
impl<T: Sessions + ?Sized> Sessions for Arc<T> {
    fn card(&self) -> &AgentCard {
        (**self).card()
    }
    fn record(&self) -> &Arc<dyn MemoryStore> {
        (**self).record()
    }
    async fn start(&self, session: &str, submission: Submission) -> Result<RunHandle> {
        (**self).start(session, submission).await
    }
    async fn interrupt(&self, session: &str) -> Result<Interrupted> {
        (**self).interrupt(session).await
    }
    async fn replay(
        &self,
        session: &str,
        turns: Option<UnboundedSender<ReplayTurn>>,
    ) -> Result<ReplayReport> {
        (**self).replay(session, turns).await
    }
    async fn fork(&self, session: &str, request: ForkRequest) -> Result<ForkOrigin> {
        (**self).fork(session, request).await
    }
    async fn create_grant(&self, grant: NewGrant, actor: &Actor) -> Result<Grant> {
        (**self).create_grant(grant, actor).await
    }
    async fn revoke_grant(&self, id: &str, by: &Actor) -> Result<Grant> {
        (**self).revoke_grant(id, by).await
    }
    fn runs_here(&self) -> bool {
        (**self).runs_here()
    }
    fn evidence_keys(&self) -> reins_evidence::Keyring {
        (**self).evidence_keys()
    }
    async fn evidence(&self, session: &str) -> Result<reins_evidence::Bundle> {
        (**self).evidence(session).await
    }
    fn relay(&self, session: &str, events: Vec<LiveEvent>) -> Result<usize> {
        (**self).relay(session, events)
    }
    fn live(&self, session: &str) -> Option<tokio::sync::broadcast::Receiver<LiveEvent>> {
        (**self).live(session)
    }
    async fn decide(&self, session: &str, decide: Decide) -> Result<RunHandle> {
        (**self).decide(session, decide).await
    }
    async fn subscribe(&self, watch: Watch) -> Result<SessionEvents> {
        (**self).subscribe(watch).await
    }
}

/// `Ok` when `record` holds `session`; otherwise `SessionNotFound` (a read or a verb
/// on an unknown session is refused, never answered with nothing or by creating it).
pub(crate) async fn stored(record: &dyn reins_memory::MemoryStore, session: &str) -> Result<()> {
    match record.session_version(session).await? {
        Some(_) => Ok(()),
        None => Err(AgentError::Store(reins_memory::Error::SessionNotFound {
            id: session.to_owned(),
        })),
    }
}
