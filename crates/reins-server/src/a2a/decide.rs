//! A message on a task: the native API's decision objects (in a JSON part) decide on
//! what the task waits for, as the sender, through the one decision path (the same
//! conversion as `POST /v1/sessions/{id}/decisions`; the run checks them).
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
//!   run's own rule applies (it waits, bounded, for the run in flight to store the
//!   decision that took effect).

use axum::response::Response;
use reins_agent::Verdict;
use serde_json::{Value, json};

use super::backend::NotStarted;
use super::incoming::Incoming;
use super::send::{Follow, Reply, answer};
use super::task::{TaskState, TaskView, task_json};
use super::{RpcError, load_task};
use crate::auth::Principal;
use crate::sessions::decide::{decisions, parse_view};
use crate::state::AppState;

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
    // What is pending, what someone decided first, who may decide which tool: the
    // run's checks, on the one decision path.
    let decisions = decisions(items)?;
    let view = token.as_deref().map(parse_view).transpose()?;
    let input = reins_agent::RunInput::Decisions(decisions);
    let refused =
        match super::backend::start(state, who, &task.context_id, input, &msg.message_id, view)
            .await
        {
            Ok((run, sub)) => {
                let mut initial = task_json(&task, None, false);
                initial["status"] = json!({"state": TaskState::Working.wire()});
                let follow = Follow::Run { run, sub, initial };
                return answer(state, who, &task.id, follow, reply).await;
            }
            Err(e) => e,
        };
    // Refused: unless by this message's own twin (the same message sent twice at once,
    // or a retry), whose decisions took effect: its task is the answer.
    if sent_before(state, who, msg, &ids).await? {
        return answer(state, who, &task.id, Follow::Stored, reply).await;
    }
    // Nothing decided it and the task does not wait for it: said as A2A says it for a
    // task that ended or works; otherwise the run's refusal as it is.
    let nothing_pending = matches!(
        &refused,
        NotStarted::Refused(
            reins_agent::AgentError::UnknownRequirement { .. }
                | reins_agent::AgentError::NothingToResume { .. }
        ) | NotStarted::Failed(
            crate::error::ServerError::UnknownRequirement(_)
                | crate::error::ServerError::NotPaused(_)
        )
    );
    Err(match task.state {
        _ if nothing_pending && task.state.is_terminal() => ended(&task),
        TaskState::Working if nothing_pending => working(&task),
        _ => RpcError::from(refused),
    })
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
    state: &AppState,
    who: &Principal,
    msg: &Incoming,
    ids: &[String],
) -> Result<bool, RpcError> {
    let Some(task) = msg.task_id.as_deref() else {
        return Ok(false);
    };
    let context = load_task(state, who, task).await?.context_id;
    let trail = state.sessions.audit(&context).await?;
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
