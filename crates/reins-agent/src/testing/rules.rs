//! [`Scenario::PolicyRules`](super::Scenario::PolicyRules): rules about which calls run
//! without asking and who may decide the rest, answered by whatever engine the test
//! plugs in — the hand-written [`MailRules`] by default, Cedar policies (reins-policy)
//! in the tests that bring them — with the same checks on every driver.
//!
//! The rules:
//!
//! | call | answer |
//! |---|---|
//! | `send_email` to `…@example.com` | runs without asking (policy `internal-mail`) |
//! | `send_email` to `….invalid` | rejected without asking (policy `invalid-mail`) |
//! | `send_email` to `….test` | asks a person, saying why: "asked because policy `partner-mail`" (policy `partner-mail`) |
//! | any other `send_email` | asks a person |
//!
//! Only a person with the role `mail-approver` may decide mail.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;

use super::{On, TOOL};
use crate::approval::{ApprovalPolicy, PolicyRequest, PolicyVerdict};
use crate::eligibility::{DecideRequest, Eligibility, EligibilityPolicy};
use crate::error::AgentError;
use crate::requirement::Decision;
use crate::run::RunInput;
use crate::view::Actor;

/// The role that may decide mail in [`Scenario::PolicyRules`](super::Scenario::PolicyRules).
pub const MAIL_APPROVER: &str = "mail-approver";

/// The same rules as Cedar policies (for reins-policy, against its schema): the suites
/// that bring reins-policy run the scenario with these answering.
pub const CEDAR: &str = r#"@id("internal-mail")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"send_email")
when { resource.hasTag("to") && resource.getTag("to") like "*@example.com" };

@id("invalid-mail")
@reason("that address cannot exist")
forbid (principal, action == Reins::Action::"call", resource in Reins::Tool::"send_email")
when { resource.hasTag("to") && resource.getTag("to") like "*.invalid" };

@id("partner-mail")
@ask
forbid (principal, action == Reins::Action::"call", resource in Reins::Tool::"send_email")
when { resource.hasTag("to") && resource.getTag("to") like "*.test" };

@id("mail-approvers")
permit (
  principal in Reins::Role::"mail-approver",
  action == Reins::Action::"decide",
  resource in Reins::Tool::"send_email"
);
"#;

/// The engines a [`Scenario::PolicyRules`](super::Scenario::PolicyRules) agent asks.
#[derive(Clone)]
pub struct ScenarioRules {
    /// Which calls run without asking.
    pub approval: Arc<dyn ApprovalPolicy>,
    /// Who may decide.
    pub eligibility: Arc<dyn EligibilityPolicy>,
}

impl Default for ScenarioRules {
    fn default() -> Self {
        Self {
            approval: Arc::new(MailRules),
            eligibility: Arc::new(MailRules),
        }
    }
}

/// The rules of the [module docs](self), written by hand.
#[derive(Debug, Clone, Copy, Default)]
pub struct MailRules;

#[async_trait]
impl ApprovalPolicy for MailRules {
    async fn decide(&self, call: PolicyRequest<'_>) -> PolicyVerdict {
        let to = call.arguments["to"].as_str().unwrap_or_default();
        if call.tool != TOOL {
            PolicyVerdict::Ask
        } else if to.ends_with("@example.com") {
            PolicyVerdict::allow("allowed by policy `internal-mail`")
        } else if to.ends_with(".invalid") {
            PolicyVerdict::deny("Rejected by policy `invalid-mail`: that address cannot exist")
        } else if to.ends_with(".test") {
            PolicyVerdict::ask_because("asked because policy `partner-mail`")
        } else {
            PolicyVerdict::Ask
        }
    }
}

impl EligibilityPolicy for MailRules {
    fn may_decide(&self, d: DecideRequest<'_>) -> Eligibility {
        match d.actor {
            Some(a) if a.roles().iter().any(|r| r == MAIL_APPROVER) => Eligibility::Eligible,
            _ => Eligibility::refused(format!("only a {MAIL_APPROVER} decides mail")),
        }
    }
}

/// Fails the check with a message when `cond` does not hold.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

impl On<'_> {
    pub(super) async fn policy_rules(&self, session: &str) -> std::result::Result<(), String> {
        // Allowed: runs, audited with the policy's id.
        let v = self
            .send(session, "email bob@example.com", "alice")
            .await
            .map_err(|e| format!("internal mail: {e}"))?;
        ensure!(
            !v.paused,
            "internal mail must run without asking, got {:?}",
            v.phase
        );
        ensure!(self.runs(session) == 1, "internal mail must run once");
        let trail = self.trail(session).await?;
        ensure!(
            trail.iter().any(|r| r.via == "policy"
                && r.note
                    .as_deref()
                    .is_some_and(|n| n.contains("`internal-mail`"))),
            "the audit trail must name policy `internal-mail`: {trail:?}"
        );
        // Denied: rejected without a pause, nothing runs, the note names the policy.
        let v = self
            .send(session, "email eve@nowhere.invalid", "alice")
            .await
            .map_err(|e| format!(".invalid mail: {e}"))?;
        ensure!(
            !v.paused,
            "mail to .invalid must be rejected without asking, got {:?}",
            v.phase
        );
        ensure!(self.runs(session) == 1, "the rejected call must not run");
        let trail = self.trail(session).await?;
        ensure!(
            trail.iter().any(|r| r.via == "policy"
                && r.note
                    .as_deref()
                    .is_some_and(|n| n.contains("`invalid-mail`"))),
            "the audit trail must name policy `invalid-mail`: {trail:?}"
        );
        // Asked: only a mail-approver may decide.
        let v = self
            .send(session, "email carol@partner.test", "alice")
            .await
            .map_err(|e| format!("other mail: {e}"))?;
        ensure!(
            v.paused,
            "partner mail must ask a person, got {:?}",
            v.phase
        );
        let r = v.requirements.first().ok_or("no requirement")?;
        ensure!(
            r.reason.ends_with(" — asked because policy `partner-mail`"),
            "the requirement must say which policy asked: {:?}",
            r.reason
        );
        let id = r.id.clone();
        let intern = Actor::new("ian").with_metadata(json!({"roles": ["intern"]}));
        let refused = self
            .decide_as(session, &id, intern)
            .await
            .map_err(|e| format!("the intern's approval: {e}"))?;
        ensure!(
            matches!(refused, Err(AgentError::NotEligible { .. })),
            "an intern's approval must be refused as NotEligible, got {refused:?}"
        );
        ensure!(
            self.runs(session) == 1,
            "a refused approval must run nothing"
        );
        let olga = Actor::new("olga").with_metadata(json!({"roles": [MAIL_APPROVER]}));
        let v = self
            .decide_as(session, &id, olga)
            .await
            .map_err(|e| format!("the mail-approver's approval: {e}"))?
            .map_err(|e| format!("the mail-approver's approval was refused: {e}"))?;
        ensure!(
            !v.paused,
            "an eligible approval must resume the run, got {:?}",
            v.phase
        );
        ensure!(self.runs(session) == 2, "the approved call must run once");
        Ok(())
    }

    /// Approves `id` as `actor` (with its roles).
    async fn decide_as(
        &self,
        session: &str,
        id: &str,
        actor: Actor,
    ) -> std::result::Result<std::result::Result<crate::state::SessionView, AgentError>, String>
    {
        let d = Decision::approve(id).by(actor.principal.clone());
        self.submit_as(session, RunInput::Decisions(vec![d]), actor)
            .await
    }
}
