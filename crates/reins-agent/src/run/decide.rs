//! Decisions on a paused run's requirements: validated against what waits (kind,
//! expiry, who may decide, quorums), then applied — a call approved, edited, rejected
//! or answered, and a sub-agent's requirement routed to its child. Validation comes
//! first: refused decisions change nothing.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use reins_message::{Msg, ToolOutcome, ToolResult};
use reins_tool::QuestionAnswer;
use serde_json::{Map, Value};

use super::input::child_id;
use super::{ChildInput, Phase, Run, SlotStatus, ToolSlot};
use crate::error::{AgentError, Result};
use crate::requirement::{Decision, RequirementKind};

impl Run {
    /// Applies decisions; `by_people`: they came from people (the eligibility policy is
    /// asked), not from the approval policy or a grant.
    pub(super) fn begin_decisions(
        &mut self,
        decisions: Vec<Decision>,
        now: DateTime<Utc>,
        by_people: bool,
    ) -> Result<()> {
        if self.state.phase != Phase::Paused {
            return Err(AgentError::NothingToResume {
                session: self.call.session.clone(),
            });
        }
        if decisions.is_empty() {
            return Err(AgentError::InvalidInput("no decisions given".to_owned()));
        }
        let pending: Vec<String> = self.requirements().into_iter().map(|r| r.id).collect();
        let mut seen = HashSet::new();
        // The budget's answer, checked first (nothing changes when it is refused).
        let budget_id = self.budget_requirement().map(|r| r.id.clone());
        let mut budget = None;
        for d in &decisions {
            if !seen.insert(d.id()) {
                return Err(AgentError::DuplicateDecision {
                    id: d.id().to_owned(),
                });
            }
            if Some(d.id()) == budget_id.as_deref() {
                if let Some(req) = self.budget_requirement() {
                    if by_people {
                        self.check_scope(req)?;
                    }
                    if let Some(shown) = d.shown_fingerprint() {
                        let current = req.fingerprint();
                        if shown != current {
                            return Err(AgentError::ShownArgumentsChanged {
                                id: req.id.clone(),
                                shown: shown.to_owned(),
                                current,
                            });
                        }
                    }
                }
                budget = Some((d.clone(), self.check_budget_decision(d)?));
                continue;
            }
            let Some(req) = self.state.slots.requirement(d.id()) else {
                return Err(AgentError::UnknownRequirement {
                    id: d.id().to_owned(),
                    pending: pending.clone(),
                });
            };
            if !d.fits(&req.kind) {
                return Err(AgentError::WrongDecision {
                    id: req.id.clone(),
                    decision: d.label(),
                    kind: req.kind.label(),
                });
            }
            if let Some(at) = req.expires_at.filter(|_| req.is_expired(now)) {
                return Err(AgentError::RequirementExpired {
                    id: req.id.clone(),
                    expired_at: at,
                });
            }
            if let Some(shown) = d.shown_fingerprint() {
                let current = req.fingerprint();
                if shown != current {
                    return Err(AgentError::ShownArgumentsChanged {
                        id: req.id.clone(),
                        shown: shown.to_owned(),
                        current,
                    });
                }
            }
            if by_people {
                self.check_scope(req)?;
                self.check_eligibility(req, d)?;
            }
            if let (Decision::Approve { edited_input, .. }, Some(q)) = (d, &req.quorum) {
                // Approving the arguments as shown is no edit.
                let edited = edited_input.as_ref().filter(|e| **e != req.tool_use.input);
                self.check_quorum_approval(req, q, d.decided_by(), edited)?;
            }
            if let Decision::Input { values, .. } = d {
                if !values.is_object() {
                    return Err(AgentError::InvalidInput(format!(
                        "input for `{}` must be a JSON object of the requested fields",
                        req.id
                    )));
                }
                // A tool's question is answered as asked: the schema is the tool's.
                if let (Some(_), RequirementKind::UserInput { fields }) =
                    (self.asking_slot(d.id()), &req.kind)
                {
                    if let Err(problems) = reins_tool::validate(fields, values) {
                        return Err(AgentError::InvalidInput(format!(
                            "the answer to `{}` does not match the question's fields: {}",
                            req.id,
                            problems.join("; ")
                        )));
                    }
                }
            }
        }
        // All valid: apply. Ending the run at its budget closes the whole turn.
        if let Some((d, extend)) = budget {
            self.apply_budget_decision(&d, extend, now);
            if extend.is_none() {
                return Ok(());
            }
        }
        let mut results = Vec::new();
        for d in decisions {
            if Some(d.id()) == budget_id.as_deref() {
                continue;
            }
            let d = match self.count_quorum_approval(d, now) {
                Some(d) => d,
                // Counted; the requirement waits for more approvals.
                None => continue,
            };
            let record = serde_json::to_value(&d).unwrap_or(Value::Null);
            let id = d.id().to_owned();
            self.req_ops.decide.push((id.clone(), record));
            // A sub-agent's requirement is recorded when its child session takes the
            // decision (the child may have moved on meanwhile): see the `subagent` module.
            if let Some(req) = self
                .state
                .slots
                .requirement(&id)
                .filter(|r| !r.is_nested())
                .cloned()
            {
                let (executed, note) = match &d {
                    Decision::Approve { edited_input, .. } => (
                        edited_input.clone().filter(|e| *e != req.tool_use.input),
                        None,
                    ),
                    Decision::Input { values, .. } => {
                        let mut merged = match &req.tool_use.input {
                            Value::Object(m) => m.clone(),
                            _ => Map::new(),
                        };
                        if let Value::Object(v) = values {
                            merged.extend(v.clone());
                        }
                        (Some(Value::Object(merged)), None)
                    }
                    Decision::Reject { note, .. } => (None, note.clone()),
                    Decision::ExternalResult { is_error, .. } => (
                        None,
                        Some(if *is_error { "failed" } else { "succeeded" }.to_owned()),
                    ),
                };
                self.log_decision(
                    &req,
                    d.label(),
                    "resolve",
                    d.decided_by(),
                    executed,
                    note,
                    now,
                );
            }
            if let Some(i) = self.asking_slot(&id) {
                if let SlotStatus::Asking { answer, .. } = &mut self.state.slots[i].status {
                    *answer = Some(match d {
                        Decision::Input { values, .. } => QuestionAnswer::Accept(values),
                        _ => QuestionAnswer::Decline,
                    });
                }
                continue;
            }
            if let Some(slot) = self.state.slots.delegating_mut(&id) {
                route(slot, d);
                continue;
            }
            let Some(slot) = self.state.slots.get_mut(&id) else {
                continue;
            };
            match d {
                Decision::Approve {
                    edited_input, by, ..
                } => {
                    let edited = edited_input
                        .as_ref()
                        .is_some_and(|e| *e != slot.tool_use.input);
                    slot.status = SlotStatus::Ready {
                        input: edited_input.unwrap_or_else(|| slot.tool_use.input.clone()),
                        edited,
                        approved_by: by,
                        dispatched: false,
                    };
                }
                Decision::Input { values, by, .. } => {
                    let mut merged = match &slot.tool_use.input {
                        Value::Object(m) => m.clone(),
                        _ => Map::new(),
                    };
                    if let Value::Object(v) = values {
                        merged.extend(v);
                    }
                    let input = Value::Object(merged);
                    slot.status = SlotStatus::Ready {
                        edited: input != slot.tool_use.input,
                        input,
                        approved_by: by,
                        dispatched: false,
                    };
                }
                Decision::Reject { note, by, .. } => {
                    let mut r = ToolResult::rejected(&slot.tool_use.id, &slot.tool_use.name, note);
                    if let Some(by) = by {
                        r = r.with_metadata("decided_by", Value::String(by));
                    }
                    slot.status = SlotStatus::Done {
                        outcome: r.outcome.clone(),
                    };
                    results.push(r);
                }
                Decision::ExternalResult {
                    output,
                    is_error,
                    by,
                    ..
                } => {
                    let text = match output {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    let outcome = if is_error {
                        ToolOutcome::Error
                    } else {
                        ToolOutcome::Success
                    };
                    let mut r = ToolResult::for_use(&slot.tool_use, outcome, text)
                        .with_metadata("executed_by", Value::String("external".to_owned()));
                    if let Some(by) = by {
                        r = r.with_metadata("decided_by", Value::String(by));
                    }
                    slot.status = SlotStatus::Done {
                        outcome: r.outcome.clone(),
                    };
                    results.push(r);
                }
            }
        }
        if !results.is_empty() {
            self.push(Msg::tool_results(results));
        }
        self.after_answers();
        Ok(())
    }
}

/// Routes a decision on a sub-agent's requirement to the child: the decision, with the
/// child's id, joins the answers the call is dispatched again with.
fn route(slot: &mut ToolSlot, decision: Decision) {
    let SlotStatus::Delegated {
        requirements,
        routed,
        ..
    } = &mut slot.status
    else {
        return;
    };
    let Some(req) = requirements.iter().find(|r| r.id == decision.id()) else {
        return;
    };
    let child = child_id(&req.path, &req.id);
    let decision = match decision {
        Decision::Approve {
            edited_input,
            by,
            shown,
            ..
        } => Decision::Approve {
            id: child,
            edited_input,
            by,
            shown,
        },
        Decision::Reject { note, by, .. } => Decision::Reject {
            id: child,
            note,
            by,
        },
        Decision::Input {
            values, by, shown, ..
        } => Decision::Input {
            id: child,
            values,
            by,
            shown,
        },
        Decision::ExternalResult {
            output,
            is_error,
            by,
            ..
        } => Decision::ExternalResult {
            id: child,
            output,
            is_error,
            by,
        },
    };
    match routed {
        Some(ChildInput::Decisions { decisions }) => decisions.push(decision),
        _ => {
            *routed = Some(ChildInput::Decisions {
                decisions: vec![decision],
            });
        }
    }
}
