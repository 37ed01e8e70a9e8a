//! Approvals from several people ([`Quorum`](crate::Quorum)), and decisions the driver
//! makes without a person (a standing grant or the application's approval policy).
//!
//! Under a quorum, an approval is counted on the waiting requirement (in the run state,
//! so every reader of the session sees the count) and the requirement stays pending
//! until the count is reached; the approval that reaches it clears the call like any
//! approval. Each approver counts once: a second approval by the same approver is
//! refused ([`AgentError::AlreadyApproved`]); one rejection closes the requirement.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Consult, Event, Run, SlotStatus};
use crate::error::{AgentError, Result};
use crate::requirement::{Approval, Decision, QuorumState, Requirement, RequirementKind};
use crate::view::QuorumCount;

/// How a call was decided without a person
/// ([`Event::DecidedWithoutAsking`](super::Event::DecidedWithoutAsking)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AutoDecision {
    /// A standing grant allowed it.
    Grant {
        /// The grant's id.
        id: String,
    },
    /// A standing deny rule (a grant with `effect: deny`) rejected it.
    GrantDeny {
        /// The rule's id.
        id: String,
        /// For the model.
        note: String,
    },
    /// The application's policy allowed it.
    PolicyAllow {
        /// Why (recorded as the note).
        reason: String,
        /// The hash of the policy set that allowed it, when the policy names one
        /// (recorded in the audit trail, signed into the receipt).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy_hash: Option<String>,
    },
    /// The application's policy denied it (the call is rejected with the note).
    PolicyDeny {
        /// For the model.
        note: String,
        /// The hash of the policy set that denied it, when the policy names one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy_hash: Option<String>,
    },
}

/// The answer to a [`Step::Consult`](super::Step::Consult): what the approval policy
/// and the standing grants decided without asking a person (by requirement id; the
/// requirements they left undecided are asked), and when. Serializable, so a driver
/// that journals its steps can journal it; fed back as
/// [`Event::DecidedWithoutAsking`] (`From`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Consulted {
    /// (requirement id, how it was decided); empty: people are asked.
    pub decisions: Vec<(String, AutoDecision)>,
    /// (requirement id, why a person is asked) for requirements the policy left to
    /// people with a reason ([`PolicyVerdict::AskBecause`](crate::PolicyVerdict::AskBecause)):
    /// added to the requirement's reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asked: Vec<(String, String)>,
    /// When.
    pub now: DateTime<Utc>,
}

impl From<Consulted> for Event {
    fn from(c: Consulted) -> Self {
        Event::DecidedWithoutAsking {
            decisions: c.decisions,
            asked: c.asked,
            now: c.now,
        }
    }
}

impl AutoDecision {
    /// Who the decision is recorded as made by.
    pub fn by(&self) -> String {
        match self {
            Self::Grant { id } | Self::GrantDeny { id, .. } => format!("grant:{id}"),
            Self::PolicyAllow { .. } | Self::PolicyDeny { .. } => "policy".to_owned(),
        }
    }

    /// The decision it makes on requirement `id`.
    pub fn decision(&self, id: &str) -> Decision {
        match self {
            Self::Grant { .. } | Self::PolicyAllow { .. } => Decision::approve(id),
            Self::PolicyDeny { note, .. } | Self::GrantDeny { note, .. } => {
                Decision::reject(id, note.clone())
            }
        }
        .by(self.by())
    }
}

/// The refusal of an approval that cannot count towards the requirement's quorum.
fn not_counted(id: &str, why: &str) -> String {
    format!("the approval of `{id}` cannot count towards its quorum: {why}")
}

impl Run {
    /// The call's actor may decide only on the tools a door scoped it to
    /// ([`crate::Actor::decides_on`]); checked for every decision of a call made by an
    /// actor with a scope, before anything changes.
    pub(super) fn check_scope(&self, req: &Requirement) -> Result<()> {
        let Some(actor) = &self.call.actor else {
            return Ok(());
        };
        let Some(tools) = actor.decides_on() else {
            return Ok(());
        };
        if tools.contains(&req.tool_use.name) {
            return Ok(());
        }
        Err(AgentError::NotEligible {
            id: req.id.clone(),
            reason: format!(
                "`{}` may decide only on calls of {}, and this is a call of `{}`",
                actor.principal,
                if tools.is_empty() {
                    "no tool".to_owned()
                } else {
                    tools
                        .iter()
                        .map(|t| format!("`{t}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                req.tool_use.name
            ),
        })
    }

    /// Asks the agent's eligibility policy, when it has one, whether the decision's
    /// author may approve or reject this tool call; before anything changes.
    pub(super) fn check_eligibility(&self, req: &Requirement, d: &Decision) -> Result<()> {
        let Some(rules) = &self.call.eligibility else {
            return Ok(());
        };
        let approve = match d {
            Decision::Approve { .. } => true,
            Decision::Reject { .. } => false,
            _ => return Ok(()),
        };
        if !matches!(req.kind, RequirementKind::Confirmation) {
            return Ok(());
        }
        let named = d.decided_by();
        let bare;
        let actor = match (&self.call.actor, named) {
            (Some(a), None) => Some(a),
            (Some(a), Some(by)) if a.principal == by => Some(a),
            (_, Some(by)) => {
                bare = crate::view::Actor::new(by);
                Some(&bare)
            }
            (None, None) => None,
        };
        let mut ask = crate::eligibility::DecideRequest::new(
            &self.call.session,
            &req.id,
            &req.tool_use.name,
            &req.tool_use.input,
        )
        .actor(actor);
        ask.agent = req.agent.as_deref();
        ask.path = &req.path;
        ask.quorum = req.quorum.is_some();
        ask.approve = approve;
        match rules.0.may_decide(ask) {
            crate::eligibility::Eligibility::Eligible => Ok(()),
            crate::eligibility::Eligibility::Refused { reason } => {
                // "Cannot count towards its quorum" only where there is one to count
                // towards; otherwise who may not make this decision.
                let reason = if approve && req.quorum.is_some() {
                    not_counted(&req.id, &reason)
                } else {
                    format!(
                        "{} may not {} `{}` (a `{}` call): {reason}",
                        actor.map_or_else(
                            || "a decision that names no one".to_owned(),
                            |a| format!("`{}`", a.principal)
                        ),
                        if approve { "approve" } else { "reject" },
                        req.id,
                        req.tool_use.name
                    )
                };
                Err(AgentError::NotEligible {
                    id: req.id.clone(),
                    reason,
                })
            }
        }
    }

    /// Checks an approval under a quorum before anything changes.
    pub(super) fn check_quorum_approval(
        &self,
        req: &Requirement,
        q: &QuorumState,
        by: Option<&str>,
        edited: Option<&Value>,
    ) -> Result<()> {
        let by = by.or_else(|| self.call.actor.as_ref().map(|a| a.principal.as_str()));
        let Some(by) = by else {
            return Err(AgentError::NotEligible {
                id: req.id.clone(),
                reason: not_counted(
                    &req.id,
                    &format!(
                        "it needs approvals from {} distinct approvers, and this approval names \
                         none (set `by`, or act as an actor)",
                        q.needed
                    ),
                ),
            });
        };
        if q.approved_by(by) {
            return Err(AgentError::AlreadyApproved {
                id: req.id.clone(),
                by: by.to_owned(),
                needed: q.needed,
                count: u32::try_from(q.approvals.len()).unwrap_or(u32::MAX),
            });
        }
        if !q.roles.is_empty() {
            let roles = match &self.call.actor {
                Some(a) if a.principal == by => a.roles(),
                _ => Vec::new(),
            };
            if !roles.iter().any(|r| q.roles.contains(r)) {
                return Err(AgentError::NotEligible {
                    id: req.id.clone(),
                    reason: not_counted(
                        &req.id,
                        &format!(
                            "only approvers with one of the roles {} count, and `{by}` has {}",
                            q.roles.join(", "),
                            if roles.is_empty() {
                                "none".to_owned()
                            } else {
                                roles.join(", ")
                            }
                        ),
                    ),
                });
            }
        }
        if edited.is_some_and(|e| *e != req.tool_use.input) {
            return Err(AgentError::InvalidInput(format!(
                "`{}` needs approvals from {} distinct approvers of the same arguments; an \
                 approval cannot edit them (reject it and ask again instead)",
                req.id, q.needed
            )));
        }
        Ok(())
    }

    /// Counts a (checked) approval under a quorum. `Some(d)`: the decision goes on as
    /// usual (not under a quorum, or the approval that completes it); `None`: it was
    /// counted, recorded in the audit trail, and the requirement waits for more.
    pub(super) fn count_quorum_approval(
        &mut self,
        d: Decision,
        now: DateTime<Utc>,
    ) -> Option<Decision> {
        let Decision::Approve { id, by, .. } = &d else {
            return Some(d);
        };
        let actor = self.call.actor.as_ref().map(|a| a.principal.clone());
        let Some(slot) = self.state.slots.get_mut(id) else {
            return Some(d);
        };
        let SlotStatus::Waiting { requirement } = &mut slot.status else {
            return Some(d);
        };
        let Some(q) = requirement.quorum.as_mut() else {
            return Some(d);
        };
        // Checked before: an approval under a quorum names its approver.
        let Some(by) = by.clone().or(actor) else {
            return Some(d);
        };
        q.approvals.push(Approval { by, at: now });
        let count = QuorumCount {
            approvals: u32::try_from(q.approvals.len()).unwrap_or(u32::MAX),
            needed: q.needed,
        };
        let req = requirement.clone();
        if count.approvals >= count.needed {
            // The approval that completes the quorum clears the call as usual.
            return Some(d);
        }
        self.log_decision(&req, "approve", "resolve", d.decided_by(), None, None, now);
        None
    }

    /// The [`Step::Consult`] for the confirmations this call's reasoning raised that
    /// still wait, before the run pauses for them (the same one again while it is not
    /// answered); `None` when there is nothing to consult.
    pub(super) fn consult_step(&mut self, waiting: &[Requirement]) -> Option<Consult> {
        if self.call.consulting.is_none() {
            let fresh = std::mem::take(&mut self.call.consult);
            let asked: Vec<String> = waiting
                .iter()
                .filter(|r| {
                    fresh.contains(&r.id)
                        && r.kind == RequirementKind::Confirmation
                        && !r.is_nested()
                })
                .map(|r| r.id.clone())
                .collect();
            if asked.is_empty() {
                return None;
            }
            self.call.consulting = Some(asked);
        }
        let asked = self.call.consulting.as_ref()?;
        let requirements: Vec<Requirement> = waiting
            .iter()
            .filter(|r| asked.contains(&r.id))
            .cloned()
            .collect();
        if requirements.is_empty() {
            self.call.consulting = None;
            return None;
        }
        Some(Consult {
            requirements,
            principal: self.state.principal.clone(),
        })
    }

    /// Takes the answer to the [`Step::Consult`](super::Step::Consult) handed out:
    /// what it decides is applied ([`Run::decide_automatically`]); nothing decided
    /// lets the run pause. A decision for a requirement the step did not ask about is
    /// refused and the step stays unanswered.
    pub(super) fn answer_consult(
        &mut self,
        decisions: Vec<(String, AutoDecision)>,
        why: Vec<(String, String)>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let Some(asked) = self.call.consulting.take() else {
            if decisions.is_empty() && why.is_empty() {
                return Ok(());
            }
            return Err(AgentError::InvalidInput(
                "decisions made without asking answer a `Step::Consult`, and none waits for \
                 an answer"
                    .to_owned(),
            ));
        };
        if let Some(id) = decisions
            .iter()
            .map(|(id, _)| id)
            .chain(why.iter().map(|(id, _)| id))
            .find(|id| !asked.contains(id))
        {
            let error = AgentError::InvalidInput(format!(
                "`{id}` was not put to the approval policy and the standing grants; the \
                 `Consult` step asked about {}",
                asked.join(", ")
            ));
            self.call.consulting = Some(asked);
            return Err(error);
        }
        // A quorum is people: neither a grant nor the policy stands in for one of them.
        let quorums: Vec<String> = self
            .requirements()
            .into_iter()
            .filter(|r| r.quorum.is_some())
            .map(|r| r.id)
            .collect();
        if let Some((id, _)) = decisions.iter().find(|(id, how)| {
            !matches!(
                how,
                AutoDecision::PolicyDeny { .. } | AutoDecision::GrantDeny { .. }
            ) && quorums.contains(id)
        }) {
            let error = AgentError::InvalidInput(format!(
                "`{id}` needs a quorum of people: the approval policy or a deny rule may \
                 deny it, and neither the policy nor a standing grant may allow it"
            ));
            self.call.consulting = Some(asked);
            return Err(error);
        }
        self.explain_asking(why);
        if decisions.is_empty() {
            return Ok(());
        }
        // Validated before anything changes: a refusal leaves the step unanswered.
        let refused = self.decide_automatically(decisions, now);
        if refused.is_err() {
            self.call.consulting = Some(asked);
        }
        refused
    }

    /// Adds why people are asked to the requirements' reasons (" — asked because
    /// policy `x`"), and has them stored again.
    fn explain_asking(&mut self, why: Vec<(String, String)>) {
        let mut changed = false;
        for (id, reason) in why {
            if let Some(r) = self.state.slots.waiting_mut(&id) {
                if !r.reason.ends_with(&reason) {
                    r.reason = if r.reason.is_empty() {
                        reason
                    } else {
                        format!("{} — {reason}", r.reason)
                    };
                    changed = true;
                }
            }
        }
        if changed {
            // The pause records the requirements again, with their new reasons.
            self.state.stored_requirements.clear();
        }
    }

    /// Decides requirements without a person: a standing grant or the application's
    /// policy allowed or denied them. Applied like a person's decisions (the same
    /// checks, the same results), within the current call; each is recorded in the
    /// audit trail with how it was made (`via: "grant"` with the grant's id and the
    /// executed arguments' fingerprint, or `via: "policy"` with the reason).
    pub(super) fn decide_automatically(
        &mut self,
        decisions: Vec<(String, AutoDecision)>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let ds = decisions.iter().map(|(id, a)| a.decision(id)).collect();
        let from = self.req_ops.log.len();
        self.begin_decisions(ds, now, false)?;
        for rec in &mut self.req_ops.log[from..] {
            let Some((_, how)) = decisions.iter().find(|(id, _)| *id == rec.requirement_id) else {
                continue;
            };
            let (door, verdict, grant) = match how {
                AutoDecision::Grant { id } => ("grant", "approve", id.as_str()),
                AutoDecision::GrantDeny { id, .. } => ("grant", "reject", id.as_str()),
                AutoDecision::PolicyAllow { .. } => ("policy", "approve", ""),
                AutoDecision::PolicyDeny { .. } => ("policy", "reject", ""),
            };
            crate::telemetry::decided_without_asking(
                &rec.tool_name,
                &rec.requirement_id,
                door,
                verdict,
                grant,
            );
            match how {
                AutoDecision::Grant { id } => {
                    rec.via = "grant".to_owned();
                    rec.grant_id = Some(id.clone());
                    rec.executed_fingerprint = Some(reins_memory::fingerprint(&rec.shown_input));
                }
                AutoDecision::PolicyAllow {
                    reason,
                    policy_hash,
                } => {
                    rec.via = "policy".to_owned();
                    rec.note = Some(reason.clone());
                    rec.executed_fingerprint = Some(reins_memory::fingerprint(&rec.shown_input));
                    rec.policy_hash.clone_from(policy_hash);
                }
                AutoDecision::PolicyDeny { policy_hash, .. } => {
                    rec.via = "policy".to_owned();
                    rec.policy_hash.clone_from(policy_hash);
                }
                AutoDecision::GrantDeny { id, .. } => {
                    rec.via = "grant".to_owned();
                    rec.grant_id = Some(id.clone());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use crate::run::{AfterReasoning, Call, GateDecision, RunConfig, RunInput, Step};
    use crate::view::Actor;
    use reins_message::{ContentBlock, Msg, Role, ToolUse};
    use serde_json::json;

    /// A run whose model called `n` tools gated as `gate`, begun by `alice` (stopped by
    /// a hook when `stop`).
    fn reasoned(gate: GateDecision, n: usize, stop: bool) -> Run {
        let mut run = Run::new(RunConfig::default());
        let call = Call::bare("s", RunInput::Message(Msg::user("go")), Utc::now())
            .with_actor(Some(Actor::new("alice")));
        run.apply(Event::Begin(call)).unwrap();
        let _ = run.next_core();
        let uses = (0..n)
            .map(|i| ContentBlock::ToolUse(ToolUse::new(format!("c{i}"), "send", json!({}))))
            .collect();
        run.on_model_message(
            Msg::new(Role::Assistant, uses),
            vec![gate; n],
            AfterReasoning {
                stop,
                goto: Vec::new(),
            },
            Default::default(),
            Utc::now(),
        );
        run
    }

    fn confirm() -> GateDecision {
        GateDecision::Confirm {
            reason: "sends".into(),
        }
    }

    fn ids(step: &Step) -> Vec<String> {
        match step {
            Step::Consult(c) => c.requirements.iter().map(|r| r.id.clone()).collect(),
            Step::Pause(reqs) => reqs.iter().map(|r| r.id.clone()).collect(),
            other => panic!("unexpected step {other:?}"),
        }
    }

    #[test]
    fn confirmations_are_consulted_before_the_run_pauses_and_asked_again_until_answered() {
        let mut run = reasoned(confirm(), 2, false);
        let step = run.next_core();
        let Step::Consult(c) = &step else {
            panic!("expected a consultation, got {step:?}");
        };
        assert_eq!(c.principal.as_deref(), Some("alice"));
        assert_eq!(ids(&step), ["c0", "c1"]);
        assert!(
            run.is_paused(),
            "the run counts as paused while it is consulted"
        );
        // Unanswered: the same step again.
        assert_eq!(run.next_core(), step);
        run.apply(Event::DecidedWithoutAsking {
            asked: Vec::new(),
            decisions: Vec::new(),
            now: Utc::now(),
        })
        .unwrap();
        let step = run.next_core();
        assert!(matches!(step, Step::Pause(_)));
        assert_eq!(ids(&step), ["c0", "c1"]);
        // Consulted once per call: the pause stays a pause.
        assert!(matches!(run.next_core(), Step::Pause(_)));
    }

    #[test]
    fn what_the_consultation_decides_is_applied_and_the_rest_waits() {
        let mut run = reasoned(confirm(), 2, false);
        let _ = run.next_core();
        run.apply(Event::DecidedWithoutAsking {
            asked: Vec::new(),
            decisions: vec![("c0".into(), AutoDecision::Grant { id: "g1".into() })],
            now: Utc::now(),
        })
        .unwrap();
        let rec = run.req_ops.log.iter().find(|r| r.requirement_id == "c0");
        assert_eq!(rec.map(|r| r.via.as_str()), Some("grant"));
        assert_eq!(run.requirements().len(), 1, "c1 still waits for a person");
    }

    #[test]
    fn a_decision_the_consultation_did_not_ask_about_is_refused() {
        let mut run = reasoned(confirm(), 1, false);
        // None handed out yet.
        let grant = |id: &str| {
            vec![(
                id.to_owned(),
                AutoDecision::PolicyAllow {
                    reason: "fine".into(),
                    policy_hash: None,
                },
            )]
        };
        let refused = run.apply(Event::DecidedWithoutAsking {
            asked: Vec::new(),
            decisions: grant("c0"),
            now: Utc::now(),
        });
        assert!(matches!(
            refused.map_err(|r| r.error),
            Err(AgentError::InvalidInput(_))
        ));
        let step = run.next_core();
        assert_eq!(ids(&step), ["c0"]);
        let refused = run.apply(Event::DecidedWithoutAsking {
            asked: Vec::new(),
            decisions: grant("other"),
            now: Utc::now(),
        });
        assert!(refused.is_err());
        // The step still waits for its answer.
        assert_eq!(run.next_core(), step);
    }

    #[test]
    fn a_quorum_is_never_allowed_without_people_but_may_be_denied() {
        let mut run = Run::new(RunConfig::default());
        let mut call = Call::bare("s", RunInput::Message(Msg::user("go")), Utc::now());
        call.quorums = std::sync::Arc::new(
            [("send".to_owned(), crate::requirement::Quorum::of(2))]
                .into_iter()
                .collect(),
        );
        run.apply(Event::Begin(call)).unwrap();
        let _ = run.next_core();
        run.on_model_message(
            Msg::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse(ToolUse::new("c0", "send", json!({})))],
            ),
            vec![confirm()],
            AfterReasoning::default(),
            Default::default(),
            Utc::now(),
        );
        let step = run.next_core();
        assert_eq!(ids(&step), ["c0"]);
        for allow in [
            AutoDecision::PolicyAllow {
                reason: "fine".into(),
                policy_hash: None,
            },
            AutoDecision::Grant { id: "g1".into() },
        ] {
            let refused = run.apply(Event::DecidedWithoutAsking {
                asked: Vec::new(),
                decisions: vec![("c0".to_owned(), allow)],
                now: Utc::now(),
            });
            let Err(refusal) = refused else {
                panic!("an allow stood in for a quorum of people");
            };
            assert!(
                matches!(&refusal.error, AgentError::InvalidInput(m) if m.contains("quorum")),
                "{:?}",
                refusal.error
            );
            // Nothing applied: the step still waits, nobody counted.
            assert_eq!(run.next_core(), step);
            assert!(run.req_ops.log.is_empty());
        }
        run.apply(Event::DecidedWithoutAsking {
            asked: Vec::new(),
            decisions: vec![(
                "c0".to_owned(),
                AutoDecision::PolicyDeny {
                    note: "not today".into(),
                    policy_hash: None,
                },
            )],
            now: Utc::now(),
        })
        .unwrap();
        assert!(
            run.requirements().is_empty(),
            "a deny decides a quorum call"
        );
    }

    #[test]
    fn a_deny_rule_decides_a_quorum_call() {
        let mut run = Run::new(RunConfig::default());
        let mut call = Call::bare("s", RunInput::Message(Msg::user("go")), Utc::now());
        call.quorums = std::sync::Arc::new(
            [("send".to_owned(), crate::requirement::Quorum::of(2))]
                .into_iter()
                .collect(),
        );
        run.apply(Event::Begin(call)).unwrap();
        let _ = run.next_core();
        run.on_model_message(
            Msg::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse(ToolUse::new("c0", "send", json!({})))],
            ),
            vec![confirm()],
            AfterReasoning::default(),
            Default::default(),
            Utc::now(),
        );
        assert_eq!(ids(&run.next_core()), ["c0"]);
        run.apply(Event::DecidedWithoutAsking {
            asked: Vec::new(),
            decisions: vec![(
                "c0".to_owned(),
                AutoDecision::GrantDeny {
                    id: "d1".into(),
                    note: "Rejected by a standing rule.".into(),
                },
            )],
            now: Utc::now(),
        })
        .unwrap();
        assert!(run.requirements().is_empty());
        let rec = run.req_ops.log.last().unwrap();
        assert_eq!(
            (rec.decision.as_str(), rec.via.as_str()),
            ("reject", "grant")
        );
        assert_eq!(rec.grant_id.as_deref(), Some("d1"));
    }

    #[test]
    fn calls_a_hook_stopped_and_other_requirements_are_not_consulted() {
        let mut run = reasoned(confirm(), 1, true);
        assert!(matches!(run.next_core(), Step::Pause(_)));
        let mut run = reasoned(GateDecision::External, 1, false);
        assert!(matches!(run.next_core(), Step::Pause(_)));
        let mut run = reasoned(GateDecision::Run, 1, false);
        assert!(matches!(run.next_core(), Step::Execute(_)));
    }
}
