//! `/v1/webhooks` (admin role): create, list, read, delete and rotate webhook
//! subscribers, read their deliveries with each attempt, and redeliver one.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use reins_memory::{Delivery, DeliveryAttempt, DeliveryFilter, NoticeKind, Subscription};
use serde::{Deserialize, Serialize};

use super::webhook::{KIND, PREFIX, Secret, Webhook, new_secret, secret_key};
use crate::error::{Result, ServerError};
use crate::extract::{Admin, ApiJson, Caller};
use crate::state::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/webhooks", get(list).post(create))
        .route("/v1/webhooks/{id}", get(read).delete(remove))
        .route("/v1/webhooks/{id}/rotate", post(rotate))
        .route("/v1/webhooks/{id}/deliveries", get(deliveries))
        .route(
            "/v1/webhooks/{id}/deliveries/{notice}/redeliver",
            post(redeliver),
        )
}

/// A new webhook subscriber.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewWebhook {
    /// Where notices are POSTed (`http` or `https`).
    url: String,
    /// The event types it wants (`requirement.waiting`, ...); none: every type.
    #[serde(default)]
    event_types: Vec<String>,
    /// The tools it wants; none: every tool.
    #[serde(default)]
    tools: Vec<String>,
    /// Only sessions whose id starts with this.
    #[serde(default)]
    session_prefix: Option<String>,
    #[serde(default)]
    description: Option<String>,
    /// A `whsec_` secret to sign with; one is made when absent.
    #[serde(default)]
    secret: Option<String>,
}

/// A webhook subscriber as the API shows it. `secret` is shown when it is created or
/// rotated, never after.
#[derive(Debug, Serialize)]
pub(crate) struct WebhookObject {
    id: String,
    url: String,
    event_types: Vec<NoticeKind>,
    tools: Vec<String>,
    session_prefix: Option<String>,
    description: Option<String>,
    created_at: DateTime<Utc>,
    created_by: Option<String>,
    /// How many secrets sign now (two during a rotation).
    live_secrets: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
}

impl WebhookObject {
    fn of(s: &Subscription, w: &Webhook, secret: Option<String>) -> Self {
        Self {
            id: s.id.clone(),
            url: w.url.clone(),
            event_types: w.event_types.clone(),
            tools: w.tools.clone(),
            session_prefix: w.session_prefix.clone(),
            description: w.description.clone(),
            created_at: s.created_at,
            created_by: w.created_by.clone(),
            live_secrets: w.live_secrets(Utc::now()).count(),
            secret,
        }
    }
}

fn invalid(message: String) -> ServerError {
    ServerError::Invalid {
        code: "invalid_webhook",
        message,
    }
}

/// Checks a new subscriber; the stored record.
fn validate(body: NewWebhook, by: &str) -> Result<Webhook> {
    let url = reqwest::Url::parse(&body.url)
        .map_err(|e| invalid(format!("`url` is not a URL ({e}): `{}`", body.url)))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(invalid(format!(
            "`url` must be an http or https URL with a host, not `{}`",
            body.url
        )));
    }
    let mut event_types = Vec::new();
    for t in &body.event_types {
        let kind = NoticeKind::parse(t).ok_or_else(|| {
            let known: Vec<&str> = NoticeKind::ALL.iter().map(NoticeKind::as_str).collect();
            invalid(format!(
                "unknown event type `{t}`; known: {}",
                known.join(", ")
            ))
        })?;
        event_types.push(kind);
    }
    let secret = match body.secret {
        Some(s) if secret_key(&s).is_none() => {
            return Err(invalid(
                "`secret` must be `whsec_` followed by 24 to 64 bytes in base64".to_owned(),
            ));
        }
        Some(s) => s,
        None => new_secret(),
    };
    Ok(Webhook {
        url: url.to_string(),
        event_types,
        tools: body.tools,
        session_prefix: body.session_prefix.filter(|p| !p.is_empty()),
        description: body.description,
        secrets: vec![Secret {
            secret,
            expires_at: None,
        }],
        created_by: Some(by.to_owned()),
    })
}

async fn find(state: &AppState, id: &str) -> Result<(Subscription, Webhook)> {
    state
        .webhooks
        .list()
        .await?
        .into_iter()
        .find(|(s, _)| s.id == id)
        .ok_or_else(|| ServerError::UnknownWebhook(format!("no webhook has id `{id}`")))
}

async fn create(
    State(state): State<AppState>,
    _: Admin,
    Caller(who): Caller,
    ApiJson(body): ApiJson<NewWebhook>,
) -> Result<(StatusCode, Json<WebhookObject>)> {
    let hook = validate(body, &who.name)?;
    let secret = hook.secrets.first().map(|s| s.secret.clone());
    let sub = Subscription {
        id: format!("wh_{}", uuid::Uuid::new_v4().simple()),
        kind: KIND.to_owned(),
        body: serde_json::to_value(&hook)
            .map_err(|e| ServerError::Internal(format!("encoding a webhook: {e}")))?,
        created_at: Utc::now(),
    };
    state.sessions.record().put_subscription(&sub).await?;
    Ok((
        StatusCode::CREATED,
        Json(WebhookObject::of(&sub, &hook, secret)),
    ))
}

/// The list answer.
#[derive(Debug, Serialize)]
struct WebhookList {
    webhooks: Vec<WebhookObject>,
}

async fn list(State(state): State<AppState>, _: Admin) -> Result<Json<WebhookList>> {
    let webhooks = state
        .webhooks
        .list()
        .await?
        .iter()
        .map(|(s, w)| WebhookObject::of(s, w, None))
        .collect();
    Ok(Json(WebhookList { webhooks }))
}

async fn read(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<WebhookObject>> {
    let (s, w) = find(&state, &id).await?;
    Ok(Json(WebhookObject::of(&s, &w, None)))
}

async fn remove(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<StatusCode> {
    if state.sessions.record().delete_subscription(&id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ServerError::UnknownWebhook(format!(
            "no webhook has id `{id}`"
        )))
    }
}

/// How long the old secret keeps signing after a rotation.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rotate {
    /// Seconds the previous secret keeps signing (default 86400; at most 30 days).
    #[serde(default)]
    grace_seconds: Option<u64>,
    /// The new secret; one is made when absent.
    #[serde(default)]
    secret: Option<String>,
}

async fn rotate(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Rotate>,
) -> Result<Json<WebhookObject>> {
    let Rotate {
        grace_seconds,
        secret,
    } = body;
    let grace = grace_seconds.unwrap_or(86_400);
    if grace > 30 * 86_400 {
        return Err(invalid(
            "`grace_seconds` must be at most 2592000 (30 days)".to_owned(),
        ));
    }
    let secret = match secret {
        Some(s) if secret_key(&s).is_none() => {
            return Err(invalid(
                "`secret` must be `whsec_` followed by 24 to 64 bytes in base64".to_owned(),
            ));
        }
        Some(s) => s,
        None => new_secret(),
    };
    let (mut sub, mut hook) = find(&state, &id).await?;
    let now = Utc::now();
    let until = now + chrono::Duration::seconds(i64::try_from(grace).unwrap_or(86_400));
    for s in hook.secrets.iter_mut() {
        if s.expires_at.is_none_or(|t| t > until) {
            s.expires_at = Some(until);
        }
    }
    hook.secrets
        .retain(|s| s.expires_at.is_none_or(|t| t > now));
    hook.secrets.insert(
        0,
        Secret {
            secret: secret.clone(),
            expires_at: None,
        },
    );
    sub.body = serde_json::to_value(&hook)
        .map_err(|e| ServerError::Internal(format!("encoding a webhook: {e}")))?;
    state.sessions.record().put_subscription(&sub).await?;
    Ok(Json(WebhookObject::of(&sub, &hook, Some(secret))))
}

/// A delivery with its attempts, as the API shows it.
#[derive(Debug, Serialize)]
pub(crate) struct DeliveryObject {
    #[serde(flatten)]
    pub(crate) delivery: Delivery,
    pub(crate) attempt_log: Vec<DeliveryAttempt>,
}

/// The list answer.
#[derive(Debug, Serialize)]
struct DeliveryList {
    deliveries: Vec<DeliveryObject>,
}

/// A webhook's deliveries with their attempts, newest first (the last 100).
pub(crate) async fn webhook_deliveries(state: &AppState, id: &str) -> Result<Vec<DeliveryObject>> {
    let store = state.sessions.record();
    let filter = DeliveryFilter::all()
        .destination_prefix(format!("{PREFIX}{id}"))
        .limit(100);
    let mut out = Vec::new();
    for d in store.deliveries(&filter).await? {
        // The prefix also matches longer ids that start with this one.
        if d.destination != format!("{PREFIX}{id}") {
            continue;
        }
        let attempt_log = store.delivery_attempts(&d.id).await?;
        out.push(DeliveryObject {
            delivery: d,
            attempt_log,
        });
    }
    Ok(out)
}

async fn deliveries(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<DeliveryList>> {
    find(&state, &id).await?;
    Ok(Json(DeliveryList {
        deliveries: webhook_deliveries(&state, &id).await?,
    }))
}

async fn redeliver(
    State(state): State<AppState>,
    _: Admin,
    Path((id, notice)): Path<(String, String)>,
) -> Result<Json<Delivery>> {
    find(&state, &id).await?;
    let delivery = Delivery::id_for(&notice, &format!("{PREFIX}{id}"));
    Ok(Json(state.sessions.record().redeliver(&delivery).await?))
}
