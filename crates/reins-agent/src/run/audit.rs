//! What a run shows a caller ([`ViewToken`]s, stale-view checks) and the audit records
//! of the decisions made on it, applied or refused.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Attempt, Run};
use crate::error::{AgentError, Result};
use crate::requirement::Requirement;
use crate::view::{Actor, DecisionRecord, Verdict, ViewToken};

impl Run {
    /// What a caller reading the run now is shown, as a token.
    pub fn view(&self) -> ViewToken {
        let paused = self.is_paused();
        let ids = if paused {
            self.requirements().into_iter().map(|r| r.id).collect()
        } else {
            Vec::new()
        };
        ViewToken::new(paused, ids)
    }

    /// Checks that the run waits for exactly what `seen` shows; otherwise
    /// [`AgentError::StaleView`] with what is pending now.
    pub(crate) fn check_view(&self, seen: &ViewToken) -> Result<()> {
        let now = self.view();
        if now == *seen {
            return Ok(());
        }
        Err(AgentError::StaleView {
            seen: seen.requirement_ids().to_vec(),
            pending: if self.is_paused() {
                self.requirements()
            } else {
                Vec::new()
            },
        })
    }

    /// Audit records of a refused input: one per attempted decision
    /// `(requirement id, decision label, by)`; for a bare `resume()` that named no
    /// requirement, one per requirement pending now.
    pub(super) fn refusal_records(
        &self,
        attempted: &[Attempt],
        via: &str,
        error: &AgentError,
        actor: Option<&Actor>,
        view: Option<&ViewToken>,
        now: DateTime<Utc>,
    ) -> Vec<DecisionRecord> {
        let reason = match error {
            AgentError::StaleView { .. } => "stale_view",
            AgentError::RequirementExpired { .. } => "expired",
            AgentError::ShownArgumentsChanged { .. } => "fingerprint_mismatch",
            AgentError::AlreadyApproved { .. } => "already_approved",
            AgentError::NotEligible { .. } => "not_eligible",
            _ => "refused",
        };
        let pending = self.requirements();
        let at_stake: Vec<Attempt> = if attempted.is_empty() {
            pending
                .iter()
                .map(|r| (r.id.clone(), "approve".to_owned(), None))
                .collect()
        } else {
            attempted.to_vec()
        };
        at_stake
            .into_iter()
            .map(|(id, decision, by)| {
                let req = pending.iter().find(|r| r.id == id);
                // A requirement answered meanwhile is no longer pending: its call is
                // still in the transcript.
                let used = self
                    .messages()
                    .iter()
                    .rev()
                    .flat_map(|m| m.tool_uses())
                    .find(|u| u.id == id);
                let actor = match (by, actor) {
                    (Some(p), Some(a)) if a.principal == p => Some(a.clone()),
                    (Some(p), _) => Some(Actor::new(p)),
                    (None, a) => a.cloned(),
                };
                DecisionRecord {
                    seq: 0,
                    at: now,
                    tool_name: req
                        .map(|r| &r.tool_use)
                        .or(used)
                        .map(|u| u.name.clone())
                        .unwrap_or_default(),
                    kind: req.map(|r| r.kind.label().to_owned()).unwrap_or_default(),
                    shown_input: req
                        .map(|r| &r.tool_use)
                        .or(used)
                        .map(|u| u.input.clone())
                        .unwrap_or(Value::Null),
                    requirement_id: id,
                    decision,
                    via: via.to_owned(),
                    verdict: Verdict::Refused {
                        reason: reason.to_owned(),
                        detail: error.to_string(),
                    },
                    actor,
                    executed_input: None,
                    note: None,
                    view: view.cloned(),
                    shown_fingerprint: req.map(Requirement::fingerprint),
                    executed_fingerprint: None,
                    grant_id: None,
                    policy_hash: None,
                    quorum: None,
                }
            })
            .collect()
    }

    /// Records an applied decision on `req` in the audit trail of the next commit.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn log_decision(
        &mut self,
        req: &Requirement,
        decision: &str,
        via: &str,
        by: Option<&str>,
        executed_input: Option<Value>,
        note: Option<String>,
        now: DateTime<Utc>,
    ) {
        let actor = match (by, &self.call.actor) {
            (Some(p), Some(a)) if a.principal == p => Some(a.clone()),
            (Some(p), _) => Some(Actor::new(p)),
            (None, a) => a.clone(),
        };
        let record = DecisionRecord {
            seq: 0,
            at: now,
            requirement_id: req.id.clone(),
            tool_name: req.tool_use.name.clone(),
            kind: req.kind.label().to_owned(),
            decision: decision.to_owned(),
            via: via.to_owned(),
            verdict: Verdict::Applied,
            actor,
            shown_input: req.tool_use.input.clone(),
            executed_fingerprint: executed_input.as_ref().map(reins_memory::fingerprint),
            grant_id: None,
            policy_hash: None,
            quorum: req
                .quorum
                .as_ref()
                .filter(|_| decision == "approve")
                .map(|q| crate::view::QuorumCount {
                    approvals: u32::try_from(q.approvals.len()).unwrap_or(u32::MAX),
                    needed: q.needed,
                }),
            executed_input,
            note,
            view: self.call.view.clone(),
            shown_fingerprint: Some(req.fingerprint()),
        };
        // A decision on a requirement stored as pending answers a wait (one made
        // before the pause, by the policy or a grant, is reported by
        // `decide_automatically`); a quorum's approval short of the count leaves it
        // waiting.
        if self.state.stored_requirements.contains(&req.id) {
            let settles = record
                .quorum
                .as_ref()
                .is_none_or(|q| q.approvals >= q.needed);
            crate::telemetry::decided(&record, Some(req.created_at), settles);
        }
        self.req_ops.log.push(record);
    }
}
