//! Shared helpers: a local server that replays Chat Completions streams.
#![allow(dead_code)]

use std::time::Duration;

use futures::StreamExt;
use reins_model::{ChatChunk, ChatModel, ChatRequest, ModelError, RetryPolicy};
use reins_openai::OpenAiChat;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// An SSE body: one `data:` event per item, then `data: [DONE]` when `done`.
pub fn sse(events: &[&str], done: bool) -> String {
    let mut s = String::new();
    for e in events {
        s.push_str("data: ");
        s.push_str(e);
        s.push_str("\n\n");
    }
    if done {
        s.push_str("data: [DONE]\n\n");
    }
    s
}

/// A 200 response streaming `body`.
pub fn stream_response(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(body)
}

/// A JSON error response.
pub fn error_response(status: u16, body: &str) -> ResponseTemplate {
    ResponseTemplate::new(status)
        .insert_header("content-type", "application/json")
        .set_body_string(body.to_owned())
}

/// Mounts `response` for every POST to /v1/chat/completions.
pub async fn serve(server: &MockServer, response: ResponseTemplate) {
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(response)
        .mount(server)
        .await;
}

/// Mounts `first` for the first request only, then `then` for the rest.
pub async fn serve_once_then(server: &MockServer, first: ResponseTemplate, then: ResponseTemplate) {
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(first)
        .up_to_n_times(1)
        .with_priority(1)
        .mount(server)
        .await;
    serve(server, then).await;
}

/// A fast retry policy for tests: 3 attempts, 1 ms apart.
pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        max_elapsed: Duration::from_secs(30),
        jitter: 0.0,
    }
}

/// A model pointed at the test server, with a test key.
pub fn model(server: &MockServer) -> OpenAiChat {
    OpenAiChat::compatible(format!("{}/v1", server.uri()), "test-model")
        .with_api_key("sk-test-secret-key")
        .with_retry(fast_retry())
}

/// Every item of one streamed response.
pub async fn collect(
    model: &OpenAiChat,
    req: ChatRequest,
) -> Result<Vec<Result<ChatChunk, ModelError>>, ModelError> {
    Ok(model.stream(req).await?.collect().await)
}

/// How many requests the server received.
pub async fn requests(server: &MockServer) -> usize {
    server
        .received_requests()
        .await
        .map(|r| r.len())
        .unwrap_or(0)
}
