//! A2A tasks as reins turns: a task is the turn a user message sent over A2A started
//! in a session (the task's context). Nothing else is stored: the task's id names the
//! session and the message, and its state, history and answer are read from the
//! stored session, so any instance on the same store answers for any task.
//!
//! | reins | A2A `TaskState` |
//! |---|---|
//! | the turn's run executes | `TASK_STATE_WORKING` |
//! | the session is paused in this turn | `TASK_STATE_INPUT_REQUIRED` (the status message carries the requirements as a data part) |
//! | the turn ended with an answer | `TASK_STATE_COMPLETED` (the answer is the `answer` artifact) |
//! | the turn ended without one (interrupted, cancelled, failed) | `TASK_STATE_CANCELED` |

use chrono::{DateTime, Utc};
use reins_agent::Requirement;
use reins_message::{Msg, Role};
use serde_json::{Value, json};

use crate::types::SessionStatus;

/// The metadata key of a user message that started an A2A task (its A2A `messageId`).
pub(crate) const TASK_MARK: &str = "a2a_message_id";

/// A task id: the session id (hex, so that any id fits) and the message id.
pub(crate) fn task_id(session: &str, message: &str) -> String {
    let mut hex = String::with_capacity(session.len() * 2);
    for b in session.as_bytes() {
        hex.push_str(&format!("{b:02x}"));
    }
    format!("t{hex}.{message}")
}

/// The session and message a task id names, or `None` for something else.
pub(crate) fn parse_task_id(id: &str) -> Option<(String, String)> {
    let (hex, message) = id.strip_prefix('t')?.split_once('.')?;
    if hex.len() % 2 != 0 || message.is_empty() {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    Some((String::from_utf8(bytes?).ok()?, message.to_owned()))
}

/// How a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskState {
    Working,
    InputRequired,
    Completed,
    Canceled,
}

impl TaskState {
    pub(crate) fn wire(self) -> &'static str {
        match self {
            Self::Working => "TASK_STATE_WORKING",
            Self::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            Self::Completed => "TASK_STATE_COMPLETED",
            Self::Canceled => "TASK_STATE_CANCELED",
        }
    }

    /// Completed, failed, canceled or rejected: no more messages, no cancel.
    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Canceled)
    }

    /// The state named by a `TaskState` string (for list filters).
    pub(crate) fn from_wire(s: &str) -> Option<Self> {
        [
            Self::Working,
            Self::InputRequired,
            Self::Completed,
            Self::Canceled,
        ]
        .into_iter()
        .find(|t| t.wire() == s)
    }
}

/// One task read from a stored session.
#[derive(Debug, Clone)]
pub(crate) struct TaskView {
    pub(crate) id: String,
    pub(crate) context_id: String,
    pub(crate) state: TaskState,
    pub(crate) timestamp: DateTime<Utc>,
    /// The turn's messages.
    pub(crate) turn: Vec<Msg>,
    /// What it waits for (input required only).
    pub(crate) pending: Vec<Requirement>,
    pub(crate) view_token: String,
}

/// The tasks of a stored session, oldest first.
pub(crate) async fn tasks_of(
    session: &str,
    record: reins_agent::port::SessionRecord,
    running_here: bool,
) -> crate::error::Result<Vec<TaskView>> {
    let session = session.to_owned();
    let updated = record.updated_at;
    let messages = record.messages;
    let (detail, pending) = crate::view::detail(record.view, &[], updated, running_here);
    let starts: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::User)
        .map(|(i, _)| i)
        .collect();
    let mut out = Vec::new();
    for (n, &start) in starts.iter().enumerate() {
        let m = &messages[start];
        if !m.metadata.contains_key(TASK_MARK) {
            continue;
        }
        let end = starts.get(n + 1).copied().unwrap_or(messages.len());
        let turn: Vec<Msg> = messages[start..end].to_vec();
        let last = end == messages.len();
        let finished = || {
            let answered = turn.last().is_some_and(|m| {
                m.role == Role::Assistant && !m.text().is_empty() && !m.has_tool_uses()
            });
            if answered {
                TaskState::Completed
            } else {
                TaskState::Canceled
            }
        };
        let state = if last {
            match detail.status {
                SessionStatus::Running => TaskState::Working,
                SessionStatus::Paused => TaskState::InputRequired,
                SessionStatus::Idle => finished(),
            }
        } else {
            finished()
        };
        let timestamp = if last {
            updated
        } else {
            turn.last().map_or(m.created_at, |x| x.created_at)
        };
        out.push(TaskView {
            id: task_id(&session, &m.id),
            context_id: session.clone(),
            state,
            timestamp,
            pending: if state == TaskState::InputRequired {
                pending.clone()
            } else {
                Vec::new()
            },
            view_token: detail.view_token.clone(),
            turn,
        });
    }
    Ok(out)
}

/// A message of the turn as an A2A `Message` (text only; tool traffic stays in reins).
fn message_of(m: &Msg, task: &TaskView) -> Option<Value> {
    let role = match m.role {
        Role::User => "ROLE_USER",
        Role::Assistant => "ROLE_AGENT",
        _ => return None,
    };
    let text = m.text();
    if text.is_empty() {
        return None;
    }
    Some(json!({
        "messageId": m.id,
        "contextId": task.context_id,
        "taskId": task.id,
        "role": role,
        "parts": [{"text": text}],
    }))
}

/// The status message of a task waiting for decisions: a sentence, and the
/// requirements (reins's `Requirement` JSON) with the view token as a data part.
pub(crate) fn input_message(task: &TaskView) -> Value {
    let names: Vec<String> = task
        .pending
        .iter()
        .map(|r| format!("{} ({})", r.tool_use.name, r.kind.label()))
        .collect();
    let requirements: Vec<Value> = task
        .pending
        .iter()
        .filter_map(|r| serde_json::to_value(r).ok())
        .collect();
    json!({
        "messageId": format!("{}-input", task.id),
        "contextId": task.context_id,
        "taskId": task.id,
        "role": "ROLE_AGENT",
        "parts": [
            {"text": format!(
                "Waiting for decisions on: {}. Answer with a message on this task whose data part is {{\"decisions\": [...], \"view_token\": ...}}.",
                names.join(", ")
            )},
            {
                "data": {"requirements": requirements, "view_token": task.view_token},
                "mediaType": "application/json",
                "metadata": {"kind": "reins.requirements"},
            },
        ],
    })
}

/// The task's status object.
pub(crate) fn status_of(task: &TaskView) -> Value {
    let mut status = json!({
        "state": task.state.wire(),
        "timestamp": task.timestamp.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    });
    if task.state == TaskState::InputRequired {
        status["message"] = input_message(task);
    }
    status
}

/// The answer artifact of a completed task.
pub(crate) fn answer_of(task: &TaskView) -> Option<Value> {
    if task.state != TaskState::Completed {
        return None;
    }
    let text = task.turn.last()?.text();
    Some(json!({
        "artifactId": format!("{}-answer", task.id),
        "name": "answer",
        "parts": [{"text": text}],
    }))
}

/// The task as A2A's `Task` JSON; `history` limits the messages given (`None`: all).
pub(crate) fn task_json(task: &TaskView, history: Option<usize>, artifacts: bool) -> Value {
    let mut msgs: Vec<Value> = task
        .turn
        .iter()
        .filter_map(|m| message_of(m, task))
        .collect();
    if let Some(n) = history {
        let skip = msgs.len().saturating_sub(n);
        msgs.drain(..skip);
    }
    let mut t = json!({
        "id": task.id,
        "contextId": task.context_id,
        "status": status_of(task),
    });
    if !msgs.is_empty() {
        t["history"] = Value::Array(msgs);
    }
    if artifacts {
        if let Some(a) = answer_of(task) {
            t["artifacts"] = json!([a]);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn task_ids_name_their_session_and_message() {
        let id = task_id("alice/chat 1.x", "0190-ab");
        assert_eq!(
            parse_task_id(&id),
            Some(("alice/chat 1.x".to_owned(), "0190-ab".to_owned()))
        );
        for bad in ["", "t", "x61.m", "t6.m", "tzz.m", "t61.", "t61"] {
            assert_eq!(parse_task_id(bad), None, "{bad}");
        }
    }
}
