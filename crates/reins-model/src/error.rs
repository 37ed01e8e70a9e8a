//! [`ModelError`]: every way a model call can fail, typed.

use std::time::Duration;

/// Why a model call failed. Messages carry the provider's own words; they never
/// contain API keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The API key is missing, wrong or lacks permission.
    #[error("authentication failed: {message}")]
    Auth {
        /// The provider's message.
        message: String,
    },
    /// The provider asked us to slow down.
    #[error("rate limited{}: {message}", retry_after.map(|d| format!(" (retry after {:.1}s)", d.as_secs_f64())).unwrap_or_default())]
    RateLimited {
        /// How long the provider asked us to wait, when it said.
        retry_after: Option<Duration>,
        /// The provider's message.
        message: String,
    },
    /// The request was refused as invalid (HTTP 400/404/422 and the like).
    #[error("bad request (HTTP {status}): {message}")]
    BadRequest {
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The conversation does not fit the model's context window.
    #[error("context too long: {message}")]
    ContextTooLong {
        /// The provider's message.
        message: String,
    },
    /// The provider failed (HTTP 5xx or an error event in the stream).
    #[error("provider error (HTTP {status}): {message}")]
    Server {
        /// The HTTP status (0 when the error came inside a stream).
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// No answer in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The connection failed or broke.
    #[error("network error: {0}")]
    Network(String),
    /// The stream could not be understood, or ended before it was complete.
    #[error("malformed stream: {0}")]
    MalformedStream(String),
    /// The request could not be built (e.g. an option the provider cannot express).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

impl ModelError {
    /// Whether retrying the same request may succeed (rate limits, server errors,
    /// timeouts, network failures). Only ever retried before the first chunk.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. } | Self::Server { .. } | Self::Timeout(_) | Self::Network(_)
        )
    }

    /// The wait the provider asked for, when it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;
