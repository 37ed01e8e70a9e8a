//! What every HTTP provider shares (feature `http`): [`HttpSettings`] — base URL,
//! API key, retry policy, timeout, HTTP client — and the streamed exchange
//! ([`HttpSettings::stream`]): send, map error statuses, wait for the first chunk
//! with retries, redact the key from every error. A provider adds only its wire
//! format, as a [`WireFormat`]: where to post, how to authenticate, how to decode the
//! stream and how to read its error bodies.
//!
//! ```no_run
//! use std::collections::VecDeque;
//! use reins_model::http::{HttpSettings, WireFormat};
//! use reins_model::sse::{SseDecoder, SseEvent};
//! use reins_model::{ChatChunk, FinishReason, Result};
//!
//! /// A made-up provider whose stream is one text event per line.
//! struct Lines;
//! #[derive(Default)]
//! struct LineDecoder;
//! impl SseDecoder for LineDecoder {
//!     fn decode(&mut self, e: &SseEvent, out: &mut VecDeque<ChatChunk>) -> Result<bool> {
//!         if e.data == "END" {
//!             out.push_back(ChatChunk::Finish { reason: FinishReason::Stop });
//!             return Ok(true);
//!         }
//!         out.push_back(ChatChunk::TextDelta { text: e.data.clone() });
//!         Ok(false)
//!     }
//!     fn end(&mut self, _out: &mut VecDeque<ChatChunk>) -> Result<()> { Ok(()) }
//! }
//! impl WireFormat for Lines {
//!     type Decoder = LineDecoder;
//!     fn path(&self) -> &str { "/generate" }
//!     fn decoder(&self) -> LineDecoder { LineDecoder }
//! }
//!
//! # async fn demo() -> Result<()> {
//! let settings = HttpSettings::new("lines", "http://127.0.0.1:9000").with_api_key_from_env("LINES_KEY");
//! let stream = settings.stream(&Lines, &serde_json::json!({"prompt": "hi"})).await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use serde_json::Value;

use crate::sse::{SseChunkStream, SseDecoder};
use crate::{ChatStream, ModelError, Result, RetryPolicy, parse_retry_after};

/// The default time allowed for a response to start, and the longest silence
/// between chunks after that.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Where the API key comes from.
#[derive(Clone)]
enum ApiKey {
    /// A key to send.
    Key(String),
    /// The provider's environment variable was not set: every call fails with
    /// [`ModelError::Auth`] naming it, until a key is given.
    MissingEnv(&'static str),
    /// The server needs no key (Ollama, most local servers).
    None,
}

/// The HTTP settings every provider shares: base URL, API key, retry policy,
/// timeout and HTTP client.
///
/// The key never appears in `Debug` output (`api_key: "<redacted>"`) nor in any
/// error [`stream`](Self::stream) returns: a server message that echoes it is
/// scrubbed, before the retry loop logs it too.
#[derive(Clone)]
pub struct HttpSettings {
    provider: &'static str,
    base_url: String,
    api_key: ApiKey,
    retry: RetryPolicy,
    timeout: Duration,
    client: reqwest::Client,
}

impl std::fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = match &self.api_key {
            ApiKey::Key(_) => "<redacted>".to_owned(),
            ApiKey::MissingEnv(var) => format!("<missing: {var}>"),
            ApiKey::None => "<none>".to_owned(),
        };
        f.debug_struct("HttpSettings")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("api_key", &key)
            .field("retry", &self.retry)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl HttpSettings {
    /// Settings for `provider` (a short name used in messages, e.g. `openai`) at
    /// `base_url`, with no key, [`RetryPolicy::default`], [`DEFAULT_TIMEOUT`] and a
    /// default HTTP client.
    pub fn new(provider: &'static str, base_url: impl Into<String>) -> Self {
        Self {
            provider,
            base_url: base_url.into(),
            api_key: ApiKey::None,
            retry: RetryPolicy::default(),
            timeout: DEFAULT_TIMEOUT,
            client: reqwest::Client::new(),
        }
    }

    /// Reads the key from the environment variable `var` now. When it is unset or
    /// blank, every call fails with [`ModelError::Auth`] naming `var` until
    /// [`with_api_key`](Self::with_api_key) is called.
    #[must_use]
    pub fn with_api_key_from_env(mut self, var: &'static str) -> Self {
        self.api_key = match std::env::var(var) {
            Ok(k) if !k.trim().is_empty() => ApiKey::Key(k.trim().to_owned()),
            _ => ApiKey::MissingEnv(var),
        };
        self
    }

    /// Uses the base URL in the environment variable `var` when it is set and not
    /// blank; keeps the current one otherwise.
    #[must_use]
    pub fn with_base_url_from_env(mut self, var: &str) -> Self {
        if let Some(url) = std::env::var(var).ok().filter(|v| !v.trim().is_empty()) {
            self.base_url = url.trim().to_owned();
        }
        self
    }

    /// Uses this API key.
    #[must_use]
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = ApiKey::Key(key.into());
        self
    }

    /// Sends no key (local servers).
    #[must_use]
    pub fn without_api_key(mut self) -> Self {
        self.api_key = ApiKey::None;
        self
    }

    /// Uses this base URL.
    #[must_use]
    pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// Retries failures before the first chunk with this policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The time allowed for each attempt to reach its first chunk, and the longest
    /// silence between chunks afterwards.
    #[must_use]
    pub fn with_timeout(mut self, d: Duration) -> Self {
        self.timeout = d;
        self
    }

    /// Uses this HTTP client (proxies, TLS settings, connection pools).
    #[must_use]
    pub fn with_http_client(mut self, client: reqwest::Client) -> Self {
        self.client = client;
        self
    }

    /// The provider's short name, as used in messages.
    pub fn provider(&self) -> &'static str {
        self.provider
    }

    /// The base URL requests go to.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The retry policy.
    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// The timeout (see [`with_timeout`](Self::with_timeout)).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether a key is configured, or none is needed.
    pub fn has_api_key(&self) -> bool {
        !matches!(self.api_key, ApiKey::MissingEnv(_))
    }

    /// The key to send: `Ok(None)` when none is needed.
    ///
    /// # Errors
    /// [`ModelError::Auth`] naming the environment variable when the key was to come
    /// from one that is not set.
    pub fn api_key(&self) -> Result<Option<&str>> {
        match &self.api_key {
            ApiKey::Key(k) => Ok(Some(k)),
            ApiKey::None => Ok(None),
            ApiKey::MissingEnv(var) => Err(ModelError::Auth {
                message: format!(
                    "{var} is not set: export it, or call .with_api_key(..) on the {} model",
                    self.provider
                ),
            }),
        }
    }

    /// `base_url` joined with `path` (one slash between them).
    pub fn endpoint(&self, path: &str) -> String {
        format!(
            "{}/{}",
            self.base_url.trim_end_matches('/'),
            path.trim_start_matches('/')
        )
    }

    /// `text` with the key replaced by `<redacted>`.
    pub fn redact(&self, text: String) -> String {
        match &self.api_key {
            ApiKey::Key(k) if k.len() >= 4 && text.contains(k.as_str()) => {
                text.replace(k.as_str(), "<redacted>")
            }
            _ => text,
        }
    }

    /// `e` with the key replaced by `<redacted>` in its message.
    pub fn redact_error(&self, e: ModelError) -> ModelError {
        match &self.api_key {
            ApiKey::Key(k) => e.redact(k),
            _ => e,
        }
    }

    /// Posts `body` to `wire`'s endpoint and returns the decoded chunk stream.
    ///
    /// Sending, the status check and the wait for the first chunk of output are
    /// retried per the [`RetryPolicy`], each attempt bounded by the timeout; after
    /// the first chunk, the timeout bounds every silence and nothing is retried.
    /// Every error, inside the stream too, has the key redacted.
    ///
    /// # Errors
    /// [`ModelError::Auth`] when the key is missing; otherwise the last attempt's
    /// error (HTTP statuses mapped by [`WireFormat::http_error`]).
    pub async fn stream<W: WireFormat>(&self, wire: &W, body: &Value) -> Result<ChatStream> {
        let key = self.api_key()?;
        let body =
            serde_json::to_vec(body).map_err(|e| ModelError::InvalidRequest(e.to_string()))?;
        let timeout = self.timeout;
        let stream = self
            .retry
            .run(|| async {
                // Redacted here, before the retry loop logs the error.
                match tokio::time::timeout(timeout, self.attempt(wire, key, &body)).await {
                    Ok(r) => r.map_err(|e| self.redact_error(e)),
                    Err(_) => Err(ModelError::Timeout(format!(
                        "no response from {} within {:.1}s",
                        self.provider,
                        timeout.as_secs_f64()
                    ))),
                }
            })
            .await?;
        let Some(key) = key.filter(|k| k.len() >= 4) else {
            return Ok(stream);
        };
        // Errors inside the stream may quote the server too: redact them as well.
        let key = key.to_owned();
        Ok(Box::pin(
            stream.map(move |item| item.map_err(|e| e.redact(&key))),
        ))
    }

    /// One attempt: send, check the status, wait for the first chunk.
    async fn attempt<W: WireFormat>(
        &self,
        wire: &W,
        key: Option<&str>,
        body: &[u8],
    ) -> Result<ChatStream> {
        let mut req = self
            .client
            .post(self.endpoint(wire.path()))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, wire.accept())
            .body(body.to_vec());
        if let Some(key) = key {
            req = wire.authorize(req, key);
        }
        req = wire.headers(req);
        let resp = req.send().await.map_err(net_error)?;
        let status = resp.status();
        if !status.is_success() {
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            let text = resp.text().await.unwrap_or_default();
            return Err(wire.http_error(status.as_u16(), &text, retry_after));
        }
        let body = wire.body_stream(resp.bytes_stream().map_err(net_error).boxed());
        let stream = SseChunkStream::new(body, wire.decoder())
            .with_idle_timeout(self.timeout)
            .ready()
            .await?;
        Ok(Box::pin(stream))
    }
}

/// A response body as it arrives: byte chunks, or the error that ended it.
pub type BodyStream = futures::stream::BoxStream<'static, Result<bytes::Bytes>>;

/// A provider's wire format, as far as the HTTP exchange needs it; the request
/// body is built by the provider and handed to [`HttpSettings::stream`].
pub trait WireFormat: Send + Sync {
    /// Decodes the provider's server-sent events into chunks.
    type Decoder: SseDecoder + Unpin + 'static;

    /// The path after the base URL, e.g. `/chat/completions`.
    fn path(&self) -> &str;

    /// A fresh decoder for one response.
    fn decoder(&self) -> Self::Decoder;

    /// Adds the key to a request (default: `Authorization: Bearer <key>`).
    fn authorize(&self, request: reqwest::RequestBuilder, key: &str) -> reqwest::RequestBuilder {
        request.bearer_auth(key)
    }

    /// Adds the provider's other headers (default: none).
    fn headers(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        request
    }

    /// The `accept` header of the request (default: `text/event-stream`).
    fn accept(&self) -> &str {
        "text/event-stream"
    }

    /// The response body as the server-sent events the decoder reads (default: as
    /// it came). A provider whose stream has another framing (e.g. AWS's binary
    /// event stream) turns each of its frames into an event here, and yields
    /// [`ModelError::MalformedStream`] for a frame it cannot read.
    fn body_stream(&self, body: BodyStream) -> BodyStream {
        body
    }

    /// Maps an error response to a [`ModelError`]. The default reads
    /// `{"error": {"message": ..}}`, `{"error": ".."}`, `{"message": ..}` or the
    /// text itself, and maps the status with [`ModelError::from_http_status`].
    fn http_error(&self, status: u16, body: &str, retry_after: Option<Duration>) -> ModelError {
        ModelError::from_http_status(status, error_message(status, body), retry_after)
    }
}

/// The message of an error response body: `error.message`, a string `error`, a
/// top-level `message`, or the first 200 characters of the body; `HTTP <status>`
/// when the body is empty.
pub fn error_message(status: u16, body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let from_json = parsed.as_ref().and_then(|v| {
        match v.get("error") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(e) => e.get("message").and_then(Value::as_str).map(str::to_owned),
            None => None,
        }
        .or_else(|| v.get("message").and_then(Value::as_str).map(str::to_owned))
    });
    let message = from_json.unwrap_or_else(|| preview(body.trim()));
    if message.trim().is_empty() {
        format!("HTTP {status}")
    } else {
        message
    }
}

/// The first 200 characters of `s`, with `…` when it was cut (for error messages).
pub fn preview(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

fn net_error(e: reqwest::Error) -> ModelError {
    let e = e.without_url();
    // reqwest's own text ("error sending request") leaves out why: add the causes.
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    if e.is_timeout() {
        ModelError::Timeout(text)
    } else if e.is_decode() || e.is_body() {
        ModelError::Network(format!("the response body broke off: {text}"))
    } else {
        ModelError::Network(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_key() {
        let s = HttpSettings::new("x", "http://h").with_api_key("sk-very-secret");
        let d = format!("{s:?}");
        assert!(!d.contains("sk-very-secret"), "{d}");
        assert!(d.contains("<redacted>"));
    }

    #[test]
    fn missing_env_key_is_an_auth_error_naming_the_variable() {
        let s = HttpSettings::new("demo", "http://h")
            .with_api_key_from_env("REINS_TEST_SURELY_UNSET_VARIABLE");
        assert!(!s.has_api_key());
        let e = s.api_key().unwrap_err();
        assert!(
            matches!(&e, ModelError::Auth { message } if message.contains("REINS_TEST_SURELY_UNSET_VARIABLE") && message.contains("demo")),
            "{e:?}"
        );
        assert_eq!(s.with_api_key("k").api_key().unwrap(), Some("k"));
    }

    #[test]
    fn endpoint_joins_with_one_slash() {
        let s = HttpSettings::new("x", "http://h/v1/");
        assert_eq!(
            s.endpoint("/chat/completions"),
            "http://h/v1/chat/completions"
        );
        assert_eq!(
            s.with_base_url("http://h/v1").endpoint("chat/completions"),
            "http://h/v1/chat/completions"
        );
    }

    #[test]
    fn redaction_replaces_the_key_only() {
        let s = HttpSettings::new("x", "http://h").with_api_key("sk-abcdef");
        assert_eq!(s.redact("bad key sk-abcdef!".into()), "bad key <redacted>!");
        let e = s.redact_error(ModelError::Network("sk-abcdef".into()));
        assert_eq!(e, ModelError::Network("<redacted>".into()));
    }

    #[test]
    fn error_messages_from_common_bodies() {
        assert_eq!(
            error_message(500, r#"{"error":{"message":"boom"}}"#),
            "boom"
        );
        assert_eq!(error_message(500, r#"{"error":"flat"}"#), "flat");
        assert_eq!(error_message(500, r#"{"message":"top"}"#), "top");
        assert_eq!(error_message(502, "Bad Gateway"), "Bad Gateway");
        assert_eq!(error_message(503, "  "), "HTTP 503");
        assert_eq!(preview(&"é".repeat(300)).chars().count(), 201);
    }
}
