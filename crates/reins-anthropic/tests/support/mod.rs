//! Shared helpers: a local server that replays Messages API streams.
#![allow(dead_code)]

use std::time::Duration;

use futures::StreamExt;
use reins_anthropic::AnthropicChat;
use reins_model::{ChatChunk, ChatModel, ChatRequest, ModelError, RetryPolicy};
use serde_json::Value;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// An SSE body: each event as `event: <type>` + `data: <json>`.
pub fn sse(events: &[&str]) -> String {
    let mut s = String::new();
    for e in events {
        let kind = serde_json::from_str::<Value>(e)
            .ok()
            .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| "unknown".to_owned());
        s.push_str(&format!("event: {kind}\ndata: {e}\n\n"));
    }
    s
}

/// `message_start` with the given input tokens.
pub fn message_start(input_tokens: u64) -> String {
    format!(
        r#"{{"type":"message_start","message":{{"id":"msg_01","type":"message","role":"assistant","content":[],"model":"claude-test","stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{input_tokens},"cache_creation_input_tokens":0,"cache_read_input_tokens":5,"output_tokens":1}}}}}}"#
    )
}

/// `message_delta` with a stop reason and output tokens, then `message_stop`.
pub fn message_end(stop_reason: &str, output_tokens: u64) -> [String; 2] {
    [
        format!(
            r#"{{"type":"message_delta","delta":{{"stop_reason":"{stop_reason}","stop_sequence":null}},"usage":{{"output_tokens":{output_tokens}}}}}"#
        ),
        r#"{"type":"message_stop"}"#.to_owned(),
    ]
}

/// A 200 response streaming `body`.
pub fn stream_response(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(body)
}

/// A JSON error response in the Messages API's shape.
pub fn error_response(status: u16, kind: &str, message: &str) -> ResponseTemplate {
    let body = serde_json::json!({"type": "error", "error": {"type": kind, "message": message}});
    ResponseTemplate::new(status)
        .insert_header("content-type", "application/json")
        .set_body_string(body.to_string())
}

/// Mounts `response` for every POST to /v1/messages carrying the right headers.
pub async fn serve(server: &MockServer, response: ResponseTemplate) {
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", "sk-ant-test-secret"))
        .and(header("anthropic-version", "2023-06-01"))
        .respond_with(response)
        .mount(server)
        .await;
}

/// Mounts `first` for the first request only, then `then` for the rest.
pub async fn serve_once_then(server: &MockServer, first: ResponseTemplate, then: ResponseTemplate) {
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
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
pub fn model(server: &MockServer) -> AnthropicChat {
    AnthropicChat::new("claude-test")
        .with_base_url(server.uri())
        .with_api_key("sk-ant-test-secret")
        .with_retry(fast_retry())
}

/// Every item of one streamed response.
pub async fn collect(
    model: &AnthropicChat,
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
