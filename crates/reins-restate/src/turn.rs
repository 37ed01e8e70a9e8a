//! The Restate driver of a [`Run`]: `reins_agent::interpret::drive` answers every
//! step; this module says where each runs — inside a journaled step of the turn's
//! invocation, so that a turn Restate retries or resumes elsewhere replays what
//! happened instead of doing it again — how a commit is written (a journaled step that
//! recognizes its own first attempt), where child sessions run (their own virtual
//! objects, see [`subagent`]) and how a paused turn waits (awakeables).
//!
//! | what | journal entries |
//! |---|---|
//! | the turn's start | `load` (the stored session, once per turn), `input` (a text input made a message); `clock` before each woken input |
//! | a step's work | one entry named after it (`follow`, `settle`, `refusal`, `close`, `hook pre-call`, `consult`, `compress`, `model`, `hook pre-acting <ids>`, `tool <id>` or `tools <ids>`, `tool-answer <ids>`, `subagent <ids>`, `subagent-finish <ids>`, `hook post-call`, `failed`), holding what `reins_agent::effects::perform` returned; a model call or a summary an interrupt cut is given up, any other step performed again |
//! | a commit | `commit` (the store's version after it; a retried commit that finds its own first attempt stored takes that version); before tool calls with nothing to store, `tool-start`: a tool step after a replayed entry takes over calls an earlier attempt may have started (`Takeover::Now`) |
//! | a pause | awakeables per requirement (+ one for resume / a new message), state `waiting`, `waiting` (a round trip), then the pause's commit |
//! | the end | `closing` (a round trip: `submit` queues behind a closing turn), then the last commit |
//!
//! The run's events are announced to the object's witness (see
//! [`SessionObject::witness`](crate::SessionObject::witness)); the steps' live events
//! also go to the live relay (see [`crate::live`]).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use reins_agent::effects::delegate::{ChildAnswer, ChildCall, ChildState, ChildTurns};
use reins_agent::effects::{self, Done, LiveCalls, OnInterrupt, Ports, Takeover, Witness, Work};
use reins_agent::interpret::{Driver, Perform};
use reins_agent::run::{Call, Checkpoint, CommitAt, Run, RunInput};
use reins_agent::{Agent, AgentError, Requirement, RunEvent, RunOutput, ViewToken};
use reins_memory::{Commit, RunStateData};
use restate_sdk::context::DurableFuture;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::object::{
    CLOSING, Inner, Loaded, Taken, WAITING, Waiting, Wake, is_cancel, load, refused, retry,
};
use crate::wire::{Refused, TurnInput, TurnRequest};

pub(crate) mod subagent;

/// An awakeable's future, as the paused turn waits on it.
type WakeFuture<'ctx> =
    Pin<Box<dyn DurableFuture<Output = Result<Json<Wake>, TerminalError>> + Send + 'ctx>>;

pub(crate) struct TurnDriver<'a, 'ctx> {
    inner: &'a Arc<Inner>,
    /// The agent whose session this is: the service's, or a sub-agent's for a child
    /// session.
    agent: Agent,
    /// Ends the turn at its first pause instead of waiting (a child session's turn,
    /// driven by its parent: see [`subagent`]).
    until_pause: bool,
    ctx: &'a ObjectContext<'ctx>,
    session: String,
    token: CancellationToken,
    /// Restate cancelled the invocation (an interrupt).
    cancelled: bool,
    version: u64,
    /// The caller's own tools for this turn (AG-UI's client tools), kept for the
    /// inputs that wake it.
    client_tools: Vec<reins_message::ToolSpec>,
    /// The object's state `waiting` is set (the turn is paused on its awakeables).
    waiting: bool,
    /// The last journaled step ran here (it was not replayed from the journal).
    fresh: bool,
    /// The input that woke the turn, and where its `submit` waits for the answer.
    reply: Option<String>,
    /// The awakeables a paused turn waits on.
    wakes: Vec<Awaited>,
    futures: DurableFuturesUnordered<WakeFuture<'ctx>>,
    /// The requirements the turn is paused on.
    paused_on: Vec<String>,
    /// Where the run's events are announced.
    announce: Announcer,
}

/// One awakeable the paused turn waits on.
struct Awaited {
    /// The requirement it answers (`None`: resume / a new message).
    requirement: Option<String>,
    awakeable: String,
    index: usize,
}

impl<'a, 'ctx> TurnDriver<'a, 'ctx> {
    pub(crate) fn new(
        inner: &'a Arc<Inner>,
        ctx: &'a ObjectContext<'ctx>,
        session: String,
        token: CancellationToken,
        agent: Agent,
    ) -> Self {
        let announce = Announcer(inner.witness.clone());
        Self {
            inner,
            agent,
            until_pause: false,
            ctx,
            session,
            token,
            cancelled: false,
            version: 0,
            client_tools: Vec::new(),
            waiting: false,
            fresh: true,
            reply: None,
            wakes: Vec::new(),
            futures: DurableFuturesUnordered::new(),
            paused_on: Vec::new(),
            announce,
        }
    }

    /// A journaled step: `make` builds the step's future (again, when a cancellation
    /// interrupted the wait for it and `on_interrupt` says finish it). Records
    /// whether its future ran here or the journal held its result.
    async fn journal<T, F, Fut>(
        &mut self,
        name: &str,
        on_interrupt: OnInterrupt,
        make: F,
    ) -> Result<T, TerminalError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = HandlerResult<Json<T>>> + Send + 'ctx,
        T: Serialize + for<'de> Deserialize<'de> + 'static,
    {
        loop {
            let ran = Arc::new(AtomicBool::new(false));
            let flag = Arc::clone(&ran);
            let fut = make();
            let out = self
                .ctx
                .run(move || {
                    flag.store(true, Ordering::SeqCst);
                    fut
                })
                .name(name)
                .await;
            self.fresh = ran.load(Ordering::SeqCst);
            match out {
                Ok(Json(v)) => return Ok(v),
                // A cancellation may come more than once (a child session's turn hears
                // its parent's, passed on by Restate, and its own).
                Err(e) if is_cancel(&e) => {
                    self.cancelled = true;
                    self.token.cancel();
                    if on_interrupt == OnInterrupt::Drop {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Marks the turn as closing — it takes no more input — before the commit that
    /// ends it is written: `submit` then queues a new turn behind it rather than
    /// answering `busy`. A round trip makes the mark visible before the commit is.
    async fn closing(&mut self) -> Result<(), TerminalError> {
        if std::mem::take(&mut self.waiting) {
            self.ctx.clear(WAITING);
        }
        self.ctx.set(CLOSING, Json(true));
        self.journal("closing", OnInterrupt::Finish, || async { Ok(Json(())) })
            .await
    }

    /// The time, journaled.
    async fn clock(&mut self) -> Result<DateTime<Utc>, TerminalError> {
        self.journal("clock", OnInterrupt::Finish, || async {
            Ok(Json(Utc::now()))
        })
        .await
    }

    /// Drives the turn from its first input to the end of the run (a child session's
    /// turn: to its first pause).
    pub(crate) async fn drive(&mut self, req: TurnRequest) -> Result<RunOutput, TerminalError> {
        self.client_tools = req.client_tools.clone();
        let (agent, session) = (self.agent.clone(), self.session.clone());
        let loaded: Option<Loaded> = self
            .journal("load", OnInterrupt::Finish, move || {
                load(agent.clone(), session.clone(), true)
            })
            .await?;
        let loaded = loaded.ok_or_else(|| TerminalError::new("the session vanished"))?;
        self.version = loaded.version;
        let now = loaded.now;
        let mut run = loaded.into_run(&self.agent, &self.session)?;
        let mut req = req;
        if let TurnInput::Text { text } = &req.input {
            // A fresh message id and time, the same on every replay.
            let text = text.clone();
            req.input = self
                .journal("input", OnInterrupt::Finish, move || {
                    let input = TurnInput::Text { text: text.clone() }.normalized();
                    async move { Ok(Json(input)) }
                })
                .await?;
        }
        let call = self.call(&req, now);
        reins_agent::interpret::drive(self, &mut run, call)
            .await
            .map_err(|e| refused(&self.session, &e))
    }

    /// The call `req` starts or wakes: an input that wakes a paused turn keeps the
    /// tools the turn started with.
    fn call(&self, req: &TurnRequest, now: DateTime<Utc>) -> Call {
        req.call(&self.agent, &self.session, now)
            .with_client_tools(self.client_tools.clone())
            .with_trace_parent(req.trace_parent.clone())
    }

    /// Tells the `submit` waiting for the input that woke the turn (when one does)
    /// what became of it.
    fn answer(&mut self, taken: Taken) {
        if let Some(id) = self.reply.take() {
            self.ctx.resolve_awakeable(&id, Json(taken));
        }
    }

    /// Awakeables for the requirements `ids` (and for resume / a new message) that
    /// have none yet, made visible to `submit` (state `waiting`, a round trip) before
    /// the pause is stored.
    async fn arm(&mut self, ids: &[String]) -> Result<(), TerminalError> {
        for id in ids {
            if !self
                .wakes
                .iter()
                .any(|w| w.requirement.as_deref() == Some(id.as_str()))
            {
                self.await_one(Some(id.clone()));
            }
        }
        if !self.wakes.iter().any(|w| w.requirement.is_none()) {
            self.await_one(None);
        }
        let waiting = Waiting {
            general: self
                .wakes
                .iter()
                .find(|w| w.requirement.is_none())
                .map(|w| w.awakeable.clone())
                .unwrap_or_default(),
            by_requirement: self
                .wakes
                .iter()
                .filter_map(|w| {
                    let r = w.requirement.as_ref()?;
                    ids.contains(r).then(|| (r.clone(), w.awakeable.clone()))
                })
                .collect(),
        };
        self.ctx.set(WAITING, Json(waiting));
        self.waiting = true;
        // A round trip: the state is visible to `submit` before the pause is.
        self.journal("waiting", OnInterrupt::Finish, || async { Ok(Json(())) })
            .await
    }

    fn await_one(&mut self, requirement: Option<String>) {
        let (awakeable, fut) = self.ctx.awakeable::<Json<Wake>>();
        let index = self.futures.push(Box::pin(fut));
        self.wakes.push(Awaited {
            requirement,
            awakeable,
            index,
        });
    }

    /// Waits on the armed awakeables for an input: the call it starts, or `None` (an
    /// interrupt while paused: the session stays paused, a later input starts a new
    /// turn).
    async fn wake(&mut self) -> Result<Option<Call>, TerminalError> {
        if self.cancelled {
            self.closing().await?;
            return Ok(None);
        }
        let next = loop {
            match self.futures.next().await {
                Err(e) if is_cancel(&e) => break None,
                Err(e) => return Err(e),
                Ok(None) => break None,
                Ok(Some((index, got))) => {
                    self.wakes.retain(|w| w.index != index);
                    match got {
                        Ok(Json(wake)) => break Some(wake),
                        Err(e) => {
                            tracing::info!(session = %self.session, error = %e, "an awakeable was rejected");
                        }
                    }
                }
            }
        };
        self.ctx.clear(WAITING);
        self.waiting = false;
        let Some(next) = next else {
            self.closing().await?;
            return Ok(None);
        };
        self.reply = Some(next.reply);
        let now = self.clock().await?;
        Ok(Some(self.call(&next.request, now)))
    }

    /// Writes `commit` as one journaled step.
    async fn write(&mut self, commit: Option<Commit>) -> Result<(), TerminalError> {
        let Some(mut commit) = commit else {
            return Ok(());
        };
        commit.expected_version = self.version;
        let (agent, session) = (self.agent.clone(), self.session.clone());
        self.version = self
            .journal("commit", OnInterrupt::Finish, move || {
                commit_once(agent.clone(), session.clone(), commit.clone())
            })
            .await?;
        Ok(())
    }
}

/// The turn's errors as the interpreter sees them: a refusal carried as JSON comes
/// back typed; anything else is the backend's.
fn agent_error(e: TerminalError) -> AgentError {
    match serde_json::from_str::<Refused>(e.message())
        .ok()
        .and_then(|r| r.to_agent_error())
    {
        Some(e) => e,
        None => AgentError::Backend(e.message().to_owned()),
    }
}

impl Perform for TurnDriver<'_, '_> {
    async fn perform(&mut self, work: Work) -> reins_agent::Result<Done> {
        let name = work.name();
        let on_interrupt = work.on_interrupt();
        // A step after an entry the journal replayed may be the second attempt of one
        // that began its tool calls.
        let takeover = if self.fresh {
            Takeover::AfterLease
        } else {
            Takeover::Now
        };
        let interrupted = match &work {
            Work::Reason(_) => Some(Done::Reasoned {
                reasoning: effects::Reasoning::Interrupted,
                now: Utc::now(),
            }),
            Work::Compress(_) => Some(Done::Summarized(effects::Summarized::Interrupted)),
            _ => None,
        };
        if self.token.is_cancelled() && interrupted.is_some() {
            return Ok(interrupted.unwrap_or(Done::Nothing));
        }
        let step = Step {
            agent: self.agent.clone(),
            session: self.session.clone(),
            token: self.token.clone(),
            live: self.inner.live_calls.clone(),
            relay: self.inner.live.clone(),
            run_id: self.ctx.invocation_id().to_owned(),
            extra: self.announce.0.clone(),
            takeover,
        };
        let out = self
            .journal(&name, on_interrupt, move || {
                step.clone().perform(work.clone())
            })
            .await;
        match out {
            Ok(done) => Ok(done),
            Err(e) if is_cancel(&e) => Ok(interrupted.unwrap_or(Done::Nothing)),
            Err(e) => Err(agent_error(e)),
        }
    }
}

/// What a journaled step's future owns: the ports it lends the effects.
#[derive(Clone)]
struct Step {
    agent: Agent,
    session: String,
    token: CancellationToken,
    live: LiveCalls,
    relay: crate::live::LiveRelay,
    run_id: String,
    extra: Option<Arc<dyn Witness>>,
    takeover: Takeover,
}

impl Step {
    /// `effects::perform`, its live events to the relay (this execution of the step
    /// under a fresh attempt id: they are delivered before the step returns) and to
    /// the object's witness.
    async fn perform(self, work: Work) -> HandlerResult<Json<Done>> {
        let sender = self.relay.open(&self.session, &self.run_id);
        let witness = Tee {
            relay: &sender,
            extra: self.extra.as_deref(),
        };
        let ports = Ports {
            agent: &self.agent,
            session: &self.session,
            cancel: &self.token,
            witness: &witness,
            live: &self.live,
            takeover: self.takeover,
        };
        let out = effects::perform(&ports, work).await;
        sender.close().await;
        out.map(Json).map_err(effect_error)
    }
}

/// The live relay and the object's witness, together.
struct Tee<'a> {
    relay: &'a crate::live::LiveSender,
    extra: Option<&'a dyn Witness>,
}

impl Witness for Tee<'_> {
    fn listening(&self) -> bool {
        self.relay.listening() || self.extra.is_some_and(|w| w.listening())
    }

    fn send(&self, event: RunEvent) {
        if let Some(w) = self.extra {
            w.send(event.clone());
        }
        Witness::send(self.relay, event);
    }
}

/// Where a turn announces the run's events: the object's witness, when it has one.
#[derive(Clone)]
struct Announcer(Option<Arc<dyn Witness>>);

impl Witness for Announcer {
    fn listening(&self) -> bool {
        self.0.as_ref().is_some_and(|w| w.listening())
    }

    fn send(&self, event: RunEvent) {
        if let Some(w) = &self.0 {
            w.send(event);
        }
    }
}

impl Driver for TurnDriver<'_, '_> {
    fn agent(&self) -> &Agent {
        &self.agent
    }

    fn session(&self) -> &str {
        &self.session
    }

    fn witness(&self) -> &dyn Witness {
        &self.announce
    }

    fn live(&self) -> &LiveCalls {
        &self.inner.live_calls
    }

    fn defers_results(&self) -> bool {
        // Every result is in a journaled tool step and in the ledger: a replay gets
        // them from the journal, a turn that never comes back settles them from the
        // ledger.
        true
    }

    async fn checkpoint(&mut self) -> bool {
        self.cancelled || self.token.is_cancelled()
    }

    async fn commit(&mut self, checkpoint: Checkpoint) -> reins_agent::Result<()> {
        let Checkpoint { commit, at } = checkpoint;
        let written = match at {
            // The batch's started mark, when there is nothing to store with it.
            CommitAt::Started if commit.is_none() => {
                self.journal("tool-start", OnInterrupt::Finish, || async { Ok(Json(())) })
                    .await
            }
            CommitAt::Pause(_) | CommitAt::End if self.until_pause => {
                // A child session's turn: the parent waits for this pause or end.
                match self.closing().await {
                    Ok(()) => self.write(commit).await,
                    Err(e) => Err(e),
                }
            }
            CommitAt::Pause(ids) => match self.arm(&ids).await {
                Ok(()) => {
                    self.paused_on = ids;
                    self.write(commit).await
                }
                Err(e) => Err(e),
            },
            CommitAt::End => match self.closing().await {
                Ok(()) => self.write(commit).await,
                Err(e) => Err(e),
            },
            CommitAt::Begin => {
                let written = self.write(commit).await;
                if written.is_ok() {
                    // Stored: a caller that checks after this answer sees the input
                    // applied.
                    self.answer(Ok(self.version));
                }
                written
            }
            CommitAt::Step | CommitAt::Started | CommitAt::Acted => self.write(commit).await,
        };
        written.map_err(agent_error)
    }

    async fn confirm(&mut self, _run: &mut Run) -> reins_agent::Result<bool> {
        // The session's object runs one turn at a time, on the session as this turn
        // read it (and wrote it since).
        Ok(false)
    }

    async fn children(&mut self, calls: Vec<ChildCall>) -> reins_agent::Result<Vec<ChildAnswer>> {
        subagent::call_children(self, calls)
            .await
            .map_err(agent_error)
    }

    async fn wait(&mut self, _requirements: &[Requirement]) -> reins_agent::Result<Option<Call>> {
        if self.until_pause {
            return Ok(None);
        }
        self.wake().await.map_err(agent_error)
    }

    async fn refused(&mut self, error: AgentError) -> reins_agent::Result<Option<Call>> {
        if self.reply.is_none() {
            // The input the turn started with: the turn ends with its refusal.
            self.closing().await.map_err(agent_error)?;
            return Err(error);
        }
        // Refused on the run as it is now (settled: audited); the turn waits on.
        tracing::info!(session = %self.session, refused = %error, "an input was refused after it woke the turn");
        self.answer(Err(Refused::of(&self.session, &error)));
        let ids = self.paused_on.clone();
        self.arm(&ids).await.map_err(agent_error)?;
        self.wake().await.map_err(agent_error)
    }
}

/// The child session's side of a sub-agent call: where it is (the journaled step
/// `child-state`), and its turns, each run until it pauses or ends.
#[async_trait]
impl ChildTurns for TurnDriver<'_, '_> {
    async fn state(&mut self) -> reins_agent::Result<ChildState> {
        let (agent, session) = (self.agent.clone(), self.session.clone());
        self.journal("child-state", OnInterrupt::Finish, move || {
            let (agent, session) = (agent.clone(), session.clone());
            async move {
                effects::delegate::child_state(&agent, &session)
                    .await
                    .map(Json)
                    .map_err(retry)
            }
        })
        .await
        .map_err(agent_error)
    }

    async fn turn(&mut self, input: RunInput, _token: ViewToken) -> reins_agent::Result<RunOutput> {
        let input = match input {
            RunInput::Message(message) => TurnInput::Message { message },
            RunInput::Resume => TurnInput::Resume,
            RunInput::Decisions(decisions) => TurnInput::Decisions { decisions },
        };
        self.drive(TurnRequest::new(input))
            .await
            .map_err(agent_error)
    }
}

/// A step's error from an effect: the model's and the store's are retried (with
/// Restate's retry policy); anything else (a hook's error, a summarizer that returned
/// nothing) ends the turn, as it ends the local driver's run.
pub(crate) fn effect_error(e: AgentError) -> HandlerError {
    use reins_agent::AgentError as E;
    match e {
        E::Model(_) | E::Store(_) | E::ToolInFlight { .. } => retry(e),
        e => TerminalError::new_with_code(500, e.to_string()).into(),
    }
}

/// One store commit, and the signed receipts of the decisions it applied (with an
/// evidence signer; [`effects::seal`], as the local driver signs them). When the stored
/// version moved, the commit may be this step's own first attempt (stored, then the
/// process died before the journal had the result): then its version is returned, and
/// its receipts are not signed again (the first attempt signed them, or died before:
/// the chain verifies either way); anything else wrote the session outside this turn.
pub(super) async fn commit_once(
    agent: Agent,
    session: String,
    commit: Commit,
) -> HandlerResult<Json<u64>> {
    let store = agent.store();
    let expected = commit.expected_version;
    let sealed = effects::to_seal(&agent, &commit);
    match store.commit(&session, commit.clone()).await {
        Ok(v) => {
            effects::seal(&agent, &session, &sealed).await;
            Ok(Json(v))
        }
        Err(reins_memory::Error::Conflict { .. }) => {
            let s = store.load_session(&session).await.map_err(retry)?;
            let ours = s.version == expected + 1
                && commit
                    .append
                    .iter()
                    .all(|m| s.messages.iter().any(|x| x.id == m.id))
                && commit
                    .run_state
                    .as_ref()
                    .is_none_or(|rs| *rs == s.run_state.clone().map(RunStateData::from));
            if ours {
                Ok(Json(s.version))
            } else {
                Err(TerminalError::new_with_code(
                    409,
                    format!(
                        "session `{session}` was written outside this Restate turn (version {} instead of {expected}); \
                         a session driven by Restate takes its inputs through Restate",
                        s.version
                    ),
                )
                .into())
            }
        }
        Err(e) => Err(retry(e)),
    }
}
