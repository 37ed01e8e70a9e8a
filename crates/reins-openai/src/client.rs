//! [`OpenAiChat`]: the provider, its presets and the HTTP exchange.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use reins_model::{
    ChatModel, ChatRequest, ChatStream, ModelError, Result, RetryPolicy, parse_retry_after,
};

use crate::decode::{chunk_stream, error_parts, preview};
use crate::wire::{WireOptions, request_body};

/// Where the API key comes from.
#[derive(Clone)]
enum ApiKey {
    /// A key to send as `Authorization: Bearer ...`.
    Key(String),
    /// The preset's environment variable was not set: every call fails with
    /// [`ModelError::Auth`] naming it, until [`OpenAiChat::with_api_key`] is called.
    MissingEnv(&'static str),
    /// The server needs no key (Ollama, most local servers).
    None,
}

/// A chat model served over the OpenAI Chat Completions API: OpenAI itself,
/// DashScope (compatible mode), DeepSeek, Ollama, vLLM, llama.cpp's server and
/// anything else that speaks it.
///
/// Presets read their API key from the environment when they are made. A missing
/// key is not an error at construction: the first call fails with
/// [`ModelError::Auth`] naming the variable (not retried), so an agent can be built
/// before the key is known; [`has_api_key`](Self::has_api_key) checks up front.
///
/// The key never appears in `Debug` output or in errors (a provider message that
/// echoes it is scrubbed).
#[derive(Clone)]
pub struct OpenAiChat {
    model: String,
    base_url: String,
    api_key: ApiKey,
    provider: &'static str,
    retry: RetryPolicy,
    timeout: Duration,
    http: reqwest::Client,
    wire: WireOptions,
}

impl std::fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = match &self.api_key {
            ApiKey::Key(_) => "<redacted>".to_owned(),
            ApiKey::MissingEnv(var) => format!("<missing: {var}>"),
            ApiKey::None => "<none>".to_owned(),
        };
        f.debug_struct("OpenAiChat")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &key)
            .field("retry", &self.retry)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The default time allowed for the response to start, and the longest silence
/// between chunks after that.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

fn env_key(var: &'static str) -> ApiKey {
    match std::env::var(var) {
        Ok(k) if !k.trim().is_empty() => ApiKey::Key(k.trim().to_owned()),
        _ => ApiKey::MissingEnv(var),
    }
}

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default.to_owned())
}

impl OpenAiChat {
    fn preset(
        provider: &'static str,
        model: impl Into<String>,
        base_url: String,
        key: ApiKey,
    ) -> Self {
        Self {
            model: model.into(),
            base_url,
            api_key: key,
            provider,
            retry: RetryPolicy::default(),
            timeout: DEFAULT_TIMEOUT,
            http: reqwest::Client::new(),
            wire: WireOptions {
                replay_reasoning: false,
                include_usage: true,
            },
        }
    }

    /// OpenAI: key from `OPENAI_API_KEY`, base URL from `OPENAI_BASE_URL` or
    /// `https://api.openai.com/v1`.
    pub fn openai(model: impl Into<String>) -> Self {
        Self::preset(
            "openai",
            model,
            env_or("OPENAI_BASE_URL", "https://api.openai.com/v1"),
            env_key("OPENAI_API_KEY"),
        )
    }

    /// Alibaba Cloud DashScope in OpenAI-compatible mode (`qwen-plus`, `qwen-max`,
    /// ...): key from `DASHSCOPE_API_KEY`, base URL from `DASHSCOPE_BASE_URL` or
    /// `https://dashscope.aliyuncs.com/compatible-mode/v1`. Thinking modes
    /// (`{"enable_thinking": true}` in [`ChatOptions::extra`](reins_model::ChatOptions))
    /// stream as thinking.
    pub fn dashscope(model: impl Into<String>) -> Self {
        Self::preset(
            "dashscope",
            model,
            env_or(
                "DASHSCOPE_BASE_URL",
                "https://dashscope.aliyuncs.com/compatible-mode/v1",
            ),
            env_key("DASHSCOPE_API_KEY"),
        )
    }

    /// DeepSeek: key from `DEEPSEEK_API_KEY`, base URL `https://api.deepseek.com`.
    /// `deepseek-reasoner`'s `reasoning_content` streams as thinking.
    pub fn deepseek(model: impl Into<String>) -> Self {
        Self::preset(
            "deepseek",
            model,
            "https://api.deepseek.com".to_owned(),
            env_key("DEEPSEEK_API_KEY"),
        )
    }

    /// A local Ollama server at `http://localhost:11434/v1`, no key.
    pub fn ollama(model: impl Into<String>) -> Self {
        Self::preset(
            "ollama",
            model,
            "http://localhost:11434/v1".to_owned(),
            ApiKey::None,
        )
    }

    /// Any OpenAI-compatible server (vLLM, llama.cpp's server, LM Studio, a
    /// gateway): `base_url` is the part before `/chat/completions`, e.g.
    /// `http://127.0.0.1:8000/v1`. No key unless [`with_api_key`](Self::with_api_key).
    pub fn compatible(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self::preset("compatible", model, base_url.into(), ApiKey::None)
    }

    /// Uses this API key (sent as `Authorization: Bearer ...`).
    #[must_use]
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = ApiKey::Key(key.into());
        self
    }

    /// Uses this base URL (the part before `/chat/completions`).
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

    /// Sends earlier thinking back as `reasoning_content` on assistant messages
    /// (default off; DeepSeek's thinking mode with tool calls expects it, several
    /// other servers refuse it).
    #[must_use]
    pub fn with_reasoning_replay(mut self, on: bool) -> Self {
        self.wire.replay_reasoning = on;
        self
    }

    /// Asks for token usage at the end of the stream with
    /// `stream_options.include_usage` (default on; turn off for servers that refuse
    /// the field).
    #[must_use]
    pub fn with_usage_reporting(mut self, on: bool) -> Self {
        self.wire.include_usage = on;
        self
    }

    /// Whether a key is configured (or none is needed).
    pub fn has_api_key(&self) -> bool {
        !matches!(self.api_key, ApiKey::MissingEnv(_))
    }

    /// The base URL requests go to.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The JSON body this provider would send for `request` (for logging and
    /// tests; no key inside).
    ///
    /// # Errors
    /// [`ModelError::InvalidRequest`] when the request cannot be expressed.
    pub fn request_body(&self, request: &ChatRequest) -> Result<serde_json::Value> {
        request_body(&self.model, request, self.wire)
    }

    fn endpoint(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }

    fn scrub(&self, mut message: String) -> String {
        if let ApiKey::Key(k) = &self.api_key {
            if k.len() >= 4 && message.contains(k.as_str()) {
                message = message.replace(k.as_str(), "<redacted>");
            }
        }
        message
    }

    /// One attempt: send, check the status, wait for the first chunk.
    async fn attempt(&self, body: &[u8]) -> Result<ChatStream> {
        let mut req = self
            .http
            .post(self.endpoint())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .body(body.to_vec());
        if let ApiKey::Key(k) = &self.api_key {
            req = req.bearer_auth(k);
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
            .await
            .map_err(|e| self.scrub_error(e))?;
        Ok(Box::pin(stream))
    }

    fn http_error(&self, status: u16, body: &str, retry_after: Option<Duration>) -> ModelError {
        let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
        let (message, code) = match parsed.as_ref().and_then(|v| v.get("error")) {
            Some(err) => {
                let (m, _, code) = error_parts(err);
                (m, code)
            }
            None => match parsed.as_ref().and_then(|v| v.get("message")) {
                Some(serde_json::Value::String(m)) => (m.clone(), String::new()),
                _ => (preview(body.trim()), String::new()),
            },
        };
        let message = if message.is_empty() {
            format!("HTTP {status} from {}", self.provider)
        } else {
            self.scrub(message)
        };
        if code.contains("context_length") && (400..500).contains(&status) {
            return ModelError::ContextTooLong { message };
        }
        ModelError::from_http_status(status, message, retry_after)
    }

    fn scrub_error(&self, e: ModelError) -> ModelError {
        match &self.api_key {
            ApiKey::Key(k) => e.redact(k),
            _ => e,
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
impl ChatModel for OpenAiChat {
    fn model_name(&self) -> &str {
        &self.model
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream> {
        if let ApiKey::MissingEnv(var) = self.api_key {
            return Err(ModelError::Auth {
                message: format!(
                    "{var} is not set: export it, or call .with_api_key(..) on the {} model",
                    self.provider
                ),
            });
        }
        let body = serde_json::to_vec(&self.request_body(&request)?)
            .map_err(|e| ModelError::InvalidRequest(e.to_string()))?;
        let timeout = self.timeout;
        let result = self
            .retry
            .run(|| async {
                // Redacted here, before the retry loop logs the error.
                match tokio::time::timeout(timeout, self.attempt(&body)).await {
                    Ok(r) => r.map_err(|e| self.scrub_error(e)),
                    Err(_) => Err(ModelError::Timeout(format!(
                        "no response from {} within {:.1}s",
                        self.provider,
                        timeout.as_secs_f64()
                    ))),
                }
            })
            .await;
        let ApiKey::Key(key) = &self.api_key else {
            return result;
        };
        let stream = result?;
        // Errors inside the stream may quote the server too: redact them as well.
        let key = key.clone();
        Ok(Box::pin(
            stream.map(move |item| item.map_err(|e| e.redact(&key))),
        ))
    }
}
