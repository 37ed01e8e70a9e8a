//! [`ProviderFixture`]: a provider as the kit sees it, and [`ModelSetup`]: what the
//! kit asks its model to be built with.

use std::time::Duration;

use super::{Endpoint, Reply, TestServer, fast_retry};
use crate::{ChatModel, RetryPolicy};

/// How the kit asks for a model: the server's base URL, the key, and the retry
/// policy and timeout to build it with.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ModelSetup {
    /// The test server's base URL, `http://127.0.0.1:<port>` (no trailing slash);
    /// the provider adds any prefix of its own (e.g. `/v1`).
    pub base_url: String,
    /// The key to send: the fixture's [`API_KEY`](ProviderFixture::API_KEY).
    pub api_key: String,
    /// The retry policy to use ([`fast_retry`] unless a case says otherwise).
    pub retry: RetryPolicy,
    /// The provider's timeout: for the first chunk and for each silence after it.
    pub timeout: Duration,
}

impl ModelSetup {
    /// The default timeout: long enough for any loopback answer on a busy machine.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

    /// `base_url` and `api_key`, with [`fast_retry`] and
    /// [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT).
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: api_key.into(),
            retry: fast_retry(),
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }

    /// With this retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// With this timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// [`HttpSettings`](crate::http::HttpSettings) for `provider` with all of it:
    /// base URL, key, retry policy and timeout (feature `http`). A provider built
    /// on them takes these whole; one that wants a path prefix adds it with
    /// `with_base_url`.
    #[cfg(feature = "http")]
    pub fn http_settings(&self, provider: &'static str) -> crate::http::HttpSettings {
        crate::http::HttpSettings::new(provider, self.base_url.clone())
            .with_api_key(self.api_key.clone())
            .with_retry(self.retry.clone())
            .with_timeout(self.timeout)
    }
}

/// A provider as the kit sees it: where it sends requests, how to build its model
/// for a test server, and its wire format's fixtures (server-sent-event bodies and
/// error bodies, as recorded from the real API).
///
/// Bodies are whole event streams (build them with [`sse_data`](super::sse_data) or
/// [`sse_typed`](super::sse_typed)); the kit sends them with `200` and
/// `content-type: text/event-stream`.
pub trait ProviderFixture {
    /// The provider's model.
    type Model: ChatModel;

    /// The API key the model sends; no error may contain it.
    const API_KEY: &'static str;

    /// Where the model posts, with the headers it must send (its key among them).
    fn endpoint(&self) -> Endpoint;

    /// A model pointed at `setup.base_url`, sending `setup.api_key`, using
    /// `setup.retry` and `setup.timeout` (with the `http` feature,
    /// `ModelSetup::http_settings` gives all four at once).
    fn model(&self, setup: &ModelSetup) -> Self::Model;

    /// The body of an error response with this status and message, in the API's
    /// shape (the provider must read `message` out of it).
    fn error_body(&self, status: u16, message: &str) -> String;

    /// A complete answer whose text is `text`.
    fn text_answer(&self, text: &str) -> String;

    /// An answer that has begun with the text `text` and has not ended: the
    /// stream yields `text` as one text delta, after usage reports at most.
    fn text_begun(&self, text: &str) -> String;

    /// An answer that began a call of tool `name` (call id `id`) and stopped after
    /// the first part of its `arguments`; the provider reports it as
    /// [`ModelError::MalformedStream`](crate::ModelError::MalformedStream) saying
    /// the stream "ended before" it finished.
    fn tool_call_begun(&self, id: &str, name: &str, arguments: &str) -> String;

    /// A complete answer calling tool `name` (call id `id`) with the argument text
    /// `arguments`, verbatim (the kit sends text that is not valid JSON).
    fn tool_call_answer(&self, id: &str, name: &str, arguments: &str) -> String;

    /// A complete answer with no content at all.
    fn empty_answer(&self) -> String;

    /// Bodies the provider cannot understand (an event that is not JSON, or JSON of
    /// the wrong shape, after valid events or before any): each must end in
    /// [`ModelError::MalformedStream`](crate::ModelError::MalformedStream), without
    /// a retry.
    fn malformed_bodies(&self) -> Vec<String>;

    /// The `200` response carrying one of this fixture's bodies (default:
    /// [`Reply::sse`]). A provider whose stream is not text (AWS's binary event
    /// stream) writes its bodies in a text form and turns them into bytes here.
    fn stream_reply(&self, body: impl Into<String>) -> Reply {
        Reply::sse(body)
    }

    /// The 5xx statuses the API documents as retryable (default 500, 502, 503).
    fn server_error_statuses(&self) -> Vec<u16> {
        vec![500, 502, 503]
    }

    /// A [`TestServer`] for the provider's [`endpoint`](Self::endpoint).
    ///
    /// # Panics
    /// Outside a Tokio runtime (see [`TestServer::start`]).
    fn server(&self) -> TestServer {
        TestServer::start(self.endpoint())
    }

    /// A [`server`](Self::server) answering every request with `reply`.
    ///
    /// # Panics
    /// Outside a Tokio runtime (see [`TestServer::start`]).
    fn serve(&self, reply: Reply) -> TestServer {
        let server = self.server();
        server.reply(reply);
        server
    }

    /// The [`ModelSetup`] for `server`: its URL, [`API_KEY`](Self::API_KEY), and
    /// [`ModelSetup::new`]'s retry policy and timeout.
    fn setup(&self, server: &TestServer) -> ModelSetup {
        ModelSetup::new(server.url(), Self::API_KEY)
    }

    /// A model pointed at `server` (built from [`setup`](Self::setup)).
    fn model_at(&self, server: &TestServer) -> Self::Model {
        self.model(&self.setup(server))
    }
}
