#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! The exact request bodies sent for a realistic conversation.

mod support;

use reins_message::{ContentBlock, Msg, ToolResult, ToolSpec, ToolUse};
use reins_model::testing;
use reins_model::{ChatOptions, ChatRequest, ResponseFormat, ToolChoice};
use serde_json::{Map, Value, json};
use support::*;

/// A system prompt, tools, a tool round trip (two parallel calls, one rejected), an
/// image, and earlier thinking.
pub fn conversation() -> ChatRequest {
    testing::sample_conversation(["call_1", "call_2"], |weather, delete| {
        Msg::assistant("Let me check.")
            .with_block(ContentBlock::thinking("Two tools are needed."))
            .with_block(ContentBlock::ToolUse(weather))
            .with_block(ContentBlock::ToolUse(delete))
    })
    .with_options(ChatOptions {
        temperature: Some(0.5),
        max_tokens: Some(512),
        ..ChatOptions::default()
    })
}

async fn sent_body(
    req: ChatRequest,
    configure: impl FnOnce(reins_openai::OpenAiChat) -> reins_openai::OpenAiChat,
) -> Value {
    testing::sent_body(&OpenAi, req, configure).await
}

#[tokio::test]
async fn conversation_request_body() {
    let body = sent_body(conversation(), |m| m).await;
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!(body);
}

#[tokio::test]
async fn options_tool_choice_response_format_and_reasoning_replay() {
    let mut extra = Map::new();
    extra.insert("enable_thinking".into(), json!(true));
    let req = conversation()
        .with_tool_choice(ToolChoice::Tool("get_weather".into()))
        .with_options(ChatOptions {
            stop: vec!["END".into()],
            seed: Some(42),
            response_format: Some(ResponseFormat::JsonSchema {
                name: "answer".into(),
                schema: json!({"type": "object"}),
                strict: true,
            }),
            extra,
            ..ChatOptions::default()
        });
    let body = sent_body(req, |m| {
        m.with_reasoning_replay(true).with_usage_reporting(false)
    })
    .await;
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "get_weather"}})
    );
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["response_format"]["json_schema"]["strict"], true);
    assert_eq!(body["stop"], json!(["END"]));
    assert_eq!(body["seed"], 42);
    assert_eq!(body["enable_thinking"], true);
    assert!(body.get("stream_options").is_none());
    assert_eq!(
        body["messages"][2]["reasoning_content"],
        "Two tools are needed."
    );

    let json_mode = ChatRequest::new(vec![Msg::user("json please")]).with_options(ChatOptions {
        response_format: Some(ResponseFormat::JsonObject),
        ..ChatOptions::default()
    });
    let body = sent_body(json_mode, |m| m).await;
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
}

#[tokio::test]
async fn malformed_arguments_in_history_are_sent_as_an_empty_object() {
    let req = ChatRequest::new(testing::unparsed_call_round_trip("call_9", vec![]));
    let body = sent_body(req, |m| m).await;
    // The compatible preset writes a tool-call-only message with `content: ""`.
    assert_eq!(body["messages"][1]["content"], "");
    assert_eq!(
        body["messages"][1]["tool_calls"][0]["function"]["arguments"],
        "{}"
    );
    assert_eq!(body["messages"][2]["tool_call_id"], "call_9");
}

/// A tool round trip whose assistant message only calls a tool: the part of the
/// wire format where the presets differ.
fn tool_round_trip() -> ChatRequest {
    ChatRequest::new(vec![
        Msg::system("Be brief."),
        Msg::user("Delete temp.txt"),
        Msg::new(
            reins_message::Role::Assistant,
            vec![ContentBlock::ToolUse(ToolUse::new(
                "call_1",
                "delete_file",
                json!({"path": "temp.txt"}),
            ))],
        ),
        Msg::tool_results([ToolResult::success("call_1", "delete_file", "deleted")]),
    ])
    .with_tools(vec![ToolSpec::new(
        "delete_file",
        "Delete a file",
        json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    )])
}

/// One snapshot per preset: nothing the caller did not set is sent (no
/// `tool_choice`, no sampling options), and the tool-call-only assistant message is
/// `content: null` where the first-party API documents it, `""` elsewhere.
#[test]
fn request_body_per_preset() {
    let presets = [
        ("openai", reins_openai::OpenAiChat::openai("gpt-4o-mini")),
        (
            "dashscope",
            reins_openai::OpenAiChat::dashscope("qwen-plus"),
        ),
        (
            "deepseek",
            reins_openai::OpenAiChat::deepseek("deepseek-chat"),
        ),
        ("ollama", reins_openai::OpenAiChat::ollama("llama3.2")),
        (
            "compatible",
            reins_openai::OpenAiChat::compatible("http://127.0.0.1:8000/v1", "local"),
        ),
    ];
    for (name, model) in presets {
        let body = model.request_body(&tool_round_trip()).unwrap();
        assert!(body.get("tool_choice").is_none(), "{name}");
        let _sorted = sorted_maps();
        insta::assert_json_snapshot!(format!("preset_{name}"), body);
    }
    // The form can be chosen either way.
    let model =
        reins_openai::OpenAiChat::openai("gpt-4o-mini").with_empty_string_tool_call_content(true);
    assert_eq!(
        model.request_body(&tool_round_trip()).unwrap()["messages"][2]["content"],
        ""
    );
    let model = reins_openai::OpenAiChat::compatible("http://h/v1", "m")
        .with_empty_string_tool_call_content(false);
    assert_eq!(
        model.request_body(&tool_round_trip()).unwrap()["messages"][2]["content"],
        Value::Null
    );
}

#[test]
fn tool_choice_is_sent_only_when_it_asks_for_something() {
    let model = reins_openai::OpenAiChat::compatible("http://h/v1", "m");
    let body = |choice: ToolChoice| {
        model
            .request_body(&tool_round_trip().with_tool_choice(choice))
            .unwrap()
            .get("tool_choice")
            .cloned()
    };
    assert_eq!(body(ToolChoice::Auto), None);
    assert_eq!(body(ToolChoice::None), Some(json!("none")));
    assert_eq!(body(ToolChoice::Required), Some(json!("required")));
    // A server that wants `auto` spelled out gets it through `extra`.
    let mut extra = Map::new();
    extra.insert("tool_choice".into(), json!("auto"));
    let req = tool_round_trip().with_options(ChatOptions {
        extra,
        ..ChatOptions::default()
    });
    assert_eq!(model.request_body(&req).unwrap()["tool_choice"], "auto");
    // A tool without a description is sent without one.
    let req = tool_round_trip().with_tools(vec![ToolSpec::new("t", "", json!({"type": "object"}))]);
    let body = model.request_body(&req).unwrap();
    assert!(body["tools"][0]["function"].get("description").is_none());
}

/// Snapshots with object keys sorted: they pin the content, not the order serde_json
/// keeps keys in (insertion order when a dependency turns on `preserve_order`).
fn sorted_maps() -> insta::internals::SettingsBindDropGuard {
    let mut settings = insta::Settings::clone_current();
    settings.set_sort_maps(true);
    settings.bind_to_scope()
}
