//! A message on a task: the native API's decision objects (in a JSON part) decide on
//! what the task waits for, as the sender, under the native API's roles and consent
//! rules (the same checks and conversion as `POST /v1/sessions/{id}/decisions`).
//!
//! Second callers get the same answers as on the native API, whatever the timing:
//!
//! - **The same message sent again** (its `messageId` is recorded with the decisions
//!   it made, in the audit trail's actor metadata): answered with its task, as it
//!   stands or once it stops working; nothing is decided again.
//! - **A decision on a requirement someone else decided first** — another approver
//!   racing on another instance, or a late one: handed to the run as the native API
//!   does, which refuses it and records the refusal in the audit trail; the answer is
//!   `-32004` (A2A's `UnsupportedOperationError`, as for a message on an ended task)
//!   whose message and `ErrorInfo` metadata say what took effect, by whom, when and
//!   how (the native API's 409 `already_decided`). While the task still works, the
//!   answer waits (bounded) for the run in flight to store its decision, as the agent
//!   does.

use std::time::{Duration, Instant};

use axum::response::Response;
use reins_agent::{Session, Verdict};
use serde_json::{Value, json};

use super::incoming::Incoming;
use super::send::{Follow, Reply, answer};
use super::task::{TaskState, TaskView, task_json};
use super::{RpcError, actor_session, load_task};
use crate::auth::Principal;
use crate::sessions::decide::{parse_view, to_decision};
use crate::state::AppState;

/// How long a decision on a working task waits for its run to store the decision that
/// may have taken effect first (the agent's own bound for a busy session).
const DECIDED_WAIT: Duration = Duration::from_secs(2);

/// A message on `task`.
pub(super) async fn on_task(
    state: &AppState,
    who: &Principal,
    msg: &Incoming,
    task: TaskView,
    reply: Reply,
) -> Result<Response, RpcError> {
    let Some((items, token)) = &msg.decisions else {
        return Err(match task.state {
            _ if task.state.is_terminal() => ended(&task),
            TaskState::Working => working(&task),
            _ => RpcError::params(
                "the task waits for decisions: send a JSON part `{\"decisions\": [...], \"view_token\": ...}`",
            ),
        });
    };
    if !who.is_decider() {
        return Err(RpcError::new(
            -32001,
            format!(
                "`{}` may not decide: that needs the approver or admin role",
                who.name
            ),
        ));
    }
    if items.is_empty() {
        return Err(RpcError::params("no decisions given"));
    }
    let ids: Vec<String> = items.iter().map(|i| i.requirement_id.clone()).collect();
    let s = actor_session(state, who, &task.context_id, Some(&msg.message_id)).await?;
    let pending = |id: &str| {
        task.pending
            .iter()
            .find(|r| r.id == id && task.state == TaskState::InputRequired)
    };
    // This message sent again (a client's retry): its task.
    if ids.iter().any(|id| pending(id).is_none()) && sent_before(&s, who, msg, &ids).await? {
        return answer(state, who, &task.id, Follow::Stored, reply).await;
    }
    let mut decisions = Vec::with_capacity(items.len());
    for item in items {
        let req = pending(&item.requirement_id);
        match req {
            Some(req) if !who.may_decide(&req.tool_use.name) => {
                return Err(RpcError::new(
                    -32001,
                    format!(
                        "`{}` may not decide on `{}` calls",
                        who.name, req.tool_use.name
                    ),
                ));
            }
            Some(_) => {}
            // Decided by someone else first: handed to the run all the same, which
            // refuses it with the same answer whatever the timing and records the late
            // decision in the audit trail, as the native API does.
            None if decided_first(state, who, &s, &task, &item.requirement_id).await? => {}
            None => return Err(not_pending(&task, &item.requirement_id)),
        }
        decisions.push(to_decision(item, req)?);
    }
    let view = token.as_deref().map(parse_view).transpose()?;
    let input = reins_agent::RunInput::Decisions(decisions);
    let refused =
        match super::backend::start(state, who, &task.context_id, input, &msg.message_id, view)
            .await
        {
            Ok(Some((run, sub))) => {
                let mut initial = task_json(&task, None, false);
                initial["status"] = json!({"state": TaskState::Working.wire()});
                let follow = Follow::Run { run, sub, initial };
                return answer(state, who, &task.id, follow, reply).await;
            }
            Ok(None) => return answer(state, who, &task.id, Follow::Stored, reply).await,
            Err(e) => RpcError::from(e),
        };
    // Refused (another decision took effect first, say): unless by this message's own
    // twin, the same message sent twice at once.
    if sent_before(&s, who, msg, &ids).await? {
        return answer(state, who, &task.id, Follow::Stored, reply).await;
    }
    Err(refused)
}

/// The answer to a decision on requirement `id`, which the task does not wait for and
/// nobody decided.
fn not_pending(task: &TaskView, id: &str) -> RpcError {
    match task.state {
        _ if task.state.is_terminal() => ended(task),
        TaskState::Working => working(task),
        _ => RpcError::params(format!(
            "`{id}` is not pending on this task (pending: {})",
            task.pending
                .iter()
                .map(|r| r.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn ended(task: &TaskView) -> RpcError {
    RpcError::unsupported(format!(
        "task `{}` has ended ({}); send a new message without `taskId`",
        task.id,
        task.state.wire()
    ))
    .with("taskId", task.id.clone())
}

fn working(task: &TaskView) -> RpcError {
    RpcError::unsupported(format!(
        "task `{}` is working; wait for it or cancel it",
        task.id
    ))
    .with("taskId", task.id.clone())
}

/// Whether this message made these decisions already: every id has a decision that
/// took effect, by the caller, recorded with this message's id.
async fn sent_before(
    s: &Session,
    who: &Principal,
    msg: &Incoming,
    ids: &[String],
) -> Result<bool, RpcError> {
    let trail = s.decisions().await?;
    Ok(ids.iter().all(|id| {
        trail.iter().any(|r| {
            r.requirement_id == *id
                && r.verdict == Verdict::Applied
                && r.actor.as_ref().is_some_and(|a| {
                    a.principal == who.name
                        && a.metadata
                            .as_ref()
                            .and_then(|m| m.get("message_id"))
                            .and_then(Value::as_str)
                            == Some(msg.message_id.as_str())
                })
        })
    }))
}

/// Whether requirement `id`, which the task does not wait for, was decided by someone
/// (the audit trail says so). While the task works, the run in flight may be storing
/// that decision: wait for it, bounded.
async fn decided_first(
    state: &AppState,
    who: &Principal,
    s: &Session,
    task: &TaskView,
    id: &str,
) -> Result<bool, RpcError> {
    let deadline = Instant::now() + DECIDED_WAIT;
    let mut working = task.state == TaskState::Working;
    loop {
        if s.decided(id).await?.is_some() {
            return Ok(true);
        }
        if !working || Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        working = load_task(state, who, &task.id).await?.state == TaskState::Working;
    }
}
