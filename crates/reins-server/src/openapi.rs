//! The OpenAPI document, generated from the handlers and types (`/v1/openapi.json`).

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::{api, auth, error, types};

/// The API's OpenAPI description.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "reins-server",
        description = "reins agents as a service: runs, pauses, decisions, interrupts and live events. \
                       Authenticate with `Authorization: Bearer <token>`."
    ),
    paths(
        api::post_run,
        api::get_session,
        api::get_decisions,
        api::post_decisions,
        api::post_interrupt,
        api::get_events,
        api::get_requirements,
        api::get_inbox_events,
        api::get_me,
        api::healthz,
        api::readyz,
    ),
    components(schemas(
        types::RunRequest,
        types::SessionView,
        types::SessionStatus,
        types::Action,
        types::DecisionItem,
        types::DecisionsRequest,
        types::DecisionsList,
        types::InboxItem,
        types::InboxPage,
        types::InterruptAnswer,
        types::Health,
        types::Me,
        auth::Principal,
        auth::Role,
        error::ErrorBody,
        error::ErrorDetail,
    )),
    modifiers(&Bearer),
    tags(
        (name = "sessions", description = "Runs, reads, decisions, interrupts and live events of one session"),
        (name = "inbox", description = "Pending requirements across sessions"),
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
