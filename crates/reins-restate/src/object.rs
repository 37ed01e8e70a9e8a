//! The session object: a Restate virtual object keyed by the session id. Its exclusive
//! `turn` handler drives a [`Run`] (see [`crate::turn`]); its shared handlers take
//! inputs (`submit`), show the session (`view`), interrupt it (`interrupt`) while a
//! turn holds the object, and replay it on a scratch store (`replay`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use reins_agent::effects::{self, Done, LiveCalls, Ports, Takeover, Unheard, Witness, Work};
use reins_agent::interpret::Perform;
use reins_agent::run::{Phase, Run};
use reins_agent::{Agent, AgentError, ReplayReport, RunOutput, SessionBackend, SessionView};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::turn::TurnDriver;
use crate::wire::{Delivery, Interrupted, Refused, Submitted, TurnInput, TurnRequest};

/// The Restate service name of the session object.
pub const SERVICE_NAME: &str = "ReinsSession";

/// Restate state: the invocation id of the turn in progress (set when it starts,
/// cleared when it ends).
pub(crate) const TURN: &str = "turn";
/// Restate state: the awakeables a paused turn waits on ([`Waiting`]), set before the
/// pause is written to the store and cleared when the turn wakes.
pub(crate) const WAITING: &str = "waiting";
/// Restate state: set (`true`) by a turn that will take no more input, before the
/// commit that ends it reaches the store, and cleared when the turn ends. `submit`
/// queues a new turn behind a closing one instead of answering `busy`, so an input
/// sent as soon as the stored session is settled is always taken.
pub(crate) const CLOSING: &str = "closing";

/// What a paused turn waits on: one awakeable per requirement, and one for inputs that
/// name no requirement (resume, a new message).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Waiting {
    /// Resolved by `resume` and by a new message.
    pub(crate) general: String,
    /// Requirement id → the awakeable its decisions resolve.
    pub(crate) by_requirement: BTreeMap<String, String>,
}

/// What a paused turn's awakeable carries: the input, and the awakeable the turn
/// answers on once it has applied the input (stored) or refused it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Wake {
    pub(crate) request: TurnRequest,
    /// Resolved with [`Taken`].
    pub(crate) reply: String,
}

/// What a turn did with an input it woke with: the stored version after applying it,
/// or the refusal (settled: audited, a late decision made `already_decided`).
pub(crate) type Taken = Result<u64, Refused>;

/// `deliver`'s request: hand `request` to the paused turn `turn` through `awakeable`,
/// on behalf of the `submit` invocation `by`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Handoff {
    request: TurnRequest,
    turn: String,
    awakeable: String,
    by: String,
}

/// `deliver`'s answer. An awakeable takes one input: `deliver` is called with the
/// awakeable as its idempotency key, so a second `submit` through the same awakeable
/// gets the first one's answer — `by` names the `submit` whose input went in.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Handed {
    by: String,
    /// `None`: the turn ended without taking the input (an interrupt).
    taken: Option<Taken>,
}

/// How long Restate lets a turn go without progress before it asks it to suspend, and
/// then before it aborts it. A tool call is one journaled step: a step that outlives
/// both is aborted and its attempt retried, which reins answers with `Unknown` for a
/// tool that is not idempotent. Set them above the longest tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Restate's `inactivity_timeout` for the turn handler.
    pub inactivity: Duration,
    /// Restate's `abort_timeout` for the turn handler.
    pub abort: Duration,
}

impl Default for Timeouts {
    /// 10 minutes of inactivity, then 10 more before an abort: tool calls up to 20
    /// minutes run once.
    fn default() -> Self {
        Self {
            inactivity: Duration::from_secs(600),
            abort: Duration::from_secs(600),
        }
    }
}

/// The reins session as a Restate virtual object (service name [`SERVICE_NAME`]).
///
/// Bind it to a Restate endpoint with [`SessionObject::service`]; see the crate docs.
#[derive(Clone)]
pub struct SessionObject {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) agent: Agent,
    /// Turns running in this process, by session: the token stops their model stream
    /// or tool call at once when an interrupt reaches this process.
    running: Mutex<HashMap<String, CancellationToken>>,
    pub(crate) timeouts: Timeouts,
    /// Where live run events go (no targets: nowhere).
    pub(crate) live: crate::live::LiveRelay,
    /// The calls of this process's turns that wait for the answer to a question.
    pub(crate) live_calls: LiveCalls,
    /// Where the turns announce the run's events, besides the relay.
    pub(crate) witness: Option<Arc<dyn Witness>>,
}

impl std::fmt::Debug for SessionObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionObject")
            .field("agent", &self.inner.agent)
            .field("timeouts", &self.inner.timeouts)
            .field("live", &self.inner.live)
            .finish_non_exhaustive()
    }
}

impl SessionObject {
    /// The object for this agent, with the default [`Timeouts`].
    ///
    /// # Errors
    /// [`crate::Error::Unsupported`] for a setting this driver cannot run (none today:
    /// hooks, context compression and every consent rule run as on the local driver;
    /// see docs/restate.md).
    pub fn new(agent: Agent) -> crate::Result<Self> {
        Self::with_timeouts(agent, Timeouts::default())
    }

    /// The object for this agent, with these timeouts for the turn handler.
    ///
    /// The agent's store records notices from now on (its outbox is on, see
    /// `MemoryStore::record_notices`): the object's turns are what commits every run,
    /// and the servers in front of the deployment, in processes of their own, deliver
    /// what they write — a call that waits reaches its approvers by Slack or email, a
    /// webhook or an A2A push notification as on the local driver.
    ///
    /// # Errors
    /// As [`SessionObject::new`].
    pub fn with_timeouts(agent: Agent, timeouts: Timeouts) -> crate::Result<Self> {
        agent.store().record_notices(true);
        Ok(Self {
            inner: Arc::new(Inner {
                agent,
                running: Mutex::new(HashMap::new()),
                timeouts,
                live: crate::live::LiveRelay::new(),
                live_calls: LiveCalls::new(),
                witness: None,
            }),
        })
    }

    /// Sends the run events of the steps this process executes (the model's text
    /// deltas, tool calls starting and finishing) to the reins-servers of `relay`, so
    /// their listeners see a turn as it streams. Best-effort: the journaled steps and
    /// the store stay the record. See [`crate::live`].
    #[must_use]
    pub fn live(self, relay: crate::live::LiveRelay) -> Self {
        Self {
            inner: Arc::new(Inner {
                agent: self.inner.agent.clone(),
                running: Mutex::new(HashMap::new()),
                timeouts: self.inner.timeouts,
                live: relay,
                live_calls: self.inner.live_calls.clone(),
                witness: self.inner.witness.clone(),
            }),
        }
    }

    /// Also hands `witness` every run event the turns this process runs announce:
    /// `RunStarted`, `Resumed`, `Repaired`, `ContextCompressed`, `Paused`, `Completed`,
    /// ... and the live events of their steps — the events a local run's listener
    /// gets. Best-effort, as the relay: a step replayed from the journal announces
    /// nothing again.
    #[must_use]
    pub fn witness(self, witness: Arc<dyn Witness>) -> Self {
        Self {
            inner: Arc::new(Inner {
                agent: self.inner.agent.clone(),
                running: Mutex::new(HashMap::new()),
                timeouts: self.inner.timeouts,
                live: self.inner.live.clone(),
                live_calls: self.inner.live_calls.clone(),
                witness: Some(witness),
            }),
        }
    }

    /// The service definition to bind to a Restate endpoint, with the turn handler's
    /// timeouts set.
    pub fn service(self) -> restate_sdk::service::ServiceDefinition {
        let t = self.inner.timeouts;
        self.into_service_definition().options(
            ServiceOptions::new()
                .handler(
                    "turn",
                    HandlerOptions::new()
                        .inactivity_timeout(t.inactivity)
                        .abort_timeout(t.abort),
                )
                // Called by `submit` only: it validates the input first.
                .handler("deliver", HandlerOptions::new().ingress_private(true))
                // Called by a parent session's turn only (its sub-agent calls).
                .handler(
                    "child",
                    HandlerOptions::new()
                        .ingress_private(true)
                        .inactivity_timeout(t.inactivity)
                        .abort_timeout(t.abort),
                ),
        )
    }
}

impl Inner {
    pub(crate) fn register(&self, session: &str) -> CancellationToken {
        let token = CancellationToken::new();
        let mut map = match self.running.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        map.insert(session.to_owned(), token.clone());
        token
    }

    pub(crate) fn unregister(&self, session: &str) {
        let mut map = match self.running.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        map.remove(session);
    }

    /// Stops the session's turn if it runs in this process, and the turns of its
    /// child sessions (sub-agent calls) that run here.
    fn cancel_local(&self, session: &str) -> bool {
        let map = match self.running.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let children = format!("{session}/");
        for (key, t) in map.iter() {
            if key.starts_with(&children) {
                t.cancel();
            }
        }
        match map.get(session) {
            Some(t) => {
                t.cancel();
                true
            }
            None => false,
        }
    }
}

/// A session as the store holds it, journaled once per turn.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Loaded {
    pub(crate) version: u64,
    pub(crate) messages: Vec<reins_message::Msg>,
    pub(crate) run_state: Option<serde_json::Value>,
    pub(crate) now: chrono::DateTime<Utc>,
}

impl Loaded {
    pub(crate) fn from_state(s: reins_memory::SessionState) -> Self {
        Self {
            version: s.version,
            messages: s.messages,
            run_state: s.run_state,
            now: Utc::now(),
        }
    }

    /// The run over this state.
    pub(crate) fn into_run(self, agent: &Agent, session: &str) -> Result<Run, TerminalError> {
        Run::stored(session, agent.run_config(), self.messages, self.run_state)
            .map_err(|e| refused(session, &e))
    }
}

/// The terminal error that carries a refusal to the caller.
pub(crate) fn refused(session: &str, error: &AgentError) -> TerminalError {
    terminal(&Refused::of(session, error))
}

/// Whether a Restate error is the invocation's cancellation.
pub(crate) fn is_cancel(e: &TerminalError) -> bool {
    e.code() == 409 && e.message() == "cancelled"
}

/// A retryable step error from anything displayable.
pub(crate) fn retry(e: impl std::fmt::Display) -> HandlerError {
    HandlerError::from(std::io::Error::other(e.to_string()))
}

/// Loads a session from the store: `create` opens (creating) it; otherwise a missing
/// session is `None`.
pub(crate) async fn load(
    agent: Agent,
    session: String,
    create: bool,
) -> HandlerResult<Json<Option<Loaded>>> {
    let store = agent.store();
    let state = if create {
        store.open_session(&session).await
    } else {
        store.load_session(&session).await
    };
    match state {
        Ok(s) => Ok(Json(Some(Loaded::from_state(s)))),
        Err(reins_memory::Error::SessionNotFound { .. }) => Ok(Json(None)),
        Err(e) => Err(retry(e)),
    }
}

/// The refusal of an input that found a turn running: [`reins_agent::busy_refusal`],
/// the rule every driver applies (a decision that lost a race to the one the turn
/// applies is `already_decided`, its audit records appended; anything else `busy`).
async fn busy_refusal(
    agent: Agent,
    session: String,
    req: TurnRequest,
) -> HandlerResult<Json<Refused>> {
    let call = req.call(&agent, &session, Utc::now());
    let r = reins_agent::busy_refusal(
        agent.store(),
        &session,
        &call,
        reins_agent::BUSY_DECISION_WAIT,
    )
    .await;
    let refused = Refused::of(&session, &r.error);
    reins_agent::record_refusal(agent.store(), &session, r.audit).await;
    Ok(Json(refused))
}

/// The terminal error that carries a refusal (as JSON) to the caller.
pub(crate) fn terminal(r: &Refused) -> TerminalError {
    let body = serde_json::to_string(r).unwrap_or_else(|_| r.message.clone());
    TerminalError::new_with_code(r.status(), body)
}

/// Validates `req` on the session as stored (read in the journaled step `step`): the
/// run's own `Begin` check, nothing stored; the stored version. A refused input is
/// settled (the run's `Step::Refuse`: a decision someone already took made
/// `already_decided`, the refusal audited) and is the error to answer with. With
/// `closing` (a turn is closing), an input that finds the run still running is `busy`.
async fn validate(
    agent: &Agent,
    live: &LiveCalls,
    ctx: &SharedObjectContext<'_>,
    session: &str,
    req: &TurnRequest,
    closing: bool,
    step: &str,
) -> HandlerResult<u64> {
    let create = matches!(
        req.input,
        TurnInput::Message { .. } | TurnInput::Text { .. }
    );
    let (a, key) = (agent.clone(), session.to_owned());
    let Json(loaded) = ctx.run(move || load(a, key, create)).name(step).await?;
    let Some(loaded) = loaded else {
        return Err(refused(
            session,
            &AgentError::Store(reins_memory::Error::SessionNotFound {
                id: session.to_owned(),
            }),
        )
        .into());
    };
    let (now, version) = (loaded.now, loaded.version);
    let mut run = loaded.into_run(agent, session)?;
    if closing
        && matches!(
            run.phase(),
            Phase::Reasoning | Phase::Acting | Phase::Summarizing
        )
    {
        // The closing turn's last commit is not stored yet.
        return Err(refused(
            session,
            &AgentError::SessionBusy {
                session: session.to_owned(),
            },
        )
        .into());
    }
    // The run's own check, as a call begins (child sessions followed, a refusal
    // settled), each step journaled in this handler; nothing stored.
    let call = req.call(agent, session, now);
    let mut checker = Checker {
        ctx,
        agent: agent.clone(),
        session: session.to_owned(),
        live: live.clone(),
    };
    reins_agent::interpret::check(&mut checker, &mut run, call)
        .await
        .map_err(|e| match e {
            AgentError::Backend(message) => TerminalError::new(message),
            e => refused(session, &e),
        })?;
    Ok(version)
}

/// The steps of an input's check, journaled in `submit`'s shared handler.
struct Checker<'a, 'ctx> {
    ctx: &'a SharedObjectContext<'ctx>,
    agent: Agent,
    session: String,
    live: LiveCalls,
}

impl Perform for Checker<'_, '_> {
    async fn perform(&mut self, work: Work) -> reins_agent::Result<Done> {
        let name = work.name();
        let (agent, session, live) = (self.agent.clone(), self.session.clone(), self.live.clone());
        self.ctx
            .run(move || async move {
                let ports = Ports {
                    agent: &agent,
                    session: &session,
                    cancel: &tokio_util::sync::CancellationToken::new(),
                    witness: &Unheard as &dyn Witness,
                    live: &live,
                    takeover: Takeover::AfterLease,
                };
                effects::perform(&ports, work)
                    .await
                    .map(Json)
                    .map_err(crate::turn::effect_error)
            })
            .name(&name)
            .await
            .map(|Json(done)| done)
            .map_err(|e| AgentError::Backend(e.message().to_owned()))
    }
}

#[restate_sdk::object(name = "ReinsSession")]
impl SessionObject {
    /// Drives one turn of the session's run: from the input to the end of the run,
    /// through every pause (the invocation waits on awakeables while paused).
    #[handler]
    async fn turn(
        &self,
        ctx: ObjectContext<'_>,
        req: Json<TurnRequest>,
    ) -> HandlerResult<Json<RunOutput>> {
        let session = ctx.key().to_owned();
        ctx.set(TURN, ctx.invocation_id().to_owned());
        ctx.clear(CLOSING);
        // A child session (a sub-agent call's) runs with its sub-agent.
        let agent = self.inner.agent.owner_of(&session).await.map_err(retry)?;
        let token = self.inner.register(&session);
        let result = TurnDriver::new(&self.inner, &ctx, session.clone(), token, agent)
            .drive(req.into_inner())
            .await;
        self.inner.unregister(&session);
        // `turn`, `waiting` and `closing` are all the object's state: one entry.
        ctx.clear_all();
        Ok(Json(result?))
    }

    /// Takes an input for the session: validated against the stored session (a refused
    /// input changes nothing and comes back as the local driver's error), then handed
    /// to the paused turn through its awakeable, or to a new turn.
    #[handler]
    async fn submit(
        &self,
        ctx: SharedObjectContext<'_>,
        req: Json<TurnRequest>,
    ) -> HandlerResult<Json<Submitted>> {
        let mut req = req.into_inner();
        req.input = req.input.normalized();
        let session = ctx.key().to_owned();
        let turn: Option<String> = ctx.get(TURN).await?;
        let waiting: Option<Json<Waiting>> = ctx.get(WAITING).await?;
        let closing = ctx
            .get::<Json<bool>>(CLOSING)
            .await?
            .is_some_and(|Json(c)| c);
        let busy = || {
            Err(refused(
                &session,
                &AgentError::SessionBusy {
                    session: session.clone(),
                },
            )
            .into())
        };
        // A turn is running (or consuming another input): the local driver's answer.
        // One that is closing takes no more input: a new turn queues behind it, once
        // its last commit is stored (below).
        let closing = turn.is_some() && waiting.is_none() && closing;
        let agent = &self.inner.agent.owner_of(&session).await.map_err(retry)?;
        if turn.is_some() && waiting.is_none() && !closing {
            // A decision that lost a race to the one this turn applies is refused as
            // `already_decided` and audited, as on the local driver; anything else is
            // `busy`.
            let (a, key, request) = (agent.clone(), session.clone(), req.clone());
            let Json(r) = ctx
                .run(move || busy_refusal(a, key, request))
                .name("busy")
                .await?;
            return Err(terminal(&r).into());
        }
        let live = &self.inner.live_calls;
        let version = validate(agent, live, &ctx, &session, &req, closing, "load").await?;
        let (Some(Json(w)), Some(turn)) = (waiting, turn) else {
            // Restate runs one `turn` per session at a time: behind a closing one,
            // this one waits for it to end.
            ctx.object_client::<SessionObjectClient>(session)
                .turn(Json(req))
                .send();
            return Ok(Json(Submitted {
                delivery: Delivery::Started,
                version,
            }));
        };
        // The paused turn takes the input through an awakeable, and answers once it
        // has applied (stored) or refused it.
        let target = req
            .input
            .first_decided()
            .and_then(|id| w.by_requirement.get(id))
            .unwrap_or(&w.general)
            .clone();
        let me = ctx.invocation_id().to_owned();
        let Json(handed) = ctx
            .object_client::<SessionObjectClient>(session.clone())
            .deliver(Json(Handoff {
                request: req.clone(),
                turn,
                awakeable: target.clone(),
                by: me.clone(),
            }))
            .idempotency_key(format!("deliver {target}"))
            .call()
            .await?;
        if handed.by == me {
            match handed.taken {
                // Stored: the answer names the version the input was validated
                // against (the turn's commit moved past it), as for a new turn, so
                // that waiting for the session to move past it returns even when the
                // turn stays paused (a quorum's first approval).
                Some(Ok(_stored)) => {
                    return Ok(Json(Submitted {
                        delivery: Delivery::Resumed,
                        version,
                    }));
                }
                Some(Err(r)) => return Err(terminal(&r).into()),
                None => {}
            }
        }
        // Another input went in through this awakeable first and is stored now, or the
        // turn ended without taking this one: the input is checked again on the stored
        // session, and refused as the local driver refuses it (a decision someone
        // already took: `already_decided`, audited). If it still fits, a turn holds
        // the session (`busy`), or none does and a new one takes it.
        let version = validate(agent, live, &ctx, &session, &req, false, "reload").await?;
        if handed.by != me || handed.taken.is_some() {
            return busy();
        }
        ctx.object_client::<SessionObjectClient>(session)
            .turn(Json(req))
            .send();
        Ok(Json(Submitted {
            delivery: Delivery::Started,
            version,
        }))
    }

    /// Hands an input `submit` validated to the paused turn through its awakeable,
    /// and waits for the turn's answer (or its end). Called by `submit` only, with the
    /// awakeable as the idempotency key: of two inputs sent through one awakeable, the
    /// first goes in and both callers get its answer (see [`Handed`]).
    #[handler]
    async fn deliver(
        &self,
        ctx: SharedObjectContext<'_>,
        handoff: Json<Handoff>,
    ) -> HandlerResult<Json<Handed>> {
        let Handoff {
            request,
            turn,
            awakeable,
            by,
        } = handoff.into_inner();
        let (reply_id, reply) = ctx.awakeable::<Json<Taken>>();
        ctx.resolve_awakeable(
            &awakeable,
            Json(Wake {
                request,
                reply: reply_id,
            }),
        );
        let ended = ctx
            .invocation_handle(turn)
            .attach::<Json<serde_json::Value>>();
        let taken = restate_sdk::select! {
            taken = reply => Some(taken?.into_inner()),
            _ = ended => None,
        };
        Ok(Json(Handed { by, taken }))
    }

    /// One dispatch of a sub-agent call, on the child session's object: called by the
    /// parent's turn only (see `turn::subagent`); runs the child until it pauses or
    /// ends, and answers where it is.
    #[handler]
    async fn child(
        &self,
        ctx: ObjectContext<'_>,
        call: Json<reins_agent::effects::delegate::ChildCall>,
    ) -> HandlerResult<Json<reins_agent::effects::delegate::ChildAnswer>> {
        crate::turn::subagent::serve(&self.inner, &ctx, call.into_inner())
            .await
            .map(Json)
    }

    /// The session as the store holds it: phase, pending requirements and the view
    /// token to decide on.
    #[handler]
    async fn view(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<SessionView>> {
        let session = ctx.key().to_owned();
        // Read directly, not journaled: nothing follows the read in this handler, so a
        // replay may read again (and the journal does not carry the transcript).
        let store = self.inner.agent.store();
        let state = match store.load_session(&session).await {
            Ok(s) => s,
            Err(e @ reins_memory::Error::SessionNotFound { .. }) => {
                return Err(refused(&session, &AgentError::Store(e)).into());
            }
            Err(e) => return Err(retry(e)),
        };
        // The one computation of a stored session's view, the local driver's and
        // reins-server's: paused sub-agent calls show what their child sessions wait
        // for now.
        reins_agent::stored_view(store, state)
            .await
            .map(Json)
            .map_err(|e| match e {
                e @ AgentError::CorruptRunState { .. } => refused(&session, &e).into(),
                e => retry(e),
            })
    }

    /// Replays the recorded session with this service's agent on a scratch in-memory
    /// store (`reins_agent::replay`): tool calls are served from the recording and
    /// none runs; nothing is written to the session's store or the object's state, so
    /// it runs beside a turn and a retry replays again. An unknown session is refused
    /// (`not_found`).
    #[handler]
    async fn replay(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<ReplayReport>> {
        let session = ctx.key().to_owned();
        SessionBackend::replay(&self.inner.agent, &session, None)
            .await
            .map(Json)
            .map_err(|e| refused(&session, &e).into())
    }

    /// Interrupts the turn in progress: cancels its invocation (Restate stops it
    /// between steps) and, when it runs in this process, stops its model stream or
    /// tool call at once. A paused session stays paused.
    #[handler]
    async fn interrupt(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<Interrupted>> {
        let session = ctx.key().to_owned();
        let turn: Option<String> = ctx.get(TURN).await?;
        let waiting: Option<Json<Waiting>> = ctx.get(WAITING).await?;
        let Some(turn) = turn else {
            return Ok(Json(Interrupted { requested: false }));
        };
        let closing = ctx
            .get::<Json<bool>>(CLOSING)
            .await?
            .is_some_and(|Json(c)| c);
        if waiting.is_some() || closing {
            // Paused: nothing runs, nothing to stop (the local driver's answer too);
            // closing: the run has ended, its last commit is on its way.
            return Ok(Json(Interrupted { requested: false }));
        }
        self.inner.cancel_local(&session);
        ctx.invocation_handle(turn).cancel();
        Ok(Json(Interrupted { requested: true }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The object's turns write the notices (a waiting call's `requirement.waiting`)
    /// that servers in other processes deliver: its store's outbox is on.
    #[test]
    fn the_object_turns_its_stores_outbox_on() {
        let agent = Agent::builder()
            .model(reins_model::ScriptedModel::new(Vec::<
                reins_model::ScriptedResponse,
            >::new()))
            .store(reins_memory::InMemoryStore::new())
            .build()
            .unwrap();
        assert!(!agent.store().records_notices());
        let _object = SessionObject::new(agent.clone()).unwrap();
        assert!(agent.store().records_notices());
    }
}
