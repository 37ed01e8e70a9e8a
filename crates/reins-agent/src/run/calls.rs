//! The tool calls of the current assistant message and where each one is
//! ([`Calls`]): which wait for a person (and what they show), which are cleared to
//! run, which a sub-agent or a question holds, and what each dispatch hands the
//! driver (the arguments, answers routed to a child session, the answer to a
//! question). Stored with the run state, in the model's order.

use serde::{Deserialize, Serialize};

#[cfg(test)]
use super::ChildInput;
use super::{Execution, SlotStatus, ToolSlot};
use crate::requirement::Requirement;

/// The calls of the current turn, in the model's order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Calls(Vec<ToolSlot>);

impl std::ops::Deref for Calls {
    type Target = Vec<ToolSlot>;
    fn deref(&self) -> &Vec<ToolSlot> {
        &self.0
    }
}

impl std::ops::DerefMut for Calls {
    fn deref_mut(&mut self) -> &mut Vec<ToolSlot> {
        &mut self.0
    }
}

impl FromIterator<ToolSlot> for Calls {
    fn from_iter<I: IntoIterator<Item = ToolSlot>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a mut Calls {
    type Item = &'a mut ToolSlot;
    type IntoIter = std::slice::IterMut<'a, ToolSlot>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter_mut()
    }
}

impl<'a> IntoIterator for &'a Calls {
    type Item = &'a ToolSlot;
    type IntoIter = std::slice::Iter<'a, ToolSlot>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl Calls {
    /// What the calls wait for, in order; a sub-agent's requirements (with their
    /// [`Requirement::path`]) stand where its call is.
    pub(crate) fn requirements(&self) -> Vec<Requirement> {
        self.iter()
            .flat_map(|s| match &s.status {
                SlotStatus::Waiting { requirement }
                | SlotStatus::Asking {
                    requirement,
                    answer: None,
                    ..
                } => vec![requirement.clone()],
                SlotStatus::Delegated {
                    requirements,
                    routed: None,
                    ..
                } => requirements.clone(),
                _ => Vec::new(),
            })
            .collect()
    }

    /// Whether some call waits for an answer (its own requirement, or a paused
    /// sub-agent's, even one that waits for a bare `resume()`).
    pub(crate) fn has_waiting(&self) -> bool {
        self.iter().any(|s| {
            matches!(
                s.status,
                SlotStatus::Waiting { .. }
                    | SlotStatus::Delegated { routed: None, .. }
                    | SlotStatus::Asking { answer: None, .. }
            )
        })
    }

    /// The pending requirement `id` (a call's own, a question's, or a sub-agent's).
    pub(crate) fn requirement(&self, id: &str) -> Option<&Requirement> {
        self.iter().find_map(|s| match &s.status {
            SlotStatus::Waiting { requirement }
            | SlotStatus::Asking {
                requirement,
                answer: None,
                ..
            } if requirement.id == id => Some(requirement),
            SlotStatus::Delegated { requirements, .. } => requirements.iter().find(|r| r.id == id),
            _ => None,
        })
    }

    /// The requirement `id` of a call that waits for its own confirmation.
    pub(crate) fn waiting_mut(&mut self, id: &str) -> Option<&mut Requirement> {
        self.iter_mut().find_map(|s| match &mut s.status {
            SlotStatus::Waiting { requirement } if requirement.id == id => Some(requirement),
            _ => None,
        })
    }

    /// The call with tool use id `id`.
    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut ToolSlot> {
        self.iter_mut().find(|s| s.tool_use.id == id)
    }

    /// The sub-agent call that waits for the (qualified) requirement `id`.
    pub(crate) fn delegating_mut(&mut self, id: &str) -> Option<&mut ToolSlot> {
        self.iter_mut().find(|s| {
            matches!(&s.status, SlotStatus::Delegated { requirements, .. }
                if requirements.iter().any(|r| r.id == id))
        })
    }

    /// The tool use ids of the calls without a result.
    pub(crate) fn pending_ids(&self) -> Vec<String> {
        self.iter()
            .filter(|s| !matches!(s.status, SlotStatus::Done { .. }))
            .map(|s| s.tool_use.id.clone())
            .collect()
    }

    /// The answers routed to the sub-agent call `id`, when it waits to be dispatched
    /// again with them.
    #[cfg(test)]
    pub(crate) fn routed_input(&self, id: &str) -> Option<ChildInput> {
        self.iter().find_map(|s| match &s.status {
            SlotStatus::Delegated {
                routed: Some(input),
                ..
            } if s.tool_use.id == id => Some(input.clone()),
            _ => None,
        })
    }

    /// Hands out every call that can be dispatched now and was not yet: cleared
    /// calls with their arguments, sub-agent calls with the answers routed to them,
    /// calls in flight with the answer to their question. Each is marked dispatched.
    #[cfg(test)]
    pub(crate) fn dispatch(&mut self) -> Vec<Execution> {
        self.dispatch_within(None).0
    }

    /// [`Calls::dispatch`], starting at most `fresh_left` calls that were not started
    /// yet (`None`: any number; answers for calls already started always go). Returns
    /// the batch, how many fresh calls it starts, and whether a cleared call was held
    /// back by the limit.
    pub(crate) fn dispatch_within(
        &mut self,
        mut fresh_left: Option<u64>,
    ) -> (Vec<Execution>, u64, bool) {
        let mut batch = Vec::new();
        let mut fresh = 0;
        let mut held = false;
        for slot in self.iter_mut() {
            let e = match &mut slot.status {
                SlotStatus::Ready {
                    input,
                    edited,
                    dispatched,
                    ..
                } if !*dispatched => {
                    if fresh_left == Some(0) {
                        held = true;
                        continue;
                    }
                    fresh_left = fresh_left.map(|n| n - 1);
                    fresh += 1;
                    *dispatched = true;
                    Execution::new(slot.tool_use.clone(), input.clone(), *edited)
                }
                SlotStatus::Delegated {
                    routed: Some(routed),
                    dispatched,
                    ..
                } if !*dispatched => {
                    *dispatched = true;
                    Execution {
                        routed: Some(routed.clone()),
                        ..Execution::again(&slot.tool_use)
                    }
                }
                SlotStatus::Asking {
                    answer: Some(answer),
                    dispatched,
                    ..
                } if !*dispatched => {
                    *dispatched = true;
                    Execution {
                        answer: Some(answer.clone()),
                        ..Execution::again(&slot.tool_use)
                    }
                }
                _ => continue,
            };
            batch.push(e);
        }
        (batch, fresh, held)
    }

    /// Calls dispatched but never reported (the driver stopped short) become
    /// dispatchable again (the ledger keeps them at most once). Whether there were
    /// any.
    pub(crate) fn undispatch(&mut self) -> bool {
        let mut any = false;
        for slot in self.iter_mut() {
            if let SlotStatus::Ready { dispatched, .. }
            | SlotStatus::Delegated { dispatched, .. }
            | SlotStatus::Asking {
                answer: Some(_),
                dispatched,
                ..
            } = &mut slot.status
            {
                *dispatched = false;
                any = true;
            }
        }
        any
    }

    /// The calls cleared to run that have no result yet, as executions (after a
    /// crash: what the ledger must settle).
    pub(crate) fn unsettled(&self) -> Vec<Execution> {
        self.iter()
            .filter_map(|s| match &s.status {
                SlotStatus::Ready { input, edited, .. } => {
                    Some(Execution::new(s.tool_use.clone(), input.clone(), *edited))
                }
                // A sub-agent call dispatched with routed answers may have run them; a
                // call that asked a question was running.
                SlotStatus::Delegated {
                    routed: Some(_), ..
                }
                | SlotStatus::Asking { .. } => Some(Execution::again(&s.tool_use)),
                _ => None,
            })
            .collect()
    }

    /// The tool use ids of calls in flight waiting for an answer to a question.
    pub(crate) fn asking(&self) -> Vec<String> {
        self.iter()
            .filter(|s| matches!(s.status, SlotStatus::Asking { .. }))
            .map(|s| s.tool_use.id.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::requirement::RequirementKind;
    use reins_message::{ToolOutcome, ToolUse};
    use serde_json::json;

    fn slot(id: &str, status: SlotStatus) -> ToolSlot {
        ToolSlot {
            tool_use: ToolUse::new(id, "t", json!({"x": id})).into(),
            status,
        }
    }

    fn waiting(id: &str) -> SlotStatus {
        SlotStatus::Waiting {
            requirement: Requirement {
                id: id.into(),
                tool_use: ToolUse::new(id, "t", json!({})),
                kind: RequirementKind::Confirmation,
                reason: "r".into(),
                created_at: chrono::Utc::now(),
                expires_at: None,
                path: Vec::new(),
                agent: None,
                quorum: None,
            },
        }
    }

    fn ready() -> SlotStatus {
        SlotStatus::Ready {
            input: json!({"edited": true}),
            edited: true,
            approved_by: None,
            dispatched: false,
        }
    }

    #[test]
    fn each_call_is_dispatched_once_until_undispatched() {
        let mut calls: Calls = [
            slot("a", ready()),
            slot("b", waiting("b")),
            slot(
                "c",
                SlotStatus::Done {
                    outcome: ToolOutcome::Success,
                },
            ),
        ]
        .into_iter()
        .collect();
        let batch = calls.dispatch();
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].tool_use.id, "a");
        assert_eq!(batch[0].input, json!({"edited": true}));
        assert!(batch[0].edited);
        assert!(calls.dispatch().is_empty());
        assert!(calls.undispatch());
        assert_eq!(calls.dispatch().len(), 1);
        assert_eq!(calls.pending_ids(), ["a", "b"]);
        assert!(calls.has_waiting());
        assert_eq!(calls.requirements()[0].id, "b");
        assert_eq!(calls.unsettled().len(), 1);
    }

    #[test]
    fn routed_answers_and_question_answers_travel_with_the_dispatch() {
        let mut calls: Calls = [
            slot(
                "sub",
                SlotStatus::Delegated {
                    requirements: Vec::new(),
                    routed: Some(ChildInput::Resume),
                    dispatched: false,
                },
            ),
            slot(
                "ask",
                SlotStatus::Asking {
                    requirement: match waiting("ask~q") {
                        SlotStatus::Waiting { requirement } => requirement,
                        _ => unreachable!(),
                    },
                    answer: Some(reins_tool::QuestionAnswer::Decline),
                    dispatched: false,
                },
            ),
        ]
        .into_iter()
        .collect();
        let batch = calls.dispatch();
        assert_eq!(batch[0].routed, Some(ChildInput::Resume));
        assert_eq!(batch[0].input, json!({"x": "sub"}));
        assert_eq!(batch[1].answer, Some(reins_tool::QuestionAnswer::Decline));
        assert!(!calls.has_waiting());
        assert_eq!(calls.asking(), ["ask"]);
    }

    #[test]
    fn the_stored_form_is_the_list_of_slots() {
        let calls: Calls = [slot("a", waiting("a"))].into_iter().collect();
        let v = serde_json::to_value(&calls).unwrap();
        assert!(v.is_array());
        let back: Calls = serde_json::from_value(v).unwrap();
        assert_eq!(back, calls);
    }
}
