//! The provider conformance kit (feature `testing`): what a provider crate needs to
//! test its [`ChatModel`] against real HTTP without a network.
//!
//! - [`TestServer`]: an HTTP/1.1 server on 127.0.0.1 that answers with scripted
//!   [`Reply`]s — responses, and faults a mock library cannot make (connection
//!   resets, streams that go silent or break off) — records every
//!   [`ReceivedRequest`] for assertions and insta snapshots, and stops when dropped.
//! - [`sse_data`] and [`sse_typed`]: server-sent-event bodies from recorded events.
//! - [`ProviderFixture`]: a provider as the kit sees it — how to build its model for
//!   a base URL ([`ModelSetup`]), and its wire format's fixtures (an answer, a
//!   cut-off tool call, an error body, …). With one,
//!   [`provider_conformance_tests!`](crate::provider_conformance_tests) writes the
//!   shared suite ([`conformance`]: rate limits, 5xx, resets, silence, malformed
//!   streams, retries counted at the server).
//! - [`histories`]: random human-in-the-loop histories for property tests.
//! - Checks for a provider's own tests: [`sent_body`] (the request body to snapshot),
//!   [`error_for`] (what a reply turns into, and after how many attempts),
//!   [`stream_error`], [`expect_text_answer`], [`expect_empty_answer`], [`assert_key_from_env`],
//!   [`assert_key_redacted`], and request fixtures ([`sample_conversation`],
//!   [`unparsed_call_round_trip`], [`weather_and_delete_tools`],
//!   [`picture_question`]).
//!
//! `reins-openai` and `reins-anthropic` test themselves this way. A third provider
//! gets the same suite by writing its fixture. This is the fixture of the made-up
//! "lines" API (one JSON object per `data:` event); reins-model's own
//! `tests/conformance.rs` compiles and runs exactly this, with the `LinesChat` model
//! written in full on `http::HttpSettings` (feature `http`):
//!
//! ```rust,ignore
//! // tests/faults.rs of a provider crate, with
//! // `reins-model = { features = ["testing"] }` among its dev-dependencies.
//! use reins_model::testing::{Endpoint, ModelSetup, ProviderFixture, sse_data};
//! use serde_json::json;
//!
//! const KEY: &str = "sk-lines-test-secret";
//!
//! fn text(t: &str) -> String {
//!     json!({ "text": t }).to_string()
//! }
//! fn call(id: &str, name: &str) -> String {
//!     json!({"call": {"id": id, "name": name}}).to_string()
//! }
//! fn args(a: &str) -> String {
//!     json!({ "args": a }).to_string()
//! }
//!
//! struct Lines;
//!
//! impl ProviderFixture for Lines {
//!     type Model = LinesChat;
//!     const API_KEY: &'static str = KEY;
//!     fn endpoint(&self) -> Endpoint {
//!         Endpoint::post("/generate").with_header("authorization", format!("Bearer {KEY}"))
//!     }
//!     fn model(&self, setup: &ModelSetup) -> LinesChat {
//!         LinesChat::from_settings(setup.http_settings("lines"), "lines-1")
//!     }
//!     fn error_body(&self, _status: u16, message: &str) -> String {
//!         json!({ "error": message }).to_string()
//!     }
//!     fn text_answer(&self, t: &str) -> String {
//!         sse_data(&[
//!             r#"{"usage":{"input":3}}"#.to_owned(),
//!             text(t),
//!             r#"{"finish":"stop"}"#.to_owned(),
//!         ])
//!     }
//!     fn text_begun(&self, t: &str) -> String {
//!         sse_data(&[r#"{"usage":{"input":3}}"#.to_owned(), text(t)])
//!     }
//!     fn tool_call_begun(&self, id: &str, name: &str, arguments: &str) -> String {
//!         sse_data(&[call(id, name), args(arguments)])
//!     }
//!     fn tool_call_answer(&self, id: &str, name: &str, arguments: &str) -> String {
//!         sse_data(&[
//!             call(id, name),
//!             args(arguments),
//!             r#"{"finish":"tool_use"}"#.to_owned(),
//!         ])
//!     }
//!     fn empty_answer(&self) -> String {
//!         sse_data(&[r#"{"finish":"stop"}"#])
//!     }
//!     fn malformed_bodies(&self) -> Vec<String> {
//!         vec![
//!             sse_data(&["{not json"]),
//!             sse_data(&["[1,2,3]"]),
//!             sse_data(&[text("ok"), "\u{0}garbage".to_owned()]),
//!         ]
//!     }
//! }
//!
//! // One `#[test]` per case of `reins_model::testing::conformance`.
//! reins_model::provider_conformance_tests!(Lines);
//! ```

mod checks;
pub mod conformance;
mod fixture;
pub mod histories;
pub mod rules;
mod rules_bedrock;
mod server;

use std::time::Duration;

use futures::StreamExt;

pub use checks::{
    assert_key_from_env, assert_key_redacted, error_for, expect_empty_answer, expect_text_answer,
    picture_question, sample_conversation, sent_body, stream_error, unparsed_call_round_trip,
    weather_and_delete_tools,
};
pub use fixture::{ModelSetup, ProviderFixture};
pub use server::{Endpoint, ReceivedRequest, Reply, TestServer};

use crate::{ChatChunk, ChatModel, ChatRequest, Result, RetryPolicy};

/// A retry policy for tests: 3 attempts, 1 ms apart (at most 5 ms), no jitter,
/// giving up on waits past 30 s.
pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        max_elapsed: Duration::from_secs(30),
        jitter: 0.0,
    }
}

/// Every item of one streamed response, errors included.
///
/// # Errors
/// The error [`ChatModel::stream`] returns before the stream starts.
pub async fn collect<M: ChatModel + ?Sized>(
    model: &M,
    request: ChatRequest,
) -> Result<Vec<Result<ChatChunk>>> {
    Ok(model.stream(request).await?.collect().await)
}

/// An event-stream body with one `data:` event per item, as OpenAI-style APIs
/// send (an item with line breaks becomes one `data:` line per line).
///
/// ```
/// assert_eq!(reins_model::testing::sse_data(&["{}", "[DONE]"]), "data: {}\n\ndata: [DONE]\n\n");
/// ```
pub fn sse_data(events: &[impl AsRef<str>]) -> String {
    let mut body = String::new();
    for event in events {
        push_data(&mut body, event.as_ref());
    }
    body
}

/// An event-stream body with one event per JSON item, each named after the item's
/// `type` field (`unknown` when it has none, or is not JSON), as the Anthropic
/// Messages API sends.
///
/// ```
/// let body = reins_model::testing::sse_typed(&[r#"{"type":"ping"}"#]);
/// assert_eq!(body, "event: ping\ndata: {\"type\":\"ping\"}\n\n");
/// ```
pub fn sse_typed(events: &[impl AsRef<str>]) -> String {
    let mut body = String::new();
    for event in events {
        let event = event.as_ref();
        let kind = serde_json::from_str::<serde_json::Value>(event)
            .ok()
            .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
            .unwrap_or_else(|| "unknown".to_owned());
        body.push_str("event: ");
        body.push_str(&kind);
        body.push('\n');
        push_data(&mut body, event);
    }
    body
}

fn push_data(body: &mut String, data: &str) {
    for line in data.split('\n') {
        body.push_str("data: ");
        body.push_str(line);
        body.push('\n');
    }
    body.push('\n');
}

/// Runs `future` to its end on a fresh current-thread Tokio runtime with I/O and
/// timers (what `#[tokio::test]` gives); [`provider_conformance_tests!`](crate::provider_conformance_tests)
/// runs each case with it.
///
/// # Panics
/// When the runtime cannot be built.
#[allow(clippy::expect_used)] // a test that cannot get a runtime cannot run
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("build a Tokio runtime for a conformance test")
        .block_on(future)
}
