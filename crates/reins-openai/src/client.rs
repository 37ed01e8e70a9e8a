//! [`OpenAiChat`]: the provider, its presets and the HTTP exchange.

use std::time::Duration;

use reins_model::http::{HttpSettings, WireFormat, preview};
use reins_model::{ChatModel, ChatRequest, ChatStream, ModelError, Result, RetryPolicy};

use crate::decode::{OpenAiDecoder, error_parts};
use crate::wire::{ToolCallContent, WireOptions, request_body};

pub use reins_model::http::DEFAULT_TIMEOUT;

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
/// echoes it is scrubbed). The HTTP side (base URL, key, retries, timeout, client)
/// is a shared [`HttpSettings`]; this type adds the Chat Completions wire format.
#[derive(Clone)]
pub struct OpenAiChat {
    model: String,
    http: HttpSettings,
    wire: WireOptions,
    caps: reins_model::ModelCapabilities,
}

impl std::fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiChat")
            .field("model", &self.model)
            .field("http", &self.http)
            .field("wire", &self.wire)
            .field("caps", &self.caps)
            .finish()
    }
}

/// The Chat Completions exchange: `POST {base}/chat/completions`, bearer key.
struct ChatCompletions;

impl WireFormat for ChatCompletions {
    type Decoder = OpenAiDecoder;

    fn path(&self) -> &str {
        "/chat/completions"
    }

    fn decoder(&self) -> OpenAiDecoder {
        OpenAiDecoder::new()
    }

    fn http_error(&self, status: u16, body: &str, retry_after: Option<Duration>) -> ModelError {
        http_error(status, body, retry_after)
    }
}

/// An OpenAI error response (`{"error": {"message", "type", "code"}}`, or a bare
/// `message`, or text) as a [`ModelError`]; shared by both OpenAI APIs.
pub(crate) fn http_error(status: u16, body: &str, retry_after: Option<Duration>) -> ModelError {
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
        format!("HTTP {status}")
    } else {
        message
    };
    if code.contains("context_length") && (400..500).contains(&status) {
        return ModelError::ContextTooLong { message };
    }
    ModelError::from_http_status(status, message, retry_after)
}

impl OpenAiChat {
    fn preset(http: HttpSettings, model: impl Into<String>, content: ToolCallContent) -> Self {
        Self {
            model: model.into(),
            http,
            wire: WireOptions {
                replay_reasoning: false,
                include_usage: true,
                tool_call_content: content,
            },
            // Forced tool calls everywhere; JSON Schema answers only where the preset
            // documents them (`openai` turns it on).
            caps: reins_model::ModelCapabilities::new(false, true),
        }
    }

    /// A model speaking Chat Completions through these HTTP settings, with the
    /// tolerant wire form of [`compatible`](Self::compatible).
    pub fn from_settings(http: HttpSettings, model: impl Into<String>) -> Self {
        Self::preset(http, model, ToolCallContent::EmptyString)
    }

    /// OpenAI: key from `OPENAI_API_KEY`, base URL from `OPENAI_BASE_URL` or
    /// `https://api.openai.com/v1`.
    pub fn openai(model: impl Into<String>) -> Self {
        let http = HttpSettings::new("openai", "https://api.openai.com/v1")
            .with_base_url_from_env("OPENAI_BASE_URL")
            .with_api_key_from_env("OPENAI_API_KEY");
        Self::preset(http, model, ToolCallContent::Null)
            .with_capabilities(reins_model::ModelCapabilities::new(true, true))
    }

    /// Alibaba Cloud DashScope in OpenAI-compatible mode (`qwen-plus`, `qwen-max`,
    /// ...): key from `DASHSCOPE_API_KEY`, base URL from `DASHSCOPE_BASE_URL` or
    /// `https://dashscope.aliyuncs.com/compatible-mode/v1`. Thinking modes
    /// (`{"enable_thinking": true}` in [`ChatOptions::extra`](reins_model::ChatOptions))
    /// stream as thinking.
    pub fn dashscope(model: impl Into<String>) -> Self {
        let http = HttpSettings::new(
            "dashscope",
            "https://dashscope.aliyuncs.com/compatible-mode/v1",
        )
        .with_base_url_from_env("DASHSCOPE_BASE_URL")
        .with_api_key_from_env("DASHSCOPE_API_KEY");
        Self::preset(http, model, ToolCallContent::Null)
    }

    /// DeepSeek: key from `DEEPSEEK_API_KEY`, base URL `https://api.deepseek.com`.
    /// `deepseek-reasoner`'s `reasoning_content` streams as thinking.
    pub fn deepseek(model: impl Into<String>) -> Self {
        let http = HttpSettings::new("deepseek", "https://api.deepseek.com")
            .with_api_key_from_env("DEEPSEEK_API_KEY");
        Self::preset(http, model, ToolCallContent::Null)
    }

    /// A local Ollama server at `http://localhost:11434/v1`, no key.
    pub fn ollama(model: impl Into<String>) -> Self {
        let http = HttpSettings::new("ollama", "http://localhost:11434/v1");
        Self::preset(http, model, ToolCallContent::EmptyString)
    }

    /// Any OpenAI-compatible server (vLLM, llama.cpp's server, LM Studio, a
    /// gateway): `base_url` is the part before `/chat/completions`, e.g.
    /// `http://127.0.0.1:8000/v1`. No key unless [`with_api_key`](Self::with_api_key).
    pub fn compatible(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self::preset(
            HttpSettings::new("compatible", base_url),
            model,
            ToolCallContent::EmptyString,
        )
    }

    /// Declares what the server supports (see [`ModelCapabilities`](reins_model::ModelCapabilities)):
    /// the `openai` preset has JSON Schema answers (`response_format: json_schema`) and
    /// forced tool calls; the others have forced tool calls only. A server that does
    /// support `json_schema` (recent vLLM, llama.cpp) can say so here, and one that
    /// does not honour `tool_choice` can say that.
    #[must_use]
    pub fn with_capabilities(mut self, caps: reins_model::ModelCapabilities) -> Self {
        self.caps = caps;
        self
    }

    /// Uses this API key (sent as `Authorization: Bearer ...`).
    #[must_use]
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.http = self.http.with_api_key(key);
        self
    }

    /// Uses this base URL (the part before `/chat/completions`).
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

    /// How an assistant message that only calls tools carries its (empty) text:
    /// `true` sends `"content": ""`, `false` sends `"content": null`. Both are valid
    /// Chat Completions; `null` is what OpenAI documents, and several compatible
    /// servers reject it (llama-cpp-python answered HTTP 500), while `""` is
    /// accepted everywhere we know of. Default: `""` for
    /// [`compatible`](Self::compatible) and [`ollama`](Self::ollama), `null` for the
    /// first-party presets ([`openai`](Self::openai), [`dashscope`](Self::dashscope),
    /// [`deepseek`](Self::deepseek)).
    #[must_use]
    pub fn with_empty_string_tool_call_content(mut self, on: bool) -> Self {
        self.wire.tool_call_content = if on {
            ToolCallContent::EmptyString
        } else {
            ToolCallContent::Null
        };
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

    /// The JSON body this provider would send for `request` (for logging and
    /// tests; no key inside).
    ///
    /// # Errors
    /// [`ModelError::InvalidRequest`] when the request cannot be expressed.
    pub fn request_body(&self, request: &ChatRequest) -> Result<serde_json::Value> {
        request_body(&self.model, request, self.wire)
    }
}

#[async_trait::async_trait]
impl ChatModel for OpenAiChat {
    fn model_name(&self) -> &str {
        &self.model
    }

    /// `openai`: the OpenAI API (an OpenAI-compatible endpoint, such as a preset's, reports the API it speaks).
    fn provider_name(&self) -> Option<&str> {
        Some("openai")
    }

    fn capabilities(&self) -> reins_model::ModelCapabilities {
        self.caps
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream> {
        self.http.api_key()?;
        let body = self.request_body(&request)?;
        self.http.stream(&ChatCompletions, &body).await
    }
}
