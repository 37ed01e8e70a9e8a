//! The HTTP handlers of `/v1`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use reins_agent::{Decision, Requirement, RequirementKind, RunHandle, RunOutput};
use reins_message::Msg;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::auth::Role;
use crate::compat;
use crate::error::{ErrorBody, Result, ServerError};
use crate::extract::{ApiJson, ApiQuery, Caller, SessionId};
use crate::hub::{Done, LocalRun};
use crate::sse;
use crate::state::AppState;
use crate::types::{
    Action, DecisionItem, DecisionsList, DecisionsRequest, Health, InboxItem, InboxPage,
    InboxQuery, InterruptAnswer, Me, RunRequest, SessionView, StreamQuery,
};

/// Starts a run on a session (created if new).
#[utoipa::path(
    post, path = "/v1/sessions/{id}/runs", tag = "sessions",
    params(("id" = String, Path, description = "The session id (percent-encode `/` as `%2F`)"), StreamQuery),
    request_body = RunRequest,
    responses(
        (status = 200, description = "The run's output (reins-agent's RunOutput JSON), or with `stream=true` an SSE stream of its events", body = serde_json::Value),
        (status = 400, description = "Bad body", body = ErrorBody),
        (status = 401, description = "No or unknown token", body = ErrorBody),
        (status = 403, description = "Not the caller's session", body = ErrorBody),
        (status = 409, description = "Another run is in flight", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "The message cannot be accepted", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn post_run(
    State(state): State<AppState>,
    Caller(who): Caller,
    SessionId(id): SessionId,
    ApiQuery(q): ApiQuery<StreamQuery>,
    ApiJson(body): ApiJson<RunRequest>,
) -> Result<Response> {
    who.require_owner(&id)?;
    if body.message.trim().is_empty() {
        return Err(ServerError::Invalid {
            code: "invalid_input",
            message: "the message is empty".to_owned(),
        });
    }
    let session = state.agent.session(&id).await?;
    let sub = q.stream.then(|| state.hub.channel(&id).subscribe(None));
    let handle = session.start(Msg::user(body.message)).await?;
    let run = spawn_pump(&state, &id, handle);
    answer(run, sub).await
}

/// Reads a session: status, transcript, pending requirements and the view token.
#[utoipa::path(
    get, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    responses(
        (status = 200, description = "The session", body = SessionView),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "Unknown session", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_session(
    State(state): State<AppState>,
    Caller(who): Caller,
    SessionId(id): SessionId,
) -> Result<Json<SessionView>> {
    who.require_read(&id)?;
    let running = state.hub.local_run(&id).is_some();
    let (view, _) = compat::load_view(&state.agent, &id, running, true).await?;
    Ok(Json(view))
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
    let decisions = compat::decisions(&state.agent, &id).await?;
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
        (status = 403, description = "Not an approver (for this tool)", body = ErrorBody),
        (status = 404, description = "Unknown session or requirement (maybe already decided)", body = ErrorBody),
        (status = 409, description = "Busy, not paused, or a stale view", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 422, description = "A decision that does not fit (wrong kind, expired, invalid values)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn post_decisions(
    State(state): State<AppState>,
    Caller(who): Caller,
    SessionId(id): SessionId,
    ApiQuery(q): ApiQuery<StreamQuery>,
    ApiJson(body): ApiJson<DecisionsRequest>,
) -> Result<Response> {
    if !(who.has(Role::Approver) || who.has(Role::Admin)) {
        return Err(ServerError::Forbidden(format!(
            "`{}` may not decide: that needs the approver or admin role",
            who.name
        )));
    }
    who.require_read(&id)?;
    if body.decisions.is_empty() {
        return Err(ServerError::invalid("no decisions given"));
    }
    let (_, pending) = compat::load_view(&state.agent, &id, false, false).await?;
    let mut decisions = Vec::with_capacity(body.decisions.len());
    for item in &body.decisions {
        let Some(req) = pending.iter().find(|r| r.id == item.requirement_id) else {
            return Err(ServerError::UnknownRequirement(format!(
                "`{}` is not pending on session `{id}` (it may already have been decided: reload); pending: {}",
                item.requirement_id,
                if pending.is_empty() {
                    "none".to_owned()
                } else {
                    pending
                        .iter()
                        .map(|r| r.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )));
        };
        if !who.may_decide(&req.tool_use.name) {
            return Err(ServerError::Forbidden(format!(
                "`{}` may not decide on `{}` calls",
                who.name, req.tool_use.name
            )));
        }
        decisions.push(to_decision(item, req)?);
    }
    let session = state.agent.session(&id).await?;
    let sub = q.stream.then(|| state.hub.channel(&id).subscribe(None));
    let handle =
        compat::start_decisions(&session, body.view_token.as_deref(), decisions, &who.name).await?;
    let run = spawn_pump(&state, &id, handle);
    answer(run, sub).await
}

/// Turns an API decision into a reins decision, refusing fields that do not belong.
fn to_decision(item: &DecisionItem, req: &Requirement) -> Result<Decision> {
    let id = item.requirement_id.clone();
    let stray = |field: &str, what: &str| {
        ServerError::invalid(format!(
            "`{field}` does not apply to `{what}` (requirement `{id}`)",
            id = item.requirement_id
        ))
    };
    let what = match item.action {
        Action::Approve => "approve",
        Action::Reject => "reject",
        Action::Input => "input",
        Action::ExternalResult => "external_result",
    };
    if item.action != Action::Approve && item.edited_args.is_some() {
        return Err(stray("edited_args", what));
    }
    if item.action != Action::Reject && item.note.is_some() {
        return Err(stray("note", what));
    }
    if item.action != Action::Input && item.values.is_some() {
        return Err(stray("values", what));
    }
    if item.action != Action::ExternalResult && (item.output.is_some() || item.is_error.is_some()) {
        return Err(stray("output/is_error", what));
    }
    Ok(match item.action {
        Action::Approve => match &item.edited_args {
            None => Decision::approve(id),
            Some(args) => {
                if !args.is_object() {
                    return Err(ServerError::invalid(format!(
                        "`edited_args` for `{id}` must be a JSON object (the tool's arguments)"
                    )));
                }
                if matches!(req.kind, RequirementKind::Confirmation) && *args == req.tool_use.input
                {
                    Decision::approve(id)
                } else {
                    Decision::approve_with(id, args.clone())
                }
            }
        },
        Action::Reject => Decision::reject(id, item.note.clone().unwrap_or_default()),
        Action::Input => {
            let values = item.values.clone().ok_or_else(|| {
                ServerError::invalid(format!("`input` for `{id}` needs `values` (a JSON object)"))
            })?;
            Decision::input(id, values)
        }
        Action::ExternalResult => {
            let output = item.output.clone().ok_or_else(|| {
                ServerError::invalid(format!("`external_result` for `{id}` needs `output`"))
            })?;
            Decision::external_result(id, output, item.is_error.unwrap_or(false))
        }
    })
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
    if !(who.owns(&id) || who.has(Role::Approver)) {
        return Err(ServerError::Forbidden(format!(
            "`{}` may not interrupt session `{id}`",
            who.name
        )));
    }
    let answer = |delivered: &str| {
        (
            axum::http::StatusCode::ACCEPTED,
            Json(InterruptAnswer {
                session_id: id.clone(),
                delivered: delivered.to_owned(),
            }),
        )
            .into_response()
    };
    if let Some(run) = state.hub.local_run(&id) {
        run.interrupter.interrupt();
        return Ok(answer("local"));
    }
    // Not here: 404 for an unknown session, then ask the agent to store the request.
    let (view, _) = compat::load_view(&state.agent, &id, false, false).await?;
    let session = state.agent.session(&id).await?;
    if compat::request_interrupt(&session).await? {
        return Ok(answer("stored"));
    }
    Err(ServerError::Busy(
        if view.status == crate::types::SessionStatus::Running {
            format!(
                "session `{id}` runs on another instance, and this agent cannot store interrupt requests"
            )
        } else {
            format!("session `{id}` has no run in flight: nothing to interrupt")
        },
    ))
}

/// The inbox: pending requirements across the sessions the caller may see, newest
/// first.
#[utoipa::path(
    get, path = "/v1/requirements", tag = "inbox",
    params(InboxQuery),
    responses(
        (status = 200, description = "One page of pending requirements", body = InboxPage),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_requirements(
    State(state): State<AppState>,
    Caller(who): Caller,
    ApiQuery(q): ApiQuery<InboxQuery>,
) -> Result<Json<InboxPage>> {
    if let Some(s) = q.status.as_deref()
        && s != "pending"
    {
        return Err(ServerError::BadRequest(format!(
            "status `{s}` is not supported (only `pending`)"
        )));
    }
    let limit = q.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(ServerError::BadRequest(
            "limit must be between 1 and 200".to_owned(),
        ));
    }
    let after = match q.cursor.as_deref() {
        None => None,
        Some(c) => Some(decode_cursor(c).ok_or_else(|| {
            ServerError::BadRequest("`cursor` is not a cursor this server gave out".to_owned())
        })?),
    };
    let sessions = state.agent.store().list_sessions().await?;
    let mut items = Vec::new();
    for s in sessions.into_iter().filter(|s| s.has_open_requirements) {
        if !who.may_read(&s.id) {
            continue;
        }
        let state_ = match state.agent.store().load_session(&s.id).await {
            Ok(st) => st,
            Err(reins_memory::Error::SessionNotFound { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let running = state.hub.local_run(&s.id).is_some();
        let (view, pending) = compat::view_of(state_, running, false);
        for r in pending {
            let may = who.may_decide(&r.tool_use.name) || who.owns(&s.id);
            if !may {
                continue;
            }
            let (kind, fields) = match &r.kind {
                RequirementKind::Confirmation => ("confirmation", None),
                RequirementKind::UserInput { fields } => ("user_input", Some(fields.clone())),
                RequirementKind::External => ("external", None),
            };
            items.push(InboxItem {
                session_id: s.id.clone(),
                requirement_id: r.id.clone(),
                tool: r.tool_use.name.clone(),
                tool_schema: state
                    .agent
                    .toolkit()
                    .spec(&r.tool_use.name)
                    .map(|spec| spec.parameters.clone()),
                arguments: r.tool_use.input.clone(),
                kind: kind.to_owned(),
                fields,
                reason: r.reason.clone(),
                created_at: r.created_at,
                expires_at: r.expires_at,
                view_token: view.view_token.clone(),
            });
        }
    }
    // Newest first; ties by session, then id, so that pages are stable.
    let key = |i: &InboxItem| {
        (
            std::cmp::Reverse(i.created_at),
            i.session_id.clone(),
            i.requirement_id.clone(),
        )
    };
    items.sort_by_key(key);
    if let Some(after) = after {
        items.retain(|i| key(i) > after);
    }
    let more = items.len() > limit;
    items.truncate(limit);
    let next_cursor = if more {
        items.last().map(|i| encode_cursor(&key(i)))
    } else {
        None
    };
    Ok(Json(InboxPage { items, next_cursor }))
}

type CursorKey = (
    std::cmp::Reverse<chrono::DateTime<chrono::Utc>>,
    String,
    String,
);

fn encode_cursor(k: &CursorKey) -> String {
    let raw = json!([k.0.0.to_rfc3339(), k.1, k.2]).to_string();
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_cursor(c: &str) -> Option<CursorKey> {
    if c.len() % 2 != 0 || c.len() > 4096 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..c.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(c.get(i..i + 2)?, 16).ok())
        .collect();
    let v: Value = serde_json::from_slice(&bytes?).ok()?;
    let at = chrono::DateTime::parse_from_rfc3339(v.get(0)?.as_str()?).ok()?;
    Some((
        std::cmp::Reverse(at.with_timezone(&chrono::Utc)),
        v.get(1)?.as_str()?.to_owned(),
        v.get(2)?.as_str()?.to_owned(),
    ))
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
    state.agent.store().load_session(&id).await?;
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Ok(sse::session_stream(state, id, last))
}

/// Inbox changes (SSE): a `changed` event naming a session whenever one the caller
/// may see changes, on any instance.
#[utoipa::path(
    get, path = "/v1/events", tag = "inbox",
    responses(
        (status = 200, description = "An SSE stream of `changed` events (`{\"session_id\": ..}`)", content_type = "text/event-stream", body = String),
        (status = 401, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_inbox_events(
    State(state): State<AppState>,
    Caller(who): Caller,
) -> Result<Response> {
    Ok(sse::inbox_stream(state, who))
}

/// Who the token belongs to.
#[utoipa::path(
    get, path = "/v1/me", tag = "inbox",
    responses((status = 200, body = Me), (status = 401, body = ErrorBody)),
    security(("bearer" = []))
)]
pub(crate) async fn get_me(Caller(who): Caller) -> Json<Me> {
    Json(Me {
        session_prefix: who.prefix(),
        principal: (*who).clone(),
    })
}

/// Liveness.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, body = Health)))]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
    })
}

/// Readiness: the store answers.
#[utoipa::path(
    get, path = "/readyz", tag = "health",
    responses((status = 200, body = Health), (status = 503, body = Health))
)]
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    match state
        .agent
        .store()
        .load_session("reins-server/readyz")
        .await
    {
        Ok(_) | Err(reins_memory::Error::SessionNotFound { .. }) => Json(Health {
            status: "ok".to_owned(),
        })
        .into_response(),
        Err(e) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: format!("store unreachable: {e}"),
            }),
        )
            .into_response(),
    }
}

/// Pumps a run's events into the hub until it ends; the run no longer depends on the
/// request that started it.
fn spawn_pump(state: &AppState, session: &str, mut handle: RunHandle) -> Arc<LocalRun> {
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let (done_tx, done_rx) = watch::channel::<Done>(None);
    let run = Arc::new(LocalRun {
        run_id: run_id.clone(),
        interrupter: handle.interrupter(),
        done: done_rx,
    });
    let hub = state.hub.clone();
    hub.add_run(session, run.clone());
    hub.notify(session);
    let chan = hub.channel(session);
    let session = session.to_owned();
    tokio::spawn(async move {
        while let Some(ev) = handle.next_event().await {
            let mut data = serde_json::to_value(&ev).unwrap_or(Value::Null);
            let name = data
                .get("event")
                .and_then(Value::as_str)
                .unwrap_or("event")
                .to_owned();
            if let Some(o) = data.as_object_mut() {
                o.insert("run_id".to_owned(), Value::String(run_id.clone()));
            }
            // Events that follow a committed step: subscribers read the store then.
            let notable = matches!(
                name.as_str(),
                "run_started"
                    | "resumed"
                    | "reasoning_started"
                    | "tool_execution_started"
                    | "paused"
                    | "tool_execution_finished"
                    | "completed"
                    | "cancelled"
                    | "failed"
            );
            chan.publish(&hub.instance, &name, data, Some(&run_id), false);
            if notable {
                hub.notify(&session);
            }
        }
        let result = handle.wait().await;
        hub.remove_run(&session, &run_id);
        let done: Done = Some(match result {
            Ok(out) => {
                let data = json!({"run_id": run_id, "output": out});
                chan.publish(&hub.instance, "output", data, Some(&run_id), true);
                Ok(out)
            }
            Err(e) => {
                let e = ServerError::from(e);
                let data = json!({"run_id": run_id, "error": e.body().error});
                chan.publish(&hub.instance, "error", data, Some(&run_id), true);
                Err(e)
            }
        });
        hub.hold(&session, chan);
        hub.notify(&session);
        let _ = done_tx.send(done);
    });
    run
}

/// Waits for the run's output, or streams it.
async fn answer(run: Arc<LocalRun>, sub: Option<crate::hub::Subscription>) -> Result<Response> {
    if let Some(sub) = sub {
        return sse::run_stream(run, sub).await;
    }
    let out = wait_done(&run).await?;
    Ok(Json(out).into_response())
}

pub(crate) async fn wait_done(run: &LocalRun) -> Result<RunOutput> {
    let mut rx = run.done.clone();
    let done = rx
        .wait_for(Option::is_some)
        .await
        .map_err(|_| ServerError::Internal("the run ended without an answer".to_owned()))?
        .clone();
    match done {
        Some(Ok(out)) => Ok(out),
        Some(Err(e)) => Err(e),
        None => Err(ServerError::Internal(
            "the run ended without an answer".to_owned(),
        )),
    }
}
