//! [`SessionBackend`]: what a front end (an HTTP server, a protocol adapter) needs of
//! whatever runs sessions — read one, hand it an input and follow the run it starts
//! ([`Started`]), interrupt it, replay it — so that it can front the local driver (an
//! [`Agent`]) or another driver (reins-restate's `RestateClient`, a Restate
//! deployment) the same way, without depending on it.

use async_trait::async_trait;
use tokio::sync::mpsc::UnboundedSender;

use crate::agent::Agent;
use crate::error::{AgentError, Result};
use crate::fork::{ReplayReport, ReplayTurn};
use crate::handle::RunHandle;
use crate::output::RunEvent;
use crate::run::RunInput;
use crate::state::SessionView;
use crate::structured::OutputSpec;
use crate::view::{Actor, ViewToken};
use reins_message::ToolSpec;

/// One input for a session, with who gives it and the view it was decided on.
#[derive(Debug, Clone, PartialEq)]
pub struct Submission {
    /// The input.
    pub input: RunInput,
    /// Who acts (recorded with every decision).
    pub actor: Option<Actor>,
    /// The view the input was decided on: a different one is refused
    /// ([`AgentError::StaleView`]).
    pub view: Option<ViewToken>,
    /// Makes a retried submission harmless where the backend keeps keys (Restate
    /// answers a repeated key with the first answer). The local driver keeps none: a
    /// repeated decision is refused there by the consent rules (stale view, nothing
    /// pending) and changes nothing either way.
    pub idempotency_key: Option<String>,
    /// The caller's own tools (AG-UI's client tools): offered to the model beside
    /// the toolkit's and always external — a call of one pauses the run with an
    /// `External` requirement, answered with the tool's result
    /// ([`SendBuilder::client_tools`](crate::SendBuilder::client_tools)).
    pub client_tools: Vec<ToolSpec>,
    /// The structured answer a run started by this message must end with, instead
    /// of the agent's ([`SendBuilder::output_spec`](crate::SendBuilder::output_spec));
    /// ignored for other inputs (a run in progress keeps its own). A spec that cannot
    /// be asked for is refused ([`AgentError::InvalidInput`]).
    pub output: Option<OutputSpec>,
    /// The session's own budget limit, set as the run this message starts begins
    /// (stored with the session, over the agent's default; [`crate::budget`]);
    /// ignored for other inputs. An invalid limit is refused
    /// ([`AgentError::InvalidBudget`]) before anything changes.
    pub budget: Option<crate::budget::Budget>,
    /// The caller's W3C `traceparent` (an HTTP `traceparent` header, an MCP request's
    /// `_meta.traceparent`): the parent of the `invoke_agent` span of the turn this
    /// input starts (see [`Session::with_trace_parent`](crate::Session::with_trace_parent)).
    pub trace_parent: Option<String>,
}

impl Submission {
    /// An input with no actor, no view and no key.
    pub fn new(input: RunInput) -> Self {
        Self {
            input,
            actor: None,
            view: None,
            idempotency_key: None,
            client_tools: Vec::new(),
            output: None,
            budget: None,
            trace_parent: None,
        }
    }
}

/// The run a backend started for an input ([`SessionBackend::start`]), and where its
/// typed events come from.
#[derive(Debug)]
pub enum Started {
    /// The run executes in this process: the handle yields its [`RunEvent`]s as they
    /// happen, then its [`RunOutput`](crate::RunOutput) or the error it ended with
    /// ([`RunHandle::wait`]), and interrupts it at once
    /// ([`RunHandle::interrupter`]). The local driver's runs.
    Here(RunHandle),
    /// The run executes in the backend's own processes. They relay the run events of
    /// the steps in progress to the front end as they happen (reins-server's
    /// `POST /v1/sessions/{id}/live`), and the store — which the front end shares with
    /// the backend — records each committed step and where the run stopped.
    Relayed,
}

/// Where a front end reads sessions and sends their inputs. Refusals are the local
/// driver's errors, whatever the backend: an unknown session is
/// `AgentError::Store(SessionNotFound)` (except for a message, which creates it), a
/// stale view [`AgentError::StaleView`], a decision for nothing pending
/// [`AgentError::NothingToResume`], one for an unknown requirement
/// [`AgentError::UnknownRequirement`], an input while a run is in flight
/// [`AgentError::SessionBusy`]. A refused input changes nothing.
#[async_trait]
pub trait SessionBackend: Send + Sync {
    /// The session as stored: phase, pending requirements, the view token.
    async fn view(&self, session: &str) -> Result<SessionView>;

    /// Hands the session an input. Returns once the input is accepted; the run goes on
    /// in the backend (read [`SessionBackend::view`] to follow it).
    async fn submit(&self, session: &str, submission: Submission) -> Result<()>;

    /// [`SessionBackend::submit`], saying the stored version the input was validated
    /// against when the backend knows it: the run it starts moves the session past it.
    /// A backend that answers a retried request (the same idempotency key) with the
    /// first answer gives the first input's version, so that whoever follows the run
    /// follows the one that input started, not one that never comes. The default
    /// submits and knows none.
    async fn submit_validated(&self, session: &str, submission: Submission) -> Result<Option<u64>> {
        self.submit(session, submission).await.map(|()| None)
    }

    /// Hands the session an input, like [`SessionBackend::submit`], and says how the
    /// run it starts reaches the front end ([`Started`]). A refused input is an
    /// error here, before any run starts (the local driver may also refuse it as the
    /// handle's first outcome). The default submits and answers
    /// [`Started::Relayed`].
    async fn start(&self, session: &str, submission: Submission) -> Result<Started> {
        self.submit(session, submission).await?;
        Ok(Started::Relayed)
    }

    /// Interrupts the run in progress on the session; `false` when none was.
    async fn interrupt(&self, session: &str) -> Result<bool>;

    /// Whether the runs this backend starts execute in this process
    /// ([`Started::Here`]): a front end can then stop one before its first step (say,
    /// reject what a paused session waits for and stop at once), and an interrupt the
    /// backend accepts for a run that is not here was stored for the instance that
    /// runs it. `false` (the default): the backend's own processes run them and it
    /// delivers interrupts itself.
    fn runs_here(&self) -> bool {
        false
    }

    /// Replays the recorded session with the backend's own agent (its model and
    /// prompts, as they are now) on a scratch store: each turn's user message is sent
    /// again, tool calls are served from the recording and none runs, and the report
    /// says where the new run diverged ([`crate::replay`]). Each replayed turn goes to
    /// `turns` as soon as the backend has it. Nothing is written to the session's
    /// store. An unknown session is `AgentError::Store(SessionNotFound)`.
    async fn replay(
        &self,
        session: &str,
        turns: Option<UnboundedSender<ReplayTurn>>,
    ) -> Result<ReplayReport>;
}

impl Agent {
    /// The session, refused with `SessionNotFound` when the store has none.
    async fn existing_session(&self, id: &str) -> Result<crate::Session> {
        if self.store().session_version(id).await?.is_none() {
            return Err(AgentError::Store(reins_memory::Error::SessionNotFound {
                id: id.to_owned(),
            }));
        }
        self.session_of_owner(id).await
    }

    /// The session, opened by the agent that runs it: this one, or the sub-agent
    /// whose child session `id` is (its tools, model and consent rules).
    async fn session_of_owner(&self, id: &str) -> Result<crate::Session> {
        self.owner_of(id).await?.session(id).await
    }
}

/// The local driver as a backend: inputs start runs in this process (detached: the
/// run goes on after `submit` returns).
#[async_trait]
impl SessionBackend for Agent {
    async fn view(&self, session: &str) -> Result<SessionView> {
        self.existing_session(session).await?.view().await
    }

    async fn submit(&self, session: &str, submission: Submission) -> Result<()> {
        let Started::Here(mut handle) = self.start(session, submission).await? else {
            return Ok(());
        };
        // The input is validated and stored before the run announces its start; a
        // refused one ends the run before that, with the error `wait` returns.
        match handle.next_event().await {
            Some(RunEvent::RunStarted { .. }) => {
                handle.detach();
                Ok(())
            }
            _ => handle.wait().await.map(|_| ()),
        }
    }

    /// The run executes in this process: [`Started::Here`], with its handle.
    async fn start(&self, session: &str, submission: Submission) -> Result<Started> {
        let Submission {
            input,
            actor,
            view,
            client_tools: tools,
            output,
            budget,
            trace_parent,
            ..
        } = submission;
        let s = match &input {
            RunInput::Message(_) => self.session_of_owner(session).await?,
            _ => self.existing_session(session).await?,
        };
        let s = match actor {
            Some(a) => s.as_actor(a),
            None => s,
        };
        let s = match trace_parent {
            Some(tp) => s.with_trace_parent(tp),
            None => s,
        };
        let handle = match (input, view) {
            (RunInput::Message(m), view) => {
                let mut send = s.send(m).client_tools(tools);
                if let Some(v) = &view {
                    send = send.at(v);
                }
                if let Some(spec) = output {
                    send = send.output_spec(spec);
                }
                if let Some(limit) = budget {
                    send = send.budget(limit);
                }
                send.start().await?
            }
            (RunInput::Resume, Some(v)) => s.resume().at(&v).client_tools(tools).start().await?,
            (RunInput::Resume, None) => s.resume().client_tools(tools).start().await?,
            (RunInput::Decisions(d), Some(v)) => {
                s.resolve(d).at(&v).client_tools(tools).start().await?
            }
            (RunInput::Decisions(d), None) => s.resolve(d).client_tools(tools).start().await?,
        };
        Ok(Started::Here(handle))
    }

    async fn interrupt(&self, session: &str) -> Result<bool> {
        self.existing_session(session)
            .await?
            .request_interrupt()
            .await
    }

    fn runs_here(&self) -> bool {
        true
    }

    async fn replay(
        &self,
        session: &str,
        turns: Option<UnboundedSender<ReplayTurn>>,
    ) -> Result<ReplayReport> {
        let recorded = self.existing_session(session).await?;
        let candidate = self.with_store(std::sync::Arc::new(reins_memory::InMemoryStore::new()));
        crate::fork::replay_streaming(&recorded, &candidate, turns).await
    }
}

#[async_trait]
impl<T: SessionBackend + ?Sized> SessionBackend for std::sync::Arc<T> {
    async fn view(&self, session: &str) -> Result<SessionView> {
        (**self).view(session).await
    }

    async fn submit(&self, session: &str, submission: Submission) -> Result<()> {
        (**self).submit(session, submission).await
    }

    async fn submit_validated(&self, session: &str, submission: Submission) -> Result<Option<u64>> {
        (**self).submit_validated(session, submission).await
    }

    async fn start(&self, session: &str, submission: Submission) -> Result<Started> {
        (**self).start(session, submission).await
    }

    async fn interrupt(&self, session: &str) -> Result<bool> {
        (**self).interrupt(session).await
    }

    fn runs_here(&self) -> bool {
        (**self).runs_here()
    }

    async fn replay(
        &self,
        session: &str,
        turns: Option<UnboundedSender<ReplayTurn>>,
    ) -> Result<ReplayReport> {
        (**self).replay(session, turns).await
    }
}
