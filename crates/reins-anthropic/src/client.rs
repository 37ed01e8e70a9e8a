//! [`AnthropicChat`]: the provider, its settings and the HTTP exchange.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use reins_model::{
    ChatModel, ChatRequest, ChatStream, ModelError, Result, RetryPolicy, parse_retry_after,
};

use crate::decode::{chunk_stream, error_from_body, preview};
use crate::wire::request_body;

/// The `anthropic-version` header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The `max_tokens` sent when the request sets none (the API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The default time allowed for the response to start, and the longest silence
/// between chunks after that.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Clone)]
enum ApiKey {
    Key(String),
    MissingEnv(&'static str),
}

/// A chat model served by the Anthropic Messages API (Claude).
///
/// [`AnthropicChat::new`] reads `ANTHROPIC_API_KEY` (and `ANTHROPIC_BASE_URL`, default
/// `https://api.anthropic.com`) when it is made. A missing key is not an error at
/// construction: the first call fails with [`ModelError::Auth`] naming the variable
/// (not retried); [`has_api_key`](Self::has_api_key) checks up front.
///
/// The key never appears in `Debug` output or in errors.
#[derive(Clone)]
pub struct AnthropicChat {
    model: String,
    base_url: String,
    api_key: ApiKey,
    betas: Vec<String>,
    max_tokens: u32,
    retry: RetryPolicy,
    timeout: Duration,
    http: reqwest::Client,
}

impl std::fmt::Debug for AnthropicChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = match &self.api_key {
            ApiKey::Key(_) => "<redacted>".to_owned(),
            ApiKey::MissingEnv(var) => format!("<missing: {var}>"),
        };
        f.debug_struct("AnthropicChat")
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &key)
            .field("betas", &self.betas)
            .field("max_tokens", &self.max_tokens)
            .field("retry", &self.retry)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl AnthropicChat {
    /// A Claude model, e.g. `claude-sonnet-4-5`: key from `ANTHROPIC_API_KEY`, base
    /// URL from `ANTHROPIC_BASE_URL` or `https://api.anthropic.com`.
    pub fn new(model: impl Into<String>) -> Self {
        let api_key = match std::env::var("ANTHROPIC_API_KEY") {
            Ok(k) if !k.trim().is_empty() => ApiKey::Key(k.trim().to_owned()),
            _ => ApiKey::MissingEnv("ANTHROPIC_API_KEY"),
        };
        let base_url = std::env::var("ANTHROPIC_BASE_URL")
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| "https://api.anthropic.com".to_owned());
        Self {
            model: model.into(),
            base_url,
            api_key,
            betas: Vec::new(),
            max_tokens: DEFAULT_MAX_TOKENS,
            retry: RetryPolicy::default(),
            timeout: DEFAULT_TIMEOUT,
            http: reqwest::Client::new(),
        }
    }

    /// Uses this API key (sent as `x-api-key`).
    #[must_use]
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = ApiKey::Key(key.into());
        self
    }

    /// Uses this base URL (the part before `/v1/messages`).
    #[must_use]
    pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// Uses this model name.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// The `max_tokens` to send when a request sets none (default
    /// [`DEFAULT_MAX_TOKENS`]).
    #[must_use]
    pub fn with_max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = n;
        self
    }

    /// Turns on a beta feature (sent in the `anthropic-beta` header), e.g.
    /// `interleaved-thinking-2025-05-14`.
    #[must_use]
    pub fn with_beta(mut self, feature: impl Into<String>) -> Self {
        self.betas.push(feature.into());
        self
    }

    /// Retries failures before the first chunk with this policy (default
    /// [`RetryPolicy::default`]).
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The time allowed for each attempt to reach its first chunk, and the longest
    /// silence between chunks afterwards (default [`DEFAULT_TIMEOUT`]).
    #[must_use]
    pub fn with_timeout(mut self, d: Duration) -> Self {
        self.timeout = d;
        self
    }

    /// Uses this HTTP client (proxies, TLS settings, connection pools).
    #[must_use]
    pub fn with_http_client(mut self, client: reqwest::Client) -> Self {
        self.http = client;
        self
    }

    /// Whether a key is configured.
    pub fn has_api_key(&self) -> bool {
        matches!(self.api_key, ApiKey::Key(_))
    }

    /// The base URL requests go to.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The JSON body this provider would send for `request` (for logging and tests;
    /// no key inside).
    ///
    /// # Errors
    /// [`ModelError::InvalidRequest`] when the request cannot be expressed (audio,
    /// or a named tool choice without tools).
    pub fn request_body(&self, request: &ChatRequest) -> Result<serde_json::Value> {
        request_body(&self.model, self.max_tokens, request)
    }

    fn endpoint(&self) -> String {
        format!("{}/v1/messages", self.base_url.trim_end_matches('/'))
    }

    fn scrub(&self, message: String) -> String {
        match &self.api_key {
            ApiKey::Key(k) if k.len() >= 4 && message.contains(k.as_str()) => {
                message.replace(k.as_str(), "<redacted>")
            }
            _ => message,
        }
    }

    async fn attempt(&self, key: &str, body: &[u8]) -> Result<ChatStream> {
        let mut req = self
            .http
            .post(self.endpoint())
            .header("x-api-key", key)
            .header("anthropic-version", ANTHROPIC_VERSION)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .body(body.to_vec());
        if !self.betas.is_empty() {
            req = req.header("anthropic-beta", self.betas.join(","));
        }
        let resp = req.send().await.map_err(net_error)?;
        let status = resp.status();
        if !status.is_success() {
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            let text = resp.text().await.unwrap_or_default();
            return Err(self.http_error(status.as_u16(), &text, retry_after));
        }
        let body = resp.bytes_stream().map_err(net_error).boxed();
        let stream = chunk_stream(body)
            .with_idle_timeout(self.timeout)
            .ready()
            .await?;
        Ok(Box::pin(stream))
    }

    fn http_error(&self, status: u16, body: &str, retry_after: Option<Duration>) -> ModelError {
        let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
        let err = match parsed.as_ref().and_then(|v| v.get("error")) {
            Some(e) if e.get("message").is_some() => error_from_body(e, Some(status)),
            _ => {
                let text = preview(body.trim());
                let text = if text.is_empty() {
                    format!("HTTP {status} from Anthropic")
                } else {
                    text
                };
                ModelError::from_http_status(status, text, None)
            }
        };
        match err {
            ModelError::Auth { message } => ModelError::Auth {
                message: self.scrub(message),
            },
            ModelError::RateLimited { message, .. } => ModelError::RateLimited {
                retry_after,
                message,
            },
            other => other,
        }
    }
}

fn net_error(e: reqwest::Error) -> ModelError {
    let e = e.without_url();
    if e.is_timeout() {
        ModelError::Timeout(e.to_string())
    } else if e.is_decode() || e.is_body() {
        ModelError::Network(format!("the response body broke off: {e}"))
    } else {
        ModelError::Network(e.to_string())
    }
}

#[async_trait::async_trait]
impl ChatModel for AnthropicChat {
    fn model_name(&self) -> &str {
        &self.model
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream> {
        let key = match &self.api_key {
            ApiKey::Key(k) => k.as_str(),
            ApiKey::MissingEnv(var) => {
                return Err(ModelError::Auth {
                    message: format!(
                        "{var} is not set: export it, or call .with_api_key(..) on the model"
                    ),
                });
            }
        };
        let body = serde_json::to_vec(&self.request_body(&request)?)
            .map_err(|e| ModelError::InvalidRequest(e.to_string()))?;
        let timeout = self.timeout;
        let stream = self
            .retry
            .run(|| async {
                // Redacted here, before the retry loop logs the error.
                match tokio::time::timeout(timeout, self.attempt(key, &body)).await {
                    Ok(r) => r.map_err(|e| e.redact(key)),
                    Err(_) => Err(ModelError::Timeout(format!(
                        "no response from Anthropic within {:.1}s",
                        timeout.as_secs_f64()
                    ))),
                }
            })
            .await?;
        // Errors inside the stream may quote the server too: redact them as well.
        let key = key.to_owned();
        Ok(Box::pin(
            stream.map(move |item| item.map_err(|e| e.redact(&key))),
        ))
    }
}
