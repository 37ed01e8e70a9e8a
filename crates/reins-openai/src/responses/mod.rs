//! [`OpenAiResponses`]: OpenAI's Responses API (`POST /v1/responses`), and Azure
//! OpenAI's.
//!
//! It lives beside [`OpenAiChat`](crate::OpenAiChat) rather than in a crate of its
//! own because both speak to the same service with the same key, base URL,
//! environment variables, error bodies and Azure deployments: a user of the
//! `openai` feature gets both, and the shared parts (error mapping, stream error
//! events) are written once. Only the wire differs, and it has its own modules.

pub mod decode;
mod strict;
mod wire;

use std::time::Duration;

use reins_model::http::{HttpSettings, WireFormat};
use reins_model::{
    ChatModel, ChatRequest, ChatStream, ModelCapabilities, ModelError, Result, RetryPolicy,
};

use self::decode::ResponsesDecoder;
use self::wire::{WireOptions, request_body};

pub use self::decode::PROVIDER;
pub use self::strict::strict_compatible;

/// A model served over OpenAI's Responses API, or Azure OpenAI's.
///
/// Every request is stateless: `store: false` (unless
/// [`with_store(true)`](Self::with_store)) with `include:
/// ["reasoning.encrypted_content"]`, and the whole conversation in `input`. The
/// reasoning items a response returns are kept in the assistant message (one
/// thinking block whose signature is sealed for [`PROVIDER`]) and sent back, in
/// their place before the function calls that followed them, on every later
/// request — after a pause of any length, in another process, after an edit or a
/// rejection of the call.
///
/// Function tools go with `strict: true` only when their schema is written for
/// strict mode ([`strict_compatible`]), and `strict: false` otherwise, so a tool's
/// optional arguments stay optional.
///
/// The key never appears in `Debug` output or in errors.
#[derive(Clone)]
pub struct OpenAiResponses {
    model: String,
    http: HttpSettings,
    auth: Auth,
    api_version: Option<String>,
    path: String,
    wire: WireOptions,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Auth {
    /// `Authorization: Bearer <key>` (OpenAI).
    Bearer,
    /// `api-key: <key>` (Azure OpenAI).
    ApiKeyHeader,
}

impl std::fmt::Debug for OpenAiResponses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiResponses")
            .field("model", &self.model)
            .field("http", &self.http)
            .field("auth", &self.auth)
            .field("api_version", &self.api_version)
            .field("store", &self.wire.store)
            .finish()
    }
}

/// The exchange: `POST {base}/responses[?api-version=..]`.
struct Exchange<'a> {
    path: &'a str,
    auth: Auth,
}

impl WireFormat for Exchange<'_> {
    type Decoder = ResponsesDecoder;

    fn path(&self) -> &str {
        self.path
    }

    fn decoder(&self) -> ResponsesDecoder {
        ResponsesDecoder::new()
    }

    fn authorize(&self, request: reqwest::RequestBuilder, key: &str) -> reqwest::RequestBuilder {
        match self.auth {
            Auth::Bearer => request.bearer_auth(key),
            Auth::ApiKeyHeader => request.header("api-key", key),
        }
    }

    fn http_error(&self, status: u16, body: &str, retry_after: Option<Duration>) -> ModelError {
        crate::client::http_error(status, body, retry_after)
    }
}

impl OpenAiResponses {
    fn with_http(http: HttpSettings, model: impl Into<String>, auth: Auth) -> Self {
        Self {
            model: model.into(),
            http,
            auth,
            api_version: None,
            path: "/responses".into(),
            wire: WireOptions { store: false },
        }
    }

    /// OpenAI: key from `OPENAI_API_KEY`, base URL from `OPENAI_BASE_URL` or
    /// `https://api.openai.com/v1`; requests go to `{base}/responses`.
    pub fn openai(model: impl Into<String>) -> Self {
        let http = HttpSettings::new("openai", "https://api.openai.com/v1")
            .with_base_url_from_env("OPENAI_BASE_URL")
            .with_api_key_from_env("OPENAI_API_KEY");
        Self::with_http(http, model, Auth::Bearer)
    }

    /// Azure OpenAI: `endpoint` is the resource's, e.g.
    /// `https://my-resource.openai.azure.com`; requests go to
    /// `{endpoint}/openai/v1/responses` with the key (from `AZURE_OPENAI_API_KEY`) in
    /// an `api-key` header, and `deployment` as the model. The v1 API needs no
    /// `api-version`; a preview API that does gets one with
    /// [`with_api_version`](Self::with_api_version).
    pub fn azure(endpoint: impl Into<String>, deployment: impl Into<String>) -> Self {
        let endpoint = endpoint.into();
        let base = format!("{}/openai/v1", endpoint.trim_end_matches('/'));
        let http =
            HttpSettings::new("azure-openai", base).with_api_key_from_env("AZURE_OPENAI_API_KEY");
        Self::with_http(http, deployment, Auth::ApiKeyHeader)
    }

    /// Azure OpenAI from the environment: the endpoint from `AZURE_OPENAI_ENDPOINT`
    /// and the deployment from `AZURE_OPENAI_DEPLOYMENT` (else `deployment`);
    /// `AZURE_OPENAI_API_VERSION`, when set, is sent as `api-version`. `None` when
    /// `AZURE_OPENAI_ENDPOINT` is not set.
    pub fn azure_from_env(deployment: &str) -> Option<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let endpoint = var("AZURE_OPENAI_ENDPOINT")?;
        let deployment = var("AZURE_OPENAI_DEPLOYMENT").unwrap_or_else(|| deployment.to_owned());
        let mut model = Self::azure(endpoint.trim(), deployment.trim());
        if let Some(v) = var("AZURE_OPENAI_API_VERSION") {
            model = model.with_api_version(v.trim());
        }
        Some(model)
    }

    /// A model speaking the Responses API through these HTTP settings
    /// (`Authorization: Bearer`, `{base}/responses`).
    pub fn from_settings(http: HttpSettings, model: impl Into<String>) -> Self {
        Self::with_http(http, model, Auth::Bearer)
    }

    /// Sends `?api-version=VERSION` with every request (Azure OpenAI's preview APIs).
    #[must_use]
    pub fn with_api_version(mut self, version: impl Into<String>) -> Self {
        let version = version.into();
        self.path = format!("/responses?api-version={version}");
        self.api_version = Some(version);
        self
    }

    /// Asks the server to keep the response (`store: true`). Default `false`: the
    /// conversation never depends on state kept by the server, and the encrypted
    /// reasoning travels in every request instead.
    #[must_use]
    pub fn with_store(mut self, store: bool) -> Self {
        self.wire.store = store;
        self
    }

    /// Uses this API key.
    #[must_use]
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.http = self.http.with_api_key(key);
        self
    }

    /// Uses this base URL (the part before `/responses`).
    #[must_use]
    pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
        self.http = self.http.with_base_url(url);
        self
    }

    /// Uses this model name (on Azure: the deployment).
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
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
    /// [`ModelError::InvalidRequest`] when the request cannot be expressed (audio, a
    /// named tool choice without tools).
    pub fn request_body(&self, request: &ChatRequest) -> Result<serde_json::Value> {
        request_body(&self.model, request, self.wire)
    }
}

#[async_trait::async_trait]
impl ChatModel for OpenAiResponses {
    fn model_name(&self) -> &str {
        &self.model
    }

    /// `openai`: the OpenAI Responses API.
    fn provider_name(&self) -> Option<&str> {
        Some("openai")
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
