//! A2A (the Agent2Agent protocol, 1.0), JSON-RPC binding: other agents use a reins
//! agent as a remote agent.
//!
//! - `GET /.well-known/agent-card.json`: the agent card, generated from the agent (its
//!   name, one skill per toolkit tool, bearer auth, streaming, the JSON-RPC interface
//!   at `/a2a` on the host the card was asked from).
//! - `POST /a2a`: JSON-RPC 2.0 — `SendMessage`, `SendStreamingMessage` (SSE),
//!   `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask`. Push notifications and
//!   the extended card are not offered (their methods answer with A2A's errors).
//!
//! A context is a reins session (`contextId` = session id, under the same ownership
//! rules as `/v1/sessions/{id}`; a new one is `<prefix>a2a-<uuid>`), and a task is the
//! turn one A2A message started in it (see [`task`] for the states). A pause is
//! `TASK_STATE_INPUT_REQUIRED`; its status message carries the requirements and a view
//! token as a data part, and a message on the task whose data part is `{"decisions":
//! [...], "view_token": "..."}` (the native API's decision objects) decides, as its
//! sender, under the native API's roles and consent rules (a stale view is refused).
//! `CancelTask` interrupts the run (a paused task: its calls are rejected and the
//! run stops before the model is asked again). Tasks are read from the store, so any
//! instance sharing it answers for any task.
//!
//! Errors are JSON-RPC error objects with A2A's codes (`-32001` task not found, which
//! is also what another principal's task looks like; `-32002` not cancelable; `-32003`
//! push notifications; `-32004` unsupported operation; `-32009` version; `-32600`,
//! `-32601`, `-32602`, `-32700`); a missing or unknown token is HTTP 401, as on the
//! native API. A refused request changes nothing.

mod card;
mod task;

use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use reins_agent::{Actor, Decision, RequirementKind, RunHandle, ViewToken};
use reins_message::Msg;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use crate::auth::{AccessRole, Principal};
use crate::error::ServerError;
use crate::extract::{Caller, validate_session_id};
use crate::state::AppState;
use crate::types::{Action, DecisionItem};

use task::{TASK_MARK, TaskState, TaskView, parse_task_id, task_json, tasks_of};

/// The A2A routes.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/.well-known/agent-card.json", get(card::get_card))
        .route("/a2a", post(post_rpc))
}

/// A JSON-RPC error: A2A's code and a sentence.
#[derive(Debug, Clone)]
struct RpcError {
    code: i64,
    message: String,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
    fn params(message: impl Into<String>) -> Self {
        Self::new(-32602, message)
    }
    fn not_found(id: &str) -> Self {
        Self::new(
            -32001,
            format!("task `{id}` does not exist or is not yours"),
        )
    }
    fn unsupported(message: impl Into<String>) -> Self {
        Self::new(-32004, message)
    }
}

impl From<ServerError> for RpcError {
    fn from(e: ServerError) -> Self {
        let code = match &e {
            ServerError::UnknownSession(_) | ServerError::Forbidden(_) => -32001,
            ServerError::BadBody(_)
            | ServerError::BadRequest(_)
            | ServerError::Invalid { .. }
            | ServerError::UnknownRequirement(_)
            | ServerError::StaleView { .. } => -32602,
            ServerError::Busy(_) | ServerError::NotPaused(_) => -32004,
            _ => -32603,
        };
        Self::new(code, format!("{} ({})", e, e.code()))
    }
}

fn rpc_error(id: &Value, e: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code, "message": e.message}})
}

fn rpc_result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn json_response(v: Value) -> Response {
    axum::Json(v).into_response()
}

/// `POST /a2a`: one JSON-RPC request.
async fn post_rpc(
    State(state): State<AppState>,
    Caller(who): Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let req: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return json_response(rpc_error(
                &Value::Null,
                &RpcError::new(-32700, format!("invalid JSON payload: {e}")),
            ));
        }
    };
    let id = req.get("id").cloned().unwrap_or(Value::Null);
    let method = match (
        req.get("jsonrpc").and_then(Value::as_str),
        req.get("method"),
    ) {
        (Some("2.0"), Some(Value::String(m))) => m.clone(),
        _ => {
            return json_response(rpc_error(
                &id,
                &RpcError::new(
                    -32600,
                    "not a JSON-RPC 2.0 request (`jsonrpc: \"2.0\"` and a `method` are needed)",
                ),
            ));
        }
    };
    if let Some(v) = headers.get("a2a-version").and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        if !v.is_empty() && v != "1.0" && !v.starts_with("1.0.") {
            return json_response(rpc_error(
                &id,
                &RpcError::new(
                    -32009,
                    format!("A2A version `{v}` is not supported; this agent speaks 1.0"),
                ),
            ));
        }
    }
    let params = req.get("params").cloned().unwrap_or_else(|| json!({}));
    if !params.is_object() {
        return json_response(rpc_error(
            &id,
            &RpcError::params("`params` must be an object"),
        ));
    }
    let answer = match method.as_str() {
        "SendMessage" => send_message(&state, &who, &params, &id, false).await,
        "SendStreamingMessage" => send_message(&state, &who, &params, &id, true).await,
        "GetTask" => get_task(&state, &who, &params).await.map(|t| rpc(&id, t)),
        "ListTasks" => list_tasks(&state, &who, &params).await.map(|t| rpc(&id, t)),
        "CancelTask" => cancel_task(&state, &who, &params)
            .await
            .map(|t| rpc(&id, t)),
        "SubscribeToTask" => subscribe(&state, &who, &params, &id).await,
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => Err(RpcError::new(
            -32003,
            "push notifications are not supported by this agent",
        )),
        "GetExtendedAgentCard" => Err(RpcError::unsupported(
            "this agent has no extended agent card",
        )),
        other => Err(RpcError::new(-32601, format!("method `{other}` not found"))),
    };
    match answer {
        Ok(r) => r,
        Err(e) => json_response(rpc_error(&id, &e)),
    }
}

fn rpc(id: &Value, result: Value) -> Response {
    json_response(rpc_result(id, result))
}

/// The tasks of the session a task id names, if the caller may read it.
async fn load_task(state: &AppState, who: &Principal, id: &str) -> Result<TaskView, RpcError> {
    let (session, message) = parse_task_id(id).ok_or_else(|| RpcError::not_found(id))?;
    if !who.may_read(&session) {
        return Err(RpcError::not_found(id));
    }
    let stored = match state.agent.store().load_session(&session).await {
        Ok(s) => s,
        Err(reins_memory::Error::SessionNotFound { .. }) => return Err(RpcError::not_found(id)),
        Err(e) => return Err(ServerError::from(e).into()),
    };
    let running = state.hub.local_run(&session).is_some();
    tasks_of(&state.agent, stored, running)
        .await?
        .into_iter()
        .find(|t| t.turn.first().is_some_and(|m| m.id == message))
        .ok_or_else(|| RpcError::not_found(id))
}

fn history_length(params: &Value) -> Result<Option<usize>, RpcError> {
    match params.get("historyLength") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|n| Some(n as usize))
            .ok_or_else(|| RpcError::params("`historyLength` must be a non-negative integer")),
    }
}

fn id_param(params: &Value) -> Result<String, RpcError> {
    params
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| RpcError::params("`id` (the task id) is required"))
}

async fn get_task(state: &AppState, who: &Principal, params: &Value) -> Result<Value, RpcError> {
    let id = id_param(params)?;
    let history = history_length(params)?;
    let task = load_task(state, who, &id).await?;
    Ok(task_json(&task, history, true))
}

async fn list_tasks(state: &AppState, who: &Principal, params: &Value) -> Result<Value, RpcError> {
    let context = params.get("contextId").and_then(Value::as_str);
    let status = match params.get("status").and_then(Value::as_str) {
        None | Some("") | Some("TASK_STATE_UNSPECIFIED") => None,
        Some(s) => Some(TaskState::from_wire(s).ok_or_else(|| {
            RpcError::params(format!(
                "`status` `{s}` is not a task state this agent uses"
            ))
        })?),
    };
    let page_size = match params.get("pageSize") {
        None | Some(Value::Null) => 50,
        Some(v) => match v.as_u64() {
            Some(n @ 1..=100) => n as usize,
            _ => return Err(RpcError::params("`pageSize` must be between 1 and 100")),
        },
    };
    let offset = match params.get("pageToken").and_then(Value::as_str) {
        None | Some("") => 0,
        Some(t) => t.parse::<usize>().map_err(|_| {
            RpcError::params(format!("`pageToken` `{t}` is not one this agent gave"))
        })?,
    };
    let history = history_length(params)?;
    let artifacts = params
        .get("includeArtifacts")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let sessions = state
        .agent
        .store()
        .list_sessions()
        .await
        .map_err(|e| RpcError::from(ServerError::from(e)))?;
    let mut all = Vec::new();
    for s in sessions {
        if !who.may_read(&s.id) || context.is_some_and(|c| c != s.id) {
            continue;
        }
        let Ok(stored) = state.agent.store().load_session(&s.id).await else {
            continue;
        };
        let running = state.hub.local_run(&s.id).is_some();
        all.extend(
            tasks_of(&state.agent, stored, running)
                .await
                .map_err(RpcError::from)?
                .into_iter()
                .filter(|t| status.is_none_or(|st| t.state == st)),
        );
    }
    all.sort_by(|a, b| b.timestamp.cmp(&a.timestamp).then(a.id.cmp(&b.id)));
    let total = all.len();
    let page: Vec<Value> = all
        .iter()
        .skip(offset)
        .take(page_size)
        .map(|t| task_json(t, history, artifacts))
        .collect();
    let next = if offset + page_size < total {
        (offset + page_size).to_string()
    } else {
        String::new()
    };
    Ok(json!({
        "tasks": page,
        "nextPageToken": next,
        "pageSize": page_size,
        "totalSize": total,
    }))
}

/// The session acting as the caller (recorded on its decisions, with `via: a2a`).
async fn actor_session(
    state: &AppState,
    who: &Principal,
    session: &str,
) -> Result<reins_agent::Session, RpcError> {
    let s = state
        .agent
        .session(session)
        .await
        .map_err(|e| RpcError::from(ServerError::from(e)))?;
    let mut actor = Actor::new(who.name.clone());
    actor.metadata = Some(json!({"via": "a2a"}));
    Ok(s.as_actor(actor))
}

async fn cancel_task(state: &AppState, who: &Principal, params: &Value) -> Result<Value, RpcError> {
    let id = id_param(params)?;
    let task = load_task(state, who, &id).await?;
    let session = task.context_id.clone();
    if !(who.owns(&session) || who.has(AccessRole::Approver)) {
        return Err(RpcError::not_found(&id));
    }
    match task.state {
        TaskState::Completed | TaskState::Canceled => {
            return Err(RpcError::new(
                -32002,
                format!(
                    "task `{id}` has ended ({}); it cannot be canceled",
                    task.state.wire()
                ),
            ));
        }
        TaskState::Working => {
            if let Some(run) = state.hub.local_run(&session) {
                run.interrupter.interrupt();
                let _ = run.wait().await;
            } else {
                let s = actor_session(state, who, &session).await?;
                let stored = s
                    .request_interrupt()
                    .await
                    .map_err(|e| RpcError::from(ServerError::from(e)))?;
                if !stored {
                    return Err(RpcError::new(
                        -32002,
                        format!("task `{id}` runs on another instance that cannot be reached"),
                    ));
                }
                wait_idle(state, &session).await;
            }
        }
        TaskState::InputRequired => {
            // Nothing runs: reject what it waits for, and stop before the model.
            let decisions = task
                .pending
                .iter()
                .map(|r| Decision::reject(r.id.clone(), "the task was canceled"))
                .collect();
            let s = actor_session(state, who, &session).await?;
            let view = ViewToken::of(true, &task.pending);
            let handle = s
                .resolve(decisions)
                .at(&view)
                .start()
                .await
                .map_err(|e| RpcError::from(ServerError::from(e)))?;
            handle.interrupt();
            let run = state.hub.start_run(&session, handle);
            let _ = run.wait().await;
        }
    }
    let task = load_task(state, who, &id).await?;
    Ok(task_json(&task, None, true))
}

/// Waits (bounded) until the session has no run in flight anywhere.
async fn wait_idle(state: &AppState, session: &str) {
    for _ in 0..200 {
        if let Ok(s) = state.agent.store().load_session(session).await {
            let Ok((d, _)) = crate::view::of(&state.agent, s, false, false).await else {
                return;
            };
            if d.status != crate::types::SessionStatus::Running {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The text and the decisions of an incoming A2A message.
struct Incoming {
    message_id: String,
    context_id: Option<String>,
    task_id: Option<String>,
    text: String,
    decisions: Option<(Vec<DecisionItem>, Option<String>)>,
}

fn incoming(params: &Value) -> Result<(Incoming, bool), RpcError> {
    let m = params
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| RpcError::params("`message` is required"))?;
    let message_id = m
        .get("messageId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| RpcError::params("`message.messageId` is required"))?
        .to_owned();
    match m.get("role").and_then(Value::as_str) {
        Some("ROLE_USER") => {}
        other => {
            return Err(RpcError::params(format!(
                "`message.role` must be `ROLE_USER`, not {other:?}"
            )));
        }
    }
    let parts = m
        .get("parts")
        .and_then(Value::as_array)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| RpcError::params("`message.parts` needs at least one part"))?;
    let mut texts = Vec::new();
    let mut decisions = None;
    for p in parts {
        if let Some(t) = p.get("text").and_then(Value::as_str) {
            texts.push(t.to_owned());
        } else if let Some(d) = p.get("data") {
            let Some(list) = d.get("decisions") else {
                return Err(RpcError::params(
                    "a data part must be `{\"decisions\": [...], \"view_token\"?: ...}`",
                ));
            };
            let items: Vec<DecisionItem> = serde_json::from_value(list.clone())
                .map_err(|e| RpcError::params(format!("`decisions`: {e}")))?;
            let token = d
                .get("view_token")
                .and_then(Value::as_str)
                .map(str::to_owned);
            decisions = Some((items, token));
        } else {
            return Err(RpcError::new(
                -32005,
                "only text and data parts are understood by this agent",
            ));
        }
    }
    let return_immediately = params
        .get("configuration")
        .and_then(|c| c.get("returnImmediately"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok((
        Incoming {
            message_id,
            context_id: m
                .get("contextId")
                .and_then(Value::as_str)
                .map(str::to_owned),
            task_id: m.get("taskId").and_then(Value::as_str).map(str::to_owned),
            text: texts.join("\n"),
            decisions,
        },
        return_immediately,
    ))
}

/// A native API decision object as a reins decision.
fn to_decision(item: &DecisionItem, kind: &RequirementKind) -> Result<Decision, RpcError> {
    let id = item.requirement_id.clone();
    let d = match item.action {
        Action::Approve => match &item.edited_args {
            Some(args) if args.is_object() => Decision::approve_with(id, args.clone()),
            Some(_) => return Err(RpcError::params("`edited_args` must be an object")),
            None => Decision::approve(id),
        },
        Action::Reject => Decision::reject(id, item.note.clone().unwrap_or_default()),
        Action::Input => Decision::input(
            id,
            item.values
                .clone()
                .ok_or_else(|| RpcError::params("`input` needs `values`"))?,
        ),
        Action::ExternalResult => Decision::external_result(
            id,
            item.output
                .clone()
                .ok_or_else(|| RpcError::params("`external_result` needs `output`"))?,
            item.is_error.unwrap_or(false),
        ),
    };
    if !d.fits(kind) {
        return Err(RpcError::params(format!(
            "`{}` does not answer a `{}` requirement",
            d.label(),
            kind.label()
        )));
    }
    Ok(d)
}

/// `SendMessage` / `SendStreamingMessage`.
async fn send_message(
    state: &AppState,
    who: &Principal,
    params: &Value,
    rpc_id: &Value,
    streaming: bool,
) -> Result<Response, RpcError> {
    let (msg, return_immediately) = incoming(params)?;
    let (session, handle, task_id, initial) = match &msg.task_id {
        Some(task_id) => {
            let task = load_task(state, who, task_id).await?;
            if msg
                .context_id
                .as_ref()
                .is_some_and(|c| *c != task.context_id)
            {
                return Err(RpcError::params(
                    "`contextId` differs from the task's context",
                ));
            }
            if task.state.is_terminal() {
                return Err(RpcError::unsupported(format!(
                    "task `{task_id}` has ended ({}); send a new message without `taskId`",
                    task.state.wire()
                )));
            }
            if task.state != TaskState::InputRequired {
                return Err(RpcError::unsupported(format!(
                    "task `{task_id}` is working; wait for it or cancel it"
                )));
            }
            let Some((items, token)) = &msg.decisions else {
                return Err(RpcError::params(
                    "the task waits for decisions: send a data part `{\"decisions\": [...]}`",
                ));
            };
            if !(who.has(AccessRole::Approver) || who.has(AccessRole::Admin)) {
                return Err(RpcError::new(
                    -32001,
                    format!(
                        "`{}` may not decide: that needs the approver or admin role",
                        who.name
                    ),
                ));
            }
            let mut decisions = Vec::with_capacity(items.len());
            for item in items {
                let Some(req) = task.pending.iter().find(|r| r.id == item.requirement_id) else {
                    return Err(RpcError::params(format!(
                        "`{}` is not pending on this task (pending: {})",
                        item.requirement_id,
                        task.pending
                            .iter()
                            .map(|r| r.id.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                };
                if !who.may_decide(&req.tool_use.name) {
                    return Err(RpcError::new(
                        -32001,
                        format!(
                            "`{}` may not decide on `{}` calls",
                            who.name, req.tool_use.name
                        ),
                    ));
                }
                decisions.push(to_decision(item, &req.kind)?);
            }
            if decisions.is_empty() {
                return Err(RpcError::params("no decisions given"));
            }
            let s = actor_session(state, who, &task.context_id).await?;
            let builder = s.resolve(decisions);
            let started = match token {
                Some(t) => {
                    let view: ViewToken = t
                        .parse()
                        .map_err(|_| RpcError::params("`view_token` is not a view token"))?;
                    builder.at(&view).start().await
                }
                None => builder.start().await,
            };
            let handle = started.map_err(|e| RpcError::from(ServerError::from(e)))?;
            let mut initial = task_json(&task, None, false);
            initial["status"] = json!({"state": TaskState::Working.wire()});
            (task.context_id.clone(), handle, task_id.clone(), initial)
        }
        None => {
            if msg.decisions.is_some() {
                return Err(RpcError::params(
                    "decisions go on the task that waits for them (`taskId`)",
                ));
            }
            if msg.text.trim().is_empty() {
                return Err(RpcError::params("the message has no text"));
            }
            let session = match &msg.context_id {
                Some(c) => {
                    validate_session_id(c).map_err(RpcError::from)?;
                    c.clone()
                }
                None => format!("{}a2a-{}", who.prefix(), uuid::Uuid::new_v4().simple()),
            };
            if !who.owns(&session) {
                return Err(RpcError::params(format!(
                    "context `{session}` is not yours (yours start with `{}`)",
                    who.prefix()
                )));
            }
            let user = Msg::user(msg.text.clone()).with_metadata(TASK_MARK, json!(msg.message_id));
            let task_id = task::task_id(&session, &user.id);
            // The run stores the message when it begins: the first answer is built here.
            let initial = json!({
                "id": task_id,
                "contextId": session,
                "status": {"state": TaskState::Working.wire()},
                "history": [{
                    "messageId": user.id, "contextId": session, "taskId": task_id,
                    "role": "ROLE_USER", "parts": [{"text": msg.text}],
                }],
            });
            let s = actor_session(state, who, &session).await?;
            let handle = s
                .send(user)
                .start()
                .await
                .map_err(|e| RpcError::from(ServerError::from(e)))?;
            (session, handle, task_id, initial)
        }
    };
    let answer = Answer {
        task_id,
        initial,
        rpc_id: rpc_id.clone(),
        streaming,
        return_immediately,
    };
    run_answer(state, who, session, handle, answer).await
}

/// How to answer a message that started (or continued) a run.
struct Answer {
    task_id: String,
    /// The task as it starts (`TASK_STATE_WORKING`).
    initial: Value,
    rpc_id: Value,
    streaming: bool,
    return_immediately: bool,
}

/// Answers a message that started (or continued) a run: the task when the run ends
/// (or at once), or an SSE stream of it.
async fn run_answer(
    state: &AppState,
    who: &Principal,
    session: String,
    handle: RunHandle,
    answer: Answer,
) -> Result<Response, RpcError> {
    let Answer {
        task_id,
        initial,
        rpc_id,
        streaming,
        return_immediately,
    } = answer;
    let sub = state.hub.channel(&session).subscribe(None);
    let run = state.hub.start_run(&session, handle);
    if !streaming {
        if return_immediately {
            // Answered once the task's message is stored (or the run ended), so that a
            // `tasks/get` that follows at once, on any instance, finds the task.
            let stored = async {
                while load_task(state, who, &task_id).await.is_err() {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            };
            tokio::select! {
                () = stored => {}
                _ = run.wait() => {}
                () = tokio::time::sleep(std::time::Duration::from_secs(10)) => {}
            }
            return Ok(rpc(&rpc_id, json!({"task": initial})));
        }
        let _ = run.wait().await;
        let task = load_task(state, who, &task_id).await?;
        return Ok(rpc(&rpc_id, json!({"task": task_json(&task, None, true)})));
    }
    let (tx, rx) = mpsc::channel(crate::sse::CLIENT_BUFFER);
    let state = state.clone();
    let who = who.clone();
    tokio::spawn(async move {
        let crate::hub::Subscription {
            mut rx, _channel, ..
        } = sub;
        let send = |v: Value| {
            let tx = tx.clone();
            let rpc_id = rpc_id.clone();
            async move {
                tx.send(Event::default().data(rpc_result(&rpc_id, v).to_string()))
                    .await
                    .is_ok()
            }
        };
        if !send(json!({"task": initial})).await {
            return;
        }
        // The run's end (its events go to the native streams; A2A gets the outcome).
        loop {
            match rx.recv().await {
                Ok(env) if env.run_id.as_deref() == Some(run.run_id.as_str()) && env.terminal => {
                    break;
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => {
                    let _ = run.wait().await;
                    break;
                }
            }
        }
        let Ok(task) = load_task(&state, &who, &task_id).await else {
            return;
        };
        if let Some(a) = task::answer_of(&task) {
            let update = json!({"artifactUpdate": {
                "taskId": task.id, "contextId": task.context_id,
                "artifact": a, "lastChunk": true,
            }});
            if !send(update).await {
                return;
            }
        }
        let _ = send(json!({"statusUpdate": {
            "taskId": task.id, "contextId": task.context_id,
            "status": task::status_of(&task),
        }}))
        .await;
    });
    Ok(crate::sse::respond(rx, state_keep_alive()))
}

fn state_keep_alive() -> Duration {
    Duration::from_secs(15)
}

/// `SubscribeToTask`: the task now, then its end if it is working here.
async fn subscribe(
    state: &AppState,
    who: &Principal,
    params: &Value,
    rpc_id: &Value,
) -> Result<Response, RpcError> {
    let id = id_param(params)?;
    let task = load_task(state, who, &id).await?;
    if task.state.is_terminal() {
        return Err(RpcError::unsupported(format!(
            "task `{id}` has ended ({})",
            task.state.wire()
        )));
    }
    let (tx, rx) = mpsc::channel(4);
    let _ = tx
        .send(
            Event::default().data(
                rpc_result(rpc_id, json!({"task": task_json(&task, None, true)})).to_string(),
            ),
        )
        .await;
    if task.state == TaskState::Working {
        if let Some(run) = state.hub.local_run(&task.context_id) {
            let state = state.clone();
            let who = who.clone();
            let rpc_id = rpc_id.clone();
            tokio::spawn(async move {
                let _ = run.wait().await;
                if let Ok(t) = load_task(&state, &who, &id).await {
                    let v = json!({"statusUpdate": {
                        "taskId": t.id, "contextId": t.context_id, "status": task::status_of(&t),
                    }});
                    let _ = tx
                        .send(Event::default().data(rpc_result(&rpc_id, v).to_string()))
                        .await;
                }
            });
        }
    }
    Ok(crate::sse::respond(rx, state_keep_alive()))
}
