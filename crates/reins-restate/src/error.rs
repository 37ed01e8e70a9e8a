//! [`Error`]: what can go wrong talking to Restate or running a local restate-server.

use crate::wire::Refused;

/// Why a call through Restate failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The session refused the request: the local driver's error (see
    /// [`Refused::to_agent_error`]); nothing changed.
    #[error("refused ({}): {}", .0.code, .0.message)]
    Refused(Box<Refused>),
    /// Restate answered with an error that is not a refusal.
    #[error("restate answered {status}: {body}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The body, as sent.
        body: String,
    },
    /// The request did not reach Restate, or its answer did not arrive.
    #[error("request to restate failed: {0}")]
    Http(#[from] reqwest::Error),
    /// Restate's answer could not be read.
    #[error("unreadable answer from restate: {0}")]
    Decode(String),
    /// Waiting for a session to settle took too long.
    #[error("session `{session}` did not settle within {waited_ms} ms (phase {phase})")]
    Timeout {
        /// The session.
        session: String,
        /// How long it waited.
        waited_ms: u128,
        /// Its phase when the wait ended.
        phase: String,
    },
    /// A local restate-server could not be started or reached.
    #[error("local restate-server: {0}")]
    Server(String),
    /// The agent uses something this driver does not support yet.
    #[error("not supported by the Restate driver: {0}")]
    Unsupported(String),
    /// An I/O error (starting a process, reading a file).
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// The refusal, when the session refused the request.
    pub fn refused(&self) -> Option<&Refused> {
        match self {
            Self::Refused(r) => Some(&**r),
            _ => None,
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
