//! Webhooks in the Standard Webhooks form: each notice is POSTed as
//! `{"type", "timestamp", "data"}` with the headers `webhook-id` (the notice's stable
//! id), `webhook-timestamp` (Unix seconds of the attempt) and `webhook-signature`
//! (`v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, one per live secret,
//! space-separated, so a receiver keeps verifying while a secret is rotated).
//!
//! Subscribers are stored ([`Subscription`]s of kind [`KIND`]): a program adds one
//! with [`Webhooks::add`], reins-server over `POST /v1/webhooks`; every process that
//! dispatches for the store delivers to them.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use reins_memory::{MemoryStore, Notice, NoticeKind, Subscription};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::dispatch::Source;
use crate::{Attempt, DeliveryError, Error};

/// The store's subscription kind of webhooks.
pub const KIND: &str = "webhook";
/// The destination prefix of webhook deliveries (`webhook:<subscription id>`).
pub const PREFIX: &str = "webhook:";

/// One signing secret (`whsec_` and the base64 key) and, once rotated out, when it
/// stops signing.
#[derive(Clone, Serialize, Deserialize)]
pub struct Secret {
    /// `whsec_` and the base64 key (24 to 64 bytes).
    pub secret: String,
    /// When it stops signing (`None`: it signs until rotated out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("secret", &"whsec_…")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// A webhook subscriber as stored (the body of its [`Subscription`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Webhook {
    /// Where notices are POSTed.
    pub url: String,
    /// Event types it wants (empty: every type).
    #[serde(default)]
    pub event_types: Vec<NoticeKind>,
    /// Tools it wants (empty: every tool). Notices about no tool (a run that ended)
    /// pass this filter.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Sessions whose id starts with this.
    #[serde(default)]
    pub session_prefix: Option<String>,
    /// What it is for, for people.
    #[serde(default)]
    pub description: Option<String>,
    /// Its signing secrets, newest first.
    pub secrets: Vec<Secret>,
    /// Who created it.
    #[serde(default)]
    pub created_by: Option<String>,
}

impl Webhook {
    /// A subscriber at `url` for every notice, signing with `secret` (`whsec_` and
    /// the base64 key; [`new_secret`] makes one).
    pub fn new(url: impl Into<String>, secret: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            event_types: Vec::new(),
            tools: Vec::new(),
            session_prefix: None,
            description: None,
            secrets: vec![Secret {
                secret: secret.into(),
                expires_at: None,
            }],
            created_by: None,
        }
    }

    /// Only notices of these kinds.
    #[must_use]
    pub fn event_types(mut self, kinds: impl IntoIterator<Item = NoticeKind>) -> Self {
        self.event_types = kinds.into_iter().collect();
        self
    }

    /// Whether it wants `n`.
    pub fn wants(&self, n: &Notice) -> bool {
        (self.event_types.is_empty() || self.event_types.contains(&n.kind))
            && (self.tools.is_empty()
                || n.tool
                    .as_deref()
                    .is_none_or(|t| self.tools.iter().any(|x| x == t)))
            && self
                .session_prefix
                .as_deref()
                .is_none_or(|p| n.session.as_deref().is_some_and(|s| s.starts_with(p)))
    }

    /// The secrets that sign now.
    pub fn live_secrets(&self, now: DateTime<Utc>) -> impl Iterator<Item = &Secret> {
        self.secrets
            .iter()
            .filter(move |s| s.expires_at.is_none_or(|t| t > now))
    }
}

/// The key bytes of a `whsec_` secret; `None` when it is malformed.
pub fn secret_key(secret: &str) -> Option<Vec<u8>> {
    let key = B64.decode(secret.strip_prefix("whsec_")?).ok()?;
    (24..=64).contains(&key.len()).then_some(key)
}

/// A new random secret (32 bytes from two v4 UUIDs' random bits).
pub fn new_secret() -> String {
    let mut key = Vec::with_capacity(32);
    key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    format!("whsec_{}", B64.encode(key))
}

/// `v1,<base64 signature>` of one message with one key.
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC accepts keys of any length.
    let mut mac = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
}

/// The JSON body a notice is sent as.
pub fn body(n: &Notice) -> Vec<u8> {
    let v = serde_json::json!({
        "type": n.kind.as_str(),
        "timestamp": n.created_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "data": n,
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

/// The webhook subscribers of a store: a [`Source`] that routes notices to them and
/// delivers them.
pub struct Webhooks {
    store: Arc<dyn MemoryStore>,
    http: reqwest::Client,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks").finish_non_exhaustive()
    }
}

impl Webhooks {
    /// The subscribers stored in `store` (a 10 s timeout per request, no redirects).
    pub fn new(store: Arc<dyn MemoryStore>) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self { store, http }
    }

    /// Stores a new subscriber; its subscription (id `wh_…`) is returned.
    ///
    /// # Errors
    /// [`Error::InvalidWebhook`] when the URL is not `http(s)://` or a secret is not a
    /// well-formed `whsec_` key; [`Error::Store`] when it cannot be stored.
    pub async fn add(&self, webhook: Webhook) -> Result<Subscription, Error> {
        if !(webhook.url.starts_with("http://") || webhook.url.starts_with("https://")) {
            return Err(Error::InvalidWebhook(format!(
                "the URL must start with http:// or https://, not `{}`",
                webhook.url
            )));
        }
        if webhook.secrets.is_empty()
            || webhook
                .secrets
                .iter()
                .any(|s| secret_key(&s.secret).is_none())
        {
            return Err(Error::InvalidWebhook(
                "every secret is `whsec_` and the base64 of 24 to 64 bytes".to_owned(),
            ));
        }
        let sub = Subscription {
            id: format!("wh_{}", uuid::Uuid::new_v4().simple()),
            kind: KIND.to_owned(),
            body: serde_json::to_value(&webhook)
                .map_err(|e| Error::InvalidWebhook(e.to_string()))?,
            created_at: Utc::now(),
        };
        self.store.put_subscription(&sub).await?;
        Ok(sub)
    }

    /// The stored subscribers (those whose record does not parse are skipped, loudly).
    ///
    /// # Errors
    /// The store's.
    pub async fn list(&self) -> reins_memory::Result<Vec<(Subscription, Webhook)>> {
        Ok(self
            .store
            .subscriptions(KIND)
            .await?
            .into_iter()
            .filter_map(|s| match serde_json::from_value::<Webhook>(s.body.clone()) {
                Ok(w) => Some((s, w)),
                Err(e) => {
                    tracing::warn!(id = %s.id, error = %e, "a stored webhook does not parse; skipped");
                    None
                }
            })
            .collect())
    }
}

#[async_trait::async_trait]
impl Source for Webhooks {
    async fn route(&self, notice: &Notice) -> reins_memory::Result<Vec<String>> {
        Ok(self
            .list()
            .await?
            .into_iter()
            .filter(|(_, w)| w.wants(notice))
            .map(|(s, _)| format!("{PREFIX}{}", s.id))
            .collect())
    }

    async fn deliver(
        &self,
        destination: &str,
        notice: &Notice,
        _attempt: &Attempt,
    ) -> Option<Result<(), DeliveryError>> {
        let id = destination.strip_prefix(PREFIX)?;
        let hook = match self.list().await {
            Ok(all) => all.into_iter().find(|(s, _)| s.id == id).map(|(_, w)| w),
            Err(e) => return Some(Err(DeliveryError::Retryable(e.to_string()))),
        };
        let Some(hook) = hook else {
            return Some(Err(DeliveryError::Permanent(format!(
                "webhook `{id}` was deleted"
            ))));
        };
        Some(self.post(&hook, notice).await)
    }
}

impl Webhooks {
    async fn post(&self, hook: &Webhook, notice: &Notice) -> Result<(), DeliveryError> {
        let now = Utc::now();
        let ts = now.timestamp();
        let body = body(notice);
        let signatures: Vec<String> = hook
            .live_secrets(now)
            .filter_map(|s| secret_key(&s.secret))
            .map(|k| sign(&k, &notice.id, ts, &body))
            .collect();
        if signatures.is_empty() {
            return Err(DeliveryError::Permanent(
                "the webhook has no live signing secret".to_owned(),
            ));
        }
        let sent = self
            .http
            .post(&hook.url)
            .header("content-type", "application/json")
            .header("webhook-id", &notice.id)
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", signatures.join(" "))
            .body(body)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) => {
                return Err(DeliveryError::Retryable(format!(
                    "POST {} failed: {}",
                    hook.url,
                    without_url(&e)
                )));
            }
        };
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let msg = format!("POST {} answered HTTP {}", hook.url, status.as_u16());
        if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408 {
            Err(DeliveryError::Retryable(msg))
        } else {
            Err(DeliveryError::Permanent(msg))
        }
    }
}

/// A reqwest error's text without the URL it repeats.
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "request error"
    };
    kind.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_id_timestamp_and_body_with_the_decoded_key() {
        // The Standard Webhooks example key and message; the signature below was
        // computed independently (Python: hmac.new(key, b"id.ts.body", sha256)).
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let key = secret_key(secret).unwrap();
        let sig = sign(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn malformed_secrets_are_refused() {
        assert!(secret_key("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_none());
        assert!(secret_key("whsec_!!!").is_none());
        assert!(secret_key("whsec_c2hvcnQ=").is_none());
        assert!(secret_key(&new_secret()).is_some());
    }
}
