//! The crate's error type.

/// What can go wrong serving ACP.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading from or writing to the client failed (its pipe closed, say).
    #[error("the connection to the ACP client failed: {0}")]
    Io(#[from] std::io::Error),
}

/// This crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
