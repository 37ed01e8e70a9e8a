//! The crate's errors: building evidence ([`Error`]) and checking it ([`VerifyError`]).

/// What went wrong while building or encoding evidence.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value could not be encoded as canonical JSON (RFC 8785).
    #[error("cannot encode {what} as canonical JSON: {source}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// Why it failed.
        source: serde_json::Error,
    },
    /// A signing or verifying key from the configuration is not usable.
    #[error("key `{kid}` is not usable: {reason}")]
    Key {
        /// The key id.
        kid: String,
        /// Why (never the key material).
        reason: String,
    },
}

/// A `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a bundle was refused: the first entry that fails, and the reason.
///
/// `entry` is the 1-based position of the failing entry in the chain (the sequence
/// number it should carry), `None` when the failure is not about an entry (a missing
/// header, a bad key line); `line` is the 1-based line of the bundle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe(.entry, .line, .reason))]
pub struct VerifyError {
    /// The failing entry's position in the chain (1, 2, ...), if an entry failed.
    pub entry: Option<u64>,
    /// The bundle line (1-based) where the failure was found.
    pub line: usize,
    /// What is wrong, for a person.
    pub reason: String,
}

fn describe(entry: &Option<u64>, line: &usize, reason: &str) -> String {
    match entry {
        Some(n) => format!("entry {n} (bundle line {line}) fails: {reason}"),
        None => format!("bundle line {line} fails: {reason}"),
    }
}
