//! The verbs that start a run — [`Session::send`], [`Session::resume`],
//! [`Session::resolve`] and [`Agent::send`] — and the builders they return.
//!
//! One verb per intent; how the run is observed is chosen on the builder:
//!
//! | what                                  | how |
//! |---------------------------------------|-----|
//! | run to the end                        | `session.send(msg).await?` |
//! | stream events, interrupt              | `session.send(msg).start().await?` (a [`RunHandle`]) |
//! | act only on what a person saw         | `session.resume().at(&token).await?` |
//! | end with a typed answer               | `session.send(msg).output::<T>().await?` |
//!
//! A builder does nothing until it is awaited or started (`#[must_use]`). Awaiting it
//! runs on the caller's task; dropping that future before it ends interrupts the run
//! (the turn is sanitized and stored, as with [`RunHandle::interrupt`]).

use std::borrow::Cow;
use std::future::IntoFuture;

use futures::future::BoxFuture;
use reins_message::{Msg, ToolSpec};

use crate::agent::{Agent, DEFAULT_SESSION};
use crate::error::{AgentError, Result};
use crate::handle::RunHandle;
use crate::output::RunOutput;
use crate::requirement::Decision;
use crate::run::RunInput;
use crate::structured::OutputSpec;
use crate::view::ViewToken;

use super::Session;

/// Which session a [`SendBuilder`] runs on.
#[derive(Debug)]
enum Target<'s> {
    /// A session handle.
    Session(&'s Session),
    /// The agent's default session ([`DEFAULT_SESSION`]), opened when the run starts.
    DefaultOf(&'s Agent),
}

impl<'s> Target<'s> {
    fn agent(&self) -> &'s Agent {
        match self {
            Self::Session(s) => &s.agent,
            Self::DefaultOf(a) => a,
        }
    }

    async fn open(self) -> Result<Cow<'s, Session>> {
        match self {
            Self::Session(s) => Ok(Cow::Borrowed(s)),
            Self::DefaultOf(a) => Ok(Cow::Owned(a.session(DEFAULT_SESSION).await?)),
        }
    }
}

/// Refuses a structured-output spec that cannot be asked for.
fn checked(output: Option<OutputSpec>) -> Result<Option<OutputSpec>> {
    if let Some(spec) = &output {
        spec.check().map_err(AgentError::InvalidInput)?;
    }
    Ok(output)
}

/// A message to send, from [`Session::send`] or [`Agent::send`]: await it to run until
/// the run completes, pauses or is cancelled, or [`start`](Self::start) it for a
/// [`RunHandle`].
///
/// - A user message starts a new run; if the session was paused, the pending tool
///   calls are closed with `Rejected` results noting the new message.
/// - `Msg::tool_results(..)` answers pending calls with the caller's results
///   (cancelled ones, or externally executed ones) and goes on.
#[must_use = "nothing is sent until the builder is awaited or started"]
#[derive(Debug)]
pub struct SendBuilder<'s> {
    target: Target<'s>,
    msg: Msg,
    view: Option<ViewToken>,
    output: Option<OutputSpec>,
    budget: Option<crate::budget::Budget>,
    client_tools: Vec<ToolSpec>,
}

impl<'s> SendBuilder<'s> {
    pub(crate) fn on_session(session: &'s Session, msg: Msg) -> Self {
        Self::new(Target::Session(session), msg)
    }

    pub(crate) fn on_default(agent: &'s Agent, msg: Msg) -> Self {
        Self::new(Target::DefaultOf(agent), msg)
    }

    fn new(target: Target<'s>, msg: Msg) -> Self {
        Self {
            target,
            msg,
            view: None,
            output: None,
            budget: None,
            client_tools: Vec::new(),
        }
    }

    /// Sends only if the session still waits for exactly what `view` showed; else the
    /// run fails with [`AgentError::StaleView`], changes nothing and runs nothing. For
    /// tool results (or a new message) meant for requirements a person was shown.
    pub fn at(mut self, view: &ViewToken) -> Self {
        self.view = Some(view.clone());
        self
    }

    /// The run must end with a structured answer of type `T` (its JSON Schema from
    /// schemars), whatever the agent's default; the agent's output mode and retry
    /// bound still apply. Read it with `out.parsed::<T>()` once the run completed. The
    /// schema is stored with the run, so a pause in between does not lose it: `resume`
    /// and `resolve` (here or in another process) end with the typed answer. Applies
    /// to a user message; tool results go on with the schema their run started with.
    /// See `docs/structured-output.md`.
    pub fn output<T: schemars::JsonSchema>(mut self) -> Self {
        let mut spec = OutputSpec::of::<T>();
        if let Some(default) = &self.target.agent().config.output {
            spec = spec.mode(default.mode).max_retries(default.max_retries);
        }
        self.output = Some(spec);
        self
    }

    /// [`output`](Self::output) with an explicit [`OutputSpec`] (a hand-written
    /// schema, a mode, a retry bound). A spec that cannot be asked for fails the run
    /// with [`AgentError::InvalidInput`] before anything is sent.
    pub fn output_spec(mut self, spec: OutputSpec) -> Self {
        self.output = Some(spec);
        self
    }

    /// Sets the session's own budget limit as the run starts (stored with the
    /// session, over the agent's default; see [`crate::budget`]). An invalid limit
    /// fails the run with [`AgentError::InvalidBudget`] before anything changes.
    pub fn budget(mut self, limit: crate::budget::Budget) -> Self {
        self.budget = Some(limit);
        self
    }

    /// Tools the caller declares for this run and executes itself (an AG-UI page's
    /// frontend tools, say): the model is offered them beside the toolkit's (a toolkit
    /// tool of the same name wins), and each call of one pauses the run with an
    /// `External` requirement; answer it with `Decision::external_result` (or tool
    /// results). Not stored: declare them again on the call that goes on after the
    /// pause if the model should still see them.
    pub fn client_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.client_tools = tools;
        self
    }

    /// Starts the run and returns at once with a [`RunHandle`] to stream its events and
    /// interrupt it. The session is claimed before this returns: a second run while
    /// this one is in flight fails with [`AgentError::SessionBusy`].
    pub async fn start(self) -> Result<RunHandle> {
        let Self {
            target,
            msg,
            view,
            output,
            budget,
            client_tools,
        } = self;
        let output = checked(output)?;
        let session = target.open().await?;
        let asks = crate::drive::Asks { output, budget };
        session
            .start_full(RunInput::Message(msg), view, asks, client_tools)
            .await
    }
}

impl<'s> IntoFuture for SendBuilder<'s> {
    type Output = Result<RunOutput>;
    type IntoFuture = BoxFuture<'s, Result<RunOutput>>;

    fn into_future(self) -> Self::IntoFuture {
        let Self {
            target,
            msg,
            view,
            output,
            budget,
            client_tools,
        } = self;
        Box::pin(async move {
            let output = checked(output)?;
            let session = target.open().await?;
            let asks = crate::drive::Asks { output, budget };
            session
                .run_inline(RunInput::Message(msg), view, asks, client_tools)
                .await
        })
    }
}

/// Going on after a pause, from [`Session::resume`]: await it to run until the run
/// completes, pauses again or is cancelled, or [`start`](Self::start) it for a
/// [`RunHandle`].
///
/// Approves the pending confirmations the handle was shown (AgentScope's `call()` with
/// no message), or continues after a hook stopped the run. Requirements that need input
/// or an external result stay pending. When the session waits for something other than
/// the view by now, the run fails with [`AgentError::StaleView`], changes nothing and
/// runs nothing.
#[must_use = "nothing is resumed until the builder is awaited or started"]
#[derive(Debug)]
pub struct ResumeBuilder<'s> {
    session: &'s Session,
    view: Option<ViewToken>,
    client_tools: Vec<ToolSpec>,
}

impl<'s> ResumeBuilder<'s> {
    pub(crate) fn new(session: &'s Session) -> Self {
        Self {
            session,
            view: None,
            client_tools: Vec::new(),
        }
    }

    /// Approves exactly what `view` showed (instead of the handle's own view), or fails
    /// with [`AgentError::StaleView`]. For callers that keep the view between requests
    /// (a web page); get the token from [`Session::view`].
    pub fn at(mut self, view: &ViewToken) -> Self {
        self.view = Some(view.clone());
        self
    }

    /// Tools the caller declares for this run and executes itself (an AG-UI page's
    /// frontend tools, say): the model is offered them beside the toolkit's (a toolkit
    /// tool of the same name wins), and each call of one pauses the run with an
    /// `External` requirement; answer it with `Decision::external_result` (or tool
    /// results). Not stored: declare them again on the call that goes on after the
    /// pause if the model should still see them.
    pub fn client_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.client_tools = tools;
        self
    }

    /// Starts the run and returns at once with a [`RunHandle`] to stream its events and
    /// interrupt it.
    pub async fn start(self) -> Result<RunHandle> {
        let view = self.view.unwrap_or_else(|| self.session.current_view());
        self.session
            .start_full(
                RunInput::Resume,
                Some(view),
                crate::drive::Asks::default(),
                self.client_tools,
            )
            .await
    }
}

impl<'s> IntoFuture for ResumeBuilder<'s> {
    type Output = Result<RunOutput>;
    type IntoFuture = BoxFuture<'s, Result<RunOutput>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let view = self.view.unwrap_or_else(|| self.session.current_view());
            self.session
                .run_inline(
                    RunInput::Resume,
                    Some(view),
                    crate::drive::Asks::default(),
                    self.client_tools,
                )
                .await
        })
    }
}

/// Answers to pending requirements, from [`Session::resolve`]: await it to run until
/// the run completes, pauses again or is cancelled, or [`start`](Self::start) it for a
/// [`RunHandle`].
///
/// Decisions naming no pending requirement, of the wrong kind, or for an expired one
/// are refused and change nothing. Resolved calls run; the rest stay pending, and the
/// model is called only when every tool use of the turn has a result. A decision names
/// its requirement's id, which is never reused within a session, so it cannot apply to
/// a requirement raised after the caller looked.
#[must_use = "nothing is decided until the builder is awaited or started"]
#[derive(Debug)]
pub struct ResolveBuilder<'s> {
    session: &'s Session,
    decisions: Vec<Decision>,
    view: Option<ViewToken>,
    client_tools: Vec<ToolSpec>,
}

impl<'s> ResolveBuilder<'s> {
    pub(crate) fn new(session: &'s Session, decisions: Vec<Decision>) -> Self {
        Self {
            session,
            decisions,
            view: None,
            client_tools: Vec::new(),
        }
    }

    /// Refused with [`AgentError::StaleView`] unless the session waits for exactly what
    /// `view` showed.
    pub fn at(mut self, view: &ViewToken) -> Self {
        self.view = Some(view.clone());
        self
    }

    /// Tools the caller declares for this run and executes itself (an AG-UI page's
    /// frontend tools, say): the model is offered them beside the toolkit's (a toolkit
    /// tool of the same name wins), and each call of one pauses the run with an
    /// `External` requirement; answer it with `Decision::external_result` (or tool
    /// results). Not stored: declare them again on the call that goes on after the
    /// pause if the model should still see them.
    pub fn client_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.client_tools = tools;
        self
    }

    /// Starts the run and returns at once with a [`RunHandle`] to stream its events and
    /// interrupt it.
    pub async fn start(self) -> Result<RunHandle> {
        self.session
            .start_full(
                RunInput::Decisions(self.decisions),
                self.view,
                crate::drive::Asks::default(),
                self.client_tools,
            )
            .await
    }
}

impl<'s> IntoFuture for ResolveBuilder<'s> {
    type Output = Result<RunOutput>;
    type IntoFuture = BoxFuture<'s, Result<RunOutput>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            self.session
                .run_inline(
                    RunInput::Decisions(self.decisions),
                    self.view,
                    crate::drive::Asks::default(),
                    self.client_tools,
                )
                .await
        })
    }
}
