//! Who may decide a requirement, and who may create a grant: the application's
//! [`EligibilityPolicy`].
//!
//! Set one with
//! [`AgentBuilder::eligibility_policy`](crate::AgentBuilder::eligibility_policy); the run
//! then asks it about every approval or rejection of a tool call before anything changes,
//! whichever door the decision came through (the native API, AG-UI, A2A, MCP) and
//! whichever driver runs the session, since the check is part of the run's own input
//! validation. A refusal is [`AgentError::NotEligible`](crate::AgentError::NotEligible)
//! with the policy's reason; nothing changed. Under a [`Quorum`](crate::Quorum) the
//! quorum's own role check still applies: an approval counts when both admit it.
//!
//! [`Agent::create_grant_as`](crate::Agent::create_grant_as) asks
//! [`EligibilityPolicy::may_grant`] before a grant is stored.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::approval::NewGrant;
use crate::view::Actor;

/// A decision on one tool call, as the eligibility policy is asked about it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct DecideRequest<'a> {
    /// The session.
    pub session: &'a str,
    /// The requirement id.
    pub requirement_id: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// The arguments as the model made them.
    pub arguments: &'a Value,
    /// The sub-agent that raised it, when a sub-agent did.
    pub agent: Option<&'a str>,
    /// The sub-agent path (empty at the top level).
    pub path: &'a [String],
    /// Who decides: the decision's `by` and, when it is the call's actor, its roles and
    /// metadata. `None`: the decision names no one.
    pub actor: Option<&'a Actor>,
    /// Whether the call is under a quorum.
    pub quorum: bool,
    /// Approve (`true`) or reject (`false`).
    pub approve: bool,
}

impl<'a> DecideRequest<'a> {
    /// A request about a decision on `tool` with `arguments` in `session`.
    pub fn new(
        session: &'a str,
        requirement_id: &'a str,
        tool: &'a str,
        arguments: &'a Value,
    ) -> Self {
        Self {
            session,
            requirement_id,
            tool,
            arguments,
            agent: None,
            path: &[],
            actor: None,
            quorum: false,
            approve: true,
        }
    }

    /// Who decides.
    #[must_use]
    pub fn actor(mut self, actor: Option<&'a Actor>) -> Self {
        self.actor = actor;
        self
    }
}

/// A grant someone wants to create, as the eligibility policy is asked about it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct GrantRequest<'a> {
    /// What the grant would be.
    pub grant: &'a NewGrant,
    /// Who creates it.
    pub actor: &'a Actor,
}

impl<'a> GrantRequest<'a> {
    /// `actor` asks to create `grant`.
    pub fn new(grant: &'a NewGrant, actor: &'a Actor) -> Self {
        Self { grant, actor }
    }
}

/// What an [`EligibilityPolicy`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eligibility {
    /// May.
    Eligible,
    /// May not: why (a person reads it in the error).
    Refused {
        /// Why.
        reason: String,
    },
}

impl Eligibility {
    /// [`Eligibility::Refused`].
    pub fn refused(reason: impl Into<String>) -> Self {
        Self::Refused {
            reason: reason.into(),
        }
    }
}

/// Who may decide a tool call, and who may create a grant (see the
/// [module docs](self)). Synchronous: it is part of the run's input check, which does
/// no I/O.
///
/// ```
/// use reins_agent::eligibility::{DecideRequest, Eligibility, EligibilityPolicy};
///
/// struct OnlyOps;
///
/// impl EligibilityPolicy for OnlyOps {
///     fn may_decide(&self, d: DecideRequest<'_>) -> Eligibility {
///         match d.actor {
///             Some(a) if a.roles().iter().any(|r| r == "ops") => Eligibility::Eligible,
///             _ => Eligibility::refused("only ops decide"),
///         }
///     }
/// }
/// ```
pub trait EligibilityPolicy: Send + Sync + 'static {
    /// Whether the actor may approve or reject this call.
    fn may_decide(&self, request: DecideRequest<'_>) -> Eligibility;

    /// Whether the actor may create this grant (default: yes; the door's own role
    /// checks still apply).
    fn may_grant(&self, request: GrantRequest<'_>) -> Eligibility {
        let _ = request;
        Eligibility::Eligible
    }
}

impl<T: EligibilityPolicy + ?Sized> EligibilityPolicy for Arc<T> {
    fn may_decide(&self, request: DecideRequest<'_>) -> Eligibility {
        (**self).may_decide(request)
    }

    fn may_grant(&self, request: GrantRequest<'_>) -> Eligibility {
        (**self).may_grant(request)
    }
}

/// The agent's eligibility policy as a run carries it.
#[derive(Clone)]
pub(crate) struct Rules(pub(crate) Arc<dyn EligibilityPolicy>);

impl fmt::Debug for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EligibilityPolicy")
    }
}
