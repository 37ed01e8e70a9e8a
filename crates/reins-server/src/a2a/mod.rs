//! A2A (the Agent2Agent protocol, 1.0), JSON-RPC binding: other agents use a reins
//! agent as a remote agent.
//!
//! - `GET /.well-known/agent-card.json`: the agent card, generated from the agent (its
//!   name, one skill per toolkit tool, bearer auth, streaming, the JSON-RPC interface
//!   at `/a2a` on the host the card was asked from).
//! - `POST /a2a`: JSON-RPC 2.0 — `SendMessage`, `SendStreamingMessage` (SSE),
//!   `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask`, and the push
//!   notification configurations of a task ([`push`]: create, get, list, delete; every
//!   state change is pushed through the notification outbox). The extended card is not
//!   offered (its method answers with A2A's error).
//!
//! A context is a reins session (`contextId` = session id, under the same ownership
//! rules as `/v1/sessions/{id}`; a new one is `<prefix>a2a-<digest of the message
//! id>`), and a task is the turn one A2A message started in it (see [`task`] for the
//! states). A pause is `TASK_STATE_INPUT_REQUIRED`; its status message carries the
//! requirements and a view token as a data part, and a message on the task whose JSON
//! part is `{"decisions": [...], "view_token": "..."}` (the native API's decision
//! objects; see [`incoming`] for what JSON input is) decides, as its
//! sender, under the native API's roles and consent rules (a stale view is refused).
//! `CancelTask` interrupts the run (a paused task: its calls are rejected and the
//! run stops before the model is asked again). Tasks are read from the store, so any
//! instance sharing it answers for any task; [`list`] pages them with a keyset cursor.
//!
//! A message is stored under the client's `messageId` (a message without a
//! `contextId` gets a context derived from its id): sent again — a client's retry, on
//! any instance, or two identical sends at once — it is answered with the task it
//! started and runs nothing again, the way AG-UI recognises the ids of messages a
//! thread holds; a decision message sent again is answered with its task (see
//! [`decide`]).
//!
//! Errors are JSON-RPC error objects with A2A's codes (`-32001` task not found, which
//! is also what another principal's task looks like; `-32002` not cancelable; `-32003`
//! push notifications; `-32004` unsupported operation, also a decision on a
//! requirement someone else decided; `-32009` version; `-32600`, `-32601`, `-32602`,
//! `-32700`); A2A's errors carry a `google.rpc.ErrorInfo` in `data`. A missing or
//! unknown token is HTTP 401, as on the native API. A refused request changes nothing.

mod backend;
mod card;
mod decide;
mod incoming;
mod list;
pub(crate) mod push;
mod send;
mod task;

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use reins_agent::{Actor, Decision, ViewToken};
use serde_json::{Value, json};

use crate::auth::{AccessRole, Principal};
use crate::error::ServerError;
use crate::extract::Caller;
use crate::state::AppState;

use task::{TaskState, TaskView, parse_task_id, task_json, tasks_of};

/// The `domain` of the `google.rpc.ErrorInfo` A2A's errors carry.
const ERROR_DOMAIN: &str = "a2a-protocol.org";

/// The A2A routes.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/.well-known/agent-card.json", get(card::get_card))
        .route("/a2a", post(post_rpc))
}

/// A JSON-RPC error: A2A's code, a sentence, and what a program may want to read
/// (sent as a `google.rpc.ErrorInfo` in `data`).
#[derive(Debug, Clone)]
struct RpcError {
    code: i64,
    message: String,
    /// `ErrorInfo.metadata`: string values only.
    info: BTreeMap<String, String>,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            info: BTreeMap::new(),
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
        .with("taskId", id)
    }
    fn unsupported(message: impl Into<String>) -> Self {
        Self::new(-32004, message)
    }
    fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.info.insert(key.to_owned(), value.into());
        self
    }

    /// A decision on requirement `id`, which `decided` decided first: A2A's
    /// `UnsupportedOperationError` (the task no longer takes it, as a message on an ended
    /// task), saying what took effect, by whom, when and how, as the native API's
    /// `already_decided` does (see the `From<ServerError>` conversion). The same answer
    /// whatever the timing.
    fn already_decided(id: &str, decided: &reins_agent::Decided) -> Self {
        ServerError::already_decided(id, decided).into()
    }

    /// The `ErrorInfo.reason` of the error's code, as A2A names it.
    fn reason(&self) -> &'static str {
        match self.code {
            -32001 => "TASK_NOT_FOUND",
            -32002 => "TASK_NOT_CANCELABLE",
            -32003 => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            -32004 => "UNSUPPORTED_OPERATION",
            -32005 => "CONTENT_TYPE_NOT_SUPPORTED",
            -32009 => "VERSION_NOT_SUPPORTED",
            -32600 => "INVALID_REQUEST",
            -32601 => "METHOD_NOT_FOUND",
            -32602 => "INVALID_PARAMS",
            -32700 => "PARSE_ERROR",
            _ => "INTERNAL_ERROR",
        }
    }

    /// `error.data`: an `ErrorInfo` for A2A's own errors (`-32001`…`-32099`) and for
    /// any error that has something to say in it.
    fn data(&self) -> Option<Value> {
        let a2a = (-32099..=-32001).contains(&self.code);
        (a2a || !self.info.is_empty()).then(|| {
            json!([{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": self.reason(),
                "domain": ERROR_DOMAIN,
                "metadata": self.info,
            }])
        })
    }
}

impl From<ServerError> for RpcError {
    fn from(e: ServerError) -> Self {
        let code = match &e {
            ServerError::UnknownSession(_)
            | ServerError::Forbidden(_)
            | ServerError::NotEligible(_) => -32001,
            ServerError::BadBody(_)
            | ServerError::BadRequest(_)
            | ServerError::Invalid { .. }
            | ServerError::UnknownRequirement(_)
            | ServerError::StaleView { .. }
            | ServerError::FingerprintMismatch(_) => -32602,
            ServerError::Busy(_)
            | ServerError::NotPaused(_)
            | ServerError::AlreadyDecided { .. }
            | ServerError::AlreadyApproved(_)
            | ServerError::Unsupported(_) => -32004,
            _ => -32603,
        };
        let mut rpc = Self::new(code, format!("{} ({})", e, e.code())).with("reinsCode", e.code());
        if let ServerError::AlreadyDecided { decided, .. } = &e {
            for (key, field) in [
                ("decision", "decision"),
                ("decidedBy", "by"),
                ("decidedAt", "at"),
                ("decidedVia", "via"),
            ] {
                if let Some(v) = decided.get(field).and_then(Value::as_str) {
                    rpc = rpc.with(key, v);
                }
            }
        }
        rpc
    }
}

impl From<reins_agent::AgentError> for RpcError {
    fn from(e: reins_agent::AgentError) -> Self {
        match e {
            reins_agent::AgentError::AlreadyDecided { id, decided } => {
                Self::already_decided(&id, &decided)
            }
            e => ServerError::from(e).into(),
        }
    }
}

fn rpc_error(id: &Value, e: &RpcError) -> Value {
    let mut error = json!({"code": e.code, "message": e.message});
    if let Some(data) = e.data() {
        error["data"] = data;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
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
    // JSON-RPC 2.0: an id is a string, a number or null; anything else makes the
    // request invalid, answered with a null id.
    let id = match req.get("id") {
        None => Value::Null,
        Some(v @ (Value::Null | Value::String(_) | Value::Number(_))) => v.clone(),
        Some(_) => {
            return json_response(rpc_error(
                &Value::Null,
                &RpcError::new(
                    -32600,
                    "not a JSON-RPC 2.0 request: `id` must be a string, a number or null",
                ),
            ));
        }
    };
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
        "SendMessage" => send::send_message(&state, &who, &params, &id, false).await,
        "SendStreamingMessage" => send::send_message(&state, &who, &params, &id, true).await,
        "GetTask" => get_task(&state, &who, &params).await.map(|t| rpc(&id, t)),
        "ListTasks" => list::list_tasks(&state, &who, &params)
            .await
            .map(|t| rpc(&id, t)),
        "CancelTask" => cancel_task(&state, &who, &params)
            .await
            .map(|t| rpc(&id, t)),
        "SubscribeToTask" => send::subscribe(&state, &who, &params, &id).await,
        "CreateTaskPushNotificationConfig" => push::create(&state, &who, &params)
            .await
            .map(|t| rpc(&id, t)),
        "GetTaskPushNotificationConfig" => {
            push::get(&state, &who, &params).await.map(|t| rpc(&id, t))
        }
        "ListTaskPushNotificationConfigs" => {
            push::list(&state, &who, &params).await.map(|t| rpc(&id, t))
        }
        "DeleteTaskPushNotificationConfig" => push::delete(&state, &who, &params)
            .await
            .map(|t| rpc(&id, t)),
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
    let stored = match state.sessions.read(&session, true).await {
        Ok(s) => s,
        Err(reins_agent::AgentError::Store(reins_memory::Error::SessionNotFound { .. })) => {
            return Err(RpcError::not_found(id));
        }
        Err(e) => return Err(ServerError::from(e).into()),
    };
    let running = state.hub.local_run(&session).is_some();
    tasks_of(&session, stored, running)
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

/// The caller as the actor of what an A2A message does: `via: a2a`, and the A2A
/// `message_id` when the message is known.
fn a2a_actor(who: &Principal, message_id: Option<&str>) -> Actor {
    let mut actor = who.actor();
    let mut meta = match actor.metadata.take() {
        Some(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    meta.insert("via".to_owned(), json!("a2a"));
    if let Some(m) = message_id {
        meta.insert("message_id".to_owned(), json!(m));
    }
    actor.metadata = Some(Value::Object(meta));
    actor
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
                // Elsewhere: the port stores the request for the worker that runs it
                // (the local driver) or has the driver deliver it.
                if !state.sessions.interrupt(&session).await?.requested() {
                    return Err(RpcError::new(
                        -32002,
                        format!("task `{id}` has no run in flight that can be reached to cancel"),
                    ));
                }
                state.hub.notify(&session);
                wait_idle(state, &session).await;
            }
        }
        // A backend whose runs execute elsewhere takes decisions and interrupts apart:
        // rejecting the calls could let the model answer before the interrupt lands,
        // so the task would end completed rather than canceled. Refused rather than
        // run differently.
        TaskState::InputRequired if !state.sessions.runs_here() => {
            return Err(RpcError::new(
                -32002,
                format!(
                    "task `{id}` waits for decisions, and this server fronts a backend that cannot reject them and stop in one step: send a message on the task that rejects them"
                ),
            ));
        }
        TaskState::InputRequired => {
            // Nothing runs: reject what it waits for, and stop before the model.
            let decisions = task
                .pending
                .iter()
                .map(|r| Decision::reject(r.id.clone(), "the task was canceled"))
                .collect();
            let decide = reins_agent::port::Decide::new(a2a_actor(who, None), decisions)
                .at(ViewToken::of(true, &task.pending));
            let live = state.sessions.live(&session);
            let handle = state.sessions.decide(&session, decide).await?;
            handle.interrupt();
            let run = state.hub.start_run(&session, handle, live);
            let _ = run.wait().await;
        }
    }
    let task = load_task(state, who, &id).await?;
    Ok(task_json(&task, None, true))
}

/// Waits (bounded) until the session has no run in flight anywhere: on its change
/// notices, at most 10 s.
async fn wait_idle(state: &AppState, session: &str) {
    let mut notices = state.hub.notices();
    state.hub.ensure_poller(&state.sessions).await;
    let idle = async {
        loop {
            match state.sessions.view(session).await {
                Ok(v) if !v.is_running() => return,
                Err(_) => return,
                Ok(_) => crate::hub::wait_for_notice(&mut notices, session).await,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), idle).await;
}
