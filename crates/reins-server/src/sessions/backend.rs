//! The one door every protocol's input goes through ([`begin`]): the input goes to
//! the [`SessionBackend`] that runs the sessions (the local driver, or a Restate
//! deployment behind [`Server::backend`](crate::Server::backend)), after the same
//! checks whatever the backend, and the run it starts is followed the way the backend
//! says ([`Started`]): a run executing here is registered in the hub, whose pump
//! publishes its typed events and its end ([`Begun::Here`]); a run in the backend's
//! own processes is followed through the store, which stays the record — the request
//! that started it waits until the stored session has moved past the input and no
//! longer runs (paused, finished), then answers with the output read back from the
//! store, or streams the committed steps as they are stored (`?stream=true`).
//!
//! The run events of such a run's steps in progress (text deltas, tool calls starting
//! and finishing) are not in the store: the backend's service processes send them here
//! (`POST /v1/sessions/{id}/live`, [`post_live`]), and they go out on the session's
//! event channel, typed, to the session stream and to the stream of the run that asked
//! for them, as a local run's do.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use reins_agent::{AgentError, RunEvent, RunOutput, Started, Submission};
use reins_memory::SessionState;
use reins_message::{Msg, Role};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use crate::auth::Principal;
use crate::error::{Result, ServerError};
use crate::extract::{Admin, ApiJson, SessionId};
use crate::hub::{HubEvent, LocalRun, Origin, Subscription};
use crate::sse::{CLIENT_BUFFER, respond};
use crate::state::AppState;
use crate::types::{InterruptAnswer, SessionStatus};
use crate::view;

/// How often the store is read while waiting, besides every change notice (a safety
/// net for stores whose change feed is slow or missing).
const REREAD: Duration = Duration::from_millis(250);

/// Where the stored session stood before an input went in: its version and how many
/// messages it held (a new session: none).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Mark {
    pub(crate) version: u64,
    pub(crate) messages: usize,
}

/// The run an input started, as this server follows it.
pub(crate) enum Begun {
    /// It executes here: registered in the hub, which publishes its typed events and
    /// its output or error on the session's channel.
    Here(Arc<LocalRun>),
    /// It executes in the backend's processes: their live events arrive at
    /// [`post_live`], and the store says when it has moved past the [`Mark`] and no
    /// longer runs.
    Relayed(Mark),
}

/// Hands `submission` of `who` for session `id` to the backend that runs the sessions
/// and starts following the run it starts. Subscribe to the session's channel before,
/// to get the run's events from its first one. A refused input is the backend's typed
/// error (the local driver's refusal, whatever the backend); nothing changed then.
/// What depends on the caller's roles is checked here, for every door: an extension
/// of a budget above the agent's default needs the admin role
/// ([`super::budget::check_extension`]).
/// The request's `traceparent` header goes with the input ([`crate::trace_context`]).
pub(crate) async fn begin(
    state: &AppState,
    who: &Principal,
    id: &str,
    mut submission: Submission,
) -> std::result::Result<Begun, AgentError> {
    super::budget::check_extension(state, who, id, &submission).await?;
    // The caller's trace context (its `traceparent` header), unless the door set one.
    if submission.trace_parent.is_none() {
        submission.trace_parent = crate::trace_context::current();
    }
    // A run executing here reports its own end; for one elsewhere, where the store
    // stood before is what tells that it moved.
    let mark = if state.backend.runs_here() {
        Mark::default()
    } else {
        match state.agent.store().load_session(id).await {
            Ok(s) => Mark {
                version: s.version,
                messages: s.messages.len(),
            },
            Err(reins_memory::Error::SessionNotFound { .. }) => Mark::default(),
            Err(e) => return Err(AgentError::Store(e)),
        }
    };
    match state.backend.start(id, submission).await? {
        Started::Here(handle) => Ok(Begun::Here(state.hub.start_run(id, handle))),
        Started::Relayed => {
            state.hub.notify(id);
            Ok(Begun::Relayed(mark))
        }
    }
}

/// The `Idempotency-Key` header, when given: a retried request with the same key gets
/// the first answer from a backend that keeps keys (Restate does).
pub(super) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = v
        .to_str()
        .ok()
        .filter(|k| !k.is_empty() && k.len() <= 256)
        .ok_or_else(|| {
            ServerError::BadRequest(
                "`Idempotency-Key` must be 1 to 256 visible ASCII characters".to_owned(),
            )
        })?;
    Ok(Some(key.to_owned()))
}

/// Hands `submission` to the backend ([`begin`]) and answers the request that sent
/// it: the run's output once it pauses or ends, or (`stream`) the run's SSE stream.
pub(crate) async fn submit(
    state: AppState,
    who: &Principal,
    id: String,
    submission: Submission,
    stream: bool,
) -> Result<Response> {
    // Subscribed before the input goes in: the run's events from its first one.
    let sub = stream.then(|| state.hub.channel(&id).subscribe(None));
    let begun = begin(&state, who, &id, submission).await?;
    match (begun, sub) {
        (Begun::Here(run), Some(sub)) => crate::sse::run_stream(run, sub).await,
        (Begun::Here(run), None) => Ok(Json(&*run.wait().await?).into_response()),
        (Begun::Relayed(mark), Some(sub)) => Ok(stream_until_settled(state, id, mark, sub)),
        (Begun::Relayed(mark), None) => {
            let out = settled(&state, &id, mark.version).await?;
            Ok(Json(out).into_response())
        }
    }
}

/// Interrupts the session's run wherever it executes: at once when it runs here
/// (`delivered: local`); otherwise through the backend, which stores the request for
/// the instance that runs it (the local driver: `stored`) or delivers it itself
/// (`backend`). 202 when a run was in flight, 409 when none was.
pub(crate) async fn interrupt(state: &AppState, id: String) -> Result<Response> {
    let answer = |id: String, delivered: &str| {
        (
            StatusCode::ACCEPTED,
            Json(InterruptAnswer {
                session_id: id,
                delivered: delivered.to_owned(),
            }),
        )
            .into_response()
    };
    if let Some(run) = state.hub.local_run(&id) {
        run.interrupter.interrupt();
        return Ok(answer(id, "local"));
    }
    // 404 for an unknown session.
    let (detail, _) = view::load(&state.agent, &id, false, false).await?;
    if state.backend.interrupt(&id).await? {
        state.hub.notify(&id);
        let delivered = if state.backend.runs_here() {
            "stored"
        } else {
            "backend"
        };
        return Ok(answer(id, delivered));
    }
    Err(ServerError::Busy(
        if detail.status == SessionStatus::Running {
            format!(
                "session `{id}` runs on another instance, and its interrupt could not be delivered"
            )
        } else {
            format!("session `{id}` has no run in flight: nothing to interrupt")
        },
    ))
}

/// The output of the run recorded in `stored`, when the session has moved past version
/// `after` and its run no longer runs (paused or ended).
pub(crate) async fn output_if_settled(
    state: &AppState,
    stored: SessionState,
    after: u64,
) -> Result<Option<RunOutput>> {
    if stored.version <= after {
        return Ok(None);
    }
    let message = stored
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)
        .cloned()
        .unwrap_or_else(|| Msg::new(Role::Assistant, Vec::new()));
    let session_id = stored.id.clone();
    let view = reins_agent::stored_view(state.agent.store(), stored).await?;
    let Some(status) = view.outcome() else {
        return Ok(None);
    };
    let requirements = view.requirements;
    Ok(Some(RunOutput {
        session_id,
        status,
        message,
        requirements,
        // Counted by the driver that ran the steps, not recorded in the store.
        usage: Default::default(),
        repairs: Default::default(),
        iterations: 0,
        structured: None,
        empty_answer: false,
    }))
}

/// Waits until the session has moved past version `after` and its run no longer runs;
/// the request timeout bounds the wait (408).
pub(crate) async fn settled(state: &AppState, id: &str, after: u64) -> Result<RunOutput> {
    let mut notices = state.hub.notices();
    state.hub.ensure_poller(&state.agent);
    loop {
        let stored = state.agent.store().load_session(id).await?;
        if let Some(out) = output_if_settled(state, stored, after).await? {
            return Ok(out);
        }
        wait_for_change(&mut notices, id).await;
    }
}

/// Returns on a change notice for session `id`, or after [`REREAD`].
pub(crate) async fn wait_for_change(
    notices: &mut tokio::sync::broadcast::Receiver<crate::hub::Notice>,
    id: &str,
) {
    let notice = async {
        loop {
            match notices.recv().await {
                Ok(n) if n.session_id == id => return,
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => return,
                Err(RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    };
    tokio::select! {
        () = notice => {}
        () = tokio::time::sleep(REREAD) => {}
    }
}

/// The run's stream over a backend: the live events its service processes send
/// ([`post_live`]: `reasoning_started`, `text_delta`, … as a local run's, with the
/// backend's `run_id` and an `attempt` id), a `message` event per message stored after
/// the first `from` (`{session_id, index, message}`, as the session stream sends them),
/// a `state` event (the session view) whenever the stored session moves, and the final
/// `output` (`{output}`) once it has moved past `after` and no longer runs; or `error`.
/// Live events that arrived before a step's commit go out before what the commit
/// stored.
fn stream_until_settled(state: AppState, id: String, mark: Mark, sub: Subscription) -> Response {
    let Mark {
        version: after,
        messages: from,
    } = mark;
    let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
    let keep_alive = state.limits.keep_alive;
    tokio::spawn(async move {
        let Subscription {
            rx: mut live,
            _channel,
            ..
        } = sub;
        let mut notices = state.hub.notices();
        state.hub.ensure_poller(&state.agent);
        let mut sent = from;
        let mut last_version = None;
        loop {
            let stored = match state.agent.store().load_session(&id).await {
                Ok(s) => s,
                Err(e) => {
                    let e = ServerError::from(e);
                    let ev = Event::default()
                        .event("error")
                        .data(json!({"error": e.body().error}).to_string());
                    let _ = tx.send(ev).await;
                    return;
                }
            };
            // The live events of the steps this read's commits ended reached the hub
            // before those commits did: those not sent yet go first.
            loop {
                use tokio::sync::broadcast::error::TryRecvError;
                let ev = match live.try_recv() {
                    Ok(env) => Event::default().event(env.name()).data(env.native_data()),
                    Err(TryRecvError::Lagged(n)) => Event::default()
                        .event("lagged")
                        .data(json!({"missed": n}).to_string()),
                    Err(TryRecvError::Empty | TryRecvError::Closed) => break,
                };
                if tx.send(ev).await.is_err() {
                    return;
                }
            }
            for (index, m) in stored.messages.iter().enumerate().skip(sent) {
                let data = json!({"session_id": id, "index": index, "message": m});
                let ev = Event::default().event("message").data(data.to_string());
                if tx.send(ev).await.is_err() {
                    return;
                }
            }
            sent = sent.max(stored.messages.len());
            if last_version != Some(stored.version) {
                last_version = Some(stored.version);
                if let Ok((detail, _)) = view::of(&state.agent, stored.clone(), false, false).await
                {
                    let ev = Event::default()
                        .event("state")
                        .data(serde_json::to_string(&detail).unwrap_or_default());
                    if tx.send(ev).await.is_err() {
                        return;
                    }
                }
            }
            match output_if_settled(&state, stored, after).await {
                Ok(Some(out)) => {
                    let ev = Event::default()
                        .event("output")
                        .data(json!({"output": out}).to_string());
                    let _ = tx.send(ev).await;
                    return;
                }
                Ok(None) => {}
                Err(e) => {
                    let ev = Event::default()
                        .event("error")
                        .data(json!({"error": e.body().error}).to_string());
                    let _ = tx.send(ev).await;
                    return;
                }
            }
            // Live events as they come (first: they precede the commit that ends
            // their step), until the store may have moved.
            loop {
                tokio::select! {
                    biased;
                    () = tx.closed() => return,
                    r = live.recv() => match r {
                        Ok(env) => {
                            let ev = Event::default().event(env.name()).data(env.native_data());
                            if tx.send(ev).await.is_err() {
                                return;
                            }
                        }
                        Err(RecvError::Lagged(n)) => {
                            let ev = Event::default().event("lagged").data(json!({"missed": n}).to_string());
                            if tx.send(ev).await.is_err() {
                                return;
                            }
                        }
                        // Not while `_channel` (which holds the sender) lives.
                        Err(RecvError::Closed) => break,
                    },
                    () = wait_for_change(&mut notices, &id) => break,
                }
            }
        }
    });
    respond(rx, keep_alive)
}

/// `POST /v1/sessions/{id}/live`: what a backend's service process sends while it runs
/// a step.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LiveEvents {
    /// Run events, as reins-agent's `RunEvent` JSON (the `event` tag names them), with
    /// the backend's `run_id` and `attempt` beside.
    events: Vec<Value>,
}

/// The run events a backend may relay: those of a step in progress, never one that
/// says what the store holds (the store says that).
fn is_live(event: &RunEvent) -> bool {
    matches!(
        event,
        RunEvent::ReasoningStarted { .. }
            | RunEvent::TextDelta { .. }
            | RunEvent::OutputDelta { .. }
            | RunEvent::ThinkingDelta { .. }
            | RunEvent::ToolCallStarted { .. }
            | RunEvent::ToolCallReady { .. }
            | RunEvent::ToolExecutionStarted { .. }
            | RunEvent::ToolExecutionChunk { .. }
            | RunEvent::ToolExecutionFinished { .. }
    )
}

/// Publishes a backend's live run events on the session's event channel: the session
/// stream (`GET /v1/sessions/{id}/events`) and the streams of runs started here relay
/// them, in the order they were sent. Only with a backend, for a principal with the
/// admin role (a service process of the backend). Nothing is stored. Every event is
/// checked before any is published: a batch with one that is not a live run event
/// (`text_delta`, `reasoning_started`, …) is refused whole (422).
pub(crate) async fn post_live(
    State(state): State<AppState>,
    _admin: Admin,
    SessionId(id): SessionId,
    ApiJson(body): ApiJson<LiveEvents>,
) -> Result<Response> {
    let mut checked = Vec::with_capacity(body.events.len());
    for (i, data) in body.events.into_iter().enumerate() {
        let invalid = |message: String| ServerError::Invalid {
            code: "invalid_input",
            message,
        };
        let field = |name: &str| data.get(name).and_then(Value::as_str).map(str::to_owned);
        let (run_id, attempt) = (field("run_id"), field("attempt"));
        let event: RunEvent = serde_json::from_value(data)
            .map_err(|e| invalid(format!("event {i} is not a run event: {e}")))?;
        if !is_live(&event) {
            return Err(invalid(format!(
                "event {i} (`{}`) is not a live event: the store says what was committed",
                event.name()
            )));
        }
        checked.push((event, run_id, attempt));
    }
    let published = checked.len();
    let chan = state.hub.channel(&id);
    for (event, run_id, attempt) in checked {
        let origin = Origin {
            run_id: run_id.as_deref(),
            attempt: attempt.as_deref(),
            terminal: false,
        };
        chan.publish(&state.hub.instance, HubEvent::Run(event), origin);
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"session_id": id, "published": published})),
    )
        .into_response())
}
