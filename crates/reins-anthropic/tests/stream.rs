#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! Streams replayed from a local server: text, tool calls, thinking, usage,
//! failures and retries.

mod support;

use std::time::Duration;

use reins_anthropic::AnthropicChat;
use reins_message::{ContentBlock, Msg, Usage};
use reins_model::testing::{
    ProviderFixture, Reply, assert_key_from_env, assert_key_redacted, collect, error_for,
    expect_text_answer, stream_error,
};
use reins_model::{ChatChunk, ChatModel, ChatRequest, FinishReason, ModelError, RetryPolicy};
use serde_json::json;
use support::*;

fn hi() -> ChatRequest {
    ChatRequest::new(vec![Msg::user("hi")])
}

fn text_events() -> Vec<String> {
    let mut v = vec![
        message_start(25),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#
            .into(),
        r#"{"type": "ping"}"#.into(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#
            .into(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"!"}}"#
            .into(),
        r#"{"type":"content_block_stop","index":0}"#.into(),
    ];
    v.extend(message_end("end_turn", 15));
    v
}

#[tokio::test]
async fn plain_text_with_usage() {
    let server = Anthropic.serve(Reply::sse(sse(&text_events())));
    let usage = Usage {
        input_tokens: 25,
        output_tokens: 15,
        cache_read_tokens: 5,
        ..Usage::default()
    };
    expect_text_answer(&model(&server), "Hello!", usage).await;
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn one_tool_call_after_text() {
    let mut events = vec![
        message_start(10),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.into(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me check."}}"#.into(),
        r#"{"type":"content_block_stop","index":0}"#.into(),
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01A","name":"get_weather","input":{}}}"#.into(),
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#.into(),
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San"}}"#.into(),
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" Francisco\"}"}}"#.into(),
        r#"{"type":"content_block_stop","index":1}"#.into(),
    ];
    events.extend(message_end("tool_use", 40));
    let server = Anthropic.serve(Reply::sse(sse(&events)));
    let done = model(&server).complete(hi()).await.unwrap();
    assert_eq!(done.message.text(), "Let me check.");
    let uses: Vec<_> = done.message.tool_uses().collect();
    assert_eq!(uses.len(), 1);
    assert_eq!(uses[0].id, "toolu_01A");
    assert_eq!(uses[0].input, json!({"location": "San Francisco"}));
    assert_eq!(done.finish_reason, Some(FinishReason::ToolUse));
}

#[tokio::test]
async fn two_tool_calls_and_a_tool_without_arguments() {
    let mut events = vec![
        message_start(10),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"weather","input":{}}}"#.into(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\":\"Oslo\"}"}}"#.into(),
        r#"{"type":"content_block_stop","index":0}"#.into(),
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_2","name":"now","input":{}}}"#.into(),
        r#"{"type":"content_block_stop","index":1}"#.into(),
    ];
    events.extend(message_end("tool_use", 20));
    let server = Anthropic.serve(Reply::sse(sse(&events)));
    let done = model(&server).complete(hi()).await.unwrap();
    let uses: Vec<_> = done.message.tool_uses().collect();
    assert_eq!(
        (uses[0].id.as_str(), &uses[0].input),
        ("toolu_1", &json!({"city": "Oslo"}))
    );
    assert_eq!(
        (uses[1].id.as_str(), &uses[1].input),
        ("toolu_2", &json!({}))
    );
}

#[tokio::test]
async fn thinking_with_its_signature() {
    let mut events = vec![
        message_start(10),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#.into(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user says hi. "}}"#.into(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Greet back."}}"#.into(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}"#.into(),
        r#"{"type":"content_block_stop","index":0}"#.into(),
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#.into(),
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi!"}}"#.into(),
        r#"{"type":"content_block_stop","index":1}"#.into(),
    ];
    events.extend(message_end("end_turn", 30));
    let server = Anthropic.serve(Reply::sse(sse(&events)));
    let done = model(&server).complete(hi()).await.unwrap();
    assert_eq!(
        done.message.content,
        vec![
            ContentBlock::Thinking {
                thinking: "The user says hi. Greet back.".into(),
                signature: Some("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds".into())
            },
            ContentBlock::text("Hi!"),
        ]
    );
}

type Check = fn(&ModelError) -> bool;

#[tokio::test]
async fn http_errors_map_to_typed_errors_with_the_provider_message() {
    let cases: Vec<(u16, &str, &str, Check)> = vec![
        (
            401,
            "authentication_error",
            "invalid x-api-key",
            |e| matches!(e, ModelError::Auth { message } if message == "invalid x-api-key"),
        ),
        (403, "permission_error", "no access", |e| {
            matches!(e, ModelError::Auth { .. })
        }),
        (
            400,
            "invalid_request_error",
            "prompt is too long: 210000 tokens > 200000 maximum",
            |e| matches!(e, ModelError::ContextTooLong { message } if message.contains("210000")),
        ),
        (
            400,
            "invalid_request_error",
            "messages: roles must alternate",
            |e| matches!(e, ModelError::BadRequest { status: 400, message } if message.contains("alternate")),
        ),
        (404, "not_found_error", "model: claude-nope", |e| {
            matches!(e, ModelError::BadRequest { status: 404, .. })
        }),
    ];
    for (status, kind, message, check) in cases {
        let (err, requests) = error_for(&Anthropic, error_response(status, kind, message)).await;
        assert!(check(&err), "HTTP {status}: got {err:?}");
        assert_eq!(requests, 1, "HTTP {status} must not be retried");
    }
}

#[tokio::test]
async fn rate_limit_with_retry_after_then_success() {
    let server = Anthropic.serve(Reply::sse(sse(&text_events())));
    server.reply_once(
        error_response(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
        )
        .with_header("retry-after", "0"),
    );
    assert_eq!(
        model(&server).complete(hi()).await.unwrap().message.text(),
        "Hello!"
    );
    assert_eq!(server.request_count(), 2);

    let server = Anthropic.serve(
        error_response(429, "rate_limit_error", "slow down").with_header("retry-after", "12"),
    );
    let err = stream_error(&model(&server).with_retry(RetryPolicy::none())).await;
    assert_eq!(
        err,
        ModelError::RateLimited {
            retry_after: Some(Duration::from_secs(12)),
            message: "slow down".into()
        }
    );
}

#[tokio::test]
async fn overloaded_then_success_and_server_errors_until_giving_up() {
    let server = Anthropic.serve(Reply::sse(sse(&text_events())));
    server.reply_once(error_response(529, "overloaded_error", "Overloaded"));
    assert_eq!(
        model(&server).complete(hi()).await.unwrap().message.text(),
        "Hello!"
    );
    assert_eq!(server.request_count(), 2);

    let server = Anthropic.serve(error_response(500, "api_error", "Internal server error"));
    let err = stream_error(&model(&server)).await;
    assert_eq!(
        err,
        ModelError::Server {
            status: 500,
            message: "Internal server error".into()
        }
    );
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn an_error_event_before_output_is_retried_but_not_after() {
    let overloaded =
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    // The error comes after `message_start` (usage only): no output yet, so retry.
    let start = message_start(3);
    let server = Anthropic.serve(Reply::sse(sse(&text_events())));
    server.reply_once(Reply::sse(sse(&[start.as_str(), overloaded])));
    assert_eq!(
        model(&server).complete(hi()).await.unwrap().message.text(),
        "Hello!"
    );
    assert_eq!(server.request_count(), 2);

    let events = text_events();
    let mut partial: Vec<&str> = events[..4].iter().map(String::as_str).collect();
    partial.push(overloaded);
    let server = Anthropic.serve(Reply::sse(sse(&partial)));
    let items = collect(&model(&server), hi()).await.unwrap();
    assert_eq!(
        items.last().unwrap(),
        &Err(ModelError::Server {
            status: 0,
            message: "Overloaded".into()
        })
    );
    assert!(items.contains(&Ok(ChatChunk::TextDelta {
        text: "Hello".into()
    })));
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_stream_cut_in_the_middle_fails_without_retry() {
    let events = text_events();
    let mut cut = sse(&events[..4]);
    cut.push_str("event: content_block_delta\ndata: {\"type\":\"content_blo");
    let server = Anthropic.serve(Reply::sse(cut));
    let items = collect(&model(&server), hi()).await.unwrap();
    assert!(matches!(
        items.last().unwrap(),
        Err(ModelError::MalformedStream(_))
    ));
    assert!(items[..items.len() - 1].iter().all(Result::is_ok));
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_malformed_event_is_reported_in_the_stream() {
    let events = text_events();
    let mut bad: Vec<&str> = events[..4].iter().map(String::as_str).collect();
    bad.push(r#"{"type":"content_block_delta","index":0,"delta":"#);
    bad.extend(events[4..].iter().map(String::as_str));
    let server = Anthropic.serve(Reply::sse(sse(&bad)));
    let items = collect(&model(&server), hi()).await.unwrap();
    assert!(
        matches!(items.last().unwrap(), Err(ModelError::MalformedStream(m)) if m.contains("content_block_delta"))
    );
    assert_eq!(server.request_count(), 1);

    // A delta for a block that never started is malformed too.
    let stray = [
        message_start(1),
        r#"{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"?"}}"#
            .into(),
    ];
    let server = Anthropic.serve(Reply::sse(sse(&stray)));
    // Nothing but usage came before it, so the error is returned by `stream`
    // itself; it is not retryable.
    let err = stream_error(&model(&server)).await;
    assert!(matches!(err, ModelError::MalformedStream(m) if m.contains("block 3")));
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_missing_key_fails_before_any_request_and_keys_stay_out_of_debug() {
    let model = AnthropicChat::new("claude-test");
    assert_key_from_env(&model, "ANTHROPIC_API_KEY", model.has_api_key()).await;
    assert_key_redacted(
        &model.with_api_key("sk-ant-very-secret"),
        "sk-ant-very-secret",
    );
}
