//! `SendMessage`, `SendStreamingMessage` and `SubscribeToTask`: an incoming A2A
//! message read as a user message or as decisions (the native API's decision objects
//! in a data part), the run it starts or continues, and its task followed to an
//! answer — at once, once the message is stored (`returnImmediately`), or as a stream
//! of task events.

use std::time::Duration;

use axum::response::Response;
use axum::response::sse::Event;
use reins_agent::{Decision, RequirementKind, RunHandle, ViewToken};
use reins_message::Msg;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use super::task::{TASK_MARK, TaskState, task_json};
use super::{RpcError, actor_session, id_param, load_task, rpc, rpc_result, task};
use crate::auth::{AccessRole, Principal};
use crate::error::ServerError;
use crate::extract::validate_session_id;
use crate::state::AppState;
use crate::types::{Action, DecisionItem};

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
pub(super) async fn send_message(
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
pub(super) async fn subscribe(
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
