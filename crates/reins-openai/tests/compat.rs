#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! Behaviours of real OpenAI-compatible servers, reproduced by a local server:
//! llama-cpp-python's answer to an explicit `tool_choice: "auto"` on a streamed
//! request (HTTP 200, empty body), its HTTP 500 for an assistant message with
//! `content: null`, and a model that answers with nothing.

mod support;

use reins_message::{ContentBlock, Msg, Role, ToolResult, ToolSpec, ToolUse};
use reins_model::testing::{self, ProviderFixture, Reply};
use reins_model::{ChatModel, ChatOptions, ChatRequest, ModelError};
use reins_openai::OpenAiChat;
use serde_json::{Map, Value, json};
use support::*;

/// An answer with this text.
fn ok_stream(text: &str) -> Reply {
    Reply::sse(OpenAi.text_answer(text))
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec::new(
        "get_weather",
        "Current weather for a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    )]
}

fn explicit_auto(body: &Value) -> bool {
    body["tool_choice"] == "auto"
}

#[tokio::test]
async fn tool_choice_auto_is_not_sent_so_the_server_answers() {
    let server = OpenAi.serve(ok_stream("sunny"));
    // llama-cpp-python: an explicit `auto` on a streamed request gets 200 and nothing.
    server.reply_when_json(explicit_auto, Reply::sse(""));
    let req = ChatRequest::new(vec![Msg::user("weather in Paris?")]).with_tools(tools());
    let done = model(&server).complete(req).await.unwrap();
    assert_eq!(done.message.text(), "sunny");
    let sent: Value = server.requests()[0].json().unwrap();
    assert!(sent.get("tool_choice").is_none(), "{sent}");
    assert!(sent.get("tools").is_some());
}

#[tokio::test]
async fn an_empty_200_body_is_a_typed_error_that_says_so() {
    let server = OpenAi.serve(ok_stream("sunny"));
    server.reply_when_json(explicit_auto, Reply::sse(""));
    // A caller who insists on `auto` (through `extra`) meets the server's behaviour,
    // and the error says what happened.
    let mut extra = Map::new();
    extra.insert("tool_choice".into(), json!("auto"));
    let req = ChatRequest::new(vec![Msg::user("weather in Paris?")])
        .with_tools(tools())
        .with_options(ChatOptions {
            extra,
            ..ChatOptions::default()
        });
    let err = model(&server).complete(req).await.unwrap_err();
    assert!(
        matches!(&err, ModelError::MalformedStream(m) if m.contains("empty body")),
        "{err:?}"
    );
    // Not retried: the server would answer the same way.
    assert_eq!(server.request_count(), 1);
}

/// Whether an assistant message in the body has `content: null`.
fn null_content(body: &Value) -> bool {
    body["messages"].as_array().is_some_and(|ms| {
        ms.iter()
            .any(|m| m["role"] == "assistant" && m["content"].is_null())
    })
}

fn after_tool_call() -> ChatRequest {
    ChatRequest::new(vec![
        Msg::user("weather in Paris?"),
        Msg::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse(ToolUse::new(
                "call_1",
                "get_weather",
                json!({"city": "Paris"}),
            ))],
        ),
        Msg::tool_results([ToolResult::success("call_1", "get_weather", "18°C")]),
    ])
    .with_tools(tools())
}

#[tokio::test]
async fn compatible_servers_get_empty_string_content_after_a_tool_call() {
    let server = OpenAi.serve(ok_stream("It is 18°C in Paris."));
    // llama-cpp-python: `content: null` fails its request validation with HTTP 500.
    let invalid = r#"{"error":{"message":"1 validation error: messages.1.content: Input should be a valid string"}}"#;
    server.reply_when_json(null_content, Reply::json(500, invalid));
    let done = model(&server).complete(after_tool_call()).await.unwrap();
    assert_eq!(done.message.text(), "It is 18°C in Paris.");
    assert_eq!(server.request_count(), 1);

    // The same server behind the OpenAI preset (which sends the documented `null`)
    // fails as the issue reported: HTTP 500, retried, then a typed error.
    let openai = OpenAiChat::openai("m")
        .with_base_url(format!("{}/v1", server.url()))
        .with_api_key("sk-test")
        .with_retry(testing::fast_retry());
    let err = openai.complete(after_tool_call()).await.unwrap_err();
    assert!(
        matches!(&err, ModelError::Server { status: 500, message } if message.contains("content")),
        "{err:?}"
    );
    assert_eq!(server.request_count(), 1 + 3);
    // ... and works once told to use the tolerant form.
    let tolerant = openai.with_empty_string_tool_call_content(true);
    assert!(tolerant.complete(after_tool_call()).await.is_ok());
}

#[tokio::test]
async fn an_empty_completion_is_flagged_as_an_empty_answer() {
    let events = [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":0}}"#,
    ];
    let server = OpenAi.serve(Reply::sse(sse(&events, true)));
    let done = testing::expect_empty_answer(&model(&server)).await;
    assert_eq!(done.usage.input_tokens, 12);
}

#[test]
fn an_empty_assistant_message_in_history_stays_valid_on_the_wire() {
    // What an agent stores for an empty answer: an assistant message with no blocks.
    // It is sent as `content: ""`, keeping user/assistant turns alternating.
    let req = ChatRequest::new(vec![
        Msg::user("hi"),
        Msg::new(Role::Assistant, vec![]),
        Msg::user("hello?"),
    ]);
    for model in [
        OpenAiChat::compatible("http://h/v1", "m"),
        OpenAiChat::openai("m"),
    ] {
        let body = model.request_body(&req).unwrap();
        assert_eq!(
            body["messages"][1],
            json!({"role": "assistant", "content": ""})
        );
        assert_eq!(body["messages"].as_array().unwrap().len(), 3);
    }
}
