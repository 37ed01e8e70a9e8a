//! Standing grants over HTTP: list (`GET /v1/grants`), create (`POST /v1/grants`) and
//! revoke (`DELETE /v1/grants/{id}`). A grant lets calls of one tool run without asking
//! a person, scoped by principal, session and conditions on the arguments, until it
//! expires or is revoked (see reins-agent's `approval` module and
//! docs/human-in-the-loop.md, "Standing grants").
//!
//! Approvers (for the tools they may decide on) and admins create and revoke grants;
//! they list every grant. A `user` lists the grants scoped to it (its principal, or a
//! session it owns).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Json, Router};
use reins_agent::approval::{GrantFilter, NewGrant};
use reins_memory::Grant;

use crate::auth::Principal;
use crate::error::{ErrorBody, Result, ServerError};
use crate::extract::{ApiJson, ApiQuery, Caller};
use crate::state::AppState;
use crate::types::{GrantObject, GrantsList, GrantsQuery, NewGrantRequest};

/// The longest `ttl_seconds` accepted (ten years).
const MAX_TTL_SECS: u64 = 10 * 365 * 24 * 3600;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/grants", get(get_grants).post(post_grant))
        .route("/v1/grants/{id}", delete(delete_grant))
}

/// Whether `who` may see `g`.
fn may_see(who: &Principal, g: &Grant) -> bool {
    who.is_decider()
        || g.principal.as_deref() == Some(who.name.as_str())
        || g.session.as_deref().is_some_and(|s| who.owns(s))
}

fn require_granter(who: &Principal, tool: &str) -> Result<()> {
    if who.may_decide(tool) {
        Ok(())
    } else {
        Err(ServerError::Forbidden(format!(
            "`{}` may not grant or revoke `{tool}` (approvers of that tool and admins may)",
            who.name
        )))
    }
}

/// The standing grants the caller may see, oldest first.
#[utoipa::path(
    get, path = "/v1/grants", tag = "grants",
    params(GrantsQuery),
    responses(
        (status = 200, description = "The grants", body = GrantsList),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_grants(
    State(state): State<AppState>,
    Caller(who): Caller,
    ApiQuery(q): ApiQuery<GrantsQuery>,
) -> Result<Json<GrantsList>> {
    let filter = GrantFilter {
        tool: q.tool,
        principal: q.principal,
        session: q.session,
        include_revoked: q.include_revoked.unwrap_or(false),
    };
    let now = chrono::Utc::now();
    let grants = state
        .sessions
        .grants(&filter)
        .await?
        .into_iter()
        .filter(|g| may_see(&who, g))
        .map(|g| GrantObject::of(g, now))
        .collect();
    Ok(Json(GrantsList { grants }))
}

/// Creates a standing grant, made by the caller.
#[utoipa::path(
    post, path = "/v1/grants", tag = "grants",
    request_body = NewGrantRequest,
    responses(
        (status = 201, description = "The grant", body = GrantObject),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 422, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn post_grant(
    State(state): State<AppState>,
    Caller(who): Caller,
    ApiJson(body): ApiJson<NewGrantRequest>,
) -> Result<(StatusCode, Json<GrantObject>)> {
    require_granter(&who, &body.tool)?;
    let now = chrono::Utc::now();
    let ttl = match (body.ttl_seconds, body.expires_at) {
        (Some(_), Some(_)) => {
            return Err(ServerError::Invalid {
                code: "invalid_grant",
                message: "give `ttl_seconds` or `expires_at`, not both".to_owned(),
            });
        }
        (Some(0), None) => {
            return Err(ServerError::Invalid {
                code: "invalid_grant",
                message: "`ttl_seconds` must be at least 1".to_owned(),
            });
        }
        (Some(s), None) if s > MAX_TTL_SECS => {
            return Err(ServerError::Invalid {
                code: "invalid_grant",
                message: format!("`ttl_seconds` must be at most {MAX_TTL_SECS} (ten years)"),
            });
        }
        (Some(s), None) => Some(std::time::Duration::from_secs(s)),
        (None, Some(at)) => Some((at - now).to_std().map_err(|_| ServerError::Invalid {
            code: "invalid_grant",
            message: format!("`expires_at` ({at}) is not in the future"),
        })?),
        (None, None) => None,
    };
    let new = NewGrant {
        tool: body.tool,
        effect: reins_memory::GrantEffect::Allow,
        principal: body.principal,
        session: body.session,
        conditions: body.conditions,
        ttl,
        note: body.note,
    };
    let g = state.sessions.create_grant(new, &who.actor()).await?;
    Ok((StatusCode::CREATED, Json(GrantObject::of(g, now))))
}

/// Revokes a standing grant (recording the caller and the time); it never matches
/// again. 404 `unknown_grant` for an id no grant has; 409 `grant_revoked` when it was
/// revoked already (the stored grant is unchanged).
#[utoipa::path(
    delete, path = "/v1/grants/{id}", tag = "grants",
    params(("id" = String, Path, description = "The grant id")),
    responses(
        (status = 200, description = "The revoked grant", body = GrantObject),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn delete_grant(
    State(state): State<AppState>,
    Caller(who): Caller,
    Path(id): Path<String>,
) -> Result<Json<GrantObject>> {
    let Some(g) = state.sessions.grant(&id).await? else {
        return Err(ServerError::UnknownGrant(format!("no grant has id `{id}`")));
    };
    require_granter(&who, &g.tool)?;
    let revoked = state.sessions.revoke_grant(&id, &who.actor()).await?;
    Ok(Json(GrantObject::of(revoked, chrono::Utc::now())))
}
