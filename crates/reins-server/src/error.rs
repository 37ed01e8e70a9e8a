//! [`ServerError`]: every way a request can be refused, how reins' errors map onto it,
//! and how it becomes an HTTP answer (`{"error": {"code", "message"}}` with the
//! matching status); also the JSON bodies of the refusals the router and its layers
//! make themselves (unknown endpoint, timeout, body too large).

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use reins_agent::AgentError;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Why a request was refused (or failed). Each variant maps to one HTTP status and a
/// stable machine-readable `code`; the message says what a person can do about it.
///
/// A refused request changes nothing: every check runs before the agent is asked to
/// act, and the agent itself validates decisions in full before it writes.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The body is not valid JSON, or has the wrong shape (400).
    #[error("bad request body: {0}")]
    BadBody(String),
    /// A path or query parameter is not acceptable (400).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// No bearer token (401). The answer carries the challenge `WWW-Authenticate:
    /// Bearer realm="reins"` (RFC 6750).
    #[error("missing or unknown bearer token")]
    Unauthorized,
    /// A bearer token this server does not know (401). The challenge adds
    /// `error="invalid_token"` (RFC 6750).
    #[error("missing or unknown bearer token")]
    InvalidToken,
    /// A JWT bearer token that failed verification (401): expired, for another
    /// audience or issuer, an unknown key id, a bad signature, an algorithm not
    /// accepted. The challenge adds `error="invalid_token"` and the reason.
    #[error("bearer token refused: {0}")]
    TokenRejected(String),
    /// The principal may not do this (403).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The session does not exist (404).
    #[error("session `{0}` does not exist")]
    UnknownSession(String),
    /// A decision names a requirement that is not pending (404): unknown, or already
    /// decided by someone else.
    #[error("{0}")]
    UnknownRequirement(String),
    /// Another run on the session is in flight, or a tool call is still running
    /// elsewhere (409).
    #[error("{0}")]
    Busy(String),
    /// The session is not paused: nothing to decide (409). Usually someone else
    /// already decided.
    #[error("{0}")]
    NotPaused(String),
    /// The caller's view of the pending requirements is out of date (409); re-read the
    /// session and decide again.
    #[error("{message}")]
    StaleView {
        /// What happened.
        message: String,
        /// The requirements pending now, as JSON.
        pending: serde_json::Value,
    },
    /// The resource to create already exists (409): e.g. a fork's new session id.
    #[error("{0}")]
    Exists(String),
    /// The decision names a requirement someone else already decided (409): a late
    /// second approver, whatever the timing. Nothing changed; `decided` says what took
    /// effect, by whom and when.
    #[error("{message}")]
    AlreadyDecided {
        /// What happened.
        message: String,
        /// The decision that took effect: `{decision, by, at, via}`.
        decided: serde_json::Value,
    },
    /// An approval bound to the arguments its author was shown (`shown_fingerprint`)
    /// names a requirement that shows other arguments (409). Nothing changed.
    #[error("{0}")]
    FingerprintMismatch(String),
    /// No grant has the id (404).
    #[error("{0}")]
    UnknownGrant(String),
    /// No webhook or delivery with that id (404 `unknown_webhook`).
    #[error("{0}")]
    UnknownWebhook(String),
    /// The grant was revoked already (409); nothing changed.
    #[error("{0}")]
    GrantRevoked(String),
    /// The approver approved this requirement already (409): under a quorum each
    /// approver counts once. Nothing changed.
    #[error("{0}")]
    AlreadyApproved(String),
    /// The decision is not the principal's to make (403): an approval that cannot count
    /// towards the requirement's quorum, a decision the eligibility policy refuses, a
    /// budget extension above the agent's default without the admin role. The message
    /// says which. Nothing changed.
    #[error("{0}")]
    NotEligible(String),
    /// The body is too large (413).
    #[error("request body too large (the limit is {0} bytes)")]
    TooLarge(usize),
    /// The decision or input cannot be applied (422): wrong kind, expired, duplicate,
    /// invalid values.
    #[error("{message}")]
    Invalid {
        /// A stable code: `invalid_decision`, `expired`, `invalid_input`.
        code: &'static str,
        /// What was wrong.
        message: String,
    },
    /// The client was too slow: the request body did not arrive in time (408).
    #[error("request timeout: {0}")]
    Timeout(String),
    /// The store failed (503 when unreachable, otherwise 500).
    #[error("store error: {0}")]
    Store(String),
    /// The model failed (502).
    #[error("model error: {0}")]
    Model(String),
    /// This server does not serve the request in its configuration (501). Every
    /// route is served over every session port, the local driver's and
    /// [`Relayed`](reins_agent::Relayed)'s; the variant is kept for
    /// servers that embed the router and refuse a route of theirs.
    #[error("{0}")]
    Unsupported(String),
    /// The session's stored run state cannot be read by this agent (500
    /// `corrupt_session`): written by another program or an incompatible version.
    /// Lists (inbox, sessions, A2A tasks) leave such a session out and log it; the
    /// session itself answers with this error until it is repaired or deleted.
    #[error("{0}")]
    CorruptSession(String),
    /// Anything else (500).
    #[error("internal error: {0}")]
    Internal(String),
}

/// The crate's result type.
pub type Result<T, E = ServerError> = std::result::Result<T, E>;

/// The JSON body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable machine-readable code (`bad_body`, `unauthorized`, `forbidden`,
    /// `not_found`, `unknown_requirement`, `busy`, `not_paused`, `stale_view`, `already_decided`,
    /// `fingerprint_mismatch`, `unknown_grant`, `grant_revoked`, `invalid_grant`,
    /// `already_approved`, `not_eligible`,
    /// `payload_too_large`, `timeout`, `invalid_decision`, `expired`, `invalid_input`, `store`,
    /// `model`, `internal`).
    pub code: String,
    /// A sentence for a person.
    pub message: String,
    /// For `stale_view`: the requirements pending now.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub pending: Option<serde_json::Value>,
    /// For `already_decided`: the decision that took effect, `{decision, by, at, via}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub decided: Option<serde_json::Value>,
}

impl ServerError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadBody(_) | Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized | Self::InvalidToken | Self::TokenRejected(_) => {
                StatusCode::UNAUTHORIZED
            }
            Self::Forbidden(_) | Self::NotEligible(_) => StatusCode::FORBIDDEN,
            Self::UnknownSession(_)
            | Self::UnknownRequirement(_)
            | Self::UnknownGrant(_)
            | Self::UnknownWebhook(_) => StatusCode::NOT_FOUND,
            Self::Busy(_)
            | Self::NotPaused(_)
            | Self::StaleView { .. }
            | Self::Exists(_)
            | Self::AlreadyDecided { .. }
            | Self::FingerprintMismatch(_)
            | Self::GrantRevoked(_)
            | Self::AlreadyApproved(_) => StatusCode::CONFLICT,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Store(_) | Self::Internal(_) | Self::CorruptSession(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            Self::Model(_) => StatusCode::BAD_GATEWAY,
            Self::Unsupported(_) => StatusCode::NOT_IMPLEMENTED,
        }
    }

    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadBody(_) => "bad_body",
            Self::BadRequest(_) => "bad_request",
            Self::Unauthorized | Self::InvalidToken | Self::TokenRejected(_) => "unauthorized",
            Self::Forbidden(_) => "forbidden",
            Self::UnknownSession(_) => "not_found",
            Self::UnknownRequirement(_) => "unknown_requirement",
            Self::Busy(_) => "busy",
            Self::NotPaused(_) => "not_paused",
            Self::StaleView { .. } => "stale_view",
            Self::Exists(_) => "session_exists",
            Self::AlreadyDecided { .. } => "already_decided",
            Self::FingerprintMismatch(_) => "fingerprint_mismatch",
            Self::UnknownGrant(_) => "unknown_grant",
            Self::UnknownWebhook(_) => "unknown_webhook",
            Self::GrantRevoked(_) => "grant_revoked",
            Self::AlreadyApproved(_) => "already_approved",
            Self::NotEligible(_) => "not_eligible",
            Self::TooLarge(_) => "payload_too_large",
            Self::Timeout(_) => "timeout",
            Self::Invalid { code, .. } => code,
            Self::Store(_) => "store",
            Self::Model(_) => "model",
            Self::Unsupported(_) => "not_supported",
            Self::CorruptSession(_) => "corrupt_session",
            Self::Internal(_) => "internal",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code().to_owned(),
                message: self.to_string(),
                pending: match self {
                    Self::StaleView { pending, .. } => Some(pending.clone()),
                    _ => None,
                },
                decided: match self {
                    Self::AlreadyDecided { decided, .. } => Some(decided.clone()),
                    _ => None,
                },
            },
        }
    }

    /// A late decision on requirement `id`: `decided` took effect first.
    pub(crate) fn already_decided(id: &str, decided: &reins_agent::Decided) -> Self {
        let by = decided
            .by
            .as_deref()
            .map_or_else(|| "an unnamed caller".to_owned(), |b| format!("`{b}`"));
        Self::AlreadyDecided {
            message: format!(
                "requirement `{id}` was already decided: `{}` by {by} (via {}; when: see `decided.at`); nothing changed",
                decided.decision, decided.via
            ),
            decided: serde_json::json!({
                "decision": decided.decision,
                "by": decided.by,
                "at": decided.at,
                "via": decided.via,
            }),
        }
    }

    /// One session's part of a list (`list` names it in the log): `Ok(None)`, logged,
    /// when the list may leave the session out and go on — it was deleted since the
    /// list was read, or its stored state cannot be read. One such session must not
    /// hide every other one.
    pub(crate) fn or_skip<T>(result: Result<T>, session: &str, list: &str) -> Result<Option<T>> {
        match result {
            Ok(v) => Ok(Some(v)),
            Err(e @ (Self::UnknownSession(_) | Self::CorruptSession(_))) => {
                tracing::warn!(session, error = %e, "{list} leaves out a session it cannot read");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid {
            code: "invalid_decision",
            message: message.into(),
        }
    }
}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        if matches!(
            self,
            Self::Store(_) | Self::Internal(_) | Self::Model(_) | Self::CorruptSession(_)
        ) {
            tracing::warn!(error = %self, "request failed");
        }
        // RFC 6750, section 3: how to authenticate, and (a token was given) why it failed.
        let challenge = match &self {
            Self::Unauthorized => Some(header::HeaderValue::from_static(r#"Bearer realm="reins""#)),
            Self::InvalidToken => Some(header::HeaderValue::from_static(
                r#"Bearer realm="reins", error="invalid_token", error_description="unknown bearer token""#,
            )),
            Self::TokenRejected(reason) => {
                // error_description is a quoted string of printable ASCII without `"`
                // and `\` (RFC 6750, section 3).
                let reason: String = reason
                    .chars()
                    .map(|c| {
                        if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                            c
                        } else {
                            '\''
                        }
                    })
                    .collect();
                header::HeaderValue::from_str(&format!(
                    r#"Bearer realm="reins", error="invalid_token", error_description="{reason}""#
                ))
                .ok()
            }
            _ => None,
        };
        let mut res = (self.status(), Json(self.body())).into_response();
        if let Some(c) = challenge {
            res.headers_mut().insert(header::WWW_AUTHENTICATE, c);
        }
        res
    }
}

impl From<AgentError> for ServerError {
    fn from(e: AgentError) -> Self {
        let message = e.to_string();
        match e {
            AgentError::InvalidInput(ref m) if m.contains("not a view token") => {
                Self::BadRequest(message)
            }
            AgentError::SessionBusy { .. } | AgentError::ToolInFlight { .. } => Self::Busy(message),
            AgentError::SessionExists { .. } => Self::Exists(message),
            AgentError::NothingToResume { .. } => Self::NotPaused(format!(
                "{message} (someone may already have decided: reload the session)"
            )),
            AgentError::UnknownRequirement { .. } => Self::UnknownRequirement(format!(
                "{message} (it may already have been decided: reload the session)"
            )),
            AgentError::WrongDecision { .. } | AgentError::DuplicateDecision { .. } => {
                Self::invalid(message)
            }
            AgentError::RequirementExpired { .. } => Self::Invalid {
                code: "expired",
                message,
            },
            AgentError::InvalidInput(_) => Self::Invalid {
                code: "invalid_input",
                message,
            },
            AgentError::InvalidBudget { .. } => Self::Invalid {
                code: "invalid_budget",
                message: format!("{message}; nothing changed"),
            },
            AgentError::Store(reins_memory::Error::SessionNotFound { id }) => {
                Self::UnknownSession(id)
            }
            AgentError::AlreadyApproved { .. } => Self::AlreadyApproved(message),
            AgentError::NotEligible { .. } => Self::NotEligible(message),
            AgentError::Store(
                e @ (reins_memory::Error::GrantNotFound { .. }
                | reins_memory::Error::GrantAlreadyRevoked { .. }
                | reins_memory::Error::InvalidGrant { .. }),
            ) => e.into(),
            AgentError::Store(_) => Self::Store(message),
            AgentError::Model(_) => Self::Model(message),
            AgentError::CorruptRunState { .. } => Self::CorruptSession(format!(
                "{message}; the session cannot be shown or resumed until it is repaired or deleted"
            )),
            AgentError::AlreadyDecided { id, decided } => Self::already_decided(&id, &decided),
            AgentError::ShownArgumentsChanged { .. } => Self::FingerprintMismatch(message),
            AgentError::StaleView { pending, .. } => Self::StaleView {
                message: format!(
                    "{message}; what the session waits for changed since your view: reload and decide again"
                ),
                pending: Value::Array(
                    pending
                        .iter()
                        .filter_map(|r| serde_json::to_value(r).ok())
                        .collect(),
                ),
            },
            _ => Self::Internal(message),
        }
    }
}

impl From<reins_memory::Error> for ServerError {
    fn from(e: reins_memory::Error) -> Self {
        match e {
            reins_memory::Error::SessionNotFound { id } => Self::UnknownSession(id),
            e @ reins_memory::Error::GrantNotFound { .. } => Self::UnknownGrant(e.to_string()),
            e @ reins_memory::Error::DeliveryNotFound { .. } => Self::UnknownWebhook(e.to_string()),
            e @ reins_memory::Error::GrantAlreadyRevoked { .. } => {
                Self::GrantRevoked(format!("{e}; nothing changed"))
            }
            reins_memory::Error::InvalidGrant { detail } => Self::Invalid {
                code: "invalid_grant",
                message: format!("invalid grant: {detail}"),
            },
            other => Self::Store(other.to_string()),
        }
    }
}

/// The answer to a path no route serves.
pub(crate) async fn not_found() -> Response {
    let body = serde_json::json!({"error": {
        "code": "not_found",
        "message": "no such endpoint (see /v1/openapi.json)",
    }});
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}

/// Gives the answers of layers (timeouts, limits) and routing a JSON error body.
pub(crate) async fn json_errors(res: Response) -> Response {
    let status = res.status();
    // JSON errors pass as they are, and so do the pages of the approval links (a
    // person's browser shows them: "This link expired").
    let typed = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"));
    if typed || !(status.is_client_error() || status.is_server_error()) {
        return res;
    }
    let (code, message) = match status {
        StatusCode::REQUEST_TIMEOUT => ("timeout", "the request took too long"),
        StatusCode::PAYLOAD_TOO_LARGE => ("payload_too_large", "request body too large"),
        StatusCode::METHOD_NOT_ALLOWED => ("method_not_allowed", "method not allowed here"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ("bad_body", "expected a JSON body"),
        _ => ("error", "the request failed"),
    };
    let body = serde_json::json!({"error": {"code": code, "message": message}});
    (status, Json(body)).into_response()
}
