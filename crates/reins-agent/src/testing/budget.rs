//! The budget scenario every driver runs ([`Scenario::Budget`](super::Scenario::Budget)):
//! a session may start one tool call; the second waits for a person, who first offers a
//! limit that is not above what was spent (refused, nothing changes), then extends it
//! (the call runs); the third call's budget requirement is rejected, which ends the run
//! with a final message saying so.

use serde_json::json;

use super::On;
use crate::budget::Budget;
use crate::error::AgentError;
use crate::output::RunStatus;
use crate::requirement::{Decision, RequirementKind};
use crate::run::{BUDGET_ENDED_MARK, Phase, RunInput};

/// Fails the check with a message when `cond` does not hold.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// The scenario's budget: one tool call.
pub(super) fn limit() -> Budget {
    Budget::new().tool_calls(1)
}

impl On<'_> {
    /// Sends `text` and approves the confirmation it raises; the view after.
    async fn mail_approved(
        &self,
        session: &str,
        text: &str,
    ) -> std::result::Result<crate::SessionView, String> {
        let v = self.send(session, text, "alice").await?;
        let r = v
            .requirements
            .first()
            .ok_or_else(|| format!("`{text}` must wait for a confirmation, got {:?}", v.phase))?;
        ensure!(
            r.kind == RequirementKind::Confirmation,
            "`{text}` must first wait for a confirmation, got {}",
            r.kind.label()
        );
        self.approve(session, &r.id.clone(), "ana")
            .await?
            .map_err(|e| format!("approving `{text}` was refused: {e}"))
    }

    async fn decide_as_ops(
        &self,
        session: &str,
        d: Decision,
    ) -> std::result::Result<std::result::Result<crate::SessionView, AgentError>, String> {
        self.submit(session, RunInput::Decisions(vec![d]), "ops")
            .await
    }

    pub(super) async fn budget(&self, session: &str) -> std::result::Result<(), String> {
        let v = self.mail_approved(session, "email a@example.com").await?;
        ensure!(
            !v.paused && self.runs(session) == 1,
            "the first call must run"
        );

        // The second call: the model may still answer, the tool may not start.
        let v = self.mail_approved(session, "email b@example.com").await?;
        ensure!(
            v.paused,
            "the second call must wait for the budget, got {:?}",
            v.phase
        );
        ensure!(
            self.runs(session) == 1,
            "the second call must not start over the budget"
        );
        let req = v
            .requirements
            .first()
            .ok_or("no budget requirement")?
            .clone();
        let RequirementKind::Budget { budget } = &req.kind else {
            return Err(format!(
                "the pause must be a budget requirement, is {}",
                req.kind.label()
            ));
        };
        ensure!(
            budget.spent.tool_calls == 1 && budget.reached == ["tool_calls"],
            "the requirement must show 1 tool call spent, shows {budget:?}"
        );

        // A limit not above what was spent: refused, nothing changes.
        let bad = Decision::approve_with(&req.id, json!({"tool_calls": 1})).by("ops");
        let refused = self.decide_as_ops(session, bad).await?;
        ensure!(
            matches!(refused, Err(AgentError::InvalidBudget { .. })),
            "a limit not above the spend must be refused as InvalidBudget, got {refused:?}"
        );
        let after = self
            .backend
            .view(session)
            .await
            .map_err(|e| e.to_string())?;
        ensure!(
            after.version == v.version && after.requirements == v.requirements,
            "a refused extension must change nothing"
        );

        // Extended: the held call runs.
        let ok = Decision::approve_with(&req.id, json!({"tool_calls": 2})).by("ops");
        let v = self
            .decide_as_ops(session, ok)
            .await?
            .map_err(|e| format!("the extension was refused: {e}"))?;
        ensure!(
            !v.paused,
            "the extension must let the run go on, got {:?}",
            v.phase
        );
        ensure!(
            self.runs(session) == 2,
            "the held call must run once, ran {}",
            self.runs(session) - 1
        );
        let trail = self.trail(session).await?;
        ensure!(
            trail.iter().any(|r| r.requirement_id == req.id
                && r.kind == "budget"
                && r.decision == "approve"
                && r.executed_input
                    .as_ref()
                    .is_some_and(|l| l["tool_calls"] == 2)),
            "the extension must be in the audit trail with its new limit: {trail:?}"
        );

        // The third call: ending the run at its budget.
        let v = self.mail_approved(session, "email c@example.com").await?;
        let req = v
            .requirements
            .first()
            .ok_or("no second budget requirement")?
            .clone();
        ensure!(
            req.kind.label() == "budget" && req.id == "budget-2",
            "the third call must wait for a new budget requirement, waits for `{}` ({})",
            req.id,
            req.kind.label()
        );
        let v = self
            .decide_as_ops(
                session,
                Decision::reject(&req.id, "that is enough").by("ops"),
            )
            .await?
            .map_err(|e| format!("ending the run was refused: {e}"))?;
        ensure!(
            v.phase == Phase::Finished(RunStatus::Completed),
            "ending the run must complete it, got {:?}",
            v.phase
        );
        ensure!(self.runs(session) == 2, "nothing may run after the end");
        let messages = self.messages(session).await?;
        let last = messages.last().ok_or("no messages")?;
        ensure!(
            last.metadata.get(BUDGET_ENDED_MARK).is_some() && last.text().contains("budget"),
            "the run must end with a message saying the budget ended it, ends with {:?}",
            last.text()
        );
        ensure!(
            reins_memory::repair::violations(&messages).is_empty(),
            "the transcript must stay provider-valid"
        );
        Ok(())
    }
}
