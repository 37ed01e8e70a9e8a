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
    /// The provider's safety system refused the prompt and gave no answer (Gemini's
    /// `promptFeedback.blockReason`). Not retried: the same prompt is refused again.
    #[error("blocked by the provider's safety system ({reason}): {message}")]
    Blocked {
        /// The provider's reason, as it named it (e.g. `SAFETY`, `PROHIBITED_CONTENT`).
        reason: String,
        /// What the provider said, or a description of the block.
        message: String,
    },
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

    /// The error with every occurrence of `secret` (an API key) in its text replaced
    /// by `<redacted>`. Providers pass every error through this before returning it,
    /// so a server message that quotes the key never leaks it. Secrets shorter than 4
    /// characters are left alone (they would redact ordinary words).
    #[must_use]
    pub fn redact(self, secret: &str) -> Self {
        if secret.len() < 4 {
            return self;
        }
        let r = |m: String| {
            if m.contains(secret) {
                m.replace(secret, "<redacted>")
            } else {
                m
            }
        };
        match self {
            Self::Auth { message } => Self::Auth {
                message: r(message),
            },
            Self::RateLimited {
                retry_after,
                message,
            } => Self::RateLimited {
                retry_after,
                message: r(message),
            },
            Self::BadRequest { status, message } => Self::BadRequest {
                status,
                message: r(message),
            },
            Self::ContextTooLong { message } => Self::ContextTooLong {
                message: r(message),
            },
            Self::Server { status, message } => Self::Server {
                status,
                message: r(message),
            },
            Self::Timeout(m) => Self::Timeout(r(m)),
            Self::Network(m) => Self::Network(r(m)),
            Self::MalformedStream(m) => Self::MalformedStream(r(m)),
            Self::InvalidRequest(m) => Self::InvalidRequest(r(m)),
            Self::Blocked { reason, message } => Self::Blocked {
                reason,
                message: r(message),
            },
        }
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

impl ModelError {
    /// Maps an HTTP error response to the right variant, keeping the provider's
    /// `message`: 401/403 → [`Auth`](Self::Auth); 429 → [`RateLimited`](Self::RateLimited)
    /// (with `retry_after`); 400/413/422 whose message speaks of the context window →
    /// [`ContextTooLong`](Self::ContextTooLong); other 4xx →
    /// [`BadRequest`](Self::BadRequest); 408 → [`Timeout`](Self::Timeout); 5xx (529
    /// "overloaded" included) and anything else → [`Server`](Self::Server).
    ///
    /// ```
    /// use reins_model::ModelError;
    /// let e = ModelError::from_http_status(400, "This model's maximum context length is 8192 tokens".into(), None);
    /// assert!(matches!(e, ModelError::ContextTooLong { .. }));
    /// ```
    pub fn from_http_status(status: u16, message: String, retry_after: Option<Duration>) -> Self {
        match status {
            401 | 403 => Self::Auth { message },
            429 => Self::RateLimited {
                retry_after,
                message,
            },
            408 => Self::Timeout(message),
            400 | 413 | 422 if is_context_overflow(&message) => Self::ContextTooLong { message },
            400..=499 => Self::BadRequest { status, message },
            _ => Self::Server { status, message },
        }
    }
}

/// Whether a provider's error message says the prompt does not fit the context window
/// (the wording OpenAI, Anthropic, DashScope, DeepSeek and common local servers use).
pub fn is_context_overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "context length",
        "context_length",
        "context window",
        "maximum context",
        "prompt is too long",
        "too many tokens",
        "input is too long",
        "range of input length",
        "exceeds the context",
        "context size",
    ]
    .iter()
    .any(|needle| m.contains(needle))
}

/// Parses an HTTP `Retry-After` value given in seconds (integer or decimal). HTTP
/// dates are not understood and give `None`, as do negative or absurd values.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().parse().ok()?;
    (secs.is_finite() && (0.0..=86_400.0).contains(&secs)).then(|| Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_variants() {
        let m = || "msg".to_owned();
        assert!(matches!(
            ModelError::from_http_status(401, m(), None),
            ModelError::Auth { .. }
        ));
        assert!(matches!(
            ModelError::from_http_status(403, m(), None),
            ModelError::Auth { .. }
        ));
        assert_eq!(
            ModelError::from_http_status(429, m(), Some(Duration::from_secs(3))).retry_after(),
            Some(Duration::from_secs(3))
        );
        assert!(matches!(
            ModelError::from_http_status(404, m(), None),
            ModelError::BadRequest { status: 404, .. }
        ));
        assert!(matches!(
            ModelError::from_http_status(
                400,
                "prompt is too long: 210000 tokens > 200000 maximum".into(),
                None
            ),
            ModelError::ContextTooLong { .. }
        ));
        assert!(matches!(
            ModelError::from_http_status(529, m(), None),
            ModelError::Server { status: 529, .. }
        ));
        assert!(ModelError::from_http_status(503, m(), None).is_retryable());
        assert!(!ModelError::from_http_status(400, m(), None).is_retryable());
    }

    #[test]
    fn retry_after_parses_seconds_only() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("NaN"), None);
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }
}
