#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! The Messages API counterparts of the compatible-server behaviours the OpenAI
//! client meets: a defaulted option spelled out (answered with an empty body), an
//! empty answer, and that answer kept valid in the next request.

mod support;

use reins_message::{Msg, Role, ToolSpec};
use reins_model::{ChatModel, ChatOptions, ChatRequest, FinishReason, ModelError};
use serde_json::{Map, Value, json};
use support::*;
use wiremock::matchers::{method, path};
use wiremock::{Match, Mock, MockServer, Request, ResponseTemplate};

/// Matches a request whose JSON body satisfies `check`.
struct BodyIs(fn(&Value) -> bool);

impl Match for BodyIs {
    fn matches(&self, request: &Request) -> bool {
        serde_json::from_slice::<Value>(&request.body).is_ok_and(|v| (self.0)(&v))
    }
}

fn ok_stream(text: &str) -> ResponseTemplate {
    let start = message_start(10);
    let block =
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#;
    let delta =
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":text}})
            .to_string();
    let stop = r#"{"type":"content_block_stop","index":0}"#;
    let [d, s] = message_end("end_turn", 3);
    stream_response(sse(&[&start, block, &delta, stop, &d, &s]))
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

async fn serve_when(
    server: &MockServer,
    check: fn(&Value) -> bool,
    special: ResponseTemplate,
    normal: ResponseTemplate,
) {
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(BodyIs(check))
        .respond_with(special)
        .with_priority(1)
        .mount(server)
        .await;
    serve(server, normal).await;
}

#[tokio::test]
async fn tool_choice_auto_is_not_sent_and_an_empty_body_says_so() {
    let server = MockServer::start().await;
    serve_when(
        &server,
        explicit_auto,
        ResponseTemplate::new(200).insert_header("content-type", "text/event-stream"),
        ok_stream("sunny"),
    )
    .await;
    let req = ChatRequest::new(vec![Msg::user("weather in Paris?")]).with_tools(tools());
    let done = model(&server).complete(req.clone()).await.unwrap();
    assert_eq!(done.message.text(), "sunny");
    let sent: Value =
        serde_json::from_slice(&server.received_requests().await.unwrap()[0].body).unwrap();
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
    assert_eq!(requests(&server).await, 2);
}

#[tokio::test]
async fn an_empty_answer_is_flagged() {
    let server = MockServer::start().await;
    let start = message_start(10);
    let [d, s] = message_end("end_turn", 0);
    serve(&server, stream_response(sse(&[&start, &d, &s]))).await;
    let done = model(&server)
        .complete(ChatRequest::new(vec![Msg::user("hi")]))
        .await
        .unwrap();
    assert!(done.is_empty_answer());
    assert_eq!(done.finish_reason, Some(FinishReason::Stop));
    assert!(done.message.content.is_empty());
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
    let server = MockServer::start().await;
    serve_when(
        &server,
        has_empty_content,
        error_response(
            400,
            "invalid_request_error",
            "messages.1: all messages must have non-empty content",
        ),
        ok_stream("Hello!"),
    )
    .await;
    // What an agent stores for an empty answer, then the person's next message.
    let req = ChatRequest::new(vec![
        Msg::user("hi"),
        Msg::new(Role::Assistant, vec![]),
        Msg::assistant(""),
        Msg::user("hello?"),
    ]);
    let done = model(&server).complete(req).await.unwrap();
    assert_eq!(done.message.text(), "Hello!");
    let sent: Value =
        serde_json::from_slice(&server.received_requests().await.unwrap()[0].body).unwrap();
    // The two user messages become one user turn.
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "hi"},
            {"type": "text", "text": "hello?"}
        ]}])
    );
}
