//! [`GeminiChat`]: the provider, its presets and the HTTP exchange.

use std::time::Duration;

use reins_model::http::{HttpSettings, WireFormat, preview};
use reins_model::{
    ChatModel, ChatRequest, ChatStream, ModelCapabilities, ModelError, Result, RetryPolicy,
};

use crate::decode::{GeminiDecoder, error_from_body};
use crate::wire::request_body;

/// The Gemini API's base URL.
pub const GEMINI_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";

/// A model served over the Gemini API (`generativelanguage.googleapis.com`) or
/// Vertex AI, streamed with `streamGenerateContent?alt=sse`.
///
/// Thought signatures come back on the parts they belong to and are kept in the
/// assistant message (one thinking block whose signature is sealed for
/// [`PROVIDER`](crate::PROVIDER)); every later request puts each back on its
/// function call (or text), as Gemini 3 requires with function calling — after a
/// pause of any length, in another process, after an edit or a rejection.
///
/// The key never appears in `Debug` output or in errors.
#[derive(Clone)]
pub struct GeminiChat {
    model: String,
    http: HttpSettings,
    auth: Auth,
    path: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Auth {
    /// `x-goog-api-key: <key>` (the Gemini API).
    ApiKey,
    /// `Authorization: Bearer <token>` (Vertex AI).
    Bearer,
}

impl std::fmt::Debug for GeminiChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeminiChat")
            .field("model", &self.model)
            .field("http", &self.http)
            .field("auth", &self.auth)
            .finish()
    }
}

struct Exchange<'a> {
    path: &'a str,
    auth: Auth,
}

impl WireFormat for Exchange<'_> {
    type Decoder = GeminiDecoder;

    fn path(&self) -> &str {
        self.path
    }

    fn decoder(&self) -> GeminiDecoder {
        GeminiDecoder::new()
    }

    fn authorize(&self, request: reqwest::RequestBuilder, key: &str) -> reqwest::RequestBuilder {
        match self.auth {
            Auth::ApiKey => request.header("x-goog-api-key", key),
            Auth::Bearer => request.bearer_auth(key),
        }
    }

    fn http_error(&self, status: u16, body: &str, retry_after: Option<Duration>) -> ModelError {
        let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
        // `{"error": {...}}`, or a list of them (some endpoints answer `[{"error": ...}]`).
        let error = parsed.as_ref().and_then(|v| {
            v.get("error")
                .or_else(|| v.get(0).and_then(|first| first.get("error")))
        });
        match error {
            Some(e) if status != 429 => error_from_body(e, Some(status)),
            Some(e) => ModelError::from_http_status(
                status,
                e.get("message")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("rate limited")
                    .to_owned(),
                retry_after,
            ),
            None => {
                let text = preview(body.trim());
                let message = if text.is_empty() {
                    format!("HTTP {status}")
                } else {
                    text
                };
                ModelError::from_http_status(status, message, retry_after)
            }
        }
    }
}

fn stream_path(model: &str) -> String {
    format!("/models/{model}:streamGenerateContent?alt=sse")
}

impl GeminiChat {
    fn with_http(http: HttpSettings, model: impl Into<String>, auth: Auth) -> Self {
        let model = model.into();
        Self {
            path: stream_path(&model),
            model,
            http,
            auth,
        }
    }

    /// The Gemini API: key from `GEMINI_API_KEY` (else `GOOGLE_API_KEY`) in an
    /// `x-goog-api-key` header, base URL from `GEMINI_BASE_URL` or
    /// [`GEMINI_BASE_URL`]; e.g. `GeminiChat::new("gemini-2.5-flash")`.
    pub fn new(model: impl Into<String>) -> Self {
        let var = if std::env::var("GEMINI_API_KEY").is_ok_and(|v| !v.trim().is_empty()) {
            "GEMINI_API_KEY"
        } else if std::env::var("GOOGLE_API_KEY").is_ok_and(|v| !v.trim().is_empty()) {
            "GOOGLE_API_KEY"
        } else {
            "GEMINI_API_KEY"
        };
        let http = HttpSettings::new("gemini", GEMINI_BASE_URL)
            .with_base_url_from_env("GEMINI_BASE_URL")
            .with_api_key_from_env(var);
        Self::with_http(http, model, Auth::ApiKey)
    }

    /// Vertex AI: `POST https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:streamGenerateContent?alt=sse`
    /// (`aiplatform.googleapis.com` for the `global` location) with an OAuth access
    /// token (e.g. `gcloud auth print-access-token`) from `VERTEX_ACCESS_TOKEN` as
    /// `Authorization: Bearer`. Tokens expire: give a fresh one with
    /// [`with_api_key`](Self::with_api_key).
    pub fn vertex(
        project: impl AsRef<str>,
        location: impl AsRef<str>,
        model: impl Into<String>,
    ) -> Self {
        let (project, location) = (project.as_ref(), location.as_ref());
        let host = if location == "global" {
            "aiplatform.googleapis.com".to_owned()
        } else {
            format!("{location}-aiplatform.googleapis.com")
        };
        let base =
            format!("https://{host}/v1/projects/{project}/locations/{location}/publishers/google");
        let http =
            HttpSettings::new("vertex-ai", base).with_api_key_from_env("VERTEX_ACCESS_TOKEN");
        Self::with_http(http, model, Auth::Bearer)
    }

    /// A model speaking the Gemini API through these HTTP settings (the key in
    /// `x-goog-api-key`; the base URL is the part before `/models/...`).
    pub fn from_settings(http: HttpSettings, model: impl Into<String>) -> Self {
        Self::with_http(http, model, Auth::ApiKey)
    }

    /// Uses this API key (or, on Vertex AI, this access token).
    #[must_use]
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.http = self.http.with_api_key(key);
        self
    }

    /// Uses this base URL (the part before `/models/...`).
    #[must_use]
    pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
        self.http = self.http.with_base_url(url);
        self
    }

    /// Uses this model name.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self.path = stream_path(&self.model);
        self
    }

    /// Retries failures before the first chunk with this policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.http = self.http.with_retry(retry);
        self
    }

    /// The time allowed for the first chunk, and for each silence after it.
    #[must_use]
    pub fn with_timeout(mut self, d: Duration) -> Self {
        self.http = self.http.with_timeout(d);
        self
    }

    /// Uses this HTTP client.
    #[must_use]
    pub fn with_http_client(mut self, client: reqwest::Client) -> Self {
        self.http = self.http.with_http_client(client);
        self
    }

    /// Replaces the HTTP settings as a whole.
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

    /// The JSON body this provider would send for `request` (no key inside).
    ///
    /// # Errors
    /// [`ModelError::InvalidRequest`] when the request cannot be expressed (a named
    /// tool choice without tools).
    pub fn request_body(&self, request: &ChatRequest) -> Result<serde_json::Value> {
        request_body(request)
    }
}

#[async_trait::async_trait]
impl ChatModel for GeminiChat {
    fn model_name(&self) -> &str {
        &self.model
    }

    /// `gcp.gemini`: the Gemini API (generativelanguage.googleapis.com).
    fn provider_name(&self) -> Option<&str> {
        Some("gcp.gemini")
    }

    fn capabilities(&self) -> ModelCapabilities {
        ModelCapabilities::new(true, true)
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream> {
        self.http.api_key()?;
        let body = self.request_body(&request)?;
        let exchange = Exchange {
            path: &self.path,
            auth: self.auth,
        };
        self.http.stream(&exchange, &body).await
    }
}
