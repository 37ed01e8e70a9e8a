#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! The Messages API counterparts of the compatible-server behaviours the OpenAI
//! client meets: a defaulted option spelled out (answered with an empty body), an
//! empty answer, and that answer kept valid in the next request.

mod support;

use reins_message::{Msg, Role, ToolSpec};
use reins_model::testing::{ProviderFixture, Reply, expect_empty_answer};
use reins_model::{ChatModel, ChatOptions, ChatRequest, ModelError};
use serde_json::{Map, Value, json};
use support::*;

/// An answer with this text.
fn ok_stream(text: &str) -> Reply {
    Reply::sse(Anthropic.text_answer(text))
}

fn explicit_auto(body: &Value) -> bool {
    body["tool_choice"] == json!({"type": "auto"})
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec::new(
        "get_weather",
        "Current weather for a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    )]
}

#[tokio::test]
async fn tool_choice_auto_is_not_sent_and_an_empty_body_says_so() {
    let server = Anthropic.serve(ok_stream("sunny"));
    server.reply_when_json(explicit_auto, Reply::sse(""));
    let req = ChatRequest::new(vec![Msg::user("weather in Paris?")]).with_tools(tools());
    let done = model(&server).complete(req.clone()).await.unwrap();
    assert_eq!(done.message.text(), "sunny");
    let sent: Value = server.requests()[0].json().unwrap();
    assert!(sent.get("tool_choice").is_none(), "{sent}");

    let mut extra = Map::new();
    extra.insert("tool_choice".into(), json!({"type": "auto"}));
    let err = model(&server)
        .complete(req.with_options(ChatOptions {
            extra,
            ..ChatOptions::default()
        }))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::MalformedStream(m) if m.contains("empty body")),
        "{err:?}"
    );
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn an_empty_answer_is_flagged() {
    let start = message_start(10);
    let [d, s] = message_end("end_turn", 0);
    let server = Anthropic.serve(Reply::sse(sse(&[&start, &d, &s])));
    expect_empty_answer(&model(&server)).await;
}

/// Whether any message has empty content or an empty text block (the API refuses
/// both).
fn has_empty_content(body: &Value) -> bool {
    body["messages"].as_array().is_some_and(|ms| {
        ms.iter().any(|m| match &m["content"] {
            Value::String(s) => s.is_empty(),
            Value::Array(blocks) => {
                blocks.is_empty()
                    || blocks
                        .iter()
                        .any(|b| b["type"] == "text" && b["text"].as_str() == Some(""))
            }
            _ => true,
        })
    })
}

#[tokio::test]
async fn an_empty_answer_in_history_is_left_out_of_the_next_request() {
    let server = Anthropic.serve(ok_stream("Hello!"));
    server.reply_when_json(
        has_empty_content,
        error_response(
            400,
            "invalid_request_error",
            "messages.1: all messages must have non-empty content",
        ),
    );
    // What an agent stores for an empty answer, then the person's next message.
    let req = ChatRequest::new(vec![
        Msg::user("hi"),
        Msg::new(Role::Assistant, vec![]),
        Msg::assistant(""),
        Msg::user("hello?"),
    ]);
    let done = model(&server).complete(req).await.unwrap();
    assert_eq!(done.message.text(), "Hello!");
    let sent: Value = server.requests()[0].json().unwrap();
    // The two user messages become one user turn.
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "hi"},
            {"type": "text", "text": "hello?"}
        ]}])
    );
}
