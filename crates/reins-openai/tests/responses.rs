#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! The Responses API wire: documented streams decoded, request bodies pinned as
//! insta snapshots, reasoning items round-tripped exactly, Azure's URL and key
//! header, structured output, and what another provider's thinking becomes.

#[path = "support/responses.rs"]
mod responses;

use reins_message::{ContentBlock, Msg, Role, ToolResult, ToolUse, signature};
use reins_model::testing::rules::responses_request_problems;
use reins_model::testing::{ProviderFixture, Reply, TestServer, sample_conversation, sent_body};
use reins_model::{ChatModel, ChatOptions, ChatRequest, FinishReason, ResponseFormat, ToolChoice};
use reins_openai::OpenAiResponses;
use reins_openai::responses::PROVIDER;
use responses::*;
use serde_json::{Value, json};

fn valid(body: &Value) {
    let problems = responses_request_problems(body);
    assert!(problems.is_empty(), "{problems:#?}\n{body:#}");
}

#[tokio::test]
async fn a_reasoning_call_decodes_with_its_reasoning_sealed_and_usage() {
    let server = Responses.serve(Reply::sse(reasoning_then_call(
        "rs_1",
        "**Checking** the weather tool",
        "gAAAAenc1==",
        "call_1",
        "get_weather",
        r#"{"city":"Paris"}"#,
    )));
    let done = model(&server)
        .complete(ChatRequest::new(vec![Msg::user("weather?")]))
        .await
        .unwrap();
    assert_eq!(done.finish_reason, Some(FinishReason::ToolUse));
    assert_eq!(done.usage.reasoning_tokens, 64);
    assert_eq!(done.usage.cache_read_tokens, 4);
    assert_eq!(done.message.thinking(), "**Checking** the weather tool");
    let sig = done
        .message
        .content
        .iter()
        .find_map(|b| match b {
            ContentBlock::Thinking { signature, .. } => signature.clone(),
            _ => None,
        })
        .unwrap();
    let payload: Value = serde_json::from_str(signature::unseal(&sig, PROVIDER).unwrap()).unwrap();
    assert_eq!(payload["items"][0]["id"], "rs_1");
    assert_eq!(payload["items"][0]["encrypted_content"], "gAAAAenc1==");
    let call = done.message.tool_uses().next().unwrap();
    assert_eq!(call.id, "call_1");
    assert_eq!(call.input, json!({"city": "Paris"}));
}

/// The next request carries the reasoning item exactly, before its function call,
/// and passes the API's rules.
#[tokio::test]
async fn the_next_request_carries_the_reasoning_item_before_its_call() {
    let server = TestServer::start(Responses.endpoint());
    server.reply_once(Reply::sse(reasoning_then_call(
        "rs_A",
        "thinking",
        "ENC-A",
        "call_A",
        "get_weather",
        r#"{"city":"Oslo"}"#,
    )));
    server.reply(Reply::sse(text("It is 3°C.")));
    let m = model(&server);
    let mut history = vec![Msg::system("Be brief."), Msg::user("Weather in Oslo?")];
    let first = m.complete(ChatRequest::new(history.clone())).await.unwrap();
    history.push(first.message);
    history.push(Msg::tool_results([ToolResult::success(
        "call_A",
        "get_weather",
        "3°C",
    )]));
    // Stored and loaded again, as a resume in another process does.
    let history: Vec<Msg> =
        serde_json::from_str(&serde_json::to_string(&history).unwrap()).unwrap();
    let done = m.complete(ChatRequest::new(history)).await.unwrap();
    assert_eq!(done.message.text(), "It is 3°C.");
    let body: Value = server.requests()[1].json().unwrap();
    valid(&body);
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!("responses_request__reasoning_round_trip", body);

    let input = body["input"].as_array().unwrap();
    assert_eq!(input[1]["type"], "reasoning");
    assert_eq!(input[1]["id"], "rs_A");
    assert_eq!(input[1]["encrypted_content"], "ENC-A");
    assert_eq!(input[2]["type"], "function_call");
    assert_eq!(input[3]["type"], "function_call_output");
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
    let body = sent_body(&Responses, req, |m| m).await;
    valid(&body);
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!("responses_request__sample_conversation", body);
}

#[tokio::test]
async fn options_structured_output_and_tool_choice_are_sent_as_documented() {
    let req = ChatRequest::new(vec![Msg::user("weather?")])
        .with_tools(reins_model::testing::weather_and_delete_tools())
        .with_tool_choice(ToolChoice::Tool("get_weather".into()))
        .with_options(ChatOptions {
            temperature: Some(0.2),
            max_tokens: Some(300),
            response_format: Some(ResponseFormat::JsonSchema {
                name: "weather".into(),
                schema: json!({"type": "object", "properties": {"c": {"type": "number"}}, "required": ["c"], "additionalProperties": false}),
                strict: true,
            }),
            ..ChatOptions::default()
        });
    let body = sent_body(&Responses, req, |m| m).await;
    valid(&body);
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!("responses_request__options", body);

    let store = sent_body(&Responses, ChatRequest::new(vec![Msg::user("hi")]), |m| {
        m.with_store(true)
    })
    .await;
    assert_eq!(store["store"], true);
}

/// Every function tool says `strict` (left out, the API takes `true` and makes every
/// argument required): `false` for `send_email`, whose `subject` and `body` are
/// optional, so the model may leave them out; `true` for a schema written for strict
/// mode (closed, every property required, the optional one nullable).
#[tokio::test]
async fn function_tools_say_strict_and_optional_arguments_stay_optional() {
    let send_email = reins_message::ToolSpec::new(
        "send_email",
        "Send an email",
        json!({
            "type": "object",
            "properties": {
                "to": { "type": "string" },
                "subject": { "type": "string" },
                "body": { "type": "string" }
            },
            "required": ["to"]
        }),
    );
    let lookup = reins_message::ToolSpec::new(
        "lookup_contact",
        "Find a contact",
        json!({
            "type": "object",
            "properties": {
                "name": { "type": "string" },
                "team": { "type": ["string", "null"] }
            },
            "required": ["name", "team"],
            "additionalProperties": false
        }),
    );
    let req = ChatRequest::new(vec![Msg::user("mail ana")]).with_tools(vec![send_email, lookup]);
    let body = sent_body(&Responses, req, |m| m).await;
    valid(&body);
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools[0]["name"], "send_email");
    assert_eq!(tools[0]["strict"], false, "{body:#}");
    assert_eq!(tools[0]["parameters"]["required"], json!(["to"]));
    assert_eq!(tools[1]["name"], "lookup_contact");
    assert_eq!(tools[1]["strict"], true, "{body:#}");
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!("responses_request__strict", body["tools"]);

    // The checker holds the API's rules: a tool without `strict`, or a strict one
    // whose schema leaves an argument optional, is refused.
    let mut unsaid = body.clone();
    unsaid["tools"][1].as_object_mut().unwrap().remove("strict");
    assert!(!responses_request_problems(&unsaid).is_empty());
    let mut forced = body.clone();
    forced["tools"][0]["strict"] = json!(true);
    let problems = responses_request_problems(&forced);
    assert!(
        problems.iter().any(|p| p.contains("`subject`")),
        "{problems:#?}"
    );
}

#[tokio::test]
async fn azure_posts_to_the_deployment_with_an_api_key_header_and_api_version() {
    let server = TestServer::start(
        reins_model::testing::Endpoint::post("/openai/v1/responses").with_header("api-key", KEY),
    );
    server.reply(Reply::sse(text("hi")));
    let m = OpenAiResponses::azure(format!("{}/", server.url()), "my-deployment")
        .with_api_key(KEY)
        .with_api_version("preview");
    let done = m
        .complete(ChatRequest::new(vec![Msg::user("hi")]))
        .await
        .unwrap();
    assert_eq!(done.message.text(), "hi");
    let r = &server.requests()[0];
    assert_eq!(r.query, "api-version=preview");
    assert!(r.header("authorization").is_none());
    assert_eq!(r.json().unwrap()["model"], "my-deployment");
    assert!(!format!("{m:?}").contains(KEY));
}

/// Thinking signed by Anthropic or another provider is left out (never sent to the
/// Responses API, which would refuse its token); the turn itself stays.
#[test]
fn thinking_from_other_providers_is_left_out() {
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
                    signature: Some(signature::seal("gemini", "CiQB0e2K")),
                },
                ContentBlock::ToolUse(call),
            ],
        ),
        Msg::tool_results([ToolResult::success("toolu_1", "get_weather", "sunny")]),
    ];
    let body = OpenAiResponses::openai("gpt-test")
        .request_body(&ChatRequest::new(history))
        .unwrap();
    valid(&body);
    let text = body.to_string();
    assert!(
        !text.contains("EqQBCgIYAhIM1gbcDa9G") && !text.contains("CiQB0e2K"),
        "{body:#}"
    );
    assert_eq!(body["input"][1]["type"], "function_call");
}

#[tokio::test]
async fn a_refusal_and_an_incomplete_answer_have_their_finish_reasons() {
    let refused = stream(&[
        created(),
        message_added(0),
        json!({"type": "response.refusal.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "I can't help with that."}),
        completed(0),
    ]);
    let server = Responses.serve(Reply::sse(refused));
    let done = model(&server)
        .complete(ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap();
    assert_eq!(done.finish_reason, Some(FinishReason::ContentFilter));
    let cut = stream(&[
        created(),
        message_added(0),
        text_delta(0, "Once upon"),
        json!({"type": "response.incomplete", "response": {"id": "resp_1", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}}),
    ]);
    let server = Responses.serve(Reply::sse(cut));
    let done = model(&server)
        .complete(ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap();
    assert_eq!(done.finish_reason, Some(FinishReason::Length));
    assert_eq!(done.message.text(), "Once upon");
}

#[tokio::test]
async fn failed_and_error_events_are_typed_errors() {
    let failed = stream(&[
        created(),
        json!({"type": "response.failed", "response": {"id": "resp_1", "status": "failed", "error": {"code": "server_error", "message": "The model failed."}}}),
    ]);
    let server = Responses.serve(Reply::sse(failed));
    let err = model(&server)
        .complete(ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("The model failed."), "{err}");
    let error = stream(&[
        json!({"type": "error", "code": "rate_limit_exceeded", "message": "Slow down.", "param": null}),
    ]);
    let server = Responses.serve(Reply::sse(error));
    let err = model(&server)
        .complete(ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, reins_model::ModelError::RateLimited { .. }),
        "{err:?}"
    );
}

/// Snapshots with object keys sorted: they pin the content, not the order serde_json
/// keeps keys in (insertion order when a dependency turns on `preserve_order`).
fn sorted_maps() -> insta::internals::SettingsBindDropGuard {
    let mut settings = insta::Settings::clone_current();
    settings.set_sort_maps(true);
    settings.bind_to_scope()
}
