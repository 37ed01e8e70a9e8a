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
use reins_message::Msg;
use reins_model::{ChatChunk, ChatModel, ChatRequest, ModelError, RetryPolicy};
use reins_openai::OpenAiChat;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wiremock::MockServer;

fn hi() -> ChatRequest {
    ChatRequest::new(vec![Msg::user("hi")])
}

const TEXT_OK: &[&str] = &[
    r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"fine"},"finish_reason":null}]}"#,
    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
];

/// The start of a tool call, its arguments cut in the middle.
const TOOL_START: &[&str] = &[
    r#"{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"delete_file","arguments":""}}]},"finish_reason":null}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\": \"a."}}]},"finish_reason":null}]}"#,
];

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
    (format!("http://{addr}/v1"), count)
}

fn raw_model(base: &str) -> OpenAiChat {
    OpenAiChat::compatible(base, "test-model")
        .with_api_key("sk-test-secret-key")
        .with_retry(fast_retry())
}

// ----- rate limits and server errors ---------------------------------------------------

#[tokio::test]
async fn rate_limit_with_retry_after_is_honoured_then_succeeds() {
    let server = MockServer::start().await;
    let limited = error_response(
        429,
        r#"{"error":{"message":"slow down","type":"rate_limit"}}"#,
    )
    .insert_header("retry-after", "0");
    serve_once_then(&server, limited, stream_response(sse(TEXT_OK, true))).await;
    let done = model(&server).complete(hi()).await.unwrap();
    assert_eq!(done.message.text(), "fine");
    assert_eq!(requests(&server).await, 2);
}

#[tokio::test]
async fn rate_limit_without_retry_after_is_retried_until_the_policy_gives_up() {
    let server = MockServer::start().await;
    serve(
        &server,
        error_response(
            429,
            r#"{"error":{"message":"slow down","type":"rate_limit"}}"#,
        ),
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
        error_response(429, r#"{"error":{"message":"quota","type":"rate_limit"}}"#)
            .insert_header("retry-after", "120"),
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
async fn server_errors_500_502_503_are_retried_then_typed() {
    for status in [500u16, 502, 503] {
        let server = MockServer::start().await;
        serve(
            &server,
            error_response(status, r#"{"error":{"message":"upstream trouble"}}"#),
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
            error_response(status, "<html>bad gateway</html>"),
            stream_response(sse(TEXT_OK, true)),
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
    const BODY: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"},\"finish_reason\":null}]}\n\n";
    let (base, count) = raw_server(Raw::OutputThenReset(BODY)).await;
    let items: Vec<_> = raw_model(&base).stream(hi()).await.unwrap().collect().await;
    assert_eq!(
        items[0].as_ref().unwrap(),
        &ChatChunk::TextDelta {
            text: "partial".into()
        }
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
    serve(&server, stream_response(sse(TOOL_START, false))).await;
    let items = collect(&model(&server), hi()).await.unwrap();
    assert!(
        items
            .iter()
            .any(|i| matches!(i, Ok(ChatChunk::ToolCallStart { id, .. }) if id == "call_1"))
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
    const BODY: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"thinking about it\"},\"finish_reason\":null}]}\n\n";
    let (base, count) = raw_server(Raw::OutputThenSilence(BODY)).await;
    let model = raw_model(&base).with_timeout(Duration::from_millis(200));
    let items: Vec<_> = model.stream(hi()).await.unwrap().collect().await;
    assert!(matches!(items[0], Ok(ChatChunk::TextDelta { .. })));
    assert!(
        matches!(items.last().unwrap(), Err(ModelError::Timeout(_))),
        "{items:?}"
    );
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn malformed_sse_is_a_typed_error_and_not_retried() {
    let bodies = [
        "data: {this is not json\n\n".to_owned(),
        "data: [1,2,3]\n\n".to_owned(),
        format!(
            "data: {}\n\ndata: \u{0}\u{7f}garbage\n\n",
            TEXT_OK[0].replace("fine", "ok")
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
    let events = [
        TOOL_START[0],
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\": \"a.txt\", oops}"}}]},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
    ];
    serve(&server, stream_response(sse(&events, true))).await;
    let done = model(&server).complete(hi()).await.unwrap();
    let u = done.message.tool_uses().next().unwrap();
    assert_eq!(u.id, "call_1");
    assert_eq!(u.raw_input.as_deref(), Some(r#"{"path": "a.txt", oops}"#));
    assert_eq!(requests(&server).await, 1);
}

#[tokio::test]
async fn an_empty_response_is_a_malformed_stream_and_done_alone_is_an_empty_message() {
    let server = MockServer::start().await;
    serve(&server, stream_response(String::new())).await;
    let err = model(&server).stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::MalformedStream(_)), "{err:?}");
    assert_eq!(requests(&server).await, 1);

    // `data: [DONE]` with nothing before it: a complete, empty answer.
    let server = MockServer::start().await;
    serve(&server, stream_response(sse(&[], true))).await;
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
    let model = OpenAiChat::compatible(format!("http://127.0.0.1:{port}/v1"), "m")
        .with_api_key("sk-test-secret-key")
        .with_retry(RetryPolicy {
            max_attempts: 2,
            ..fast_retry()
        });
    let err = model.stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::Network(_)), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("sk-test-secret-key"));
}
