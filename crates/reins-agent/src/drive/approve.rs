//! Before a run pauses for confirmations: the approval policy and the standing grants
//! (see [`crate::approval`] for the order).

use chrono::Utc;
use reins_memory::{Error as StoreError, GrantFilter};

use super::Driver;
use crate::approval::{PolicyRequest, PolicyVerdict};
use crate::error::Result;
use crate::requirement::{Requirement, RequirementKind};
use crate::run::AutoDecision;
use crate::state::SessionCore;

impl Driver {
    /// Puts the confirmations this drive's reasoning raised to the approval policy and
    /// the standing grants; applies what they decide. True when anything was decided
    /// (the run goes on instead of pausing).
    pub(super) async fn decide_without_asking(
        &self,
        core: &mut SessionCore,
        reqs: &[Requirement],
    ) -> Result<bool> {
        let fresh: Vec<String> = match self.fresh.lock() {
            Ok(mut f) => std::mem::take(&mut *f),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        };
        let asked: Vec<&Requirement> = reqs
            .iter()
            .filter(|r| {
                fresh.contains(&r.id) && r.kind == RequirementKind::Confirmation && !r.is_nested()
            })
            .collect();
        if asked.is_empty() {
            return Ok(false);
        }
        let principal = core.run.state().principal().map(str::to_owned);
        let mut decided = Vec::new();
        for r in asked {
            if let Some(policy) = &self.agent.runtime.policy {
                let verdict = policy
                    .decide(PolicyRequest {
                        tool: &r.tool_use.name,
                        arguments: &r.tool_use.input,
                        tool_use_id: &r.id,
                        session: &self.session,
                        principal: principal.as_deref(),
                    })
                    .await;
                match verdict {
                    PolicyVerdict::Ask => {}
                    PolicyVerdict::Allow { reason } => {
                        decided.push((r.id.clone(), AutoDecision::PolicyAllow { reason }));
                        continue;
                    }
                    PolicyVerdict::Deny { note } => {
                        decided.push((r.id.clone(), AutoDecision::PolicyDeny { note }));
                        continue;
                    }
                }
            }
            // A quorum asks people.
            if r.quorum.is_some() {
                continue;
            }
            let grants = match self
                .agent
                .runtime
                .store
                .list_grants(&GrantFilter::all().tool(&r.tool_use.name))
                .await
            {
                Ok(g) => g,
                Err(StoreError::Unsupported { .. }) => continue,
                Err(e) => {
                    // A person decides when the grants cannot be read.
                    tracing::warn!(session = %self.session, error = %e, "could not read the standing grants; asking a person");
                    continue;
                }
            };
            let now = Utc::now();
            if let Some(g) = grants.iter().find(|g| {
                g.matches(
                    &r.tool_use.name,
                    principal.as_deref(),
                    &self.session,
                    &r.tool_use.input,
                    now,
                )
            }) {
                decided.push((r.id.clone(), AutoDecision::Grant { id: g.id.clone() }));
            }
        }
        if decided.is_empty() {
            return Ok(false);
        }
        core.run
            .apply(crate::run::Event::DecidedWithoutAsking {
                decisions: decided,
                now: Utc::now(),
            })
            .map_err(|r| r.error)?;
        Ok(true)
    }
}
