//! Liveness and readiness: `GET /healthz` answers while the process serves,
//! `GET /readyz` while the store answers too.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use crate::state::AppState;
use crate::types::Health;

/// `/healthz` and `/readyz` (no token needed).
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

/// Liveness.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, body = Health)))]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
    })
}

/// Readiness: the store answers.
#[utoipa::path(
    get, path = "/readyz", tag = "health",
    responses((status = 200, body = Health), (status = 503, body = Health))
)]
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    match state
        .sessions
        .record()
        .load_session("reins-server/readyz")
        .await
    {
        Ok(_) | Err(reins_memory::Error::SessionNotFound { .. }) => Json(Health {
            status: "ok".to_owned(),
        })
        .into_response(),
        Err(e) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: format!("store unreachable: {e}"),
            }),
        )
            .into_response(),
    }
}
