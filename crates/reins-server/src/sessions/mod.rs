//! The session resource, `/v1/sessions/{id}`: start a run on it, read it, answer what
//! it waits for (with the audit trail of those decisions), interrupt its run, and
//! watch it live ([`stream`]). A request that starts a run is answered with the run's
//! output, or with its own SSE stream when `?stream=true`. Everything goes through the
//! session port ([`reins_agent::port::Sessions`]) — the local driver, or a Restate
//! deployment behind [`reins_agent::Relayed`] — through one door ([`backend`]).

pub(crate) mod backend;
mod budget;
pub(crate) mod decide;
pub(crate) mod fork;
mod stream;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use reins_agent::Submission;
use reins_agent::port::Sessions;
use reins_message::Msg;
use serde_json::Value;

use crate::auth::AccessRole;
use crate::error::{ErrorBody, Result, ServerError};
use crate::extract::{ApiJson, ApiQuery, Caller, Decider, SessionId};
use crate::state::AppState;
use crate::types::{
    DecisionsList, DecisionsRequest, InterruptAnswer, RunRequest, SessionDetail, StreamQuery,
};
use crate::view;

/// The routes of `/v1/sessions/{id}`.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions/{id}", get(get_session))
        .route("/v1/sessions/{id}/runs", post(post_run))
        .route(
            "/v1/sessions/{id}/decisions",
            get(get_decisions).post(post_decisions),
        )
        .route("/v1/sessions/{id}/interrupt", post(post_interrupt))
        .route("/v1/sessions/{id}/events", get(get_events))
        .route("/v1/sessions/{id}/fork", post(fork::post_fork))
        .route("/v1/sessions/{id}/turns", get(fork::get_turns))
        .route("/v1/sessions/{id}/replay", post(fork::post_replay))
}

/// The route a backend's service processes relay the live run events of the steps
/// they run to (served when the backend's runs execute elsewhere).
pub(crate) fn live_router() -> Router<AppState> {
    Router::new().route("/v1/sessions/{id}/live", post(backend::post_live))
}

/// Starts a run on a session (created if new).
#[utoipa::path(
    post, path = "/v1/sessions/{id}/runs", tag = "sessions",
    params(("id" = String, Path, description = "The session id (percent-encode `/` as `%2F`)"), StreamQuery),
    request_body = RunRequest,
    responses(
        (status = 200, description = "The run's output (reins-agent's RunOutput JSON), or with `stream=true` an SSE stream of its events", body = serde_json::Value),
        (status = 400, description = "Bad body", body = ErrorBody),
        (status = 401, description = "No or unknown token", body = ErrorBody),
        (status = 403, description = "Not the caller's session, or a budget above the agent's default without the admin role", body = ErrorBody),
        (status = 409, description = "Another run is in flight", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "The message cannot be accepted (`invalid_input`), or the budget (`invalid_budget`)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn post_run(
    State(state): State<AppState>,
    Caller(who): Caller,
    SessionId(id): SessionId,
    ApiQuery(q): ApiQuery<StreamQuery>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<RunRequest>,
) -> Result<Response> {
    who.require_owner(&id)?;
    if body.message.trim().is_empty() {
        return Err(ServerError::Invalid {
            code: "invalid_input",
            message: "the message is empty".to_owned(),
        });
    }
    let budget = budget::session_budget(state.sessions.card(), &who, body.budget)?;
    let mut submission = Submission::new(reins_agent::RunInput::Message(Msg::user(body.message)));
    submission.actor = Some(reins_agent::Actor::new(who.name.clone()));
    submission.budget = budget;
    submission.idempotency_key = backend::idempotency_key(&headers)?;
    backend::submit(state, id, submission, q.stream).await
}

/// Reads a session: status, transcript, pending requirements and the view token.
#[utoipa::path(
    get, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    responses(
        (status = 200, description = "The session", body = SessionDetail),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "Unknown session", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_session(
    State(state): State<AppState>,
    Caller(who): Caller,
    SessionId(id): SessionId,
) -> Result<Json<SessionDetail>> {
    who.require_read(&id)?;
    let running = state.hub.local_run(&id).is_some();
    let (detail, _) = view::load(&*state.sessions, &id, running, true).await?;
    Ok(Json(detail))
}

/// The session's decisions (audit trail), oldest first.
#[utoipa::path(
    get, path = "/v1/sessions/{id}/decisions", tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    responses(
        (status = 200, description = "The audit trail", body = DecisionsList),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_decisions(
    State(state): State<AppState>,
    Caller(who): Caller,
    SessionId(id): SessionId,
) -> Result<Json<DecisionsList>> {
    who.require_read(&id)?;
    let decisions = audit_trail(&*state.sessions, &id).await?;
    Ok(Json(DecisionsList {
        session_id: id,
        decisions,
    }))
}

/// Answers pending requirements; the run goes on (SSE with `stream=true`).
#[utoipa::path(
    post, path = "/v1/sessions/{id}/decisions", tag = "sessions",
    params(("id" = String, Path, description = "The session id"), StreamQuery),
    request_body = DecisionsRequest,
    responses(
        (status = 200, description = "The run's output (RunOutput JSON) or an SSE stream", body = serde_json::Value),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, description = "Not an approver; a decision not the caller's to make (`not_eligible`: a tool this approver may not decide on, a quorum it cannot count towards, the eligibility policy, a budget extension above the agent's default without the admin role)", body = ErrorBody),
        (status = 404, description = "Unknown session, or a requirement that was never pending", body = ErrorBody),
        (status = 409, description = "`already_decided` (someone decided it first: by whom, when), busy, not paused, or a stale view", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 422, description = "A decision that does not fit (wrong kind, expired, invalid values)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn post_decisions(
    State(state): State<AppState>,
    Decider(who): Decider,
    SessionId(id): SessionId,
    ApiQuery(q): ApiQuery<StreamQuery>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<DecisionsRequest>,
) -> Result<Response> {
    who.require_read(&id)?;
    if body.decisions.is_empty() {
        return Err(ServerError::invalid("no decisions given"));
    }
    let mut decide =
        reins_agent::port::Decide::new(who.actor(), decide::decisions(&body.decisions)?);
    decide.view = body
        .view_token
        .as_deref()
        .map(decide::parse_view)
        .transpose()?;
    decide.idempotency_key = backend::idempotency_key(&headers)?;
    // Subscribed before the decisions go in: the run's events from its first one.
    let sub = q.stream.then(|| state.hub.channel(&id).subscribe(None));
    let run = backend::decide(&state, &id, decide).await?;
    backend::answer(run, sub).await
}

/// Stops the session's run wherever it executes.
#[utoipa::path(
    post, path = "/v1/sessions/{id}/interrupt", tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    responses(
        (status = 202, description = "The interrupt was delivered or stored", body = InterruptAnswer),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "No run is in flight", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn post_interrupt(
    State(state): State<AppState>,
    Caller(who): Caller,
    SessionId(id): SessionId,
) -> Result<Response> {
    if !(who.owns(&id) || who.has(AccessRole::Approver)) {
        return Err(ServerError::Forbidden(format!(
            "`{}` may not interrupt session `{id}`",
            who.name
        )));
    }
    backend::interrupt(&state, id).await
}

/// The session's live events (SSE), from any instance.
#[utoipa::path(
    get, path = "/v1/sessions/{id}/events", tag = "sessions",
    params(
        ("id" = String, Path, description = "The session id"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event"),
    ),
    responses(
        (status = 200, description = "An SSE stream, from any instance: `message` (`{session_id, index, message}`) for each message stored after the stream began, `state` (the session view, without messages) on connect and whenever the stored session changes, `reset` when the stored transcript got shorter; and the run events (`text_delta`, `tool_call_ready`, `paused`, …, `output`, `error`) of runs executing on the instance serving the stream. Reconnecting with `Last-Event-ID` on any instance resumes without losing a stored message", content_type = "text/event-stream", body = String),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_events(
    State(state): State<AppState>,
    Caller(who): Caller,
    SessionId(id): SessionId,
    headers: HeaderMap,
) -> Result<Response> {
    who.require_read(&id)?;
    // 404 for unknown sessions, before the stream starts.
    state.sessions.view(&id).await?;
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Ok(stream::session_stream(state, id, last))
}

/// The session's audit trail, oldest first (reins-agent's `DecisionRecord` JSON).
async fn audit_trail(sessions: &dyn Sessions, id: &str) -> Result<Vec<Value>> {
    Ok(sessions
        .audit(id)
        .await?
        .iter()
        .filter_map(|d| serde_json::to_value(d).ok())
        .collect())
}
