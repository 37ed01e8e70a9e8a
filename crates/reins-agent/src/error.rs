//! [`AgentError`]: every way a call on an agent or session can fail.

use chrono::{DateTime, Utc};

/// The decision that took effect on a requirement, as the audit trail records it
/// (see [`AgentError::AlreadyDecided`]). Serializable, so that a driver in another
/// process can send it back with its refusal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Decided {
    /// `approve`, `reject`, `input`, `external_result` or `tool_result`.
    pub decision: String,
    /// Who made it, when recorded.
    pub by: Option<String>,
    /// When it was made.
    pub at: DateTime<Utc>,
    /// How it was given (`resolve`, `resume`, `message`, `parent`, ...; "on child
    /// session `..`" when it was made there).
    pub via: String,
}

impl Decided {
    /// What closed the call, when no one decided on it: a new message in the session
    /// (`via: message`), the end of the run at its budget (`budget`) or the parent
    /// session moving on (`parent`), which close every call still waiting (recorded as
    /// rejections). `None` for a decision made on the call itself.
    ///
    /// ```
    /// # use reins_agent::Decided;
    /// let closed: Decided = serde_json::from_value(serde_json::json!({
    ///     "decision": "reject", "by": null, "at": "2026-11-27T12:00:00Z", "via": "message"
    /// })).unwrap();
    /// assert_eq!(closed.closed_by(), Some("a new message in the session"));
    /// ```
    pub fn closed_by(&self) -> Option<&'static str> {
        // A call of a sub-agent's child session: "message on child session `...`".
        let via = self.via.split(" on child session ").next().unwrap_or("");
        match via {
            "message" => Some("a new message in the session"),
            "budget" => Some("the end of the run at its budget"),
            "parent" => Some("the parent session moving on"),
            _ => None,
        }
    }
}

impl From<crate::budget::InvalidBudget> for AgentError {
    fn from(e: crate::budget::InvalidBudget) -> Self {
        Self::InvalidBudget { reason: e.reason }
    }
}

/// Why a call on an [`Agent`](crate::Agent) or [`Session`](crate::Session) failed.
///
/// Errors about decisions and inputs are raised before anything is written: the stored
/// session is unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// Another run on this session is in flight (in this process or another one).
    #[error("session `{session}` is busy: another run is in flight; wait for it or interrupt it")]
    SessionBusy {
        /// The session id.
        session: String,
    },
    /// A fork ([`Session::fork`](crate::Session::fork)) or an import
    /// ([`Agent::restore`](crate::Agent::restore)) names a session id that is already
    /// taken (it has messages or a run state): nothing is written over it.
    #[error("session `{session}` already exists: delete it first or choose another id")]
    SessionExists {
        /// The session id.
        session: String,
    },
    /// `resume()` or `resolve()` on a session that is not paused.
    #[error("session `{session}` has nothing to resume: it is not paused")]
    NothingToResume {
        /// The session id.
        session: String,
    },
    /// A decision or tool result names no pending requirement.
    #[error("`{id}` is not a pending requirement of this session; pending: {}", list(.pending))]
    UnknownRequirement {
        /// The id given.
        id: String,
        /// The ids that are pending.
        pending: Vec<String>,
    },
    /// A decision of the wrong kind (e.g. `input` for a confirmation).
    #[error("a `{decision}` decision cannot answer the {kind} requirement `{id}`{}", hint(.kind))]
    WrongDecision {
        /// The requirement id.
        id: String,
        /// The decision given.
        decision: &'static str,
        /// The requirement's kind.
        kind: &'static str,
    },
    /// The requirement expired; decisions are refused (a new message still rejects it).
    #[error("requirement `{id}` expired at {expired_at}; send a new message to move on")]
    RequirementExpired {
        /// The requirement id.
        id: String,
        /// When it expired.
        expired_at: DateTime<Utc>,
    },
    /// The requirement was already decided — by another approver, through the child
    /// session of a sub-agent, or closed by a new message — before this decision
    /// arrived (a late second approver). Nothing changed and nothing ran; `decided` is
    /// the audit record of the decision that took effect (who, what, when, how).
    #[error(
        "requirement `{id}` was already decided: `{}` by {} at {} (via {}); nothing changed",
        .decided.decision,
        .decided.by.as_deref().map_or_else(|| "an unnamed caller".to_owned(), |b| format!("`{b}`")),
        .decided.at,
        .decided.via
    )]
    AlreadyDecided {
        /// The requirement id given.
        id: String,
        /// The decision that took effect, as the audit trail records it.
        decided: Box<Decided>,
    },
    /// An approval (or input) bound to the arguments its author was shown
    /// ([`Decision::shown`](crate::Decision::shown)) names a requirement that shows
    /// other arguments: it was not made on what would run. Nothing changed; read the
    /// requirement again and decide on what it shows.
    #[error(
        "the arguments of `{id}` are not the ones the decision was made on (shown {shown}, now {current}); read it again and decide on what it shows"
    )]
    ShownArgumentsChanged {
        /// The requirement id.
        id: String,
        /// The fingerprint the decision carried.
        shown: String,
        /// The fingerprint of the arguments the requirement shows.
        current: String,
    },
    /// An approver approved a requirement under a quorum a second time: each
    /// approver counts once. Nothing changed; another approver must approve.
    #[error(
        "`{by}` already approved `{id}`; it needs approvals from {needed} distinct approvers ({count} so far)"
    )]
    AlreadyApproved {
        /// The requirement id.
        id: String,
        /// Who approved again.
        by: String,
        /// Approvals needed.
        needed: u32,
        /// Approvals so far.
        count: u32,
    },
    /// A decision its author may not make, or a grant they may not create: an approval
    /// under a quorum that cannot count towards it (no name — every approval under a
    /// quorum must say who made it — or none of the roles the quorum accepts), a
    /// decision or a grant the [eligibility policy](crate::EligibilityPolicy) refuses, a
    /// door's own rule about who decides what. Nothing changed.
    #[error("{reason}")]
    NotEligible {
        /// The requirement id (for a grant: ``grant of `TOOL` ``, naming the tool).
        id: String,
        /// The whole refusal, as a person reads it: who may not do what, and why (an
        /// approval "cannot count towards its quorum" only where the requirement has
        /// one).
        reason: String,
    },
    /// The same requirement was answered twice in one call.
    #[error("requirement `{id}` was answered more than once in the same call")]
    DuplicateDecision {
        /// The requirement id.
        id: String,
    },
    /// The caller acted on a view of the session that is out of date: what it was shown
    /// is not what the session waits for now (another worker resolved some of it, or
    /// a new pause exists). Nothing changed and nothing ran; read the session again
    /// (`requirements()`, `view()`) and decide on what it shows.
    #[error(
        "the session changed since it was read: you saw {}, it now waits for {}; read it again and decide on what it shows",
        list(.seen),
        pending_list(.pending)
    )]
    StaleView {
        /// The requirement ids the caller was shown.
        seen: Vec<String>,
        /// What the session waits for now.
        pending: Vec<crate::requirement::Requirement>,
    },
    /// The model's structured answer did not match the output schema, even after it
    /// was told what was wrong `attempts - 1` times. The invalid answers are in the
    /// transcript, marked (`reins.output: "invalid"` in their metadata).
    #[error(
        "the model's answer does not match the output schema after {attempts} attempt(s): {}; raw answer: {}",
        .problems.join("; "),
        clip(.raw, 400)
    )]
    InvalidOutput {
        /// The last answer, as the model wrote it.
        raw: String,
        /// What is wrong with it.
        problems: Vec<String>,
        /// How many answers were tried.
        attempts: u32,
    },
    /// A budget limit or an extension of one cannot be accepted: a negative or
    /// non-numeric value, an unknown field, a new limit not above what was spent, or a
    /// cost limit without a price for the model.
    #[error("invalid budget: {reason}")]
    InvalidBudget {
        /// What is wrong, and what would be accepted.
        reason: String,
    },
    /// The input cannot be accepted (e.g. a user message carrying tool results).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A tool call is running in another process (its ledger lease has not expired).
    #[error("tool call `{id}` is in flight elsewhere until {until}; try again later")]
    ToolInFlight {
        /// The tool use id.
        id: String,
        /// When the other process's lease ends.
        until: DateTime<Utc>,
    },
    /// The model failed.
    #[error("model error: {0}")]
    Model(#[from] reins_model::ModelError),
    /// A hook failed.
    #[error("hook error: {0}")]
    Hook(#[from] reins_hook::HookError),
    /// The store failed.
    #[error("store error: {0}")]
    Store(#[from] reins_memory::Error),
    /// Context compression could not summarize the older turns (see
    /// [`ContextPolicy`](crate::ContextPolicy)); nothing was stored.
    #[error("context compression failed: {0}")]
    Summarization(String),
    /// The agent was built with an invalid configuration.
    #[error("invalid agent configuration: {0}")]
    Config(String),
    /// A session snapshot could not be read.
    #[error("invalid session snapshot: {0}")]
    Snapshot(String),
    /// The stored run state could not be read.
    #[error("stored run state of session `{session}` is unreadable: {detail}")]
    CorruptRunState {
        /// The session id.
        session: String,
        /// What was wrong.
        detail: String,
    },
    /// The backend that runs the session (e.g. a Restate deployment behind a
    /// [`SessionBackend`](crate::SessionBackend)) failed or could not be reached.
    #[error("session backend error: {0}")]
    Backend(String),
    /// The run's task ended abnormally (a bug: please report it).
    #[error("internal error: {0}")]
    Internal(String),
}

fn list(ids: &[String]) -> String {
    if ids.is_empty() {
        "none".to_owned()
    } else {
        ids.join(", ")
    }
}

fn pending_list(reqs: &[crate::requirement::Requirement]) -> String {
    if reqs.is_empty() {
        "nothing".to_owned()
    } else {
        reqs.iter()
            .map(|r| format!("`{}` ({})", r.id, r.tool_use.name))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn hint(kind: &str) -> &'static str {
    match kind {
        "confirmation" => " (use approve or reject)",
        "user_input" => " (use input or reject)",
        "external" => " (use external_result or reject)",
        _ => "",
    }
}

/// The crate's result type.
pub type Result<T, E = AgentError> = std::result::Result<T, E>;

/// `s` cut to `max` characters, with an ellipsis when cut.
pub(crate) fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}
