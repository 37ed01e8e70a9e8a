//! Forks and replays of a session: `POST /v1/sessions/{id}/fork` makes a new session
//! from this one's history up to a turn (calls the original already made are served
//! from its ledger, not run again), `GET /v1/sessions/{id}/turns` lists the turns a
//! fork can start before, and `POST /v1/sessions/{id}/replay` re-drives the session
//! with the agent that runs it (this server's, or the backend's: a Restate
//! deployment's service) on a scratch in-memory store, streaming where it diverged.
//!
//! A fork is a store operation, the same whatever runs the sessions: the server writes
//! the new session into the store it shares with its backend, and the fork's runs go
//! to the backend like any other session's, where the calls its record holds are
//! served from it (the run's `Step::Replayed`), not run again.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use reins_agent::{ForkPoint, ReplayTurn};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::auth::AccessRole;
use crate::error::{ErrorBody, Result, ServerError};
use crate::extract::{ApiJson, Caller, SessionId};
use crate::sse;
use crate::state::AppState;
use crate::types::{ForkAnswer, ForkRequest, TurnsList};

/// Makes a fork of the session.
#[utoipa::path(
    post, path = "/v1/sessions/{id}/fork", tag = "sessions",
    params(("id" = String, Path, description = "The session to fork")),
    request_body = ForkRequest,
    responses(
        (status = 201, description = "The fork", body = ForkAnswer),
        (status = 400, description = "Bad body", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "Not the caller's session (either of them)", body = ErrorBody),
        (status = 404, description = "Unknown session", body = ErrorBody),
        (status = 409, description = "The new session id is taken (`session_exists`)", body = ErrorBody),
        (status = 422, description = "No such turn, or the cut leaves a tool use without its result (`invalid_input`)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn post_fork(
    State(state): State<AppState>,
    Caller(who): Caller,
    SessionId(id): SessionId,
    ApiJson(body): ApiJson<ForkRequest>,
) -> Result<Response> {
    who.require_owner(&id)?;
    who.require_owner(&body.new_session_id)?;
    let at = match (body.before_turn, body.messages) {
        (Some(t), None) => ForkPoint::BeforeTurn(t),
        (None, Some(n)) => ForkPoint::Messages(n),
        _ => {
            return Err(ServerError::BadBody(
                "give exactly one of `before_turn` and `messages`".to_owned(),
            ));
        }
    };
    let mut request = reins_agent::port::ForkRequest::new(at, body.new_session_id.clone());
    request.rerun_side_effects = body.rerun_side_effects;
    request.actor = Some(who.actor());
    let origin = state.sessions.fork(&id, request).await?;
    Ok((
        StatusCode::CREATED,
        Json(ForkAnswer {
            session_id: body.new_session_id,
            source: origin.source,
            at: origin.at,
            recorded_calls: origin.recorded_calls,
        }),
    )
        .into_response())
}

/// Lists the session's turns (where a fork can start).
#[utoipa::path(
    get, path = "/v1/sessions/{id}/turns", tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    responses(
        (status = 200, description = "The turns", body = TurnsList),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_turns(
    State(state): State<AppState>,
    Caller(who): Caller,
    SessionId(id): SessionId,
) -> Result<Json<TurnsList>> {
    who.require_read(&id)?;
    let stored = state.sessions.read(&id, true).await?;
    let forked_from = state
        .sessions
        .origin(&id)
        .await?
        .and_then(|o| serde_json::to_value(o).ok());
    Ok(Json(TurnsList {
        session_id: id,
        turns: reins_agent::turns(&stored.messages)
            .iter()
            .filter_map(|t| serde_json::to_value(t).ok())
            .collect(),
        forked_from,
    }))
}

/// Replays the session with the agent that runs it and streams where it diverged.
#[utoipa::path(
    post, path = "/v1/sessions/{id}/replay", tag = "sessions",
    params(("id" = String, Path, description = "The recorded session")),
    responses(
        (status = 200, description = "An SSE stream: a `turn` event (reins-agent's `ReplayTurn` JSON: served calls, calls not run, answers, divergences) per replayed turn, then `report` (the `ReplayReport`) or `error`. Tool calls are served from the recording; none runs. The replay runs on a scratch in-memory store", content_type = "text/event-stream", body = String),
        (status = 401, body = ErrorBody),
        (status = 403, description = "Not the caller's session", body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn post_replay(
    State(state): State<AppState>,
    Caller(who): Caller,
    SessionId(id): SessionId,
) -> Result<Response> {
    if !(who.owns(&id) || who.has(AccessRole::Admin)) {
        return Err(ServerError::Forbidden(format!(
            "`{}` may not replay session `{id}`",
            who.name
        )));
    }
    // Whatever runs the sessions replays them with its own agent, on a scratch store;
    // an unknown session is refused (404) before the stream starts.
    state.sessions.view(&id).await?;
    let sessions = state.sessions.clone();
    let (turn_tx, mut turn_rx) = mpsc::unbounded_channel::<ReplayTurn>();
    let (tx, rx) = mpsc::channel(sse::CLIENT_BUFFER);
    tokio::spawn(async move {
        let replay = sessions.replay(&id, Some(turn_tx));
        tokio::pin!(replay);
        let result = loop {
            tokio::select! {
                biased;
                Some(turn) = turn_rx.recv() => {
                    if tx.send(json_event("turn", &turn)).await.is_err() {
                        return; // the client left: stop replaying
                    }
                }
                result = &mut replay => break result,
            }
        };
        while let Ok(turn) = turn_rx.try_recv() {
            let _ = tx.send(json_event("turn", &turn)).await;
        }
        let last = match result {
            Ok(report) => json_event("report", &report),
            Err(e) => json_event("error", &ServerError::from(e).body()),
        };
        let _ = tx.send(last).await;
    });
    Ok(sse::respond(rx, state.limits.keep_alive))
}

fn json_event(name: &str, data: &impl Serialize) -> Event {
    Event::default()
        .event(name)
        .data(serde_json::to_string(data).unwrap_or_else(|_| "null".to_owned()))
}
