//! Extractors whose refusals are JSON errors: the caller's principal, the JSON body,
//! the path and the query.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::auth::Principal;
use crate::error::ServerError;
use crate::state::AppState;
use crate::strict::StrictBody;

/// The authenticated principal of a request.
pub(crate) struct Caller(pub(crate) Arc<Principal>);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ServerError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        state.auth.authenticate(&parts.headers).await.map(Caller)
    }
}

/// The authenticated principal of a request that decides on requirements: the
/// approver or the admin role, else 403 before anything else is read.
pub(crate) struct Decider(pub(crate) Arc<Principal>);

impl FromRequestParts<AppState> for Decider {
    type Rejection = ServerError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Caller(who) = Caller::from_request_parts(parts, state).await?;
        who.require_decider("decide")?;
        Ok(Self(who))
    }
}

/// A request only the admin role may make (a backend's service process relaying live
/// events), else 403.
pub(crate) struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = ServerError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Caller(who) = Caller::from_request_parts(parts, state).await?;
        if !who.has(crate::auth::AccessRole::Admin) {
            return Err(ServerError::Forbidden(format!(
                "`{}` may not do this: it needs the admin role",
                who.name
            )));
        }
        Ok(Self)
    }
}

/// A JSON body; malformed JSON and wrong types (an array where an object is expected
/// among them: see [`crate::strict`]) are 400, too large is 413.
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ServerError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // Read strictly: an array where the schema has an object is refused, not read
        // as the struct's fields in order (see `crate::strict`).
        type Body<T> = axum::Json<StrictBody<T>>;
        let Some(BodyLimit(limit, deadline)) = req.extensions().get::<BodyLimit>().copied() else {
            return match Body::<T>::from_request(req, state).await {
                Ok(axum::Json(StrictBody(v))) => Ok(Self(v)),
                Err(e) => Err(json_rejection(e, 0)),
            };
        };
        // The whole body within the deadline, however it is paced.
        match tokio::time::timeout(deadline, Body::<T>::from_request(req, state)).await {
            Ok(Ok(axum::Json(StrictBody(v)))) => Ok(Self(v)),
            Ok(Err(e)) => Err(json_rejection(e, limit)),
            Err(_) => Err(ServerError::Timeout(format!(
                "the request body did not arrive within {} ms",
                deadline.as_millis()
            ))),
        }
    }
}

/// The configured body limit (for the 413 message) and the time a whole body may take.
#[derive(Clone, Copy)]
pub(crate) struct BodyLimit(pub(crate) usize, pub(crate) std::time::Duration);

fn json_rejection(e: JsonRejection, limit: usize) -> ServerError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ServerError::TooLarge(limit);
    }
    match e {
        JsonRejection::MissingJsonContentType(_) => ServerError::BadBody(
            "expected a JSON body with `Content-Type: application/json`".to_owned(),
        ),
        other => ServerError::BadBody(other.body_text()),
    }
}

/// A session id from the path (percent-decoded; `alice%2Fchat-1` is `alice/chat-1`).
pub(crate) struct SessionId(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for SessionId {
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(id) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|e| ServerError::BadRequest(e.body_text()))?;
        validate_session_id(&id)?;
        Ok(Self(id))
    }
}

/// Session ids: 1 to 256 characters, no control characters.
pub(crate) fn validate_session_id(id: &str) -> Result<(), ServerError> {
    if id.trim().is_empty() || id.len() > 256 || id.chars().any(char::is_control) {
        return Err(ServerError::BadRequest(
            "a session id is 1 to 256 characters without control characters".to_owned(),
        ));
    }
    Ok(())
}

/// A query string.
pub(crate) struct ApiQuery<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Self(q.0))
            .map_err(|e| ServerError::BadRequest(e.body_text()))
    }
}
