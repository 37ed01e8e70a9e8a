//! The Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) over reins sessions.
//!
//! A task is a reins session: its id is the session id, and its status is read through
//! the session port every time (`working` while a run executes, `input_required` while
//! the session is paused on requirements, `completed` / `cancelled` when the run
//! ended). Nothing about a task lives only in this process, so a decision made anywhere
//! that shares the sessions (reins-server's inbox, another instance of this server)
//! continues the same task, and any instance answers `tasks/get`, on either driver.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use reins_agent::port::Decide;
use reins_agent::run::Phase;
use reins_agent::{AgentError, RunStatus};
use reins_message::Role;
use rmcp::ErrorData as McpError;
use rmcp::model::{DetailedTask, GetTaskResult, Task, TaskPayload, TaskStatus};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Map, Value, json};

use crate::config::McpAgentServer;
use crate::handler::{
    SESSION_FIELD, agent_error, asked_of, decide, input_requests, is_working, unknown,
};

/// When the session (task) was created: the time in its UUIDv7, else now.
fn created_at(id: &str) -> DateTime<Utc> {
    id.rsplit('/')
        .next()
        .and_then(|u| uuid::Uuid::parse_str(u).ok())
        .and_then(|u| u.get_timestamp())
        .and_then(|t| {
            let (secs, nanos) = t.to_unix();
            DateTime::from_timestamp(i64::try_from(secs).ok()?, nanos)
        })
        .unwrap_or_else(Utc::now)
}

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn base(server: &McpAgentServer, id: &str, status: TaskStatus) -> Task {
    let mut task = Task::new(id, status, stamp(created_at(id)), stamp(Utc::now()))
        .with_poll_interval_ms(
            u64::try_from(server.inner.poll_interval.as_millis()).unwrap_or(u64::MAX),
        );
    if let Some(ttl) = server.inner.task_ttl {
        task = task.with_ttl_ms(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    }
    task
}

/// The seed state of a task just started.
pub(crate) fn working(server: &McpAgentServer, id: &str) -> Task {
    base(server, id, TaskStatus::Working).with_status_message("the agent is working")
}

/// A port error for a task: an unknown session is an unknown task.
fn task_error(id: &str, e: AgentError) -> McpError {
    match e {
        AgentError::Store(reins_memory::Error::SessionNotFound { .. }) => unknown("task", id),
        e => agent_error(e),
    }
}

/// `tasks/get`: the session's state as stored.
pub(crate) async fn get(
    server: &McpAgentServer,
    id: &str,
    ctx: &RequestContext<RoleServer>,
) -> Result<GetTaskResult, McpError> {
    let caller = server.caller(ctx)?;
    server.owned(id, &caller, "task")?;
    if server.is_running_here(id) {
        return Ok(GetTaskResult::new(DetailedTask::new(
            working(server, id),
            TaskPayload::Working,
        )));
    }
    let sessions = &server.inner.sessions;
    let view = sessions.view(id).await.map_err(|e| task_error(id, e))?;
    let agent = sessions.card().name.as_str();
    let (message, payload) = match view.phase {
        Phase::Paused if !view.requirements.is_empty() => {
            let reasons: Vec<&str> = view
                .requirements
                .iter()
                .map(|r| r.reason.as_str())
                .collect();
            (
                format!("waiting for a decision: {}", reasons.join("; ")),
                TaskPayload::InputRequired {
                    input_requests: input_requests(agent, &view.requirements)?,
                },
            )
        }
        Phase::Paused => (
            "paused by a hook; resume the session in reins".to_owned(),
            TaskPayload::Working,
        ),
        Phase::Finished(RunStatus::Cancelled) => {
            ("the run was interrupted".to_owned(), TaskPayload::Cancelled)
        }
        Phase::Finished(status) => {
            let messages = sessions
                .read(id, true)
                .await
                .map_err(|e| task_error(id, e))?
                .messages;
            let text = messages
                .iter()
                .rev()
                .find(|m| m.role == Role::Assistant)
                .map(reins_message::Msg::text)
                .unwrap_or_default();
            let status = if status == RunStatus::MaxIterations {
                "max_iterations"
            } else {
                "completed"
            };
            let result = json!({
                "resultType": "complete",
                "content": [{ "type": "text", "text": text }],
                "structuredContent": { SESSION_FIELD: id, "status": status },
                "isError": false,
            });
            let result: Map<String, Value> = result.as_object().cloned().unwrap_or_default();
            (
                "the agent answered".to_owned(),
                TaskPayload::Completed { result },
            )
        }
        ref p if is_working(p) => ("the agent is working".to_owned(), TaskPayload::Working),
        // Idle: stored, and the run not begun yet (a driver that runs the session
        // elsewhere may store the session before its first message), or between runs.
        _ => ("the agent is working".to_owned(), TaskPayload::Working),
    };
    let status = payload.status();
    Ok(GetTaskResult::new(DetailedTask::new(
        base(server, id, status).with_status_message(message),
        payload,
    )))
}

/// `tasks/update`: the answers become decisions on exactly the requirements pending
/// now; answers for anything else are ignored (as the extension asks). The decisions
/// go through the one decision path on the view read; one the run refuses (someone
/// decided it meanwhile: `already_decided`) is the call's error. The run goes on in
/// the background.
pub(crate) async fn update(
    server: &McpAgentServer,
    id: &str,
    responses: &BTreeMap<String, Value>,
    ctx: &RequestContext<RoleServer>,
) -> Result<(), McpError> {
    let caller = server.caller(ctx)?;
    server.owned(id, &caller, "task")?;
    let sessions = &server.inner.sessions;
    let view = sessions.view(id).await.map_err(|e| task_error(id, e))?;
    if !view.paused {
        return Ok(());
    }
    let asked = asked_of(&view.requirements);
    let (decisions, problems) = decide(
        asked.iter().map(|a| (a.id.as_str(), &a.kind)),
        responses,
        &caller.principal,
    );
    if decisions.is_empty() {
        if !problems.is_empty() {
            return Err(McpError::invalid_params(problems.join("; "), None));
        }
        return Ok(());
    }
    let decide = Decide::new(caller.actor(), decisions).at(view.token);
    let handle = sessions.decide(id, decide).await.map_err(agent_error)?;
    server.track(handle);
    Ok(())
}

/// `tasks/cancel`: interrupts the run, wherever it executes (through its handle when
/// this server follows it, through the port otherwise: the store when another
/// instance runs it, the driver when its own processes do). A task that waits for input has no run to stop; it
/// stays as it is.
pub(crate) async fn cancel(
    server: &McpAgentServer,
    id: &str,
    ctx: &RequestContext<RoleServer>,
) -> Result<(), McpError> {
    let caller = server.caller(ctx)?;
    server.owned(id, &caller, "task")?;
    let here = server.inner.running().get(id).cloned();
    if let Some(stop) = here {
        stop.interrupt();
        return Ok(());
    }
    server
        .inner
        .sessions
        .interrupt(id)
        .await
        .map_err(|e| task_error(id, e))?;
    Ok(())
}
