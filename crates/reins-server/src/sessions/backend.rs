//! The one door every protocol's input goes through ([`begin`], and [`decide`] for
//! decisions): the input goes to the session port ([`Sessions`]), whichever driver
//! runs the sessions — the local driver, or a Restate deployment behind
//! [`reins_agent::Relayed`] — and the run it starts is registered in the hub, whose
//! pump publishes its typed events and its end on the session's channel. A run in the
//! driver's own processes is followed by the port (its live events, then its output
//! read back from the store); the server handles both the same way.
//!
//! The live events of such a run's steps in progress (text deltas, tool calls starting
//! and finishing) are not in the store: the driver's service processes send them here
//! (`POST /v1/sessions/{id}/live`, [`post_live`]), to the port, which passes them to
//! the runs it follows; the session stream of a run followed elsewhere gets them from
//! the session's channel.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use reins_agent::port::{Decide, Interrupted, LiveEvent};
use reins_agent::{AgentError, RunEvent, Submission};
use serde_json::{Value, json};

use crate::error::{Result, ServerError};
use crate::extract::{Admin, ApiJson, SessionId};
use crate::hub::{HubEvent, LocalRun, Origin};
use crate::state::AppState;
use crate::types::InterruptAnswer;

/// Hands `submission` for session `id` to the session port and starts following the
/// run it starts. Subscribe to the session's channel before, to get the run's events
/// from its first one. A refused input is the port's typed error (the local driver's
/// refusal, whatever the driver); nothing changed then. The request's `traceparent`
/// header goes with the input ([`crate::trace_context`]).
pub(crate) async fn begin(
    state: &AppState,
    id: &str,
    mut submission: Submission,
) -> std::result::Result<Arc<LocalRun>, AgentError> {
    // The caller's trace context (its `traceparent` header), unless the door set one.
    if submission.trace_parent.is_none() {
        submission.trace_parent = crate::trace_context::current();
    }
    // The live events of a run the driver's processes execute, from its first one.
    let live = state.sessions.live(id);
    let handle = state.sessions.start(id, submission).await?;
    Ok(state.hub.start_run(id, handle, live))
}

/// Decisions through the one decision path ([`Sessions::decide`](reins_agent::port::Sessions::decide)):
/// the run checks them as it begins, on every driver; the run they continue is
/// followed here as [`begin`]'s is.
pub(crate) async fn decide(
    state: &AppState,
    id: &str,
    mut decide: Decide,
) -> std::result::Result<Arc<LocalRun>, AgentError> {
    if decide.trace_parent.is_none() {
        decide.trace_parent = crate::trace_context::current();
    }
    let live = state.sessions.live(id);
    let handle = state.sessions.decide(id, decide).await?;
    Ok(state.hub.start_run(id, handle, live))
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

/// Answers the request that started `run`: the run's output once it pauses or ends,
/// or (`stream`, with the subscription taken before it started) the run's SSE stream.
pub(crate) async fn answer(
    run: Arc<LocalRun>,
    sub: Option<crate::hub::Subscription>,
) -> Result<Response> {
    match sub {
        Some(sub) => crate::sse::run_stream(run, sub).await,
        None => Ok(Json(&*run.wait().await?).into_response()),
    }
}

/// Hands `submission` to the port ([`begin`]) and answers the request that sent it
/// ([`answer`]).
pub(crate) async fn submit(
    state: AppState,
    id: String,
    submission: Submission,
    stream: bool,
) -> Result<Response> {
    // Subscribed before the input goes in: the run's events from its first one.
    let sub = stream.then(|| state.hub.channel(&id).subscribe(None));
    let run = begin(&state, &id, submission).await?;
    answer(run, sub).await
}

/// Interrupts the session's run wherever it executes: at once when a run followed here
/// is in flight (`delivered: local`); otherwise through the port, which stores the
/// request for the worker that runs it (the local driver: `stored`) or has the driver
/// deliver it (`backend`). 202 when a run was in flight, 409 when none was.
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
    // A run executing in this process stops at once; one followed here but executing
    // in the driver's processes is stopped by the driver (its end reaches the run's
    // listeners as any end does).
    if let Some(run) = state
        .hub
        .local_run(&id)
        .filter(|_| state.sessions.runs_here())
    {
        run.interrupter.interrupt();
        return Ok(answer(id, "local"));
    }
    let delivered = match state.sessions.interrupt(&id).await? {
        Interrupted::Here => "local",
        Interrupted::Stored => "stored",
        Interrupted::Delivered => "backend",
        Interrupted::Idle => {
            return Err(ServerError::Busy(format!(
                "session `{id}` has no run in flight: nothing to interrupt"
            )));
        }
    };
    state.hub.notify(&id);
    Ok(answer(id, delivered))
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
        if !LiveEvent::is_live(&event) {
            return Err(invalid(format!(
                "event {i} (`{}`) is not a live event: the store says what was committed",
                event.name()
            )));
        }
        checked.push(LiveEvent::relayed(event, run_id, attempt));
    }
    // A run followed here gets them from the port (its pump publishes them on the
    // session's channel); otherwise the session's listeners get them from here.
    if state.hub.local_run(&id).is_none() {
        let chan = state.hub.channel(&id);
        for e in &checked {
            let origin = Origin {
                run_id: e.run_id.as_deref(),
                attempt: e.attempt.as_deref(),
                ..Origin::default()
            };
            chan.publish(&state.hub.instance, HubEvent::Run(e.event.clone()), origin);
        }
    }
    let published = state.sessions.relay(&id, checked)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"session_id": id, "published": published})),
    )
        .into_response())
}
