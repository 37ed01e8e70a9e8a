//! What a `tools/call` answers when it does not ask: the run's result, a paused run
//! that names where a person decides, or arguments the tool cannot take.
//!
//! Arguments that do not fit the tool's input schema, and a `session` the caller
//! does not own, are tool execution errors (a result with `isError: true` the caller
//! can act on), as the tools page of the spec (2025-11-25 and 2026-07-28, "Error
//! Handling") classes input validation errors; only an unknown tool or a request
//! that is not a `tools/call` at all stays a JSON-RPC error.

use reins_agent::{RunOutput, RunStatus};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use crate::handler::SESSION_FIELD;

/// A result from its parts (`resultType: complete`, which rmcp strips for peers
/// before 2026-07-28).
fn result(text: &str, structured: Value, is_error: bool) -> CallToolResult {
    let value = json!({
        "content": [{ "type": "text", "text": text }],
        "structuredContent": structured,
        "isError": is_error,
    });
    let mut result: CallToolResult =
        serde_json::from_value(value).unwrap_or_else(|_| CallToolResult::success(Vec::new()));
    result.result_type = Some(rmcp::model::ResultType::COMPLETE);
    result
}

/// The result for arguments the tool cannot take: nothing ran, and the text says
/// what to change.
pub(crate) fn invalid_arguments(problem: &str) -> CallToolResult {
    result(
        &format!(
            "invalid arguments: {problem}. Nothing ran; call again with `message` (a string) and, \
             to continue a conversation, the `session` of an earlier result"
        ),
        json!({ "status": "invalid_arguments" }),
        true,
    )
}

/// `inbox?session=<id>`: reins-server's inbox page opened on the session.
pub(crate) fn decide_link(inbox: &str, session: &str) -> String {
    let mut encoded = String::with_capacity(session.len() * 3);
    for b in session.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    let sep = if inbox.contains('?') { '&' } else { '?' };
    format!("{inbox}{sep}session={encoded}")
}

/// The `tools/call` result for a run's output. A paused run's result says what it
/// waits for and where a person decides it (`inbox`: reins-server's inbox page,
/// when the server knows it), for clients that could not be asked.
pub(crate) fn result_of(out: &RunOutput, inbox: Option<&str>) -> CallToolResult {
    let session = out.session_id.as_str();
    match out.status {
        RunStatus::Completed | RunStatus::MaxIterations => {
            let status = if out.status == RunStatus::Completed {
                "completed"
            } else {
                "max_iterations"
            };
            result(
                &out.message.text(),
                json!({ SESSION_FIELD: session, "status": status }),
                false,
            )
        }
        RunStatus::Cancelled => result(
            "the run was interrupted before it finished",
            json!({ SESSION_FIELD: session, "status": "cancelled" }),
            true,
        ),
        RunStatus::Paused => {
            let link = inbox.map(|i| decide_link(i, session));
            let waits: Vec<String> = out
                .requirements
                .iter()
                .map(|r| format!("`{}` ({})", r.tool_use.name, r.reason))
                .collect();
            let what = if waits.is_empty() {
                "the run paused".to_owned()
            } else {
                format!("the run waits for a decision on {}", waits.join(", "))
            };
            let where_ = match &link {
                Some(link) => format!("a person decides in the reins inbox: {link}"),
                None => format!(
                    "a person decides where this agent's approvals are handled (reins-server's \
                     inbox or its decision API), on session `{session}`"
                ),
            };
            let text = format!(
                "{what}. This MCP client was not asked (it declared no elicitation, or left the \
                 question unanswered), so {where_}. Then call this tool again with session \
                 `{session}` to continue."
            );
            let mut structured = json!({ SESSION_FIELD: session, "status": "paused" });
            if let Some(link) = link {
                structured["decide_at"] = Value::String(link);
            }
            result(&text, structured, true)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_link_opens_the_session_in_the_inbox() {
        assert_eq!(
            decide_link("http://127.0.0.1:8080/", "mcp/local/0192-ab"),
            "http://127.0.0.1:8080/?session=mcp%2Flocal%2F0192-ab"
        );
        assert_eq!(
            decide_link("https://ops.example.com/inbox?view=pending", "mcp/a b"),
            "https://ops.example.com/inbox?view=pending&session=mcp%2Fa%20b"
        );
    }
}
