#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! Streams replayed from a local server: text, tool calls, reasoning, usage,
//! failures and retries.

mod support;

use std::time::Duration;

use reins_message::{ContentBlock, Msg, Usage};
use reins_model::testing::{
    ProviderFixture, Reply, assert_key_from_env, assert_key_redacted, collect, error_for,
    expect_text_answer, stream_error,
};
use reins_model::{ChatChunk, ChatModel, ChatRequest, FinishReason, ModelError, RetryPolicy};
use reins_openai::OpenAiChat;
use serde_json::json;
use support::*;

fn hi() -> ChatRequest {
    ChatRequest::new(vec![Msg::user("hi")])
}

const TEXT: &[&str] = &[
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"test-model","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"test-model","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}"#,
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"test-model","choices":[{"index":0,"delta":{"content":", world"},"finish_reason":null}]}"#,
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"test-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"test-model","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":0}}}"#,
];

#[tokio::test]
async fn plain_text_with_usage() {
    let server = OpenAi.serve(Reply::sse(sse(TEXT, true)));
    let usage = Usage {
        input_tokens: 12,
        output_tokens: 3,
        cache_read_tokens: 4,
        ..Usage::default()
    };
    expect_text_answer(&model(&server), "Hello, world", usage).await;
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(
        reqs[0].header("authorization"),
        Some("Bearer sk-test-secret-key")
    );
}

#[tokio::test]
async fn one_tool_call() {
    let events = [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"loc"}}]},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ation\": \"Paris\"}"}}]},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
    ];
    let server = OpenAi.serve(Reply::sse(sse(&events, true)));
    let done = model(&server).complete(hi()).await.unwrap();
    let uses: Vec<_> = done.message.tool_uses().collect();
    assert_eq!(uses.len(), 1);
    assert_eq!(uses[0].id, "call_abc");
    assert_eq!(uses[0].name, "get_weather");
    assert_eq!(uses[0].input, json!({"location": "Paris"}));
    assert_eq!(done.finish_reason, Some(FinishReason::ToolUse));
}

#[tokio::test]
async fn two_parallel_tool_calls_interleaved() {
    let events = [
        r#"{"choices":[{"index":0,"delta":{"content":"Checking both."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"weather","arguments":""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"time","arguments":"{\"tz\":"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":\"Oslo\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"CET\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
    ];
    let server = OpenAi.serve(Reply::sse(sse(&events, true)));
    let done = model(&server).complete(hi()).await.unwrap();
    let uses: Vec<_> = done.message.tool_uses().collect();
    assert_eq!(done.message.text(), "Checking both.");
    assert_eq!(uses.len(), 2);
    assert_eq!(
        (uses[0].id.as_str(), &uses[0].input),
        ("call_1", &json!({"city": "Oslo"}))
    );
    assert_eq!(
        (uses[1].id.as_str(), &uses[1].input),
        ("call_2", &json!({"tz": "CET"}))
    );
}

#[tokio::test]
async fn reasoning_content_streams_as_thinking() {
    let events = [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"The user greets"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":" me."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"Hi!","reasoning_content":null}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":9,"completion_tokens_details":{"reasoning_tokens":6},"prompt_cache_hit_tokens":2}}"#,
    ];
    let server = OpenAi.serve(Reply::sse(sse(&events, true)));
    let done = model(&server).complete(hi()).await.unwrap();
    assert_eq!(
        done.message.content,
        vec![
            ContentBlock::thinking("The user greets me."),
            ContentBlock::text("Hi!")
        ]
    );
    assert_eq!(done.usage.reasoning_tokens, 6);
    assert_eq!(done.usage.cache_read_tokens, 2);
}

type Check = fn(&ModelError) -> bool;

#[tokio::test]
async fn http_errors_map_to_typed_errors_with_the_provider_message() {
    let cases: Vec<(u16, &str, Check)> = vec![
        (
            401,
            r#"{"error":{"message":"Incorrect API key provided: sk-test-secret-key.","type":"invalid_request_error","code":"invalid_api_key"}}"#,
            |e| matches!(e, ModelError::Auth { message } if message.contains("Incorrect API key") && !message.contains("sk-test-secret-key")),
        ),
        (
            403,
            r#"{"error":{"message":"not allowed","type":"permission_error"}}"#,
            |e| matches!(e, ModelError::Auth { .. }),
        ),
        (
            400,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
            |e| matches!(e, ModelError::ContextTooLong { message } if message.contains("8192")),
        ),
        (
            400,
            r#"{"error":{"message":"Range of input length should be [1, 30720]","type":"InvalidParameter","code":"InvalidParameter"}}"#,
            |e| matches!(e, ModelError::ContextTooLong { .. }),
        ),
        (
            400,
            r#"{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error"}}"#,
            |e| matches!(e, ModelError::BadRequest { status: 400, message } if message.contains("temperature")),
        ),
        (
            404,
            r#"{"error":"model \"nope\" not found, try pulling it first"}"#,
            |e| matches!(e, ModelError::BadRequest { status: 404, message } if message.contains("pulling")),
        ),
    ];
    for (status, body, check) in cases {
        let (err, requests) = error_for(&OpenAi, Reply::json(status, body)).await;
        assert!(check(&err), "HTTP {status}: got {err:?}");
        assert_eq!(requests, 1, "HTTP {status} must not be retried");
    }
}

#[tokio::test]
async fn rate_limit_with_retry_after_then_success() {
    let server = OpenAi.serve(Reply::sse(sse(TEXT, true)));
    server.reply_once(
        Reply::json(
            429,
            r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#,
        )
        .with_header("retry-after", "0"),
    );
    let done = model(&server).complete(hi()).await.unwrap();
    assert_eq!(done.message.text(), "Hello, world");
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn rate_limit_reports_retry_after_when_not_retried() {
    let server = OpenAi.serve(
        Reply::json(429, r#"{"error":{"message":"Rate limit reached"}}"#)
            .with_header("retry-after", "7"),
    );
    let err = stream_error(&model(&server).with_retry(RetryPolicy::none())).await;
    assert_eq!(
        err,
        ModelError::RateLimited {
            retry_after: Some(Duration::from_secs(7)),
            message: "Rate limit reached".into()
        }
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn server_error_then_success_and_server_error_until_giving_up() {
    let server = OpenAi.serve(Reply::sse(sse(TEXT, true)));
    server.reply_once(Reply::json(
        500,
        r#"{"error":{"message":"The server had an error"}}"#,
    ));
    assert_eq!(
        model(&server).complete(hi()).await.unwrap().message.text(),
        "Hello, world"
    );
    assert_eq!(server.request_count(), 2);

    let server = OpenAi.serve(Reply::json(503, "upstream unavailable"));
    let err = stream_error(&model(&server)).await;
    assert_eq!(
        err,
        ModelError::Server {
            status: 503,
            message: "upstream unavailable".into()
        }
    );
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn a_stream_cut_in_the_middle_fails_without_retry() {
    let mut body = sse(&TEXT[..3], false);
    body.push_str("data: {\"choices\":[{\"index\":0,\"del");
    let server = OpenAi.serve(Reply::sse(body));
    let items = collect(&model(&server), hi()).await.unwrap();
    let (last, rest) = items.split_last().unwrap();
    assert!(rest.iter().all(Result::is_ok));
    assert_eq!(
        rest.iter()
            .filter_map(|c| match c {
                Ok(ChatChunk::TextDelta { text }) => Some(text.as_str()),
                _ => None,
            })
            .collect::<String>(),
        "Hello, world"
    );
    assert!(
        matches!(last, Err(ModelError::MalformedStream(_))),
        "{last:?}"
    );
    assert_eq!(server.request_count(), 1);
    assert!(model(&server).complete(hi()).await.is_err());
}

#[tokio::test]
async fn a_malformed_event_is_reported_in_the_stream() {
    let body = sse(&[TEXT[1], "{not json", TEXT[3]], true);
    let server = OpenAi.serve(Reply::sse(body));
    let items = collect(&model(&server), hi()).await.unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(
        items[0],
        Ok(ChatChunk::TextDelta {
            text: "Hello".into()
        })
    );
    assert!(matches!(&items[1], Err(ModelError::MalformedStream(m)) if m.contains("{not json")));
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn an_error_event_before_output_is_retried_but_not_after() {
    let overloaded = r#"{"error":{"message":"Service overloaded","type":"server_error"}}"#;
    let server = OpenAi.serve(Reply::sse(sse(TEXT, true)));
    server.reply_once(Reply::sse(sse(&[overloaded], false)));
    assert_eq!(
        model(&server).complete(hi()).await.unwrap().message.text(),
        "Hello, world"
    );
    assert_eq!(server.request_count(), 2);

    let server = OpenAi.serve(Reply::sse(sse(&[TEXT[1], overloaded], false)));
    let items = collect(&model(&server), hi()).await.unwrap();
    assert_eq!(
        items[1],
        Err(ModelError::Server {
            status: 0,
            message: "Service overloaded".into()
        })
    );
    assert_eq!(items.len(), 2);
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_missing_key_fails_before_any_request_and_keys_stay_out_of_debug() {
    let deepseek = OpenAiChat::deepseek("deepseek-chat");
    assert_key_from_env(&deepseek, "DEEPSEEK_API_KEY", deepseek.has_api_key()).await;
    let keyed = OpenAiChat::openai("gpt-4o").with_api_key("sk-very-secret");
    assert_key_redacted(&keyed, "sk-very-secret");
    assert_eq!(
        OpenAiChat::ollama("llama3").base_url(),
        "http://localhost:11434/v1"
    );
    assert!(OpenAiChat::ollama("llama3").has_api_key());
}
