//! The OpenAPI document, generated from the handlers and types, and its route
//! (`GET /v1/openapi.json`).

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::error::ServerError;
use crate::state::AppState;
use crate::{auth, error, evidence, grants, health, inbox, policy, sessions, types};

/// The API's OpenAPI description.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "reins-server",
        description = "reins agents as a service: runs, pauses, decisions, interrupts and live events. \
                       Authenticate with `Authorization: Bearer <token>`."
    ),
    paths(
        sessions::post_run,
        sessions::get_session,
        sessions::get_decisions,
        sessions::post_decisions,
        sessions::post_interrupt,
        sessions::get_events,
        evidence::get_evidence,
        sessions::fork::post_fork,
        sessions::fork::get_turns,
        sessions::fork::post_replay,
        inbox::get_requirements,
        inbox::list::get_sessions,
        inbox::get_inbox_events,
        inbox::get_me,
        grants::get_grants,
        grants::post_grant,
        grants::delete_grant,
        policy::get_shadow,
        policy::get_policy,
        policy::post_reload,
        health::healthz,
        health::readyz,
    ),
    components(schemas(
        types::RunRequest,
        types::BudgetLimit,
        types::SessionDetail,
        types::SessionStatus,
        types::Action,
        types::DecisionItem,
        types::DecisionsRequest,
        types::DecisionsList,
        types::InboxItem,
        types::InboxChange,
        types::OpenRequirementView,
        types::Notified,
        types::InboxPage,
        types::SessionRow,
        types::SessionsPage,
        types::InterruptAnswer,
        types::Health,
        types::Me,
        types::GrantsList,
        types::GrantObject,
        types::GrantCondition,
        types::NewGrantRequest,
        types::QuorumView,
        types::QuorumApproval,
        policy::ShadowPage,
        policy::ShadowItem,
        policy::ShadowAnswer,
        types::ForkRequest,
        types::ForkAnswer,
        types::TurnsList,
        auth::Principal,
        auth::AccessRole,
        error::ErrorBody,
        error::ErrorDetail,
    )),
    modifiers(&Bearer),
    tags(
        (name = "sessions", description = "Runs, reads, decisions, interrupts and live events of one session"),
        (name = "inbox", description = "Pending requirements across sessions"),
        (name = "grants", description = "Standing grants: calls that run without asking"),
        (name = "policy", description = "Cedar policies: where the shadow set would answer differently"),
        (name = "health", description = "Liveness and readiness"),
    )
)]
pub struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// `/v1/openapi.json` (no token needed).
pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/v1/openapi.json", get(openapi_json))
}

async fn openapi_json() -> Response {
    match ApiDoc::openapi().to_json() {
        Ok(json) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            json,
        )
            .into_response(),
        Err(e) => ServerError::Internal(format!("cannot render the OpenAPI document: {e}"))
            .into_response(),
    }
}
