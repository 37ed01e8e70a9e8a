//! The shared provider suite: one async function per case, each taking a
//! [`ProviderFixture`]. [`provider_conformance_tests!`](crate::provider_conformance_tests)
//! turns them all into `#[test]`s; a test may also call one directly.
//!
//! Each case starts its own [`TestServer`] and counts the requests it received:
//! failures before the first chunk of output are retried per the
//! [`RetryPolicy`] (the kit's [`fast_retry`]: 3 attempts), failures after it never
//! are, and every failure is the typed [`ModelError`] the provider contract names
//! (see docs/providers.md, "Errors").

// A failed check panics, as `assert!` does: that is how a test reports it.
#![allow(clippy::panic)]

use std::time::Duration;

use super::checks::{hi, ok};
use super::{
    ModelSetup, ProviderFixture, Reply, TestServer, collect, error_for, fast_retry, stream_error,
};
use crate::{ChatChunk, ChatModel, ModelError, RetryPolicy};

/// A 429 with `Retry-After: 0`, then an answer: the wait is honoured, the retry
/// succeeds (2 requests).
pub async fn rate_limit_with_retry_after_is_honoured_then_succeeds<P: ProviderFixture>(
    provider: &P,
) {
    let server = provider.serve(provider.stream_reply(provider.text_answer("fine")));
    server.reply_once(
        Reply::json(429, provider.error_body(429, "slow down")).with_header("retry-after", "0"),
    );
    let done = ok(provider.model_at(&server).complete(hi()).await);
    assert_eq!(done.message.text(), "fine");
    assert_eq!(server.request_count(), 2);
}

/// 429s without `Retry-After`: retried until the policy gives up (3 requests),
/// then `RateLimited` with no wait and the server's message.
pub async fn rate_limit_without_retry_after_is_retried_until_the_policy_gives_up<
    P: ProviderFixture,
>(
    provider: &P,
) {
    let (e, requests) = error_for(
        provider,
        Reply::json(429, provider.error_body(429, "slow down")),
    )
    .await;
    assert!(
        matches!(&e, ModelError::RateLimited { retry_after: None, message } if message.contains("slow down")),
        "{e:?}"
    );
    assert_eq!(requests, 3, "max_attempts = 3");
}

/// A 429 asking to wait longer than the policy allows: no retry (1 request), and
/// the error says how long.
pub async fn a_retry_after_beyond_the_budget_fails_at_once_and_says_how_long<P: ProviderFixture>(
    provider: &P,
) {
    let reply =
        Reply::json(429, provider.error_body(429, "quota")).with_header("retry-after", "120");
    let (e, requests) = error_for(provider, reply).await;
    assert_eq!(e.retry_after(), Some(Duration::from_secs(120)), "{e:?}");
    assert_eq!(requests, 1, "waiting 120 s is past max_elapsed (30 s)");
}

/// Each of [`ProviderFixture::server_error_statuses`]: retried until the policy
/// gives up, then `Server` with the status and message; once, then an answer:
/// the retry succeeds (an HTML body does not confuse it).
pub async fn server_errors_are_retried_then_typed<P: ProviderFixture>(provider: &P) {
    for status in provider.server_error_statuses() {
        let reply = Reply::json(status, provider.error_body(status, "upstream trouble"));
        let (e, requests) = error_for(provider, reply).await;
        assert!(
            matches!(&e, ModelError::Server { status: s, message } if *s == status && message.contains("upstream trouble")),
            "HTTP {status}: {e:?}"
        );
        assert_eq!(requests, 3, "HTTP {status}");

        let server = provider.serve(provider.stream_reply(provider.text_answer("fine")));
        server.reply_once(
            Reply::new(status)
                .with_header("content-type", "text/html")
                .with_body("<html>bad gateway</html>"),
        );
        let done = ok(provider.model_at(&server).complete(hi()).await);
        assert_eq!(done.message.text(), "fine", "HTTP {status} then 200");
        assert_eq!(server.request_count(), 2);
    }
}

/// A connection reset before any response: retried (3 requests), then `Network`.
pub async fn a_connection_reset_before_the_response_is_retried_then_a_network_error<
    P: ProviderFixture,
>(
    provider: &P,
) {
    let (e, requests) = error_for(provider, Reply::reset()).await;
    assert!(matches!(e, ModelError::Network(_)), "{e:?}");
    assert_eq!(requests, 3);
}

/// Asserts that the first item that is not a usage report is the text delta
/// `text`.
fn assert_first_output_is_text(items: &[crate::Result<ChatChunk>], text: Option<&str>) {
    let first = items.iter().find(|i| !matches!(i, Ok(ChatChunk::Usage(_))));
    let is_text = match (first, text) {
        (Some(Ok(ChatChunk::TextDelta { text: got })), Some(want)) => got == want,
        (Some(Ok(ChatChunk::TextDelta { .. })), None) => true,
        _ => false,
    };
    assert!(is_text, "first output should be text {text:?}: {items:?}");
}

/// A stream reset after its first text: the text arrives, then `Network` or
/// `MalformedStream`, with no retry (1 request).
pub async fn a_connection_reset_after_output_started_is_not_retried<P: ProviderFixture>(
    provider: &P,
) {
    let server = provider.serve(
        provider
            .stream_reply(provider.text_begun("partial"))
            .then_reset(),
    );
    let items = ok(collect(&provider.model_at(&server), hi()).await);
    assert_first_output_is_text(&items, Some("partial"));
    assert!(
        matches!(
            items.last(),
            Some(Err(ModelError::Network(_) | ModelError::MalformedStream(_)))
        ),
        "{items:?}"
    );
    assert_eq!(server.request_count(), 1);
}

/// A body that ends in the middle of a tool call's arguments: the call's start
/// arrives, then `MalformedStream` ("ended before"); `complete` refuses it too (no
/// half-made call escapes); nothing is retried (1 request per call).
pub async fn a_stream_that_stops_mid_tool_call_is_a_malformed_stream_not_a_call<
    P: ProviderFixture,
>(
    provider: &P,
) {
    let body = provider.tool_call_begun("call_1", "delete_file", r#"{"path": "a."#);
    let server = provider.serve(provider.stream_reply(body));
    let items = ok(collect(&provider.model_at(&server), hi()).await);
    assert!(
        items
            .iter()
            .any(|i| matches!(i, Ok(ChatChunk::ToolCallStart { id, .. }) if id == "call_1")),
        "{items:?}"
    );
    assert!(
        matches!(items.last(), Some(Err(ModelError::MalformedStream(m))) if m.contains("ended before")),
        "{items:?}"
    );
    // The whole-message helper refuses it too: no half-made tool call escapes.
    let whole = provider.model_at(&server).complete(hi()).await;
    assert!(
        matches!(whole, Err(ModelError::MalformedStream(_))),
        "{whole:?}"
    );
    assert_eq!(server.request_count(), 2, "one request per call, no retry");
}

/// The model for `server` with a 200 ms timeout.
fn impatient<P: ProviderFixture>(provider: &P, server: &TestServer) -> P::Model {
    provider.model(
        &provider
            .setup(server)
            .with_timeout(Duration::from_millis(200)),
    )
}

/// Headers, then silence: each attempt times out and is retried (3 requests),
/// then `Timeout`.
pub async fn silence_before_any_output_times_out_and_is_retried<P: ProviderFixture>(provider: &P) {
    let server = provider.serve(provider.stream_reply("").then_silence());
    let e = stream_error(&impatient(provider, &server)).await;
    assert!(matches!(e, ModelError::Timeout(_)), "{e:?}");
    assert_eq!(server.request_count(), 3);
}

/// Text, then silence: the text arrives, then `Timeout` once the silence passes
/// the timeout, with no retry (1 request).
pub async fn a_stream_that_never_ends_times_out_once_silent_without_retry<P: ProviderFixture>(
    provider: &P,
) {
    let server = provider.serve(
        provider
            .stream_reply(provider.text_begun("thinking about it"))
            .then_silence(),
    );
    let items = ok(collect(&impatient(provider, &server), hi()).await);
    assert_first_output_is_text(&items, None);
    assert!(
        matches!(items.last(), Some(Err(ModelError::Timeout(_)))),
        "{items:?}"
    );
    assert_eq!(server.request_count(), 1);
}

/// Each of [`ProviderFixture::malformed_bodies`]: `MalformedStream` (from
/// `stream` or inside the stream), with no retry (1 request).
pub async fn malformed_sse_is_a_typed_error_and_not_retried<P: ProviderFixture>(provider: &P) {
    for body in provider.malformed_bodies() {
        let server = provider.serve(provider.stream_reply(body.clone()));
        let last = match collect(&provider.model_at(&server), hi()).await {
            Err(e) => e,
            Ok(items) => match items.into_iter().last() {
                Some(Err(e)) => e,
                other => panic!("{body:?}: the stream should end in an error, got {other:?}"),
            },
        };
        assert!(
            matches!(last, ModelError::MalformedStream(_)),
            "{body:?}: {last:?}"
        );
        assert_eq!(server.request_count(), 1, "{body:?}");
    }
}

/// A tool call whose arguments are not JSON: the call reaches the caller with
/// the text as `raw_input` (1 request).
pub async fn invalid_json_tool_arguments_reach_the_caller_as_raw_input<P: ProviderFixture>(
    provider: &P,
) {
    let raw = r#"{"path": "a.txt", oops}"#;
    let server = provider.serve(provider.stream_reply(provider.tool_call_answer(
        "call_1",
        "delete_file",
        raw,
    )));
    let done = ok(provider.model_at(&server).complete(hi()).await);
    let Some(call) = done.message.tool_uses().next() else {
        panic!("no tool call in {:?}", done.message);
    };
    assert_eq!(call.id, "call_1");
    assert_eq!(call.raw_input.as_deref(), Some(raw));
    assert_eq!(server.request_count(), 1);
}

/// An empty 200 body: `MalformedStream`, not retried (1 request); a complete
/// answer with no content: an empty message, not an error.
pub async fn an_empty_response_is_a_malformed_stream_and_an_empty_answer_is_empty<
    P: ProviderFixture,
>(
    provider: &P,
) {
    let (e, requests) = error_for(provider, provider.stream_reply("")).await;
    assert!(matches!(e, ModelError::MalformedStream(_)), "{e:?}");
    assert_eq!(requests, 1);

    let server = provider.serve(provider.stream_reply(provider.empty_answer()));
    let done = ok(provider.model_at(&server).complete(hi()).await);
    assert!(done.message.content.is_empty(), "{:?}", done.message);
}

/// A closed port: `Network` after the retries, and the key in no error text.
pub async fn an_unreachable_server_is_a_network_error_after_retries<P: ProviderFixture>(
    provider: &P,
) {
    // Bind then drop: the port is (almost certainly) closed.
    let port = ok(std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr())).port();
    let setup =
        ModelSetup::new(format!("http://127.0.0.1:{port}"), P::API_KEY).with_retry(RetryPolicy {
            max_attempts: 2,
            ..fast_retry()
        });
    let e = stream_error(&provider.model(&setup)).await;
    assert!(matches!(e, ModelError::Network(_)), "{e:?}");
    assert!(
        !format!("{e} {e:?}").contains(P::API_KEY),
        "the key leaked into {e:?}"
    );
}

/// Writes the conformance suite for a provider: one `#[test]` per case of
/// [`reins_model::testing::conformance`](crate::testing::conformance), named after
/// it, each on its own Tokio runtime. `$provider` is an expression for a
/// [`ProviderFixture`](crate::testing::ProviderFixture), evaluated once per test.
///
/// Invoke it once per module (a second provider's suite goes in a `mod` of its
/// own), at the top level of an integration test, e.g. in `tests/faults.rs`:
/// `reins_model::provider_conformance_tests!(support::OpenAi);`. The
/// [`testing`](crate::testing) module shows a fixture; reins-model's
/// `tests/conformance.rs` runs the suite on a whole provider.
#[macro_export]
macro_rules! provider_conformance_tests {
    ($provider:expr) => {
        $crate::provider_conformance_tests!(@cases $provider;
            rate_limit_with_retry_after_is_honoured_then_succeeds,
            rate_limit_without_retry_after_is_retried_until_the_policy_gives_up,
            a_retry_after_beyond_the_budget_fails_at_once_and_says_how_long,
            server_errors_are_retried_then_typed,
            a_connection_reset_before_the_response_is_retried_then_a_network_error,
            a_connection_reset_after_output_started_is_not_retried,
            a_stream_that_stops_mid_tool_call_is_a_malformed_stream_not_a_call,
            silence_before_any_output_times_out_and_is_retried,
            a_stream_that_never_ends_times_out_once_silent_without_retry,
            malformed_sse_is_a_typed_error_and_not_retried,
            invalid_json_tool_arguments_reach_the_caller_as_raw_input,
            an_empty_response_is_a_malformed_stream_and_an_empty_answer_is_empty,
            an_unreachable_server_is_a_network_error_after_retries,
        );
    };
    (@cases $provider:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::testing::block_on($crate::testing::conformance::$case(&$provider));
            }
        )*
    };
}
