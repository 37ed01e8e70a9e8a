//! Evidence (see docs/evidence.md): a session's bundle, and the keys its receipts are
//! checked with.
//!
//! - `GET /v1/sessions/{id}/evidence`: the session's evidence bundle as JSON lines
//!   (`application/x-ndjson`): the header, the verifying keys, the hash chain with its
//!   signed receipts. Checked offline with `cargo xtask audit verify`.
//! - `GET /.well-known/jwks.json`: the verifying keys of the receipts, as a JWKS (OKP
//!   Ed25519 keys; revoked ones marked `"revoked": true`). Public, like the agent card:
//!   keys are what a third party checks receipts with.
//!
//! The keys are the session port's ([`Sessions::evidence_keys`]): the agent's signer,
//! from its configuration, never from the store.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use reins_agent::port::Sessions;
use serde_json::Value;

use crate::error::{ErrorBody, Result, ServerError};
use crate::extract::{Caller, SessionId};
use crate::state::AppState;

/// The evidence routes.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions/{id}/evidence", get(get_evidence))
        .route("/.well-known/jwks.json", get(get_jwks))
}

/// The session's evidence bundle (JSON lines; see docs/evidence.md).
#[utoipa::path(
    get, path = "/v1/sessions/{id}/evidence", tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    responses(
        (status = 200, description = "The evidence bundle, one JSON object per line (docs/evidence.md)", content_type = "application/x-ndjson", body = String),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "Unknown session", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_evidence(
    State(state): State<AppState>,
    Caller(who): Caller,
    SessionId(id): SessionId,
) -> Result<Response> {
    who.require_read(&id)?;
    let bundle = state.sessions.evidence(&id).await?;
    let text = bundle
        .to_jsonl()
        .map_err(|e| ServerError::Internal(format!("the evidence bundle: {e}")))?;
    Ok(([(CONTENT_TYPE, "application/x-ndjson")], text).into_response())
}

/// The receipts' verifying keys, as a JWKS (a well-known document, outside the
/// OpenAPI description like the agent card).
pub(crate) async fn get_jwks(State(state): State<AppState>) -> Json<Value> {
    Json(state.sessions.evidence_keys().jwks())
}
