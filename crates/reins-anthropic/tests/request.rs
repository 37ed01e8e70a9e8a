#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! The exact request bodies sent for a realistic conversation.

mod support;

use reins_message::{ContentBlock, MediaSource, Msg, Role};
use reins_model::testing::{self, ProviderFixture};
use reins_model::{ChatModel, ChatOptions, ChatRequest, ModelError, ResponseFormat, ToolChoice};
use serde_json::{Map, Value, json};
use support::*;

/// A system prompt, tools, a tool round trip (two parallel calls, one rejected,
/// answered in a tool message followed by a user message), an image, and signed
/// thinking that must be sent back.
fn conversation() -> ChatRequest {
    testing::sample_conversation(["toolu_1", "toolu_2"], |weather, delete| {
        Msg::new(
            Role::Assistant,
            vec![
                ContentBlock::Thinking {
                    thinking: "Two tools are needed.".into(),
                    signature: Some("sig-abc".into()),
                },
                ContentBlock::text("Let me check."),
                ContentBlock::ToolUse(weather),
                ContentBlock::ToolUse(delete),
            ],
        )
    })
    .with_options(ChatOptions {
        temperature: Some(0.5),
        ..ChatOptions::default()
    })
}

async fn sent_body(req: ChatRequest) -> Value {
    testing::sent_body(&Anthropic, req, |m| m).await
}

#[tokio::test]
async fn conversation_request_body() {
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!(sent_body(conversation()).await);
}

#[tokio::test]
async fn options_and_tool_choice() {
    let mut extra = Map::new();
    extra.insert(
        "thinking".into(),
        json!({"type": "enabled", "budget_tokens": 1024}),
    );
    let req = conversation()
        .with_tool_choice(ToolChoice::Required)
        .with_options(ChatOptions {
            max_tokens: Some(2000),
            stop: vec!["END".into()],
            seed: Some(1),
            response_format: Some(ResponseFormat::JsonObject),
            extra,
            ..ChatOptions::default()
        });
    let body = sent_body(req).await;
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
    assert_eq!(body["max_tokens"], 2000);
    assert_eq!(body["stop_sequences"], json!(["END"]));
    assert!(body.get("seed").is_none());
    assert_eq!(body["thinking"]["budget_tokens"], 1024);
    assert!(
        body["system"]
            .as_str()
            .unwrap()
            .ends_with("single JSON object and nothing else.")
    );

    let body = sent_body(ChatRequest::new(vec![Msg::user("hi")])).await;
    assert_eq!(body["max_tokens"], 4096);
    assert!(body.get("system").is_none() && body.get("tools").is_none());
}

#[tokio::test]
async fn unsigned_thinking_and_malformed_arguments_are_sent_safely() {
    let mut history =
        testing::unparsed_call_round_trip("toolu_9", vec![ContentBlock::thinking("unsigned")]);
    history.extend([Msg::assistant("Sorry."), Msg::assistant("Try again?")]);
    let req = ChatRequest::new(history);
    let body = sent_body(req).await;
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4, "{body:#}");
    assert_eq!(
        msgs[1]["content"],
        json!([{"type": "tool_use", "id": "toolu_9", "name": "write", "input": {}}])
    );
    assert_eq!(msgs[2]["content"][0]["is_error"], true);
    assert_eq!(msgs[3]["content"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn audio_is_refused_before_any_request() {
    let server = Anthropic.server();
    let req = ChatRequest::new(vec![Msg::new(
        Role::User,
        vec![ContentBlock::Audio {
            source: MediaSource::base64("audio/wav", "UklGRg=="),
        }],
    )]);
    let err = model(&server).stream(req).await.err().unwrap();
    assert!(matches!(err, ModelError::InvalidRequest(m) if m.contains("audio")));
    assert_eq!(server.request_count(), 0);
}

/// Snapshots with object keys sorted: they pin the content, not the order serde_json
/// keeps keys in (insertion order when a dependency turns on `preserve_order`).
fn sorted_maps() -> insta::internals::SettingsBindDropGuard {
    let mut settings = insta::Settings::clone_current();
    settings.set_sort_maps(true);
    settings.bind_to_scope()
}
