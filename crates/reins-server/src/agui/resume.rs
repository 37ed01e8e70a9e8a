//! Interrupts and resumes: a reins [`Requirement`] as an AG-UI interrupt, and an AG-UI
//! resume entry as a reins [`Decision`].
//!
//! | requirement | `reason` | `responseSchema` / `payload` |
//! |---|---|---|
//! | confirmation | `tool_call` | `{approved: boolean, editedArgs?: object, note?: string}` |
//! | user input | `input_required` | the requirement's own schema; the payload is the values |
//! | external execution | `reins:external_result` | `{output: any, isError?: boolean}` |
//! | budget reached | `reins:budget` | `{approved: boolean, limit?: object, note?: string}`: approve extends (to `limit`, else the suggested one), not approved ends the run |
//!
//! `status: "cancelled"` rejects the call, whatever its kind. An interrupt's id is the
//! requirement's id (the tool call's), so `toolCallId` names the same call.

use reins_agent::{Decision, DecisionRecord, Requirement, RequirementKind, Verdict};
use serde_json::{Value, json};

use super::wire::{ResumeEntry, ResumeStatus};

/// The interrupt `reason` of a requirement.
fn reason_of(kind: &RequirementKind) -> &'static str {
    match kind {
        RequirementKind::Confirmation => "tool_call",
        RequirementKind::UserInput { .. } => "input_required",
        RequirementKind::External => "reins:external_result",
        RequirementKind::Budget { .. } => "reins:budget",
    }
}

/// What a resume payload must look like for a requirement.
fn response_schema(kind: &RequirementKind) -> Value {
    match kind {
        RequirementKind::Confirmation => json!({
            "type": "object",
            "properties": {
                "approved": {"type": "boolean"},
                "editedArgs": {
                    "type": "object",
                    "description": "Full replacement of the tool's arguments (not merged)",
                },
                "note": {
                    "type": "string",
                    "description": "When not approved: why, for the model",
                },
            },
            "required": ["approved"],
        }),
        RequirementKind::UserInput { fields } if fields.is_object() => fields.clone(),
        RequirementKind::UserInput { .. } => json!({"type": "object"}),
        RequirementKind::External => json!({
            "type": "object",
            "properties": {
                "output": {"description": "The tool's result, shown to the model"},
                "isError": {"type": "boolean"},
            },
            "required": ["output"],
        }),
        RequirementKind::Budget { .. } => json!({
            "type": "object",
            "properties": {
                "approved": {
                    "type": "boolean",
                    "description": "true extends the budget, false ends the run",
                },
                "limit": {
                    "type": "object",
                    "description": "The new limit (fields replace the current ones; \
                                    without it, the suggested limit)",
                    "properties": {
                        "tokens": {"type": "integer", "minimum": 0},
                        "cost": {"type": "number", "minimum": 0},
                        "tool_calls": {"type": "integer", "minimum": 0},
                        "wall_secs": {"type": "integer", "minimum": 0},
                    },
                    "additionalProperties": false,
                },
                "note": {"type": "string", "description": "When not approved: why"},
            },
            "required": ["approved"],
        }),
    }
}

/// A requirement as an AG-UI `Interrupt`.
pub(crate) fn interrupt_of(r: &Requirement) -> Value {
    let mut reins = json!({
        "kind": r.kind.label(),
        "tool": r.tool_use.name,
        "arguments": r.tool_use.input,
    });
    if let Some(agent) = &r.agent {
        reins["agent"] = json!(agent);
    }
    if !r.path.is_empty() {
        reins["path"] = json!(r.path);
    }
    let mut i = json!({
        "id": r.id,
        "reason": reason_of(&r.kind),
        "message": r.reason,
        "toolCallId": r.tool_use.id,
        "responseSchema": response_schema(&r.kind),
        "metadata": {"reins": reins},
    });
    // A budget is no tool call of the transcript: the interrupt names none.
    if matches!(r.kind, RequirementKind::Budget { .. }) {
        if let Some(o) = i.as_object_mut() {
            o.remove("toolCallId");
        }
    }
    if let Some(t) = r.expires_at {
        i["expiresAt"] = json!(t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    }
    i
}

/// Why a resume entry cannot be applied (`RUN_ERROR` code and message).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refusal {
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl Refusal {
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// The decision a resume entry makes about `req`.
pub(crate) fn decision_of(entry: &ResumeEntry, req: &Requirement) -> Result<Decision, Refusal> {
    let id = req.id.clone();
    let bad = |what: &str| {
        Refusal::new(
            "invalid_payload",
            format!(
                "the resume payload for interrupt `{id}` ({}) {what}",
                req.kind.label(),
                id = req.id
            ),
        )
    };
    if entry.status == ResumeStatus::Cancelled {
        return Ok(Decision::reject(id, "cancelled in the user interface"));
    }
    let payload = entry.payload.as_ref().ok_or_else(|| bad("is missing"))?;
    match &req.kind {
        RequirementKind::Confirmation => {
            let o = payload
                .as_object()
                .ok_or_else(|| bad("must be an object `{approved, editedArgs?, note?}`"))?;
            let approved = o
                .get("approved")
                .and_then(Value::as_bool)
                .ok_or_else(|| bad("needs `approved` (a boolean)"))?;
            let edited = o.get("editedArgs").filter(|v| !v.is_null());
            let note = o.get("note").filter(|v| !v.is_null());
            if approved {
                if note.is_some() {
                    return Err(bad("has a `note`, which only a rejection carries"));
                }
                match edited {
                    None => Ok(Decision::approve(id)),
                    Some(args) if !args.is_object() => {
                        Err(bad("has `editedArgs` that is not an object"))
                    }
                    Some(args) if *args == req.tool_use.input => Ok(Decision::approve(id)),
                    Some(args) => Ok(Decision::approve_with(id, args.clone())),
                }
            } else {
                if edited.is_some() {
                    return Err(bad("has `editedArgs` but does not approve"));
                }
                let note = match note {
                    None => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(_) => return Err(bad("has a `note` that is not a string")),
                };
                Ok(Decision::reject(id, note))
            }
        }
        RequirementKind::UserInput { .. } => {
            if !payload.is_object() {
                return Err(bad("must be an object of the values asked for"));
            }
            Ok(Decision::input(id, payload.clone()))
        }
        RequirementKind::Budget { .. } => {
            let o = payload
                .as_object()
                .ok_or_else(|| bad("must be an object `{approved, limit?, note?}`"))?;
            let approved = o
                .get("approved")
                .and_then(Value::as_bool)
                .ok_or_else(|| bad("needs `approved` (a boolean)"))?;
            let limit = o.get("limit").filter(|v| !v.is_null());
            let note = o.get("note").filter(|v| !v.is_null());
            match (approved, limit, note) {
                (true, _, Some(_)) => Err(bad("has a `note`, which only an end carries")),
                (true, None, None) => Ok(Decision::approve(id)),
                // The run checks the limit itself (a typed refusal when it is not one).
                (true, Some(l), None) => Ok(Decision::approve_with(id, l.clone())),
                (false, Some(_), _) => Err(bad("has a `limit` but does not approve")),
                (false, None, None) => Ok(Decision::reject(id, "")),
                (false, None, Some(Value::String(s))) => Ok(Decision::reject(id, s.clone())),
                (false, None, Some(_)) => Err(bad("has a `note` that is not a string")),
            }
        }
        RequirementKind::External => {
            let o = payload
                .as_object()
                .ok_or_else(|| bad("must be an object `{output, isError?}`"))?;
            let output = o
                .get("output")
                .filter(|v| !v.is_null())
                .ok_or_else(|| bad("needs `output`"))?;
            let is_error = match o.get("isError") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(bad("has an `isError` that is not a boolean")),
            };
            Ok(Decision::external_result(id, output.clone(), is_error))
        }
    }
}

/// Whether a resume entry repeats what the audit trail says was already applied to
/// its interrupt: the same kind of answer and, for approvals and rejections, the same
/// arguments and note. `None` when the trail has no applied decision for it.
pub(crate) fn replays(entry: &ResumeEntry, trail: &[DecisionRecord]) -> Option<bool> {
    let rec = trail.iter().rev().find(|r| {
        r.requirement_id == entry.interrupt_id && matches!(r.verdict, Verdict::Applied)
    })?;
    let payload = entry.payload.as_ref();
    let same = match (entry.status, rec.decision.as_str()) {
        (ResumeStatus::Cancelled, "reject") => true,
        (ResumeStatus::Resolved, "approve") => {
            let approved = payload
                .and_then(|p| p.get("approved"))
                .and_then(Value::as_bool);
            let edited = payload
                .and_then(|p| p.get("editedArgs"))
                .filter(|v| !v.is_null())
                .filter(|v| **v != rec.shown_input);
            approved == Some(true) && edited == rec.executed_input.as_ref()
        }
        (ResumeStatus::Resolved, "reject") => {
            let approved = payload
                .and_then(|p| p.get("approved"))
                .and_then(Value::as_bool);
            let note = payload
                .and_then(|p| p.get("note"))
                .and_then(Value::as_str)
                .unwrap_or("");
            approved == Some(false) && rec.note.as_deref().unwrap_or("") == note
        }
        (ResumeStatus::Resolved, "input") => payload.is_some_and(Value::is_object),
        (ResumeStatus::Resolved, "external_result" | "tool_result") => {
            payload.is_some_and(|p| p.get("output").is_some())
        }
        _ => false,
    };
    Some(same)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use chrono::Utc;
    use reins_message::ToolUse;

    use super::*;

    fn req(kind: RequirementKind) -> Requirement {
        Requirement {
            id: "c1".into(),
            tool_use: ToolUse::new("c1", "delete_file", json!({"path": "a.txt"})),
            kind,
            reason: "`delete_file` needs confirmation".into(),
            created_at: Utc::now(),
            expires_at: None,
            path: Vec::new(),
            agent: None,
            quorum: None,
        }
    }

    fn entry(status: ResumeStatus, payload: Option<Value>) -> ResumeEntry {
        ResumeEntry {
            interrupt_id: "c1".into(),
            status,
            payload,
        }
    }

    #[test]
    fn payloads_map_onto_decisions() {
        let r = req(RequirementKind::Confirmation);
        let ok = |p: Value| decision_of(&entry(ResumeStatus::Resolved, Some(p)), &r);
        assert_eq!(
            ok(json!({"approved": true})).unwrap(),
            Decision::approve("c1")
        );
        assert_eq!(
            ok(json!({"approved": true, "editedArgs": {"path": "b.txt"}})).unwrap(),
            Decision::approve_with("c1", json!({"path": "b.txt"}))
        );
        assert_eq!(
            ok(json!({"approved": false, "note": "no"})).unwrap(),
            Decision::reject("c1", "no")
        );
        for bad in [
            json!(true),
            json!({}),
            json!({"approved": true, "editedArgs": 3}),
        ] {
            assert_eq!(ok(bad).unwrap_err().code, "invalid_payload");
        }
        let cancelled = decision_of(&entry(ResumeStatus::Cancelled, None), &r).unwrap();
        assert!(matches!(cancelled, Decision::Reject { .. }));
        let ext = req(RequirementKind::External);
        let d = decision_of(
            &entry(
                ResumeStatus::Resolved,
                Some(json!({"output": "42", "isError": false})),
            ),
            &ext,
        );
        assert_eq!(
            d.unwrap(),
            Decision::external_result("c1", json!("42"), false)
        );
    }

    #[test]
    fn interrupts_carry_schema_and_call() {
        let i = interrupt_of(&req(RequirementKind::UserInput {
            fields: json!({"type": "object", "properties": {"to": {"type": "string"}}}),
        }));
        assert_eq!(i["reason"], "input_required");
        assert_eq!(i["toolCallId"], "c1");
        assert_eq!(i["responseSchema"]["properties"]["to"]["type"], "string");
        assert!(i.get("expiresAt").is_none());
    }
}
