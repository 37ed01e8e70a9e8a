#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! The Gemini wire: documented responses decoded, request bodies pinned as insta
//! snapshots, thought signatures round-tripped onto the parts they came with,
//! Vertex AI's URL and token, safety blocks, and another provider's transcript.

mod support;

use reins_gemini::{GeminiChat, PLACEHOLDER_SIGNATURE, PROVIDER};
use reins_message::{ContentBlock, Msg, Role, ToolResult, ToolUse, signature};
use reins_model::testing::rules::gemini_request_problems;
use reins_model::testing::{
    Endpoint, ProviderFixture, Reply, TestServer, sample_conversation, sent_body,
};
use reins_model::{
    ChatModel, ChatOptions, ChatRequest, FinishReason, ModelError, ResponseFormat, ToolChoice,
};
use serde_json::{Value, json};
use support::*;

fn valid(body: &Value) {
    let problems = gemini_request_problems(body);
    assert!(problems.is_empty(), "{problems:#?}\n{body:#}");
}

#[tokio::test]
async fn thoughts_text_and_parallel_calls_decode_with_their_signatures() {
    let body = stream(&[
        chunk(
            json!([{"text": "Weighing the cities", "thought": true}]),
            None,
        ),
        chunk(
            json!([
                call(
                    None,
                    "get_weather",
                    json!({"city": "Paris"}),
                    Some("SIG_FIRST")
                ),
                call(None, "get_weather", json!({"city": "Rome"}), None)
            ]),
            Some("STOP"),
        ),
        json!({"usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 8, "thoughtsTokenCount": 50, "cachedContentTokenCount": 10}}),
    ]);
    let server = Gemini.serve(Reply::sse(body));
    let done = model(&server)
        .complete(ChatRequest::new(vec![Msg::user("weather?")]))
        .await
        .unwrap();
    assert_eq!(done.finish_reason, Some(FinishReason::ToolUse));
    assert_eq!(done.usage.reasoning_tokens, 50);
    assert_eq!(done.usage.output_tokens, 58);
    assert_eq!(done.usage.cache_read_tokens, 10);
    assert_eq!(done.message.thinking(), "Weighing the cities");
    let calls: Vec<_> = done.message.tool_uses().collect();
    assert_eq!(calls.len(), 2);
    assert_ne!(
        calls[0].id, calls[1].id,
        "calls without ids get distinct ones"
    );
    let sig = done
        .message
        .content
        .iter()
        .find_map(|b| match b {
            ContentBlock::Thinking { signature, .. } => signature.clone(),
            _ => None,
        })
        .unwrap();
    let kept: Value = serde_json::from_str(signature::unseal(&sig, PROVIDER).unwrap()).unwrap();
    assert_eq!(kept["calls"], json!([[0, "SIG_FIRST"]]));
}

/// The next request puts the signature back on the first call, exactly, and sends
/// no id for calls that came without one.
#[tokio::test]
async fn the_next_request_carries_the_signature_on_its_call() {
    let server = TestServer::start(Gemini.endpoint());
    server.reply_once(Reply::sse(stream(&[chunk(
        json!([
            call(None, "get_weather", json!({"city": "Paris"}), Some("SIG_P")),
            call(None, "get_weather", json!({"city": "Rome"}), None)
        ]),
        Some("STOP"),
    )])));
    server.reply(Reply::sse(text("Paris 18°C, Rome 24°C.")));
    let m = model(&server);
    let mut history = vec![
        Msg::system("Be brief."),
        Msg::user("Weather in Paris and Rome?"),
    ];
    let first = m.complete(ChatRequest::new(history.clone())).await.unwrap();
    let ids: Vec<String> = first.message.tool_uses().map(|u| u.id.clone()).collect();
    history.push(first.message);
    history.push(Msg::tool_results([
        ToolResult::success(&ids[0], "get_weather", "18°C"),
        ToolResult::success(&ids[1], "get_weather", "24°C"),
    ]));
    let history: Vec<Msg> =
        serde_json::from_str(&serde_json::to_string(&history).unwrap()).unwrap();
    let done = m.complete(ChatRequest::new(history)).await.unwrap();
    assert_eq!(done.message.text(), "Paris 18°C, Rome 24°C.");
    let body: Value = server.requests()[1].json().unwrap();
    valid(&body);
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!("request__signature_round_trip", body);

    let parts = &body["contents"][1]["parts"];
    assert_eq!(parts[0]["thoughtSignature"], "SIG_P");
    assert!(parts[1].get("thoughtSignature").is_none());
    assert!(parts[0]["functionCall"].get("id").is_none());
}

#[tokio::test]
async fn the_sample_conversation_is_pinned() {
    let req = sample_conversation(["call_w", "call_d"], |w, d| {
        Msg::new(
            Role::Assistant,
            vec![
                ContentBlock::text("Checking both."),
                ContentBlock::ToolUse(w),
                ContentBlock::ToolUse(d),
            ],
        )
    });
    let body = sent_body(&Gemini, req, |m| m).await;
    valid(&body);
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!("request__sample_conversation", body);
}

#[tokio::test]
async fn options_response_schema_and_tool_config_are_sent_as_documented() {
    let mut extra = serde_json::Map::new();
    extra.insert(
        "generationConfig".into(),
        json!({"thinkingConfig": {"includeThoughts": true}}),
    );
    let req = ChatRequest::new(vec![Msg::user("weather?")])
        .with_tools(reins_model::testing::weather_and_delete_tools())
        .with_tool_choice(ToolChoice::Tool("get_weather".into()))
        .with_options(ChatOptions {
            temperature: Some(0.2),
            max_tokens: Some(300),
            stop: vec!["END".into()],
            seed: Some(7),
            response_format: Some(ResponseFormat::JsonSchema {
                name: "weather".into(),
                schema: json!({"type": "object", "properties": {"c": {"type": "number"}}, "required": ["c"], "additionalProperties": false}),
                strict: true,
            }),
            extra,
        });
    let body = sent_body(&Gemini, req, |m| m).await;
    valid(&body);
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!("request__options", body);
}

#[tokio::test]
async fn vertex_posts_to_the_publisher_model_with_a_bearer_token() {
    let server = TestServer::start(
        Endpoint::post("/v1/projects/p1/locations/us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent")
            .with_header("authorization", format!("Bearer {KEY}")),
    );
    server.reply(Reply::sse(text("hi")));
    let vertex = GeminiChat::vertex("p1", "us-central1", "gemini-2.5-pro");
    assert_eq!(
        vertex.base_url(),
        "https://us-central1-aiplatform.googleapis.com/v1/projects/p1/locations/us-central1/publishers/google"
    );
    let m = vertex
        .with_base_url(format!(
            "{}/v1/projects/p1/locations/us-central1/publishers/google",
            server.url()
        ))
        .with_api_key(KEY);
    let done = m
        .complete(ChatRequest::new(vec![Msg::user("hi")]))
        .await
        .unwrap();
    assert_eq!(done.message.text(), "hi");
    assert_eq!(server.requests()[0].query, "alt=sse");
    assert!(!format!("{m:?}").contains(KEY));
    assert_eq!(
        GeminiChat::vertex("p", "global", "g").base_url(),
        "https://aiplatform.googleapis.com/v1/projects/p/locations/global/publishers/google"
    );
}

#[tokio::test]
async fn a_blocked_prompt_is_a_typed_error_and_a_safety_stop_a_content_filter() {
    let blocked = stream(&[
        json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": {"promptTokenCount": 9}}),
    ]);
    let server = Gemini.serve(Reply::sse(blocked));
    let err = model(&server)
        .complete(ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Blocked { reason, .. } if reason == "PROHIBITED_CONTENT"),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert_eq!(server.request_count(), 1);
    let safety = stream(&[chunk(json!([{"text": "I"}]), Some("SAFETY"))]);
    let server = Gemini.serve(Reply::sse(safety));
    let done = model(&server)
        .complete(ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap();
    assert_eq!(done.finish_reason, Some(FinishReason::ContentFilter));
}

#[tokio::test]
async fn error_bodies_and_stream_errors_are_typed() {
    let (err, _) = reins_model::testing::error_for(
        &Gemini,
        Reply::json(400, r#"{"error": {"code": 400, "message": "Function call is missing a thought_signature in functionCall parts.", "status": "INVALID_ARGUMENT"}}"#),
    )
    .await;
    assert!(
        matches!(&err, ModelError::BadRequest { status: 400, message } if message.contains("thought_signature")),
        "{err:?}"
    );
    let server = Gemini.serve(Reply::sse(stream(&[
        chunk(json!([{"text": "par"}]), None),
        json!({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}),
    ])));
    let err = model(&server)
        .complete(ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("overloaded"), "{err}");
}

/// A transcript made with Anthropic (plain signature) and the Responses API
/// (sealed reasoning) continues on Gemini: their tokens are left out, the call
/// gets the documented placeholder signature, and the request is valid.
#[test]
fn another_providers_transcript_continues_without_a_400() {
    let call = ToolUse::new("toolu_1", "get_weather", json!({"city": "Rome"}));
    let history = vec![
        Msg::user("weather?"),
        Msg::new(
            Role::Assistant,
            vec![
                ContentBlock::Thinking {
                    thinking: "anthropic thoughts".into(),
                    signature: Some("EqQBCgIYAhIM1gbcDa9G".into()),
                },
                ContentBlock::Thinking {
                    thinking: String::new(),
                    signature: Some(signature::seal("openai-responses", "{\"items\":[]}")),
                },
                ContentBlock::ToolUse(call),
            ],
        ),
        Msg::tool_results([ToolResult::success("toolu_1", "get_weather", "sunny")]),
    ];
    let body = GeminiChat::new("g")
        .request_body(&ChatRequest::new(history))
        .unwrap();
    valid(&body);
    let text = body.to_string();
    assert!(
        !text.contains("EqQBCgIYAhIM1gbcDa9G") && !text.contains("items"),
        "{body:#}"
    );
    assert_eq!(
        body["contents"][1]["parts"][0]["thoughtSignature"],
        PLACEHOLDER_SIGNATURE
    );
    assert_eq!(
        body["contents"][1]["parts"][0]["functionCall"]["id"],
        "toolu_1"
    );
    assert_eq!(
        body["contents"][2]["parts"][0]["functionResponse"]["id"],
        "toolu_1"
    );
}

/// Snapshots with object keys sorted: they pin the content, not the order serde_json
/// keeps keys in (insertion order when a dependency turns on `preserve_order`).
fn sorted_maps() -> insta::internals::SettingsBindDropGuard {
    let mut settings = insta::Settings::clone_current();
    settings.set_sort_maps(true);
    settings.bind_to_scope()
}
