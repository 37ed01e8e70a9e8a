//! The Restate driver of a [`Run`]: the same steps as the local driver, each one a
//! journaled step, so that a turn that Restate retries or resumes elsewhere replays
//! what happened instead of doing it again.
//!
//! | step | journal entries |
//! |---|---|
//! | start | `load` (the stored session, once per turn), `clock` before each input; `settle` (calls a crash cut short, settled from the ledger and reconciled: `effects::settle_from_ledger`) when the input closes them; `follow` (a paused parent's children, as stored) and `close-children` (after a new message) when the run has paused sub-agent calls; `hook pre-call` after the input is stored |
//! | `Consult` | `consult` (what the approval policy and the standing grants decided, through `reins_agent::effects::consult`) |
//! | `Compress` | `commit` (when something is recorded), `compress` (the summary, through `effects::summarize`: the summarizer and its hooks) |
//! | `Reason` | `commit` (when something is recorded), `model` (through `effects::reason`: the `PreReasoning` hooks, the stream turned into the final message, the `PostReasoning` hooks, with their verdict; a crash mid-call makes the call again, a finished call never) |
//! | `Execute` | per call `hook pre-acting <id>` (the call the hooks leave, or their rejection); `commit` (the model's calls stored), which is also the batch's started marker (`tool-start` when there is nothing to store); per call `tool <id>` (the result and the time, through the tool-call ledger: `effects::claim`, the tool — its partial output to the `ActingChunk` hooks —, `effects::finish`; a call an earlier attempt may have started is reconciled), or for a parallel batch one `tools <id>,..` (all results); then per call `hook post-acting <id>`; then `commit`, except that a batch whose every result is the ledger's record (no sub-agent, no rejected call, no `PostActing` hook, no stop) rides with the next commit (the one that stores the next model answer) — the next `Reason` step stores nothing first, and stores it before returning a failed model call's error |
//! | `Execute`: a sub-agent call | `commit`, then per call `subagent <id>` (the parent's ledger), every child object's `child` handler called at once (their answers journaled as they come), then per call `subagent-routed <id>` (the parent's audit of routed answers), `subagent-finish <id>` (see [`subagent`]) |
//! | `Execute`: a new message closed calls waiting on a question | `close-asking <id>,..` (their results in the ledger; the live calls stopped, see [`ask`]) |
//! | a failed turn | `hook error` (the `Error` hooks; a refused input tells them in its `refusal` step) |
//! | `Execute`: a question answered | `tool-answer <id>` (the answer handed to the live call, its result; see [`ask`]) |
//! | `Replayed` | `commit`, `hook replayed <id>,..` (the `ToolReplayed` hooks) |
//! | `Pause` | awakeables per requirement (+ one for resume / a new message), state `waiting`, `waiting` (a round trip), `commit`, `hook post-call` |
//! | `Finish` | `closing`, `commit`, `hook post-call` |
//!
//! A `hook ..` entry is journaled only when one of the agent's hooks listens for its
//! event.

use reins_memory::RunStateData;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use reins_agent::effects::{self, ModelCall, Reasoning};
use reins_agent::run::{AfterReasoning, Consulted, Event, Flush, Reason, Run, RunInput, Step};
use reins_agent::telemetry;
use reins_agent::{Agent, RunOutput, RunStatus};
use reins_memory::Commit;
use reins_message::{Msg, Role, ToolResult};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::object::{
    CLOSING, Inner, Loaded, Taken, WAITING, Waiting, Wake, is_cancel, load, refused, retry,
    settle_refusal,
};
use crate::wire::{Refused, TurnInput, TurnRequest};

mod ask;
mod compress;
mod hooks;
pub(crate) mod subagent;
mod tools;

/// What the model step journals: what the model call came to (through
/// `reins_agent::effects::reason`: the hooks' edits and verdict included), and when.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ModelStep {
    reasoning: Reasoning,
    now: DateTime<Utc>,
}

/// What a tool step journals.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[allow(
    clippy::large_enum_variant,
    reason = "one value per tool step, moved once: boxing would only add an allocation"
)]
enum ToolStep {
    Done(ToolResult),
    Suspended {
        reason: String,
    },
    /// The call asked a question (see [`ask`]): it waits, in this process, for the
    /// answer to this user-input requirement.
    Asked {
        requirement: reins_agent::Requirement,
    },
}

/// What a journaled step does when the invocation is cancelled while it waits for it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnCancel {
    /// Run it again (a store write, a read, a tool call through the ledger, which
    /// returns the result it recorded).
    Retry,
    /// Give up (the model call: the interrupt drops its message).
    Fail,
}

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
    /// The run's iteration at its last step (for the `Error` hooks).
    iteration: u32,
    /// The object's state `waiting` is set (the turn is paused on its awakeables).
    waiting: bool,
    /// A tool batch's results wait for the next commit (see [`TurnDriver::act`]): the
    /// model step after it does not store them first.
    carried: bool,
}

/// How [`TurnDriver::steps`] ended.
enum Ended {
    /// The run paused on these requirements (not committed yet).
    Paused(Vec<reins_agent::Requirement>),
    /// The run ended (committed).
    Status(RunStatus),
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
            iteration: 0,
            waiting: false,
            carried: false,
        }
    }

    fn agent(&self) -> &Agent {
        &self.agent
    }

    /// Where this turn's steps send their live events.
    fn live(&self) -> Live {
        Live {
            relay: self.inner.live.clone(),
            session: self.session.clone(),
            run_id: self.ctx.invocation_id().to_owned(),
        }
    }

    fn interrupted(&self) -> bool {
        self.cancelled || self.token.is_cancelled()
    }

    /// A journaled step: `make` builds the step's future (again, when a cancellation
    /// interrupted the wait for it and `on_cancel` says retry).
    async fn journal<T, F, Fut>(
        &mut self,
        name: &str,
        on_cancel: OnCancel,
        make: F,
    ) -> Result<T, TerminalError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = HandlerResult<Json<T>>> + Send + 'ctx,
        T: Serialize + for<'de> Deserialize<'de> + 'static,
    {
        loop {
            let fut = make();
            match self.ctx.run(move || fut).name(name).await {
                Ok(Json(v)) => return Ok(v),
                // A cancellation may come more than once (a child session's turn hears
                // its parent's, passed on by Restate, and its own).
                Err(e) if is_cancel(&e) => {
                    self.cancelled = true;
                    self.token.cancel();
                    if on_cancel == OnCancel::Fail {
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
        self.journal("closing", OnCancel::Retry, || async { Ok(Json(())) })
            .await
    }

    /// The time, journaled.
    async fn clock(&mut self) -> Result<DateTime<Utc>, TerminalError> {
        self.journal("clock", OnCancel::Retry, || async { Ok(Json(Utc::now())) })
            .await
    }

    /// Drives the turn from its first input to the end of the run. A turn that fails
    /// (not a refused input, which is settled where it is refused, nor an interrupt)
    /// tells the agent's `Error` hooks, as the local driver's run does (the journaled
    /// step `hook error`), then ends with its error.
    pub(crate) async fn drive(&mut self, req: TurnRequest) -> Result<RunOutput, TerminalError> {
        let out = self.drive_turn(req).await;
        if let Err(e) = &out
            && !is_cancel(e)
            && serde_json::from_str::<Refused>(e.message()).is_err()
        {
            let event = reins_hook::HookEvent::Error {
                message: e.message().to_owned(),
            };
            self.notify("hook error", self.iteration, event).await?;
            let (agent, session, error) = (
                self.agent().clone(),
                self.session.clone(),
                e.message().to_owned(),
            );
            self.journal("notice failed", OnCancel::Retry, move || {
                let (agent, session, error) = (agent.clone(), session.clone(), error.clone());
                async move {
                    reins_agent::effects::run_failed(agent.store().as_ref(), &session, &error)
                        .await;
                    Ok(Json(()))
                }
            })
            .await?;
        }
        out
    }

    async fn drive_turn(&mut self, req: TurnRequest) -> Result<RunOutput, TerminalError> {
        self.client_tools = req.client_tools.clone();
        let (agent, session) = (self.agent().clone(), self.session.clone());
        let loaded: Option<Loaded> = self
            .journal("load", OnCancel::Retry, move || {
                load(agent.clone(), session.clone(), true)
            })
            .await?;
        let loaded = loaded.ok_or_else(|| TerminalError::new("the session vanished"))?;
        self.version = loaded.version;
        let mut now = loaded.now;
        let mut run = loaded.into_run(self.agent(), &self.session)?;
        let mut wakes: Vec<Awaited> = Vec::new();
        let mut futures = DurableFuturesUnordered::new();
        let mut input = req;
        if let TurnInput::Text { text } = &input.input {
            // A fresh message id and time, the same on every replay.
            let text = text.clone();
            input.input = self
                .journal("input", OnCancel::Retry, move || {
                    let input = TurnInput::Text { text: text.clone() }.normalized();
                    async move { Ok(Json(input)) }
                })
                .await?;
        }
        let mut woken = false;
        // Where to answer the input that woke the turn (its `submit` waits for it).
        let mut reply: Option<String> = None;
        // What the run waits for (from its last `Step::Pause`).
        let mut requirements: Vec<reins_agent::Requirement> = Vec::new();
        loop {
            let pre_call = self.pre_call_input(&input);
            // The call that went in ran to a pause (a refused one left the pause as it
            // was).
            let mut paused_now = false;
            // Each call — to its pause or its end — is a turn in its `invoke_agent`
            // span, opened as the local driver opens it (see `telemetry::turn`).
            let resumed = !matches!(
                input.input.clone().into_run_input(),
                RunInput::Message(m) if m.role != Role::Tool
            );
            let span = telemetry::turn(
                self.agent(),
                &self.session,
                resumed,
                input.trace_parent.as_deref(),
                run.state().traceparent(),
            );
            match self
                .begin(&mut run, input, now)
                .instrument(span.clone())
                .await
                .inspect_err(|e| turn_failed(&span, e))?
            {
                Ok(()) => {
                    // Stored: a caller that checks after this answer sees the input
                    // applied.
                    self.answer(reply.take(), Ok(self.version));
                    let ended = async {
                        self.pre_call(&run, pre_call).await?;
                        self.steps(&mut run).await
                    }
                    .instrument(span.clone())
                    .await
                    .inspect_err(|e| turn_failed(&span, e))?;
                    match ended {
                        Ended::Paused(_) if self.until_pause => {
                            // A child session's turn: the parent waits for this pause.
                            run.keep_traceparent(telemetry::traceparent_of(&span));
                            telemetry::run_ended(&span, Ok(RunStatus::Paused));
                            drop(span);
                            self.closing().await?;
                            self.commit(&mut run, Flush::All).await?;
                            let out = run
                                .output(RunStatus::Paused)
                                .map_err(|e| refused(&self.session, &e))?;
                            self.post_call(&run, Some(out.message.clone())).await?;
                            return Ok(out);
                        }
                        Ended::Paused(reqs) => {
                            // The turn that resumes this one links to it.
                            run.keep_traceparent(telemetry::traceparent_of(&span));
                            telemetry::run_ended(&span, Ok(RunStatus::Paused));
                            requirements = reqs;
                            paused_now = true;
                        }
                        Ended::Status(status) => {
                            telemetry::run_ended(&span, Ok(status));
                            drop(span);
                            let out = run.output(status).map_err(|e| refused(&self.session, &e))?;
                            self.post_call(&run, Some(out.message.clone())).await?;
                            return Ok(out);
                        }
                    }
                }
                Err(r) if woken => {
                    // Refused on the run as it is now (settled: audited); the turn
                    // waits on.
                    telemetry::run_ended(&span, Err("refused"));
                    tracing::info!(session = %self.session, refused = %r.message, "an input was refused after it woke the turn");
                    self.answer(reply.take(), Err(r));
                }
                Err(r) => {
                    telemetry::run_ended(&span, Err("refused"));
                    drop(span);
                    self.closing().await?;
                    let body = serde_json::to_string(&r).unwrap_or_else(|_| r.message.clone());
                    return Err(TerminalError::new_with_code(r.status(), body));
                }
            }
            // The turn ends at its pause: the wait is not part of it.
            drop(span);
            // Paused: wait for an input on the awakeables.
            for req in &requirements {
                if !wakes
                    .iter()
                    .any(|w| w.requirement.as_deref() == Some(&req.id))
                {
                    let (id, fut) = self.ctx.awakeable::<Json<Wake>>();
                    let index = futures.push(fut);
                    wakes.push(Awaited {
                        requirement: Some(req.id.clone()),
                        awakeable: id,
                        index,
                    });
                }
            }
            if !wakes.iter().any(|w| w.requirement.is_none()) {
                let (id, fut) = self.ctx.awakeable::<Json<Wake>>();
                let index = futures.push(fut);
                wakes.push(Awaited {
                    requirement: None,
                    awakeable: id,
                    index,
                });
            }
            let waiting = Waiting {
                general: wakes
                    .iter()
                    .find(|w| w.requirement.is_none())
                    .map(|w| w.awakeable.clone())
                    .unwrap_or_default(),
                by_requirement: wakes
                    .iter()
                    .filter_map(|w| {
                        let r = w.requirement.as_ref()?;
                        requirements
                            .iter()
                            .any(|q| &q.id == r)
                            .then(|| (r.clone(), w.awakeable.clone()))
                    })
                    .collect(),
            };
            self.ctx.set(WAITING, Json(waiting));
            self.waiting = true;
            // A round trip: the state is visible to `submit` before the pause is.
            self.journal("waiting", OnCancel::Retry, || async { Ok(Json(())) })
                .await?;
            self.commit(&mut run, Flush::All).await?;
            if paused_now {
                let out = run.output(RunStatus::Paused).ok().map(|o| o.message);
                self.post_call(&run, out).await?;
            }
            if self.cancelled {
                self.closing().await?;
                return run
                    .output(RunStatus::Paused)
                    .map_err(|e| refused(&self.session, &e));
            }
            let next = loop {
                match futures.next().await {
                    Err(e) if is_cancel(&e) => break None,
                    Err(e) => return Err(e),
                    Ok(None) => break None,
                    Ok(Some((index, got))) => {
                        wakes.retain(|w| w.index != index);
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
                // Interrupted while paused: the session stays paused; a later input
                // starts a new turn.
                return run
                    .output(RunStatus::Paused)
                    .map_err(|e| refused(&self.session, &e));
            };
            input = next.request;
            reply = Some(next.reply);
            woken = true;
            now = self.clock().await?;
        }
    }

    /// Tells the `submit` waiting at `reply` (when one is) what became of its input.
    fn answer(&self, reply: Option<String>, taken: Taken) {
        if let Some(id) = reply {
            self.ctx.resolve_awakeable(&id, Json(taken));
        }
    }

    /// The message a call brings, for the `PreCall` hooks (when one listens).
    fn pre_call_input(&self, req: &TurnRequest) -> Option<Msg> {
        if !self.wants(reins_hook::HookEventKind::PreCall) {
            return None;
        }
        match req.input.clone().into_run_input() {
            RunInput::Message(m) if m.role != Role::Tool => Some(m),
            _ => None,
        }
    }

    /// Begins a call with `req`: settles calls a crash cut short (from the ledger),
    /// applies the input and stores it. A refused input changes nothing (its audit
    /// records are kept).
    async fn begin(
        &mut self,
        run: &mut Run,
        req: TurnRequest,
        now: DateTime<Utc>,
    ) -> Result<Result<(), Refused>, TerminalError> {
        // An input that wakes a paused turn keeps the tools the turn started with.
        let call = req
            .call(self.agent(), &self.session, now)
            .with_client_tools(self.client_tools.clone());
        // A paused sub-agent call is decided against what its child session waits for
        // in the store (someone may have answered the child directly).
        self.follow_children(run).await?;
        let settle = run.state().settle_before(call.input());
        if !settle.is_empty() {
            let iteration = run.state().iteration();
            let (agent, session, token, live) = (
                self.agent().clone(),
                self.session.clone(),
                self.token.clone(),
                self.live(),
            );
            let results: Vec<ToolResult> = self
                .journal("settle", OnCancel::Retry, move || {
                    let (agent, session, token, live, calls) = (
                        agent.clone(),
                        session.clone(),
                        token.clone(),
                        live.clone(),
                        settle.clone(),
                    );
                    async move {
                        let sender = live.relay.open(&live.session, &live.run_id);
                        let out = effects::settle_from_ledger(
                            &agent, &session, iteration, calls, &token, &sender,
                        )
                        .await;
                        sender.close().await;
                        out.map(Json).map_err(effect_error)
                    }
                })
                .await?;
            if !results.is_empty() {
                let _ = run.apply(Event::Settled { results, now });
            }
        }
        // Paused sub-agent calls a new user message closes.
        let closed = reins_agent::nested::closed_by(run, call.input());
        // Calls in flight on a question, which a new message closes.
        let asking = run.state().asking();
        if let Err(refusal) = run.apply(Event::Begin(call.clone())) {
            let (agent, session) = (self.agent().clone(), self.session.clone());
            let first = Refused::of(&self.session, &refusal.error);
            let audit = refusal.audit;
            let iteration = run.state().iteration();
            let refused = self
                .journal("refusal", OnCancel::Retry, move || {
                    settle_refusal(
                        agent.clone(),
                        session.clone(),
                        first.clone(),
                        audit.clone(),
                        call.clone(),
                        iteration,
                    )
                })
                .await?;
            return Ok(Err(refused));
        }
        self.commit(run, Flush::All).await?;
        self.close_children(closed, call).await?;
        self.close_asking(run, asking).await?;
        Ok(Ok(()))
    }

    /// Performs the run's steps until it pauses or ends.
    async fn steps(&mut self, run: &mut Run) -> Result<Ended, TerminalError> {
        loop {
            if self.interrupted() {
                return self.interrupt(run).await.map(Ended::Status);
            }
            self.iteration = run.state().iteration();
            let step = run.next();
            if !matches!(step, Step::Reason(_)) {
                // Every other step stores (or is followed by a step that stores) what
                // is recorded: nothing rides past it.
                self.carried = false;
            }
            match step {
                Step::Consult(step) => {
                    // The approval policy and the standing grants, as the local driver
                    // asks them (the same function), journaled with what they decided.
                    let (agent, session) = (self.agent().clone(), self.session.clone());
                    let consulted: Consulted = self
                        .journal("consult", OnCancel::Retry, move || {
                            let (agent, session, step) =
                                (agent.clone(), session.clone(), step.clone());
                            async move { Ok(Json(effects::consult(&agent, &session, &step).await)) }
                        })
                        .await?;
                    run.apply(consulted.into())
                        .map_err(|r| refused(&self.session, &r.error))?;
                }
                Step::Compress(step) => {
                    self.commit(run, Flush::Recorded).await?;
                    if let Some(status) = self.compress(run, step).await? {
                        return Ok(Ended::Status(status));
                    }
                }
                Step::Reason(step) => {
                    // A batch whose results the tool steps journaled rides with the
                    // next commit; a failed model call stores them before its error.
                    let carried = std::mem::take(&mut self.carried);
                    if !carried {
                        self.commit(run, Flush::Recorded).await?;
                    }
                    match self.reason(run, step).await {
                        Ok(Some(status)) => return Ok(Ended::Status(status)),
                        Ok(None) => {}
                        Err(e) => {
                            if carried && !is_cancel(&e) {
                                self.commit(run, Flush::All).await?;
                            }
                            return Err(e);
                        }
                    }
                }
                // The model's calls are stored with the batch's started marker.
                Step::Execute(batch) => self.act(run, batch).await?,
                // A fork's calls served from its record: nothing runs. They are stored,
                // then announced.
                Step::Replayed(results) => {
                    self.commit(run, Flush::Recorded).await?;
                    self.replayed(run, results).await?;
                }
                // Committed once the awakeables are in the object's state.
                Step::Pause(requirements) => return Ok(Ended::Paused(requirements)),
                Step::Finish(status) => {
                    self.closing().await?;
                    self.commit(run, Flush::All).await?;
                    return Ok(Ended::Status(status));
                }
            }
        }
    }

    async fn interrupt(&mut self, run: &mut Run) -> Result<RunStatus, TerminalError> {
        let _ = run.apply(Event::Interrupted(Vec::new()));
        self.closing().await?;
        self.commit(run, Flush::All).await?;
        Ok(RunStatus::Cancelled)
    }

    /// Writes the run's changes as one store commit (a journaled step; a retried
    /// commit that finds its own first attempt stored takes that version).
    async fn commit(&mut self, run: &mut Run, flush: Flush) -> Result<(), TerminalError> {
        let Some(mut commit) = run.take_commit(flush) else {
            return Ok(());
        };
        commit.expected_version = self.version;
        let (agent, session) = (self.agent().clone(), self.session.clone());
        self.version = self
            .journal("commit", OnCancel::Retry, move || {
                commit_once(agent.clone(), session.clone(), commit.clone())
            })
            .await?;
        Ok(())
    }

    // ----- reasoning -------------------------------------------------------------

    async fn reason(
        &mut self,
        run: &mut Run,
        step: Reason,
    ) -> Result<Option<RunStatus>, TerminalError> {
        let agent = self.agent().clone();
        let live = self.live();
        // The request as the run finished it; the call through the local driver's
        // function (hooks, stream, message, gates).
        let call = ModelCall::from(step);
        let (token, session) = (self.token.clone(), self.session.clone());
        let out = self
            .journal("model", OnCancel::Fail, move || {
                call_model(
                    agent.clone(),
                    session.clone(),
                    call.clone(),
                    token.clone(),
                    live.clone(),
                )
            })
            .await;
        let (out, now) = match out {
            Ok(out) => (out.reasoning, out.now),
            Err(e) if is_cancel(&e) => (Reasoning::Interrupted, Utc::now()),
            Err(e) => return Err(e),
        };
        let Reasoning::Reasoned {
            message,
            usage,
            verdict,
            gates,
        } = out
        else {
            return self.interrupt(run).await.map(Some);
        };
        let _ = run.apply(Event::Reasoned {
            message,
            gates,
            after: AfterReasoning {
                stop: verdict.stop,
                goto: verdict.goto,
            },
            usage,
            now,
        });
        Ok(None)
    }
}

/// Where a model step sends its live events (see [`crate::live`]).
#[derive(Clone)]
struct Live {
    relay: crate::live::LiveRelay,
    session: String,
    run_id: String,
}

/// The model call (`reins_agent::effects::reason`: hooks, the stream turned into one
/// message); an interrupt drops the partial message. While it streams, its events go
/// to the live relay (this execution of the step under a fresh attempt id); they are
/// delivered before the step returns.
async fn call_model(
    agent: Agent,
    session: String,
    call: ModelCall,
    token: CancellationToken,
    live: Live,
) -> HandlerResult<Json<ModelStep>> {
    if token.is_cancelled() {
        return Ok(Json(ModelStep {
            reasoning: Reasoning::Interrupted,
            now: Utc::now(),
        }));
    }
    let sender = live.relay.open(&live.session, &live.run_id);
    let out = effects::reason(&agent, &session, call, &token, &sender).await;
    sender.close().await;
    let reasoning = out.map_err(effect_error)?;
    Ok(Json(ModelStep {
        reasoning,
        now: Utc::now(),
    }))
}

/// A step's error from an effect: the model's and the store's are retried (with
/// Restate's retry policy); anything else (a hook's error, a summarizer that returned
/// nothing) ends the turn, as it ends the local driver's run.
pub(crate) fn effect_error(e: reins_agent::AgentError) -> HandlerError {
    use reins_agent::AgentError as E;
    match e {
        E::Model(_) | E::Store(_) | E::ToolInFlight { .. } => retry(e),
        e => TerminalError::new_with_code(500, e.to_string()).into(),
    }
}

/// One store commit. When the stored version moved, the commit may be this step's own
/// first attempt (stored, then the process died before the journal had the result):
/// then its version is returned; anything else wrote the session outside this turn.
pub(super) async fn commit_once(
    agent: Agent,
    session: String,
    commit: Commit,
) -> HandlerResult<Json<u64>> {
    let store = agent.store();
    let expected = commit.expected_version;
    match store.commit(&session, commit.clone()).await {
        Ok(v) => Ok(Json(v)),
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

/// Records a turn that ended with an error on its span: an interrupted invocation
/// (`cancelled`) or a failure.
fn turn_failed(span: &tracing::Span, e: &TerminalError) {
    telemetry::run_ended(span, Err(if is_cancel(e) { "cancelled" } else { "_OTHER" }));
}
