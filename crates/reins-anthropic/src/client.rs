//! [`AnthropicChat`]: the provider, its settings and the HTTP exchange.

use std::time::Duration;

use reins_model::http::{HttpSettings, WireFormat, preview};
use reins_model::{ChatModel, ChatRequest, ChatStream, ModelError, Result, RetryPolicy};

use crate::decode::{AnthropicDecoder, error_from_body};
use crate::wire::request_body;

pub use reins_model::http::DEFAULT_TIMEOUT;

/// The `anthropic-version` header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The `max_tokens` sent when the request sets none (the API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A chat model served by the Anthropic Messages API (Claude).
///
/// [`AnthropicChat::new`] reads `ANTHROPIC_API_KEY` (and `ANTHROPIC_BASE_URL`, default
/// `https://api.anthropic.com`) when it is made. A missing key is not an error at
/// construction: the first call fails with [`ModelError::Auth`] naming the variable
/// (not retried); [`has_api_key`](Self::has_api_key) checks up front.
///
/// The key never appears in `Debug` output or in errors. The HTTP side (base URL,
/// key, retries, timeout, client) is a shared [`HttpSettings`]; this type adds the
/// Messages API wire format.
#[derive(Clone)]
pub struct AnthropicChat {
    model: String,
    http: HttpSettings,
    wire: Messages,
    max_tokens: u32,
}

impl std::fmt::Debug for AnthropicChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicChat")
            .field("model", &self.model)
            .field("http", &self.http)
            .field("betas", &self.wire.betas)
            .field("max_tokens", &self.max_tokens)
            .finish()
    }
}

/// The Messages API exchange: `POST {base}/v1/messages`, `x-api-key`,
/// `anthropic-version`, optional `anthropic-beta`.
#[derive(Debug, Clone, Default)]
struct Messages {
    betas: Vec<String>,
}

impl WireFormat for Messages {
    type Decoder = AnthropicDecoder;

    fn path(&self) -> &str {
        "/v1/messages"
    }

    fn decoder(&self) -> AnthropicDecoder {
        AnthropicDecoder::new()
    }

    fn authorize(&self, request: reqwest::RequestBuilder, key: &str) -> reqwest::RequestBuilder {
        request.header("x-api-key", key)
    }

    fn headers(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let request = request.header("anthropic-version", ANTHROPIC_VERSION);
        if self.betas.is_empty() {
            request
        } else {
            request.header("anthropic-beta", self.betas.join(","))
        }
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
            ModelError::RateLimited { message, .. } => ModelError::RateLimited {
                retry_after,
                message,
            },
            other => other,
        }
    }
}

impl AnthropicChat {
    /// A Claude model, e.g. `claude-sonnet-4-5`: key from `ANTHROPIC_API_KEY`, base
    /// URL from `ANTHROPIC_BASE_URL` or `https://api.anthropic.com`.
    pub fn new(model: impl Into<String>) -> Self {
        let http = HttpSettings::new("anthropic", "https://api.anthropic.com")
            .with_base_url_from_env("ANTHROPIC_BASE_URL")
            .with_api_key_from_env("ANTHROPIC_API_KEY");
        Self::from_settings(http, model)
    }

    /// A model speaking the Messages API through these HTTP settings (e.g. a
    /// gateway with its own key handling). The API requires a key: settings without
    /// one send none, and the server decides.
    pub fn from_settings(http: HttpSettings, model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            http,
            wire: Messages::default(),
            max_tokens: DEFAULT_MAX_TOKENS,
        }
    }

    /// Uses this API key (sent as `x-api-key`).
    #[must_use]
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.http = self.http.with_api_key(key);
        self
    }

    /// Uses this base URL (the part before `/v1/messages`).
    #[must_use]
    pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
        self.http = self.http.with_base_url(url);
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
        self.wire.betas.push(feature.into());
        self
    }

    /// Retries failures before the first chunk with this policy (default
    /// [`RetryPolicy::default`]).
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.http = self.http.with_retry(retry);
        self
    }

    /// The time allowed for each attempt to reach its first chunk, and the longest
    /// silence between chunks afterwards (default [`DEFAULT_TIMEOUT`]).
    #[must_use]
    pub fn with_timeout(mut self, d: Duration) -> Self {
        self.http = self.http.with_timeout(d);
        self
    }

    /// Uses this HTTP client (proxies, TLS settings, connection pools).
    #[must_use]
    pub fn with_http_client(mut self, client: reqwest::Client) -> Self {
        self.http = self.http.with_http_client(client);
        self
    }

    /// Replaces the HTTP settings (base URL, key, retries, timeout, client) as a
    /// whole.
    #[must_use]
    pub fn with_http_settings(mut self, http: HttpSettings) -> Self {
        self.http = http;
        self
    }

    /// Whether a key is configured.
    pub fn has_api_key(&self) -> bool {
        self.http.has_api_key()
    }

    /// The base URL requests go to.
    pub fn base_url(&self) -> &str {
        self.http.base_url()
    }

    /// The HTTP settings (base URL, key, retries, timeout, client).
    pub fn http_settings(&self) -> &HttpSettings {
        &self.http
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
}

#[async_trait::async_trait]
impl ChatModel for AnthropicChat {
    fn model_name(&self) -> &str {
        &self.model
    }

    /// `anthropic`: Anthropic's Messages API.
    fn provider_name(&self) -> Option<&str> {
        Some("anthropic")
    }

    /// Forced tool calls (`tool_choice` `any` / `tool`); the Messages API has no JSON
    /// Schema answer format.
    fn capabilities(&self) -> reins_model::ModelCapabilities {
        reins_model::ModelCapabilities::new(false, true)
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream> {
        self.http.api_key()?;
        let body = self.request_body(&request)?;
        self.http.stream(&self.wire, &body).await
    }
}
