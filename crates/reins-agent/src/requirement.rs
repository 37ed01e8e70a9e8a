//! What a paused run waits for ([`Requirement`]) and how a person answers
//! ([`Decision`]).

use chrono::{DateTime, Utc};
use reins_message::ToolUse;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why a tool use waits for a person or the caller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RequirementKind {
    /// Approve or reject the call (`ToolPolicy::Confirm`, or a hook's `stop_agent()`).
    Confirmation,
    /// A person must fill in these fields (a JSON Schema); the values are merged into
    /// the arguments before the call.
    UserInput {
        /// A JSON Schema of what must be supplied.
        fields: Value,
    },
    /// The caller executes the tool and hands back the result (`ToolPolicy::External`,
    /// or a tool that suspended itself).
    External,
    /// The session's budget is reached ([`crate::budget`]): approve to extend it (with a
    /// new limit as the edited input or the input values, or the suggested one), reject
    /// to end the run. The requirement's tool use is named [`BUDGET_TOOL`] and shows
    /// the same facts as its input.
    ///
    /// [`BUDGET_TOOL`]: crate::budget::BUDGET_TOOL
    Budget {
        /// What was spent, the limit and what was reached.
        budget: Box<crate::budget::BudgetAsk>,
    },
}

impl RequirementKind {
    /// `confirmation`, `user_input`, `external` or `budget`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Confirmation => "confirmation",
            Self::UserInput { .. } => "user_input",
            Self::External => "external",
            Self::Budget { .. } => "budget",
        }
    }
}

/// One thing a paused run waits for. Its id is the tool use's id.
///
/// Its JSON carries, besides the fields below, `fingerprint`: the digest of the
/// arguments it shows ([`Requirement::fingerprint`]), so that whoever shows a
/// requirement to a person can bind the approval to it ([`Decision::shown`]) without
/// another request. The field is derived on every serialization and ignored when read.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Requirement {
    /// The id (equal to the tool use's id).
    pub id: String,
    /// The tool call waiting, exactly as the model made it.
    pub tool_use: ToolUse,
    /// What is needed.
    #[serde(flatten)]
    pub kind: RequirementKind,
    /// Why, for the person deciding (e.g. "`delete_file` needs confirmation").
    pub reason: String,
    /// When the run paused for it.
    pub created_at: DateTime<Utc>,
    /// After this moment decisions for it are refused (the caller may still reject it
    /// with a new message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// For a requirement raised inside a sub-agent: the route to it, outermost first —
    /// the parent's sub-agent tool use id(s), then the child's own requirement id. The
    /// requirement's `id` is the path joined with `/`. Empty for the run's own
    /// requirements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<String>,
    /// For a requirement raised inside a sub-agent: the name of the agent whose model
    /// made the call (so a UI can say "research wants to run `send_email`").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// For a confirmation that needs approvals from several people
    /// ([`AgentBuilder::quorum`](crate::AgentBuilder::quorum)): how many, and who
    /// approved so far. The requirement stays pending until the count is reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<QuorumState>,
}

/// The JSON of a [`Requirement`]: its fields, borrowed, and its derived fingerprint.
#[derive(Serialize)]
struct RequirementJson<'a> {
    id: &'a str,
    tool_use: &'a ToolUse,
    #[serde(flatten)]
    kind: &'a RequirementKind,
    reason: &'a str,
    created_at: &'a DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<&'a DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quorum: Option<&'a QuorumState>,
    fingerprint: String,
}

impl Serialize for Requirement {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Self {
            id,
            tool_use,
            kind,
            reason,
            created_at,
            expires_at,
            path,
            agent,
            quorum,
        } = self;
        RequirementJson {
            id,
            tool_use,
            kind,
            reason,
            created_at,
            expires_at: expires_at.as_ref(),
            path: (!path.is_empty()).then_some(path.as_slice()),
            agent: agent.as_ref(),
            quorum: quorum.as_ref(),
            fingerprint: self.fingerprint(),
        }
        .serialize(serializer)
    }
}

/// How many distinct people must approve a call of a tool, and optionally which roles
/// count ([`AgentBuilder::quorum`](crate::AgentBuilder::quorum)).
///
/// ```
/// use reins_agent::Quorum;
/// let q = Quorum::of(2).roles(["finance", "security"]);
/// assert_eq!(q.needed, 2);
/// assert!(q.counts(&["security".to_owned()]));
/// assert!(!q.counts(&["intern".to_owned()]));
/// assert!(Quorum::of(2).counts(&[]));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quorum {
    /// Approvals from distinct approvers needed before the call runs (at least 2).
    pub needed: u32,
    /// When not empty, only approvers with one of these roles count (an actor's roles
    /// are the strings in its metadata's `roles` array, see [`Actor::roles`]).
    ///
    /// [`Actor::roles`]: crate::Actor::roles
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
}

impl Quorum {
    /// `needed` approvals from distinct approvers, any role.
    pub fn of(needed: u32) -> Self {
        Self {
            needed,
            roles: Vec::new(),
        }
    }

    /// Only approvers with one of these roles count.
    #[must_use]
    pub fn roles<S: Into<String>>(mut self, roles: impl IntoIterator<Item = S>) -> Self {
        self.roles = roles.into_iter().map(Into::into).collect();
        self
    }

    /// Whether an approver with `roles` counts.
    pub fn counts(&self, roles: &[String]) -> bool {
        self.roles.is_empty() || roles.iter().any(|r| self.roles.contains(r))
    }
}

/// Where a quorum stands on one requirement: what it needs and the approvals so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumState {
    /// Approvals needed.
    pub needed: u32,
    /// The roles that count (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// The approvals so far, oldest first, one per approver.
    #[serde(default)]
    pub approvals: Vec<Approval>,
}

impl QuorumState {
    /// A quorum with no approvals yet.
    pub fn new(q: &Quorum) -> Self {
        Self {
            needed: q.needed,
            roles: q.roles.clone(),
            approvals: Vec::new(),
        }
    }

    /// Whether `by` approved already.
    pub fn approved_by(&self, by: &str) -> bool {
        self.approvals.iter().any(|a| a.by == by)
    }
}

/// One approval counted towards a [`QuorumState`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// Who approved.
    pub by: String,
    /// When.
    pub at: DateTime<Utc>,
}

impl Requirement {
    /// Whether the requirement has expired at `now`.
    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_some_and(|t| now >= t)
    }

    /// Whether the requirement was raised inside a sub-agent (its `path` is set).
    pub fn is_nested(&self) -> bool {
        !self.path.is_empty()
    }

    /// The fingerprint of the arguments this requirement shows (the model's
    /// `ToolUse` input; the same digest the tool-call ledger keeps). A person's
    /// approval carries the fingerprint of what they were shown
    /// ([`Decision::shown`]); a decision whose fingerprint does not match is refused.
    pub fn fingerprint(&self) -> String {
        reins_memory::fingerprint(&self.tool_use.input)
    }
}

/// A person's (or the caller's) answer to one [`Requirement`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Run the tool; optionally with edited arguments (the model's `ToolUse` stays as it
    /// was; the executed arguments are recorded in the result's metadata).
    Approve {
        /// The requirement's id.
        id: String,
        /// Replacement arguments, when the person edited them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        edited_input: Option<Value>,
        /// Who decided.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        /// The fingerprint of the arguments the person was shown
        /// ([`Requirement::fingerprint`]); when set, the decision is refused unless
        /// it matches what the requirement shows.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shown: Option<String>,
    },
    /// Do not run the tool; the model is told, with the note.
    Reject {
        /// The requirement's id.
        id: String,
        /// Why, for the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        /// Who decided.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// The values a `UserInput` requirement asked for (a JSON object merged into the
    /// arguments).
    Input {
        /// The requirement's id.
        id: String,
        /// The values.
        values: Value,
        /// Who supplied them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        /// The fingerprint of the arguments the person was shown (see
        /// [`Decision::Approve`]'s `shown`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shown: Option<String>,
    },
    /// The result of a tool the caller executed itself (`External`).
    ExternalResult {
        /// The requirement's id.
        id: String,
        /// The output shown to the model (a string or any JSON).
        output: Value,
        /// Whether the execution failed.
        #[serde(default)]
        is_error: bool,
        /// Who executed it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
}

impl Decision {
    /// Approve the call as the model made it.
    pub fn approve(id: impl Into<String>) -> Self {
        Self::Approve {
            id: id.into(),
            edited_input: None,
            by: None,
            shown: None,
        }
    }

    /// Approve the call with edited arguments.
    pub fn approve_with(id: impl Into<String>, edited_input: Value) -> Self {
        Self::Approve {
            id: id.into(),
            edited_input: Some(edited_input),
            by: None,
            shown: None,
        }
    }

    /// Reject the call, telling the model why.
    pub fn reject(id: impl Into<String>, note: impl Into<String>) -> Self {
        let note = note.into();
        Self::Reject {
            id: id.into(),
            note: (!note.is_empty()).then_some(note),
            by: None,
        }
    }

    /// Supply the values a `UserInput` requirement asked for.
    pub fn input(id: impl Into<String>, values: Value) -> Self {
        Self::Input {
            id: id.into(),
            values,
            by: None,
            shown: None,
        }
    }

    /// Hand back the result of an externally executed tool.
    pub fn external_result(
        id: impl Into<String>,
        output: impl Into<Value>,
        is_error: bool,
    ) -> Self {
        Self::ExternalResult {
            id: id.into(),
            output: output.into(),
            is_error,
            by: None,
        }
    }

    /// Records who decided.
    #[must_use]
    pub fn by(mut self, who: impl Into<String>) -> Self {
        let who = Some(who.into());
        match &mut self {
            Self::Approve { by, .. }
            | Self::Reject { by, .. }
            | Self::Input { by, .. }
            | Self::ExternalResult { by, .. } => *by = who,
        }
        self
    }

    /// Binds an approval (or input) to the arguments the person was shown: the
    /// fingerprint from [`Requirement::fingerprint`] of the requirement they saw. The
    /// decision is then refused ([`AgentError::ShownArgumentsChanged`]) unless the
    /// requirement still shows exactly those arguments. No effect on a rejection or an
    /// external result (they run nothing).
    ///
    /// [`AgentError::ShownArgumentsChanged`]: crate::AgentError::ShownArgumentsChanged
    #[must_use]
    pub fn shown(mut self, fingerprint: impl Into<String>) -> Self {
        if let Self::Approve { shown, .. } | Self::Input { shown, .. } = &mut self {
            *shown = Some(fingerprint.into());
        }
        self
    }

    /// The fingerprint of the arguments the decision was made on, when it carries one.
    pub fn shown_fingerprint(&self) -> Option<&str> {
        match self {
            Self::Approve { shown, .. } | Self::Input { shown, .. } => shown.as_deref(),
            Self::Reject { .. } | Self::ExternalResult { .. } => None,
        }
    }

    /// The requirement id this answers.
    pub fn id(&self) -> &str {
        match self {
            Self::Approve { id, .. }
            | Self::Reject { id, .. }
            | Self::Input { id, .. }
            | Self::ExternalResult { id, .. } => id,
        }
    }

    /// `approve`, `reject`, `input` or `external_result`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Approve { .. } => "approve",
            Self::Reject { .. } => "reject",
            Self::Input { .. } => "input",
            Self::ExternalResult { .. } => "external_result",
        }
    }

    /// Who decided, when recorded.
    pub fn decided_by(&self) -> Option<&str> {
        match self {
            Self::Approve { by, .. }
            | Self::Reject { by, .. }
            | Self::Input { by, .. }
            | Self::ExternalResult { by, .. } => by.as_deref(),
        }
    }

    /// Whether this kind of decision answers this kind of requirement. Reject answers
    /// every kind; Approve answers confirmations; Input answers user input; an
    /// external result answers external execution; a budget is answered by Approve
    /// (extend, with `edited_input` as the new limit), Input (the values are the new
    /// limit) or Reject (end the run).
    pub fn fits(&self, kind: &RequirementKind) -> bool {
        matches!(
            (self, kind),
            (Self::Reject { .. }, _)
                | (Self::Approve { .. }, RequirementKind::Confirmation)
                | (Self::Input { .. }, RequirementKind::UserInput { .. })
                | (Self::ExternalResult { .. }, RequirementKind::External)
                | (
                    Self::Approve { .. } | Self::Input { .. },
                    RequirementKind::Budget { .. }
                )
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn requirement() -> Requirement {
        Requirement {
            id: "t1".into(),
            tool_use: ToolUse::new("t1", "delete_file", serde_json::json!({"path": "a.txt"})),
            kind: RequirementKind::Confirmation,
            reason: "`delete_file` needs confirmation".into(),
            created_at: DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap_or_default(),
            expires_at: None,
            path: Vec::new(),
            agent: None,
            quorum: None,
        }
    }

    #[test]
    fn json_carries_the_fingerprint_of_the_arguments_and_reads_back() {
        let r = requirement();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["fingerprint"], r.fingerprint());
        assert_eq!(v["kind"], "confirmation");
        assert!(v.get("path").is_none() && v.get("expires_at").is_none());
        let back: Requirement = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn a_stale_fingerprint_in_the_json_is_not_believed() {
        let mut v = serde_json::to_value(requirement()).unwrap();
        v["fingerprint"] = "forged".into();
        v["tool_use"]["input"] = serde_json::json!({"path": "/etc/passwd"});
        let back: Requirement = serde_json::from_value(v).unwrap();
        assert_ne!(back.fingerprint(), "forged");
        assert_eq!(
            serde_json::to_value(&back).unwrap()["fingerprint"],
            back.fingerprint()
        );
    }
}
