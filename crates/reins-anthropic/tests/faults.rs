#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! Provider faults against a local server on 127.0.0.1: rate limits with and without
//! `Retry-After`, 5xx, connection resets, streams cut in the middle of a tool call,
//! streams that go silent, malformed SSE, invalid JSON in tool arguments and empty
//! responses. Each test counts the requests the server received: errors before the
//! first chunk are retried per the `RetryPolicy`, errors after it never are, and
//! each failure is a typed `ModelError`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use reins_anthropic::AnthropicChat;
use reins_message::Msg;
use reins_model::{ChatChunk, ChatModel, ChatRequest, ModelError, RetryPolicy};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wiremock::MockServer;

/// A response that started (a text block with "partial"), then nothing more.
const PARTIAL: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"c\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"partial\"}}\n\n";

fn hi() -> ChatRequest {
    ChatRequest::new(vec![Msg::user("hi")])
}

fn text_ok() -> String {
    let mut events = vec![
        message_start(3),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#
            .to_owned(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"fine"}}"#
            .to_owned(),
        r#"{"type":"content_block_stop","index":0}"#.to_owned(),
    ];
    events.extend(message_end("end_turn", 2));
    body(&events)
}

fn body(events: &[String]) -> String {
    sse(&events.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The start of a tool call, its arguments cut in the middle.
fn tool_start() -> Vec<String> {
    vec![
        message_start(3),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"delete_file","input":{}}}"#.to_owned(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"a."}}"#.to_owned(),
    ]
}

fn overloaded() -> &'static str {
    "overloaded_error"
}

// ----- a raw TCP server, for faults an HTTP mock cannot make ---------------------------

#[derive(Clone, Copy)]
enum Raw {
    /// Read the request, then reset the connection (RST).
    Reset,
    /// Send the response headers, then nothing, forever.
    HeadersThenSilence,
    /// Send the headers and this SSE text, then nothing, forever.
    OutputThenSilence(&'static str),
    /// Send the headers and this SSE text, then reset the connection.
    OutputThenReset(&'static str),
}

const HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

async fn read_request(sock: &mut TcpStream) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        let n = sock.read(&mut tmp).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return;
            }
        }
    }
}

fn chunk(data: &str) -> String {
    format!("{:x}\r\n{data}\r\n", data.len())
}

#[allow(deprecated)] // SO_LINGER 0 is exactly how to send a reset; the drop does not block.
fn reset(sock: TcpStream) {
    sock.set_linger(Some(Duration::ZERO)).unwrap();
    drop(sock);
}

/// Serves `kind` to every connection; returns the base URL and a request counter.
/// The server's tasks end with the test's runtime.
async fn raw_server(kind: Raw) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let c = c.clone();
            tokio::spawn(async move {
                read_request(&mut sock).await;
                c.fetch_add(1, Ordering::SeqCst);
                match kind {
                    Raw::Reset => reset(sock),
                    Raw::HeadersThenSilence => {
                        sock.write_all(HEAD.as_bytes()).await.unwrap();
                        std::future::pending::<()>().await;
                    }
                    Raw::OutputThenSilence(body) => {
                        sock.write_all(HEAD.as_bytes()).await.unwrap();
                        sock.write_all(chunk(body).as_bytes()).await.unwrap();
                        std::future::pending::<()>().await;
                    }
                    Raw::OutputThenReset(body) => {
                        sock.write_all(HEAD.as_bytes()).await.unwrap();
                        sock.write_all(chunk(body).as_bytes()).await.unwrap();
                        sock.flush().await.unwrap();
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        reset(sock);
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), count)
}

fn raw_model(base: &str) -> AnthropicChat {
    AnthropicChat::new("claude-test")
        .with_base_url(base)
        .with_api_key("sk-ant-test-secret")
        .with_retry(fast_retry())
}

// ----- rate limits and server errors ---------------------------------------------------

#[tokio::test]
async fn rate_limit_with_retry_after_is_honoured_then_succeeds() {
    let server = MockServer::start().await;
    let limited =
        error_response(429, "rate_limit_error", "slow down").insert_header("retry-after", "0");
    serve_once_then(&server, limited, stream_response(text_ok())).await;
    let done = model(&server).complete(hi()).await.unwrap();
    assert_eq!(done.message.text(), "fine");
    assert_eq!(requests(&server).await, 2);
}

#[tokio::test]
async fn rate_limit_without_retry_after_is_retried_until_the_policy_gives_up() {
    let server = MockServer::start().await;
    serve(
        &server,
        error_response(429, "rate_limit_error", "slow down"),
    )
    .await;
    let err = model(&server).stream(hi()).await.err().unwrap();
    assert!(
        matches!(&err, ModelError::RateLimited { retry_after: None, message } if message.contains("slow down")),
        "{err:?}"
    );
    assert_eq!(requests(&server).await, 3, "max_attempts = 3");
}

#[tokio::test]
async fn a_retry_after_beyond_the_budget_fails_at_once_and_says_how_long() {
    let server = MockServer::start().await;
    serve(
        &server,
        error_response(429, "rate_limit_error", "quota").insert_header("retry-after", "120"),
    )
    .await;
    let err = model(&server).stream(hi()).await.err().unwrap();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(120)), "{err:?}");
    assert_eq!(
        requests(&server).await,
        1,
        "waiting 120 s is past max_elapsed (30 s)"
    );
}

#[tokio::test]
async fn server_errors_500_502_503_529_are_retried_then_typed() {
    for status in [500u16, 502, 503, 529] {
        let server = MockServer::start().await;
        serve(
            &server,
            error_response(status, overloaded(), "upstream trouble"),
        )
        .await;
        let err = model(&server).stream(hi()).await.err().unwrap();
        assert!(
            matches!(&err, ModelError::Server { status: s, message } if *s == status && message.contains("upstream trouble")),
            "HTTP {status}: {err:?}"
        );
        assert_eq!(requests(&server).await, 3, "HTTP {status}");

        let server = MockServer::start().await;
        serve_once_then(
            &server,
            wiremock::ResponseTemplate::new(status).set_body_string("<html>bad gateway</html>"),
            stream_response(text_ok()),
        )
        .await;
        let done = model(&server).complete(hi()).await.unwrap();
        assert_eq!(done.message.text(), "fine", "HTTP {status} then 200");
        assert_eq!(requests(&server).await, 2);
    }
}

// ----- broken connections and streams ---------------------------------------------------

#[tokio::test]
async fn a_connection_reset_before_the_response_is_retried_then_a_network_error() {
    let (base, count) = raw_server(Raw::Reset).await;
    let err = raw_model(&base).stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::Network(_)), "{err:?}");
    assert_eq!(count.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_connection_reset_after_output_started_is_not_retried() {
    const BODY: &str = PARTIAL;
    let (base, count) = raw_server(Raw::OutputThenReset(BODY)).await;
    let items: Vec<_> = raw_model(&base).stream(hi()).await.unwrap().collect().await;
    assert!(
        items
            .iter()
            .any(|i| matches!(i, Ok(ChatChunk::TextDelta { text }) if text == "partial"))
    );
    assert!(
        matches!(
            items.last().unwrap(),
            Err(ModelError::Network(_) | ModelError::MalformedStream(_))
        ),
        "{items:?}"
    );
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_stream_that_stops_mid_tool_call_is_a_malformed_stream_not_a_call() {
    let server = MockServer::start().await;
    serve(&server, stream_response(body(&tool_start()))).await;
    let items = collect(&model(&server), hi()).await.unwrap();
    assert!(
        items
            .iter()
            .any(|i| matches!(i, Ok(ChatChunk::ToolCallStart { id, .. }) if id == "toolu_1"))
    );
    assert!(
        matches!(items.last().unwrap(), Err(ModelError::MalformedStream(m)) if m.contains("ended before")),
        "{items:?}"
    );
    // The whole-message helper refuses it too: no half-made tool call escapes.
    assert!(matches!(
        model(&server).complete(hi()).await,
        Err(ModelError::MalformedStream(_))
    ));
    assert_eq!(requests(&server).await, 2, "one request per call, no retry");
}

#[tokio::test]
async fn silence_before_any_output_times_out_and_is_retried() {
    let (base, count) = raw_server(Raw::HeadersThenSilence).await;
    let model = raw_model(&base).with_timeout(Duration::from_millis(200));
    let err = model.stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::Timeout(_)), "{err:?}");
    assert_eq!(count.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_stream_that_never_ends_times_out_once_silent_without_retry() {
    const BODY: &str = PARTIAL;
    let (base, count) = raw_server(Raw::OutputThenSilence(BODY)).await;
    let model = raw_model(&base).with_timeout(Duration::from_millis(200));
    let items: Vec<_> = model.stream(hi()).await.unwrap().collect().await;
    assert!(
        items
            .iter()
            .any(|i| matches!(i, Ok(ChatChunk::TextDelta { .. })))
    );
    assert!(
        matches!(items.last().unwrap(), Err(ModelError::Timeout(_))),
        "{items:?}"
    );
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn malformed_sse_is_a_typed_error_and_not_retried() {
    let bodies = [
        "event: message_start\ndata: {this is not json\n\n".to_owned(),
        "event: message_start\ndata: [1,2,3]\n\n".to_owned(),
        format!(
            "{}event: content_block_delta\ndata: \u{0}\u{7f}garbage\n\n",
            body(&[message_start(1)])
        ),
    ];
    for body in bodies {
        let server = MockServer::start().await;
        serve(&server, stream_response(body.clone())).await;
        let result = collect(&model(&server), hi()).await;
        let last = match result {
            Err(e) => e,
            Ok(items) => items.into_iter().last().unwrap().unwrap_err(),
        };
        assert!(
            matches!(last, ModelError::MalformedStream(_)),
            "{body:?}: {last:?}"
        );
        assert_eq!(requests(&server).await, 1, "{body:?}");
    }
}

#[tokio::test]
async fn invalid_json_tool_arguments_reach_the_caller_as_raw_input() {
    let server = MockServer::start().await;
    let mut events = tool_start();
    events[2] = r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"a.txt\", oops}"}}"#.to_owned();
    events.push(r#"{"type":"content_block_stop","index":0}"#.to_owned());
    events.extend(message_end("tool_use", 9));
    serve(&server, stream_response(body(&events))).await;
    let done = model(&server).complete(hi()).await.unwrap();
    let u = done.message.tool_uses().next().unwrap();
    assert_eq!(u.id, "toolu_1");
    assert_eq!(u.raw_input.as_deref(), Some(r#"{"path": "a.txt", oops}"#));
    assert_eq!(requests(&server).await, 1);
}

#[tokio::test]
async fn an_empty_response_is_a_malformed_stream_and_a_contentless_message_is_empty() {
    let server = MockServer::start().await;
    serve(&server, stream_response(String::new())).await;
    let err = model(&server).stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::MalformedStream(_)), "{err:?}");
    assert_eq!(requests(&server).await, 1);

    // A message that starts and stops with no content: a complete, empty answer.
    let server = MockServer::start().await;
    let mut events = vec![message_start(1)];
    events.extend(message_end("end_turn", 0));
    serve(&server, stream_response(body(&events))).await;
    let done = model(&server).complete(hi()).await.unwrap();
    assert!(done.message.content.is_empty());
}

#[tokio::test]
async fn an_unreachable_server_is_a_network_error_after_retries() {
    // Bind then drop: the port is (almost certainly) closed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let model = AnthropicChat::new("m")
        .with_base_url(format!("http://127.0.0.1:{port}"))
        .with_api_key("sk-ant-test-secret")
        .with_retry(RetryPolicy {
            max_attempts: 2,
            ..fast_retry()
        });
    let err = model.stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::Network(_)), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("sk-ant-test-secret"));
}
