//! What a `tools/call` can answer on revision 2026-07-28 besides a result: an
//! `input_required` result (multi round-trip requests, SEP-2322) and a task (the Tasks
//! extension `io.modelcontextprotocol/tasks`, SEP-2663).
//!
//! rmcp 3.11 has the wire types and requests for both (`InputRequiredResult`,
//! `CreateTaskResult`, `Peer::get_task` / `update_task` / `cancel_task`); what is
//! written here is the mapping onto reins: an input request's elicitation becomes a
//! question of the call's own run (the run pauses with a user-input requirement, as
//! for `elicitation/create` on older revisions), and a task is followed by polling
//! until it ends, with an interrupt sent as `tasks/cancel`. Nothing relies on stream
//! resumption: a poll lost with its connection is simply asked again on a new one
//! (`tasks/get` changes nothing), while a lost `tools/call` keeps the fault rules of
//! [`crate::call`] (`Unknown` unless the tool is idempotent).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use reins_tool::{ToolContext, ToolError, ToolOutput};
use rmcp::model::{
    CallToolResult, CancelTaskParams, GetTaskParams, InputRequest, InputRequests, InputResponses,
    Task, TaskPayload, UpdateTaskParams,
};
use rmcp::service::ServiceError;
use serde_json::{Value, json};

use crate::connection::{Connection, elicit};

/// The most `input_required` rounds one call may take before it is given up.
pub(crate) const MAX_ROUNDS: usize = 8;

/// How many times in a row following a task may lose its connection.
const MAX_LOST_POLLS: u32 = 3;

/// Answers a server's input requests: elicitations as questions of this call's run
/// (or the configured callback), roots as an empty list; sampling is not offered.
pub(crate) async fn answer(
    conn: &Arc<Connection>,
    tool: &str,
    requests: InputRequests,
    ctx: &ToolContext,
) -> Result<InputResponses, ToolError> {
    let server = conn.name();
    let mut responses = InputResponses::new();
    for (key, request) in requests {
        let value = match request {
            InputRequest::Elicitation(r) => {
                let asker = (conn.config.elicit_in_runs && ctx.can_ask()).then(|| ctx.clone());
                let result = elicit(server, conn.config.elicitation.as_ref(), asker, r.params)
                    .await
                    .map_err(|e| {
                        ToolError::failed(format!(
                            "could not answer MCP server `{server}`'s question during `{tool}`: {}",
                            e.message
                        ))
                    })?;
                serde_json::to_value(result).unwrap_or(Value::Null)
            }
            InputRequest::ListRoots(_) => json!({ "roots": [] }),
            _ => {
                return Err(ToolError::failed(format!(
                    "MCP server `{server}` needs sampling (an LLM call by the client) to finish `{tool}`; \
                     reins-mcp does not offer sampling"
                )));
            }
        };
        responses.insert(key, value);
    }
    Ok(responses)
}

fn interval(task: &Task) -> Duration {
    Duration::from_millis(task.poll_interval_ms.unwrap_or(500).clamp(20, 5_000))
}

/// Sends `tasks/cancel` (best effort: the interrupt stands either way).
async fn cancel(conn: &Arc<Connection>, id: &str) {
    if let Some(live) = conn.current().await
        && let Err(e) = live
            .service
            .peer()
            .cancel_task(CancelTaskParams::new(id))
            .await
    {
        tracing::debug!(server = %conn.name(), task = %id, error = %e, "tasks/cancel failed");
    }
}

/// Follows a task until it ends; its answer is the call's.
pub(crate) async fn follow(
    conn: &Arc<Connection>,
    tool: &str,
    task: Task,
    ctx: &ToolContext,
) -> Result<ToolOutput, ToolError> {
    let server = conn.name().to_owned();
    let id = task.task_id.clone();
    let mut every = interval(&task);
    let mut answered: HashSet<String> = HashSet::new();
    let mut last_message = task.status_message.clone();
    let mut lost = 0u32;
    tracing::debug!(server = %server, tool, task = %id, "the call became a task");
    loop {
        tokio::select! {
            biased;
            () = ctx.cancelled() => {
                cancel(conn, &id).await;
                return Err(ToolError::Cancelled);
            }
            () = tokio::time::sleep(every) => {}
        }
        let live = match conn.live().await {
            Ok(live) => live,
            Err(e) => {
                lost += 1;
                if lost > MAX_LOST_POLLS {
                    return Err(ToolError::Unknown(format!(
                        "lost MCP server `{server}` while following task `{id}` of `{tool}` ({e}); \
                         the task may still run there"
                    )));
                }
                continue;
            }
        };
        let got = tokio::select! {
            biased;
            () = ctx.cancelled() => {
                cancel(conn, &id).await;
                return Err(ToolError::Cancelled);
            }
            r = live.service.peer().get_task(GetTaskParams::new(&id)) => r,
        };
        let got = match got {
            Ok(got) => got,
            Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                // Polling is safe to repeat: ask again on a new connection.
                conn.forget(live.generation).await;
                lost += 1;
                if lost > MAX_LOST_POLLS {
                    return Err(ToolError::Unknown(format!(
                        "lost MCP server `{server}` while following task `{id}` of `{tool}` ({e}); \
                         the task may still run there"
                    )));
                }
                continue;
            }
            Err(e) => {
                return Err(ToolError::failed(format!(
                    "MCP server `{server}` did not report task `{id}` of `{tool}`: {e}"
                )));
            }
        };
        lost = 0;
        let detailed = got.task;
        every = interval(&detailed.task);
        if detailed.task.status_message != last_message {
            if let Some(m) = &detailed.task.status_message {
                ctx.emit(format!("[task {}] {m}", status_label(&detailed.payload)));
            }
            last_message = detailed.task.status_message.clone();
        }
        match detailed.payload {
            TaskPayload::Working => {}
            TaskPayload::InputRequired { input_requests } => {
                let fresh: InputRequests = input_requests
                    .into_iter()
                    .filter(|(k, _)| !answered.contains(k))
                    .collect();
                if fresh.is_empty() {
                    continue;
                }
                let keys: Vec<String> = fresh.keys().cloned().collect();
                let responses = answer(conn, tool, fresh, ctx).await?;
                if ctx.is_cancelled() {
                    cancel(conn, &id).await;
                    return Err(ToolError::Cancelled);
                }
                let live = conn
                    .live()
                    .await
                    .map_err(|e| ToolError::failed(e.to_string()))?;
                live.service
                    .peer()
                    .update_task(UpdateTaskParams::new(&id, responses))
                    .await
                    .map_err(|e| {
                        ToolError::failed(format!(
                            "MCP server `{server}` did not take the answers for task `{id}`: {e}"
                        ))
                    })?;
                answered.extend(keys);
            }
            TaskPayload::Completed { result } => {
                let result: CallToolResult = serde_json::from_value(Value::Object(result))
                    .map_err(|e| {
                        ToolError::failed(format!(
                            "MCP server `{server}` finished task `{id}` of `{tool}` with something that is not a tool result: {e}"
                        ))
                    })?;
                return crate::call::to_output(&server, tool, result);
            }
            TaskPayload::Failed { error } => {
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message");
                let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
                return Err(ToolError::failed(format!(
                    "task `{id}` of `{tool}` on MCP server `{server}` failed: {message} (JSON-RPC error {code})"
                )));
            }
            TaskPayload::Cancelled => {
                return Err(ToolError::failed(format!(
                    "MCP server `{server}` cancelled task `{id}` of `{tool}` before it finished{}",
                    detailed
                        .task
                        .status_message
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                )));
            }
            _ => {}
        }
    }
}

fn status_label(p: &TaskPayload) -> &'static str {
    match p {
        TaskPayload::Working => "working",
        TaskPayload::InputRequired { .. } => "input_required",
        TaskPayload::Completed { .. } => "completed",
        TaskPayload::Failed { .. } => "failed",
        TaskPayload::Cancelled => "cancelled",
        _ => "unknown",
    }
}
