//! Shared helpers for the integration tests: deterministic transcript builders and
//! the store conformance suite.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod conformance;

use chrono::{DateTime, TimeZone, Utc};
use reins_message::{ContentBlock, Msg, Role, ToolResult, ToolUse};
use serde_json::json;

/// A fixed point in time, `n` seconds after 2026-01-01.
pub fn at(n: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::seconds(n)
}

fn fixed(mut m: Msg, id: &str, n: i64) -> Msg {
    m.id = id.to_owned();
    m.created_at = at(n);
    m
}

/// A person's message with a fixed id and time.
pub fn user(id: &str, n: i64, text: &str) -> Msg {
    fixed(Msg::user(text), id, n)
}

/// An assistant message with text and tool uses `(id, name)`.
pub fn assistant(id: &str, n: i64, text: &str, uses: &[(&str, &str)]) -> Msg {
    let mut m = fixed(Msg::assistant(text), id, n);
    if text.is_empty() {
        m.content.clear();
    }
    for (uid, name) in uses {
        m.content.push(ContentBlock::ToolUse(ToolUse::new(
            *uid,
            *name,
            json!({ "arg": uid }),
        )));
    }
    m
}

/// A tool message holding the given results.
pub fn results(id: &str, n: i64, rs: Vec<ToolResult>) -> Msg {
    fixed(Msg::tool_results(rs), id, n)
}

/// Marks a message partially streamed.
pub fn partial(m: Msg) -> Msg {
    m.with_metadata(reins_memory::PARTIAL_KEY, json!(true))
}

/// Ids of the messages with the given role.
pub fn ids_with_role(ms: &[Msg], role: Role) -> Vec<String> {
    ms.iter()
        .filter(|m| m.role == role)
        .map(|m| m.id.clone())
        .collect()
}
