//! `session/request_permission`: a confirmation requirement shown in the editor with
//! the four options, and the person's choice read back.

use std::sync::Arc;

use reins_agent::Requirement;
use serde_json::{Value, json};

use crate::server::{Conn, Live};
use crate::update;

/// The person's answer to one permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Choice {
    AllowOnce,
    AllowAlways,
    RejectOnce,
    RejectAlways,
    /// The request was cancelled, failed, or answered with no option offered: nothing
    /// is decided.
    Cancelled,
}

/// The options offered for a confirmation: `(optionId, name, kind)`.
pub(crate) const OPTIONS: [(&str, &str, &str); 4] = [
    ("allow-once", "Allow once", "allow_once"),
    (
        "allow-always",
        "Allow always in this session",
        "allow_always",
    ),
    ("reject-once", "Reject", "reject_once"),
    (
        "reject-always",
        "Reject always in this session",
        "reject_always",
    ),
];

/// The options for a call the door runs through the client (no standing rule).
pub(crate) const ONCE: [(&str, &str, &str); 2] = [
    ("allow-once", "Allow", "allow_once"),
    ("reject-once", "Reject", "reject_once"),
];

/// The options for a reached budget: extend it (to the suggested limit shown in the
/// request) or end the run. There is no "always": an extension is one decision.
pub(crate) const BUDGET: [(&str, &str, &str); 2] = [
    ("allow-once", "Extend to the suggested limit", "allow_once"),
    ("reject-once", "End the run", "reject_once"),
];

fn options(which: &[(&str, &str, &str)]) -> Vec<Value> {
    which
        .iter()
        .map(|(id, name, kind)| json!({ "optionId": id, "name": name, "kind": kind }))
        .collect()
}

/// Reads the client's answer.
pub(crate) fn choice(answer: &Value, offered: &[(&str, &str, &str)]) -> Choice {
    let outcome = &answer["outcome"];
    if outcome["outcome"] != "selected" {
        return Choice::Cancelled;
    }
    let Some(id) = outcome["optionId"].as_str() else {
        return Choice::Cancelled;
    };
    if !offered.iter().any(|(o, _, _)| *o == id) {
        tracing::warn!(option = %id, "the client chose an option that was not offered; nothing decided");
        return Choice::Cancelled;
    }
    match id {
        "allow-once" => Choice::AllowOnce,
        "allow-always" => Choice::AllowAlways,
        "reject-once" => Choice::RejectOnce,
        "reject-always" => Choice::RejectAlways,
        _ => Choice::Cancelled,
    }
}

/// Asks about a confirmation requirement with the four options.
pub(crate) async fn ask(conn: &Arc<Conn>, live: &Live, r: &Requirement) -> Choice {
    ask_with(conn, live, r, &OPTIONS).await
}

/// Asks with these options.
pub(crate) async fn ask_with(
    conn: &Arc<Conn>,
    live: &Live,
    r: &Requirement,
    offered: &[(&str, &str, &str)],
) -> Choice {
    let mut call = conn
        .acp
        .inner
        .describe
        .call(&r.tool_use, &live.cwd, "pending");
    call["content"] = json!(update::text_content(&r.reason));
    let params = json!({
        "sessionId": live.id,
        "toolCall": call,
        "options": options(offered),
        "_meta": { "dev.reins/requirement": {
            "id": r.id,
            "kind": r.kind.label(),
            "reason": r.reason,
            "fingerprint": r.fingerprint(),
        }},
    });
    match conn
        .peer
        .request("session/request_permission", params)
        .await
    {
        Ok(answer) => choice(&answer, offered),
        Err(e) => {
            tracing::debug!(error = %e.message, "permission request failed; nothing decided");
            Choice::Cancelled
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_offered_selection_decides() {
        let sel = |id: &str| json!({"outcome": {"outcome": "selected", "optionId": id}});
        assert_eq!(choice(&sel("allow-once"), &OPTIONS), Choice::AllowOnce);
        assert_eq!(choice(&sel("allow-always"), &OPTIONS), Choice::AllowAlways);
        assert_eq!(choice(&sel("reject-once"), &OPTIONS), Choice::RejectOnce);
        assert_eq!(
            choice(&sel("reject-always"), &OPTIONS),
            Choice::RejectAlways
        );
        assert_eq!(choice(&sel("allow-always"), &ONCE), Choice::Cancelled);
        assert_eq!(choice(&sel("whatever"), &OPTIONS), Choice::Cancelled);
        assert_eq!(
            choice(&json!({"outcome": {"outcome": "cancelled"}}), &OPTIONS),
            Choice::Cancelled
        );
        assert_eq!(choice(&json!(null), &OPTIONS), Choice::Cancelled);
    }
}
