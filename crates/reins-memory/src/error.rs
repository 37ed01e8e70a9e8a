//! The crate's error type.

/// What went wrong in a store operation. Every variant names the session (and the row,
/// message or requirement) involved, so a person can find it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The session does not exist (open it with `open_session` first).
    #[error("session `{id}` does not exist")]
    SessionNotFound {
        /// The session id asked for.
        id: String,
    },
    /// The session was changed by someone else since it was loaded.
    #[error(
        "session `{session}` is at version {actual}, but the commit expected version {expected}; reload the session and retry"
    )]
    Conflict {
        /// The session id.
        session: String,
        /// The version the commit was based on.
        expected: u64,
        /// The version actually stored.
        actual: u64,
    },
    /// A commit that takes the session's run lock ([`Commit::acquire_lock`](crate::Commit::acquire_lock))
    /// found it held by another owner whose lease is live: nothing was written. Retry
    /// once that run ended (its lease is at most the runner's session lease).
    #[error(
        "session `{session}` is being run by another worker (it holds the session's run lock); nothing was written"
    )]
    SessionLocked {
        /// The session id.
        session: String,
    },
    /// A commit named a message id the session does not hold.
    #[error("session `{session}` has no message with id `{id}`")]
    MessageNotFound {
        /// The session id.
        session: String,
        /// The missing message id.
        id: String,
    },
    /// A commit appended a message whose id the session already holds.
    #[error("session `{session}` already holds a message with id `{id}`")]
    DuplicateMessage {
        /// The session id.
        session: String,
        /// The repeated message id.
        id: String,
    },
    /// A decision named a requirement the session does not hold.
    #[error("session `{session}` has no requirement with id `{id}`")]
    RequirementNotFound {
        /// The session id.
        session: String,
        /// The requirement id (the tool use id).
        id: String,
    },
    /// A decision was given for a requirement that is already decided.
    #[error("requirement `{id}` of session `{session}` is already decided")]
    RequirementAlreadyDecided {
        /// The session id.
        session: String,
        /// The requirement id.
        id: String,
    },
    /// A requirement was added while an open one with the same id exists.
    #[error("session `{session}` already has an open requirement with id `{id}`")]
    DuplicateRequirement {
        /// The session id.
        session: String,
        /// The requirement id.
        id: String,
    },
    /// A tool use was claimed with arguments that differ from the ones recorded for it.
    #[error(
        "tool use `{tool_use_id}` of session `{session}` was claimed with different arguments than the ones recorded (fingerprint {found}, recorded {recorded})"
    )]
    FingerprintMismatch {
        /// The session id.
        session: String,
        /// The tool use id.
        tool_use_id: String,
        /// The fingerprint recorded by the first claim.
        recorded: String,
        /// The fingerprint of this claim.
        found: String,
    },
    /// `finish` was called for a tool use that was never claimed.
    #[error("tool use `{tool_use_id}` of session `{session}` was never claimed in the ledger")]
    LedgerEntryNotFound {
        /// The session id.
        session: String,
        /// The tool use id.
        tool_use_id: String,
    },
    /// A stored row does not parse; `detail` names the row and the field.
    #[error("session `{session}` holds a corrupt row: {detail}")]
    Corrupt {
        /// The session id (empty when the row belongs to no session).
        session: String,
        /// Which row, and what is wrong with it.
        detail: String,
    },
    /// The database was written by a newer reins (or is not a reins database).
    #[error(
        "the database schema is version {found}, but this reins supports up to version {supported}; upgrade reins or use another database"
    )]
    UnsupportedSchema {
        /// The version found in the database.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// A value could not be encoded for storage.
    #[error("could not encode {what}: {detail}")]
    Encode {
        /// What was being encoded.
        what: String,
        /// The encoder's message.
        detail: String,
    },
    /// The database reported an error.
    #[error("database error: {0}")]
    Database(String),
    /// No grant has this id.
    #[error("no grant has id `{id}`")]
    GrantNotFound {
        /// The id asked for.
        id: String,
    },
    /// The grant was revoked already (a revoked grant stays revoked).
    #[error("grant `{id}` was already revoked at {at}{}", by.as_ref().map(|b| format!(" by `{b}`")).unwrap_or_default())]
    GrantAlreadyRevoked {
        /// The grant id.
        id: String,
        /// When it was revoked.
        at: chrono::DateTime<chrono::Utc>,
        /// Who revoked it.
        by: Option<String>,
    },
    /// A grant with this id already exists.
    #[error("a grant with id `{id}` already exists")]
    DuplicateGrant {
        /// The repeated id.
        id: String,
    },
    /// A grant was refused as malformed; `detail` says what to fix.
    #[error("invalid grant: {detail}")]
    InvalidGrant {
        /// What is wrong.
        detail: String,
    },
    /// The store does not keep this kind of record (a custom store that does not
    /// implement standing grants).
    #[error("this store does not support {what}")]
    Unsupported {
        /// What was asked for.
        what: String,
    },
    /// No delivery has this id.
    #[error("no delivery `{id}` in the outbox")]
    DeliveryNotFound {
        /// The id asked for.
        id: String,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(feature = "sqlite")]
impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Self::Database(e.to_string())
    }
}

#[cfg(feature = "postgres")]
impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Self::Database(e.to_string())
    }
}
