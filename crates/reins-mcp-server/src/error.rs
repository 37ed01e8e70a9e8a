//! The crate's error type.

/// What can go wrong building or serving an agent over MCP.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server was configured in a way that cannot work.
    #[error("MCP agent server configuration: {0}")]
    Config(String),
    /// Reading or writing the transport failed (stdio closed, the listener failed).
    #[error("MCP transport: {0}")]
    Transport(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
