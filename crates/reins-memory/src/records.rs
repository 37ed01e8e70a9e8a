//! The records a [`MemoryStore`](crate::MemoryStore) keeps and answers with: a
//! session as stored, its list lines and heads, requirements, ledger entries, decision
//! log entries, change notices and lock answers.

use chrono::{DateTime, Utc};
use reins_message::{Msg, ToolResult};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A session as stored: its messages, requirements and the agent's run state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionState {
    /// The session id.
    pub id: String,
    /// Bumped by every non-empty commit; a new session is at version 0.
    pub version: u64,
    /// The transcript, oldest first.
    pub messages: Vec<Msg>,
    /// Requirements (pauses waiting for a person), oldest first.
    pub requirements: Vec<RequirementRecord>,
    /// The agent's opaque run state.
    pub run_state: Option<Value>,
    /// When the session was created.
    pub created_at: DateTime<Utc>,
    /// When the session was last committed to.
    pub updated_at: DateTime<Utc>,
}

impl SessionState {
    /// An empty session at version 0.
    pub fn new(id: impl Into<String>, now: DateTime<Utc>) -> Self {
        Self {
            id: id.into(),
            version: 0,
            messages: Vec::new(),
            requirements: Vec::new(),
            run_state: None,
            created_at: now,
            updated_at: now,
        }
    }

    /// The requirements still waiting for a decision.
    pub fn open_requirements(&self) -> impl Iterator<Item = &RequirementRecord> {
        self.requirements.iter().filter(|r| r.decision.is_none())
    }
}

/// One line of [`MemoryStore::list_sessions`](crate::MemoryStore::list_sessions).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// The session id.
    pub id: String,
    /// Its version.
    pub version: u64,
    /// How many messages it holds.
    pub message_count: u64,
    /// When it was last committed to.
    pub updated_at: DateTime<Utc>,
    /// Whether any requirement is waiting for a decision.
    pub has_open_requirements: bool,
}

/// A session without its transcript, as [`MemoryStore::list_session_heads`](crate::MemoryStore::list_session_heads) reads it:
/// what a list of sessions shows (whether it waits, for what, and when it last moved).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionHead {
    /// The session id.
    pub id: String,
    /// Its version.
    pub version: u64,
    /// How many messages it holds (they are not loaded).
    pub message_count: u64,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was last committed to.
    pub updated_at: DateTime<Utc>,
    /// The agent's opaque run state.
    pub run_state: Option<Value>,
    /// The requirements still waiting for a decision, oldest first.
    pub open_requirements: Vec<RequirementRecord>,
}

impl SessionHead {
    /// The head of a loaded session (its decided requirements and messages dropped).
    pub fn of(state: SessionState) -> Self {
        Self {
            message_count: state.messages.len() as u64,
            open_requirements: state
                .requirements
                .into_iter()
                .filter(|r| r.is_open())
                .collect(),
            id: state.id,
            version: state.version,
            created_at: state.created_at,
            updated_at: state.updated_at,
            run_state: state.run_state,
        }
    }

    /// A [`SessionState`] with this head and no messages (for code that reads a
    /// session's run state and open requirements, never its transcript).
    pub fn into_state(self) -> SessionState {
        SessionState {
            id: self.id,
            version: self.version,
            messages: Vec::new(),
            requirements: self.open_requirements,
            run_state: self.run_state,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

/// A stored requirement: a pause waiting for a person. `kind`, `payload` and
/// `decision` are opaque to the store (the agent defines them), except that the tool
/// name at `payload.tool_use.name` is indexed for [`MemoryStore::pending_requirements`](crate::MemoryStore::pending_requirements).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequirementRecord {
    /// The requirement id (the tool use id).
    pub id: String,
    /// What kind of requirement it is.
    pub kind: String,
    /// What the agent needs to show or rebuild it.
    pub payload: Value,
    /// When it was raised.
    pub created_at: DateTime<Utc>,
    /// When it stops accepting decisions, if ever.
    pub expires_at: Option<DateTime<Utc>>,
    /// The decision, once given.
    pub decision: Option<Value>,
    /// When the decision was given.
    pub decided_at: Option<DateTime<Utc>>,
}

impl RequirementRecord {
    /// An open requirement raised now.
    pub fn new(id: impl Into<String>, kind: impl Into<String>, payload: Value) -> Self {
        Self {
            id: id.into(),
            kind: kind.into(),
            payload,
            created_at: Utc::now(),
            expires_at: None,
            decision: None,
            decided_at: None,
        }
    }

    /// Sets when it expires.
    #[must_use]
    pub fn with_expiry(mut self, at: DateTime<Utc>) -> Self {
        self.expires_at = Some(at);
        self
    }

    /// Whether it still waits for a decision.
    pub fn is_open(&self) -> bool {
        self.decision.is_none()
    }
}

/// The answer to [`MemoryStore::claim`](crate::MemoryStore::claim).
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// The caller holds the lease: run the tool, then [`MemoryStore::finish`](crate::MemoryStore::finish).
    Granted,
    /// The call already finished; here is its recorded result. Do not run it again.
    Finished(ToolResult),
    /// Someone else holds an unexpired lease on the call.
    InFlight {
        /// When that lease runs out.
        lease_until: DateTime<Utc>,
    },
    /// A lease ran out and the call never finished: whether it took effect is unknown.
    /// Returned only when `allow_takeover` is false.
    Expired,
}

/// Whether a ledger entry's call is still running or finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerState {
    /// Claimed; no result recorded yet.
    Running,
    /// A result is recorded.
    Finished,
}

impl LedgerState {
    /// `running` or `finished`, as stored.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Finished => "finished",
        }
    }

    /// Parses the stored form.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "running" => Some(Self::Running),
            "finished" => Some(Self::Finished),
            _ => None,
        }
    }
}

/// One tool call as the ledger records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The tool use id.
    pub tool_use_id: String,
    /// The fingerprint of the arguments it was claimed with (see [`crate::fingerprint`]).
    pub fingerprint: String,
    /// Running or finished.
    pub state: LedgerState,
    /// When the current lease runs out.
    pub lease_until: DateTime<Utc>,
    /// The recorded result, once finished.
    pub result: Option<ToolResult>,
    /// How many times a lease was granted (1 + takeovers).
    pub attempts: u32,
}

/// One entry of a session's decision log: the append-only audit trail of what people
/// (or callers) decided about its requirements, including refused decisions. `record`
/// is opaque to the store (the agent defines it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionEntry {
    /// The entry's position in the session's log (1, 2, ...), assigned by the store;
    /// ignored when appending.
    pub seq: u64,
    /// The requirement the decision was about.
    pub requirement_id: String,
    /// When it was made.
    pub at: DateTime<Utc>,
    /// What the agent records about it.
    pub record: Value,
}

impl DecisionEntry {
    /// An entry for `requirement_id` made now.
    pub fn new(requirement_id: impl Into<String>, record: Value) -> Self {
        Self {
            seq: 0,
            requirement_id: requirement_id.into(),
            at: Utc::now(),
            record,
        }
    }
}

/// A change a writer made to a store, as [`MemoryStore::changes`](crate::MemoryStore::changes) reports it: a
/// commit, or a request to interrupt a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreChange {
    /// The session that changed; `None` when the backend only knows that *something*
    /// changed (SQLite learns of other processes' writes by polling), so a listener
    /// checks the sessions it cares about.
    pub session: Option<String>,
    /// Whether this may be an interrupt request (true for requests, and for notices of
    /// unknown origin); false for a plain commit.
    pub maybe_interrupt: bool,
}

impl StoreChange {
    /// Whether this change may concern `session`.
    pub fn concerns(&self, session: &str) -> bool {
        self.session.as_deref().is_none_or(|s| s == session)
    }
}

/// What [`MemoryStore::try_lock_session_reading_version`](crate::MemoryStore::try_lock_session_reading_version) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionLock {
    /// Another owner holds a live lock: nothing changed.
    Busy,
    /// The lock is the caller's; `version` is the session's stored version (`None`:
    /// the session does not exist).
    Acquired {
        /// The stored version when the lock was taken.
        version: Option<u64>,
    },
}

/// The receiving end of [`MemoryStore::changes`](crate::MemoryStore::changes). A receiver that falls behind gets
/// `RecvError::Lagged`: treat it as "anything may have changed".
pub type ChangeFeed = tokio::sync::broadcast::Receiver<StoreChange>;
