//! The AG-UI wire: the request body ([`RunAgentInput`]), the events the endpoint
//! sends (built as JSON objects in AG-UI's camelCase), and reins messages as AG-UI
//! messages (for `MESSAGES_SNAPSHOT`).
//!
//! Field names follow `@ag-ui/core`'s schemas (protocol 1.0): events are objects with
//! a `type` in SCREAMING_SNAKE_CASE; optional fields are left out, never `null`.

use std::collections::HashSet;

use reins_message::{ContentBlock, Msg, Role, ToolResult};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// `RunAgentInput`: what an AG-UI client posts to start (or resume) a run.
///
/// Unknown members are ignored (the schema is open); `messages` are kept as JSON and
/// read by role, so that message kinds reins does not use (activity, reasoning) pass.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunAgentInput {
    /// The conversation: a reins session id.
    pub(crate) thread_id: String,
    /// The client's id for this run (echoed in `RUN_STARTED` / `RUN_FINISHED`).
    pub(crate) run_id: String,
    /// The whole conversation as the client has it.
    pub(crate) messages: Vec<Value>,
    /// The client's own tools (executed in the client: reins external execution).
    #[serde(default)]
    pub(crate) tools: Vec<InputTool>,
    /// Answers to the open interrupts of the thread.
    #[serde(default)]
    pub(crate) resume: Option<Vec<ResumeEntry>>,
}

/// A tool the client declares (`Tool` in `@ag-ui/core`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct InputTool {
    pub(crate) name: String,
    pub(crate) description: String,
    #[serde(default)]
    pub(crate) parameters: Option<Value>,
}

/// How an interrupt was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ResumeStatus {
    /// The person answered; `payload` carries the answer.
    Resolved,
    /// The person abandoned it.
    Cancelled,
}

/// One answer (`ResumeEntry` in `@ag-ui/core`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResumeEntry {
    pub(crate) interrupt_id: String,
    pub(crate) status: ResumeStatus,
    #[serde(default)]
    pub(crate) payload: Option<Value>,
}

/// An event: its type and fields.
pub(crate) fn event(kind: &str, fields: Value) -> Value {
    let mut o = Map::new();
    o.insert("type".to_owned(), Value::String(kind.to_owned()));
    if let Value::Object(f) = fields {
        for (k, v) in f {
            if !v.is_null() {
                o.insert(k, v);
            }
        }
    }
    Value::Object(o)
}

/// `RUN_ERROR` with a stable code and a sentence for a person.
pub(crate) fn run_error(code: &str, message: impl Into<String>) -> Value {
    event(
        "RUN_ERROR",
        json!({"code": code, "message": message.into()}),
    )
}

/// The text a tool result shows, for `TOOL_CALL_RESULT` and tool messages.
pub(crate) fn result_text(r: &ToolResult) -> String {
    let text = r.text();
    if text.is_empty() && !r.output.is_empty() {
        // Non-text output (an image, say): its JSON, rather than nothing.
        return serde_json::to_string(&r.output).unwrap_or_default();
    }
    text
}

/// The AG-UI messages of a stored transcript, oldest first. A tool message answering
/// several calls becomes one AG-UI tool message per call (`<message id>:<call id>`
/// after the first). System messages are left out: they are the agent's, not the
/// conversation's.
pub(crate) fn messages_of(transcript: &[Msg]) -> Vec<Value> {
    let mut out = Vec::with_capacity(transcript.len());
    for m in transcript {
        match m.role {
            Role::System => {}
            Role::User => {
                let text = m.text();
                out.push(json!({"id": m.id, "role": "user", "content": text}));
            }
            Role::Assistant => {
                let mut o = Map::new();
                o.insert("id".to_owned(), json!(m.id));
                o.insert("role".to_owned(), json!("assistant"));
                let text = m.text();
                if !text.is_empty() {
                    o.insert("content".to_owned(), json!(text));
                }
                let calls: Vec<Value> = m
                    .tool_uses()
                    .map(|u| {
                        json!({
                            "id": u.id,
                            "type": "function",
                            "function": {"name": u.name, "arguments": arguments_of(u)},
                        })
                    })
                    .collect();
                if !calls.is_empty() {
                    o.insert("toolCalls".to_owned(), Value::Array(calls));
                }
                out.push(Value::Object(o));
            }
            Role::Tool => {
                let results = m.content.iter().filter_map(|b| match b {
                    ContentBlock::ToolResult(r) => Some(r),
                    _ => None,
                });
                for (i, r) in results.enumerate() {
                    let id = if i == 0 {
                        m.id.clone()
                    } else {
                        format!("{}:{}", m.id, r.id)
                    };
                    let mut o = json!({
                        "id": id,
                        "role": "tool",
                        "toolCallId": r.id,
                        "content": result_text(r),
                    });
                    if r.is_error() {
                        o["error"] = json!(r.outcome.label());
                    }
                    out.push(o);
                }
            }
        }
    }
    out
}

/// The ids [`messages_of`] gives a transcript: what the client got from us.
pub(crate) fn known_ids(transcript: &[Msg]) -> HashSet<String> {
    messages_of(transcript)
        .iter()
        .filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// A call's arguments as the JSON text AG-UI carries.
pub(crate) fn arguments_of(u: &reins_message::ToolUse) -> String {
    match &u.raw_input {
        Some(raw) => raw.clone(),
        None => serde_json::to_string(&u.input).unwrap_or_else(|_| "{}".to_owned()),
    }
}

/// The text of an AG-UI message's `content` (a string, or parts of which the text
/// ones count).
pub(crate) fn content_text(content: Option<&Value>) -> Option<String> {
    match content? {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            Some(texts.join("\n"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use reins_message::ToolUse;

    #[test]
    fn transcripts_become_agui_messages_with_stable_ids() {
        let call = ToolUse::new("c1", "delete_file", json!({"path": "a.txt"}));
        let t = vec![
            Msg::user("hi").with_id("u1"),
            Msg::new(
                Role::Assistant,
                vec![ContentBlock::text("ok"), ContentBlock::ToolUse(call)],
            )
            .with_id("a1"),
            Msg::tool_results(vec![
                ToolResult::success("c1", "delete_file", "deleted"),
                ToolResult::error("c2", "x", "boom"),
            ])
            .with_id("t1"),
        ];
        let got = messages_of(&t);
        assert_eq!(got[0], json!({"id": "u1", "role": "user", "content": "hi"}));
        assert_eq!(
            got[1]["toolCalls"][0]["function"]["arguments"],
            json!(r#"{"path":"a.txt"}"#)
        );
        assert_eq!(got[2]["id"], json!("t1"));
        assert_eq!(got[3]["id"], json!("t1:c2"));
        assert!(got[3].get("error").is_some());
        assert_eq!(known_ids(&t).len(), 4);
    }

    #[test]
    fn events_leave_out_nulls() {
        let e = event(
            "TEXT_MESSAGE_START",
            json!({"messageId": "m", "name": null}),
        );
        assert_eq!(e, json!({"type": "TEXT_MESSAGE_START", "messageId": "m"}));
    }
}
