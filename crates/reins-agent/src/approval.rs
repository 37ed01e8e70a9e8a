//! Deciding calls without a person: the application's [`ApprovalPolicy`] and standing
//! [`Grant`]s.
//!
//! When the tool's own policy says a call needs a person (`ToolPolicy::Confirm`), the
//! run hands every driver a `Step::Consult` before it pauses, and the driver answers it
//! with `reins_agent::effects::consult`, which asks, in this order:
//!
//! 1. the agent's [`ApprovalPolicy`], when one is set
//!    ([`AgentBuilder::approval_policy`](crate::AgentBuilder::approval_policy)):
//!    [`PolicyVerdict::Deny`] rejects the call as a person's rejection would (the model
//!    reads the note), [`PolicyVerdict::Allow`] runs it (except for a tool under a
//!    [`Quorum`](crate::Quorum): a quorum is people, so the policy may deny such a call
//!    but its allow asks them as usual), [`PolicyVerdict::Ask`] goes on;
//! 2. the standing deny rules in the store (grants whose effect is
//!    [`GrantEffect::Deny`]): a live one that matches rejects the call (the model reads
//!    its note), also for a tool under a quorum;
//! 3. the standing grants in the store: a live grant that matches the tool, the
//!    session, the principal the session acts for and the arguments runs the call
//!    (never for a tool under a [`Quorum`](crate::Quorum): a quorum asks people);
//! 4. otherwise the run pauses for a person, as before.
//!
//! Calls that need no confirmation are never put to the policy; calls paused by a hook
//! (`stop_agent()`), questions, user input and external calls are not either. Every
//! decision made this way is in the session's audit trail (`via: "policy"` with the
//! reason or note, or `via: "grant"` with the grant's id — and, for an allow grant,
//! the executed arguments' fingerprint).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

pub use reins_memory::{ArgCondition, ArgOp, Grant, GrantEffect, GrantFilter};

/// One call the policy is asked about.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct PolicyRequest<'a> {
    /// The tool.
    pub tool: &'a str,
    /// The arguments as the model made them.
    pub arguments: &'a Value,
    /// The tool use (and requirement) id.
    pub tool_use_id: &'a str,
    /// The session.
    pub session: &'a str,
    /// Who the session acts for in this turn (see
    /// [`RunState::principal`](crate::RunState::principal)).
    pub principal: Option<&'a str>,
    /// The agent whose run raised the call (its name).
    pub agent: &'a str,
    /// The sub-agent path of the requirement (empty at the top level).
    pub path: &'a [String],
    /// When the policy is asked.
    pub now: chrono::DateTime<chrono::Utc>,
}

impl<'a> PolicyRequest<'a> {
    /// A request about a call of `tool` with `arguments` (tool use `tool_use_id`) in
    /// `session`, at the top level of an agent named `agent`, for no principal, now.
    pub fn new(
        tool: &'a str,
        arguments: &'a Value,
        tool_use_id: &'a str,
        session: &'a str,
        agent: &'a str,
    ) -> Self {
        Self {
            tool,
            arguments,
            tool_use_id,
            session,
            principal: None,
            agent,
            path: &[],
            now: chrono::Utc::now(),
        }
    }

    /// For this principal.
    #[must_use]
    pub fn principal(mut self, principal: Option<&'a str>) -> Self {
        self.principal = principal;
        self
    }
}

/// What an [`ApprovalPolicy`] says about a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyVerdict {
    /// No opinion: go on to the standing grants, then a person.
    Ask,
    /// Ask a person, and say why: as [`PolicyVerdict::Ask`] (the standing grants are
    /// still consulted), and when the run pauses for the call the reason is added to
    /// the requirement's (" — asked because policy `prod-deletes`"), which the inbox
    /// shows.
    AskBecause {
        /// Why a person is asked.
        reason: String,
    },
    /// Run it; the reason is recorded in the audit trail.
    Allow {
        /// Why.
        reason: String,
    },
    /// Do not run it: rejected as a person's rejection, with this note for the model.
    Deny {
        /// Why, for the model (and the audit trail).
        note: String,
    },
}

impl PolicyVerdict {
    /// [`PolicyVerdict::Allow`].
    pub fn allow(reason: impl Into<String>) -> Self {
        Self::Allow {
            reason: reason.into(),
        }
    }

    /// [`PolicyVerdict::AskBecause`].
    pub fn ask_because(reason: impl Into<String>) -> Self {
        Self::AskBecause {
            reason: reason.into(),
        }
    }

    /// [`PolicyVerdict::Deny`].
    pub fn deny(note: impl Into<String>) -> Self {
        Self::Deny { note: note.into() }
    }
}

/// An application's own rule engine for calls that need approval (see the
/// [module docs](self) for where it sits among grants and people).
///
/// ```
/// use async_trait::async_trait;
/// use reins_agent::approval::{ApprovalPolicy, PolicyRequest, PolicyVerdict};
///
/// struct Office;
///
/// #[async_trait]
/// impl ApprovalPolicy for Office {
///     async fn decide(&self, call: PolicyRequest<'_>) -> PolicyVerdict {
///         let to = call.arguments["to"].as_str().unwrap_or_default();
///         match call.tool {
///             "send_email" if to.ends_with("@example.com") => PolicyVerdict::allow("internal mail"),
///             "send_email" if to.ends_with(".invalid") => PolicyVerdict::deny("that address cannot exist"),
///             _ => PolicyVerdict::Ask,
///         }
///     }
/// }
/// ```
#[async_trait]
pub trait ApprovalPolicy: Send + Sync + 'static {
    /// The verdict on one call. A policy that cannot decide (its own rule store is down)
    /// answers [`PolicyVerdict::Ask`]: a person decides.
    async fn decide(&self, call: PolicyRequest<'_>) -> PolicyVerdict;

    /// The verdict on one call and the hash of the rules that gave it (a policy set's
    /// hash; see docs/evidence.md), which is what every driver asks. An allow or a deny
    /// records the hash in the audit trail (`policy_hash`) and signs it into the
    /// decision's receipt. By default [`ApprovalPolicy::decide`] and no hash; a policy
    /// whose rules can be replaced while it runs answers both from the same rules
    /// (reins-policy's `CedarPolicy` does).
    async fn decide_hashed(&self, call: PolicyRequest<'_>) -> (PolicyVerdict, Option<String>) {
        (self.decide(call).await, None)
    }
}

#[async_trait]
impl<T: ApprovalPolicy + ?Sized> ApprovalPolicy for Arc<T> {
    async fn decide(&self, call: PolicyRequest<'_>) -> PolicyVerdict {
        (**self).decide(call).await
    }
    async fn decide_hashed(&self, call: PolicyRequest<'_>) -> (PolicyVerdict, Option<String>) {
        (**self).decide_hashed(call).await
    }
}

#[async_trait]
impl<T: ApprovalPolicy + ?Sized> ApprovalPolicy for Box<T> {
    async fn decide(&self, call: PolicyRequest<'_>) -> PolicyVerdict {
        (**self).decide(call).await
    }
    async fn decide_hashed(&self, call: PolicyRequest<'_>) -> (PolicyVerdict, Option<String>) {
        (**self).decide_hashed(call).await
    }
}

/// What a person asks for when creating a grant
/// ([`Agent::create_grant`](crate::Agent::create_grant)); the id and
/// the creation time are assigned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewGrant {
    /// The tool.
    pub tool: String,
    /// Allow (the default) or deny: a deny rule rejects matching calls without asking.
    pub effect: GrantEffect,
    /// Only for this principal.
    pub principal: Option<String>,
    /// Only in this session.
    pub session: Option<String>,
    /// Conditions on the arguments.
    pub conditions: Vec<ArgCondition>,
    /// How long it lasts (`None`: until revoked).
    pub ttl: Option<std::time::Duration>,
    /// Why.
    pub note: Option<String>,
}

impl NewGrant {
    /// A grant of `tool` everywhere, for good.
    pub fn tool(tool: impl Into<String>) -> Self {
        Self {
            tool: tool.into(),
            ..Self::default()
        }
    }
}
