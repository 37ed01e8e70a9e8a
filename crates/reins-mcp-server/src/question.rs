//! A paused run's requirements as MCP elicitations, and the client's answers as reins
//! decisions. The same form serves both revisions: an `elicitation/create` request
//! the server sends (before 2026-07-28) and an entry of `inputRequests` (MRTR, and
//! the Tasks extension's `input_required`).

use reins_agent::{Decision, Requirement, RequirementKind};
use serde_json::{Value, json};

/// The metadata key that carries the requirement as reins sees it.
pub const REQUIREMENT_META: &str = "dev.reins/requirement";

/// The form for one requirement: `(message, requestedSchema, _meta)`.
pub(crate) fn form(agent: &str, r: &Requirement) -> (String, Value, Value) {
    let args = serde_json::to_string(&r.tool_use.input).unwrap_or_default();
    let who = r.agent.as_deref().unwrap_or(agent);
    let (message, schema) = match &r.kind {
        RequirementKind::Confirmation => (
            format!(
                "`{who}` wants to run `{}` with {args}: {}. Approve or reject.",
                r.tool_use.name, r.reason
            ),
            json!({
                "type": "object",
                "properties": {
                    "decision": {
                        "type": "string",
                        "title": "Decision",
                        "description": "approve runs the call; reject tells the agent no",
                        "enum": ["approve", "reject"]
                    },
                    "note": {
                        "type": "string",
                        "title": "Note",
                        "description": "Why (the agent sees it when you reject)"
                    }
                },
                "required": ["decision"]
            }),
        ),
        RequirementKind::UserInput { fields } => (
            format!(
                "`{who}` needs input to run `{}` with {args}: {}",
                r.tool_use.name, r.reason
            ),
            fields.clone(),
        ),
        RequirementKind::External => (
            format!(
                "`{who}` asks you to run `{}` with {args} and report the result: {}",
                r.tool_use.name, r.reason
            ),
            json!({
                "type": "object",
                "properties": {
                    "output": { "type": "string", "title": "Result", "description": "What the call returned" },
                    "is_error": { "type": "boolean", "title": "Failed", "description": "Whether the call failed", "default": false }
                },
                "required": ["output"]
            }),
        ),
        RequirementKind::Budget { .. } => (
            format!(
                "`{who}` has reached its budget: {}. Extend it or end the run.",
                r.reason
            ),
            json!({
                "type": "object",
                "properties": {
                    "decision": {
                        "type": "string",
                        "title": "Decision",
                        "description": "extend lets the run go on; end finishes it here",
                        "enum": ["extend", "end"]
                    },
                    "tokens": { "type": "integer", "minimum": 0, "title": "Token limit" },
                    "cost": { "type": "number", "minimum": 0, "title": "Cost limit" },
                    "tool_calls": { "type": "integer", "minimum": 0, "title": "Tool-call limit" },
                    "wall_secs": { "type": "integer", "minimum": 0, "title": "Active-time limit (s)" },
                    "note": { "type": "string", "title": "Note", "description": "Why the run ends" }
                },
                "required": ["decision"]
            }),
        ),
    };
    let meta = json!({
        REQUIREMENT_META: {
            "id": r.id,
            "kind": r.kind.label(),
            "tool": r.tool_use.name,
            "arguments": r.tool_use.input,
            "reason": r.reason,
            "expires_at": r.expires_at,
        }
    });
    (message, schema, meta)
}

/// The form as an `elicitation/create` request object (an `inputRequests` entry).
pub(crate) fn input_request(agent: &str, r: &Requirement) -> Value {
    let (message, schema, meta) = form(agent, r);
    json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": schema,
            "_meta": meta,
        }
    })
}

/// What one `ElicitResult` means for the requirement `id` of `kind`: a decision, or
/// nothing (the client dismissed it or sent something unreadable; the requirement stays
/// pending).
pub(crate) fn decision(
    id: &str,
    kind: &RequirementKind,
    answer: &Value,
    by: &str,
) -> Result<Decision, String> {
    let action = answer.get("action").and_then(Value::as_str).unwrap_or("");
    let content = answer.get("content").cloned().unwrap_or(Value::Null);
    let d = match action {
        "accept" => match kind {
            RequirementKind::Confirmation => {
                match content.get("decision").and_then(Value::as_str) {
                    Some("approve") => Decision::approve(id),
                    Some("reject") => Decision::reject(
                        id,
                        content
                            .get("note")
                            .and_then(Value::as_str)
                            .filter(|n| !n.is_empty())
                            .unwrap_or("rejected by the MCP client's user"),
                    ),
                    other => {
                        return Err(format!(
                            "the answer to `{}` must have decision \"approve\" or \"reject\", got {}",
                            id,
                            other.map_or_else(|| "nothing".to_owned(), |o| format!("{o:?}"))
                        ));
                    }
                }
            }
            RequirementKind::UserInput { fields } => {
                if let Err(problems) = reins_tool::validate(fields, &content) {
                    return Err(format!(
                        "the answer to `{}` does not match its schema: {}",
                        id,
                        problems.join("; ")
                    ));
                }
                Decision::input(id, content)
            }
            RequirementKind::Budget { .. } => match content.get("decision").and_then(Value::as_str)
            {
                Some("extend") => {
                    let limit: serde_json::Map<String, Value> =
                        ["tokens", "cost", "tool_calls", "wall_secs"]
                            .into_iter()
                            .filter_map(|k| {
                                content
                                    .get(k)
                                    .filter(|v| !v.is_null())
                                    .map(|v| (k.to_owned(), v.clone()))
                            })
                            .collect();
                    if limit.is_empty() {
                        Decision::approve(id)
                    } else {
                        // The run checks the new limit (a typed refusal when it is no limit).
                        Decision::approve_with(id, Value::Object(limit))
                    }
                }
                Some("end") => Decision::reject(
                    id,
                    content
                        .get("note")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                ),
                other => {
                    return Err(format!(
                        "the answer to `{}` must have decision \"extend\" or \"end\", got {}",
                        id,
                        other.map_or_else(|| "nothing".to_owned(), |o| format!("{o:?}"))
                    ));
                }
            },
            RequirementKind::External => {
                let Some(output) = content.get("output").and_then(Value::as_str) else {
                    return Err(format!(
                        "the answer to `{}` must carry the call's `output`",
                        id
                    ));
                };
                let is_error = content
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                Decision::external_result(id, output, is_error)
            }
        },
        "decline" => Decision::reject(id, "declined by the MCP client's user"),
        "cancel" => return Err(format!("the question about `{}` was dismissed", id)),
        other => {
            return Err(format!(
                "the answer to `{}` has action {other:?}; expected accept, decline or cancel",
                id
            ));
        }
    };
    Ok(d.by(by))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use chrono::Utc;
    use reins_message::ToolUse;

    fn req(kind: RequirementKind) -> Requirement {
        Requirement {
            id: "call_1".into(),
            tool_use: ToolUse::new("call_1", "delete_file", json!({ "path": "temp.txt" })),
            kind,
            reason: "`delete_file` needs confirmation".into(),
            created_at: Utc::now(),
            expires_at: None,
            path: vec![],
            agent: None,
            quorum: None,
        }
    }

    #[test]
    fn a_confirmation_is_a_form_with_the_tool_arguments_and_reason() {
        let v = input_request("ops", &req(RequirementKind::Confirmation));
        assert_eq!(v["method"], "elicitation/create");
        let msg = v["params"]["message"].as_str().unwrap();
        assert!(
            msg.contains("delete_file")
                && msg.contains("temp.txt")
                && msg.contains("needs confirmation"),
            "{msg}"
        );
        assert_eq!(
            v["params"]["requestedSchema"]["required"],
            json!(["decision"])
        );
        assert_eq!(
            v["params"]["_meta"][REQUIREMENT_META]["tool"],
            "delete_file"
        );
        assert_eq!(
            v["params"]["_meta"][REQUIREMENT_META]["arguments"]["path"],
            "temp.txt"
        );
    }

    #[test]
    fn answers_become_decisions_with_an_actor() {
        let r = req(RequirementKind::Confirmation);
        let d = decision(
            &r.id,
            &r.kind,
            &json!({ "action": "accept", "content": { "decision": "approve" } }),
            "alice",
        )
        .unwrap();
        assert_eq!(d.label(), "approve");
        assert_eq!(d.decided_by(), Some("alice"));
        let d = decision(
            &r.id,
            &r.kind,
            &json!({ "action": "accept", "content": { "decision": "reject", "note": "no" } }),
            "alice",
        )
        .unwrap();
        assert_eq!(d.label(), "reject");
        let d = decision(&r.id, &r.kind, &json!({ "action": "decline" }), "alice").unwrap();
        assert_eq!(d.label(), "reject");
        assert!(decision(&r.id, &r.kind, &json!({ "action": "cancel" }), "alice").is_err());
        assert!(
            decision(
                &r.id,
                &r.kind,
                &json!({ "action": "accept", "content": {} }),
                "alice"
            )
            .is_err()
        );

        let fields = json!({ "type": "object", "properties": { "reason": { "type": "string" } }, "required": ["reason"] });
        let r = req(RequirementKind::UserInput { fields });
        let d = decision(
            &r.id,
            &r.kind,
            &json!({ "action": "accept", "content": { "reason": "cleanup" } }),
            "bob",
        )
        .unwrap();
        assert_eq!(d.label(), "input");
        assert!(
            decision(
                &r.id,
                &r.kind,
                &json!({ "action": "accept", "content": { "reason": 3 } }),
                "bob"
            )
            .is_err()
        );
    }
}
