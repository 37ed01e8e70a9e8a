//! An incoming A2A message read: its ids, what it says for the model, and the
//! decisions it carries. Its `messageId` becomes the stored message's id: at most
//! 256 bytes, no control characters.
//!
//! The card's input modes are `text/plain` and `application/json`. A text part is
//! text; JSON is a data part, or a text part whose `mediaType` is `application/json`
//! (it must then hold a JSON document). JSON of the form `{"decisions": [...],
//! "view_token"?: ...}` decides on the task the message names; any other JSON goes to
//! the model as JSON text, in its place among the text parts. Files (`raw`, `url`)
//! are refused with `-32005`.

use serde_json::Value;

use super::RpcError;
use crate::types::DecisionItem;

/// The longest `messageId` taken (it is the stored message's id, and part of the task id).
const MAX_MESSAGE_ID: usize = 256;

/// An incoming A2A message.
pub(super) struct Incoming {
    /// The client's `messageId`: the stored message's id.
    pub(super) message_id: String,
    pub(super) context_id: Option<String>,
    pub(super) task_id: Option<String>,
    /// Its text parts and its JSON (other than decisions) as JSON text, in order,
    /// joined by newlines: the user message the model reads.
    pub(super) text: String,
    /// The decisions of a `{"decisions": ...}` JSON part, and its view token.
    pub(super) decisions: Option<(Vec<DecisionItem>, Option<String>)>,
    /// `configuration.returnImmediately`.
    pub(super) return_immediately: bool,
    /// `configuration.taskPushNotificationConfig`: where the new task's state changes
    /// are pushed.
    pub(super) push: Option<Value>,
}

/// Whether a part's `mediaType` says JSON (`application/json`, parameters aside).
fn is_json(part: &Value) -> bool {
    part.get("mediaType")
        .and_then(Value::as_str)
        .and_then(|m| m.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// Reads `params.message` (and its configuration) of `SendMessage`.
pub(super) fn incoming(params: &Value) -> Result<Incoming, RpcError> {
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
    if message_id.len() > MAX_MESSAGE_ID || message_id.chars().any(char::is_control) {
        return Err(RpcError::params(format!(
            "`message.messageId` must be at most {MAX_MESSAGE_ID} bytes without control characters (a UUID, say)"
        )));
    }
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
        let json = match (p.get("text").and_then(Value::as_str), p.get("data")) {
            (Some(t), _) if is_json(p) => serde_json::from_str::<Value>(t).map_err(|e| {
                RpcError::params(format!(
                    "a text part of media type application/json must hold a JSON document: {e}"
                ))
            })?,
            (Some(t), _) => {
                texts.push(t.to_owned());
                continue;
            }
            (None, Some(d)) => d.clone(),
            (None, None) => {
                return Err(RpcError::new(
                    -32005,
                    "only text/plain and application/json parts are understood by this agent (text and data parts)",
                ));
            }
        };
        match json.get("decisions") {
            Some(list) => {
                if decisions.is_some() {
                    return Err(RpcError::params("a message carries one `decisions` part"));
                }
                let items: Vec<DecisionItem> = crate::strict::from_value(list.clone())
                    .map_err(|e| RpcError::params(format!("`decisions`: {e}")))?;
                let token = json
                    .get("view_token")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                decisions = Some((items, token));
            }
            None => texts.push(json.to_string()),
        }
    }
    let return_immediately = params
        .get("configuration")
        .and_then(|c| c.get("returnImmediately"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let push = params
        .get("configuration")
        .and_then(|c| c.get("taskPushNotificationConfig"))
        .filter(|c| !c.is_null())
        .cloned();
    let id = |key: &str| {
        m.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    Ok(Incoming {
        message_id,
        context_id: id("contextId"),
        task_id: id("taskId"),
        text: texts.join("\n"),
        decisions,
        return_immediately,
        push,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn read(parts: Value) -> Result<Incoming, RpcError> {
        incoming(&json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": parts}}))
    }

    #[test]
    fn json_is_a_data_part_or_a_json_text_part() {
        let m = read(json!([{"text": "look:"}, {"data": {"city": "Oslo"}}])).unwrap();
        assert_eq!(m.text, "look:\n{\"city\":\"Oslo\"}");
        assert!(m.decisions.is_none());
        let d =
            r#"{"decisions": [{"requirement_id": "c1", "action": "approve"}], "view_token": "v"}"#;
        for part in [
            json!({"text": d, "mediaType": "application/json; charset=utf-8"}),
            json!({"data": serde_json::from_str::<Value>(d).unwrap()}),
        ] {
            let m = read(json!([part])).unwrap();
            let (items, token) = m.decisions.unwrap();
            assert_eq!(items[0].requirement_id, "c1");
            assert_eq!(token.as_deref(), Some("v"));
            assert_eq!(m.text, "");
        }
    }

    #[test]
    fn what_cannot_be_read_is_refused() {
        let code = |parts: Value| read(parts).err().map(|e| e.code);
        assert_eq!(
            code(json!([{"text": "{nope", "mediaType": "application/json"}])),
            Some(-32602)
        );
        assert_eq!(code(json!([{"url": "https://x/y.pdf"}])), Some(-32005));
        assert_eq!(code(json!([{"data": {"decisions": "all"}}])), Some(-32602));
        let two = json!({"decisions": []});
        assert_eq!(code(json!([{"data": two}, {"data": two}])), Some(-32602));
        assert_eq!(code(json!([])), Some(-32602));
        for id in ["a\nb".to_owned(), "x".repeat(MAX_MESSAGE_ID + 1)] {
            let m = json!({"message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": "hi"}]}});
            assert_eq!(incoming(&m).err().map(|e| e.code), Some(-32602));
        }
    }
}
