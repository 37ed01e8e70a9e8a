#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! The Bedrock wire: documented ConverseStream events decoded, request bodies
//! pinned as insta snapshots, reasoning blocks round-tripped with their signatures,
//! SigV4 headers, exceptions mapped to error kinds, and other providers' reasoning.

mod support;

use reins_bedrock::{BedrockChat, CONTINUE_TEXT, PROVIDER};
use reins_message::{ContentBlock, Msg, Role, ToolResult, ToolUse, signature};
use reins_model::testing::rules::bedrock_request_problems;
use reins_model::testing::{ProviderFixture, TestServer, sample_conversation, sent_body};
use reins_model::{
    ChatModel, ChatOptions, ChatRequest, FinishReason, ModelError, ResponseFormat, ToolChoice,
};
use serde_json::{Value, json};
use support::*;

fn valid(body: &Value) {
    let problems = bedrock_request_problems(body);
    assert!(problems.is_empty(), "{problems:#?}\n{body:#}");
}

fn thinking_signature(m: &Msg) -> Option<String> {
    m.content.iter().find_map(|b| match b {
        ContentBlock::Thinking { signature, .. } => signature.clone(),
        _ => None,
    })
}

#[tokio::test]
async fn reasoning_and_a_tool_call_decode_with_the_signature_sealed() {
    let server = Bedrock.serve(Bedrock.stream_reply(reasoned_call(
        "The user wants Paris weather.",
        "EqQBCgIYAhIM",
        "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
        "get_weather",
        r#"{"city": "Paris"}"#,
    )));
    let done = model(&server)
        .complete(ChatRequest::new(vec![Msg::user("weather?")]))
        .await
        .unwrap();
    assert_eq!(done.finish_reason, Some(FinishReason::ToolUse));
    assert_eq!(done.usage.input_tokens, 30);
    assert_eq!(done.usage.output_tokens, 12);
    assert_eq!(done.message.thinking(), "The user wants Paris weather.");
    let sig = thinking_signature(&done.message).unwrap();
    assert_eq!(sig, "bedrock:EqQBCgIYAhIM");
    assert_eq!(signature::unseal(&sig, PROVIDER), Some("EqQBCgIYAhIM"));
    let call = done.message.tool_uses().next().unwrap();
    assert_eq!(call.id, "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q");
    assert_eq!(call.input, json!({"city": "Paris"}));
}

/// The next request sends the reasoning block back first, with its text and its
/// signature exactly as Bedrock gave them, and the tool result first in the next
/// user message.
#[tokio::test]
async fn the_next_request_carries_the_reasoning_block_and_signature() {
    let server = TestServer::start(Bedrock.endpoint());
    server.reply_once(Bedrock.stream_reply(reasoned_call(
        "Need the weather tool.",
        "SIG/abc+123==",
        "tooluse_1",
        "get_weather",
        r#"{"city": "Paris"}"#,
    )));
    server.reply(Bedrock.stream_reply(text("Paris: 18°C.")));
    let m = model(&server);
    let mut history = vec![Msg::system("Be brief."), Msg::user("Weather in Paris?")];
    let request = |h: Vec<Msg>| {
        ChatRequest::new(h).with_tools(reins_model::testing::weather_and_delete_tools())
    };
    let first = m.complete(request(history.clone())).await.unwrap();
    history.push(first.message);
    history.push(Msg::tool_results([ToolResult::success(
        "tooluse_1",
        "get_weather",
        "18°C",
    )]));
    // Through the store's form (JSON) and back.
    let history: Vec<Msg> =
        serde_json::from_str(&serde_json::to_string(&history).unwrap()).unwrap();
    let done = m.complete(request(history)).await.unwrap();
    assert_eq!(done.message.text(), "Paris: 18°C.");
    let body: Value = server.requests()[1].json().unwrap();
    valid(&body);
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!("request__reasoning_round_trip", body);

    let assistant = &body["messages"][1]["content"];
    assert_eq!(
        assistant[0],
        json!({"reasoningContent": {"reasoningText": {"text": "Need the weather tool.", "signature": "SIG/abc+123=="}}})
    );
    assert_eq!(assistant[1]["toolUse"]["toolUseId"], "tooluse_1");
    assert_eq!(
        body["messages"][2]["content"][0]["toolResult"]["toolUseId"],
        "tooluse_1"
    );
}

#[tokio::test]
async fn the_sample_conversation_is_pinned() {
    let req = sample_conversation(["tooluse_w", "tooluse_d"], |w, d| {
        Msg::new(
            Role::Assistant,
            vec![
                ContentBlock::Thinking {
                    thinking: "Two tools.".into(),
                    signature: Some(signature::seal(PROVIDER, "SIG_SAMPLE")),
                },
                ContentBlock::text("Checking both."),
                ContentBlock::ToolUse(w),
                ContentBlock::ToolUse(d),
            ],
        )
    });
    let body = sent_body(&Bedrock, req, |m| m).await;
    valid(&body);
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!("request__sample_conversation", body);

    // The rejection is an error result with the note.
    let results = &body["messages"][2]["content"];
    assert_eq!(results[1]["toolResult"]["status"], "error");
}

#[tokio::test]
async fn options_are_pinned() {
    let mut options = ChatOptions {
        temperature: Some(0.2),
        max_tokens: Some(512),
        stop: vec!["END".into()],
        ..ChatOptions::default()
    };
    options.extra.insert(
        "additionalModelRequestFields".into(),
        json!({"thinking": {"type": "enabled", "budget_tokens": 1024}}),
    );
    let req = ChatRequest::new(vec![Msg::user("hi")])
        .with_tools(reins_model::testing::weather_and_delete_tools())
        .with_tool_choice(ToolChoice::Tool("get_weather".into()))
        .with_options(options);
    let body = sent_body(&Bedrock, req, |m| m).await;
    valid(&body);
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!("request__options", body);
}

#[tokio::test]
async fn requests_are_signed_with_sigv4_for_bedrock() {
    let server = Bedrock.serve(Bedrock.stream_reply(text("ok")));
    let m = model(&server).with_credentials(KEY_ID, SECRET, Some("SESSION-TOKEN".into()));
    m.complete(ChatRequest::new(vec![Msg::user("hi")]))
        .await
        .unwrap();
    let req = &server.requests()[0];
    let auth = req.header("authorization").unwrap();
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDTESTEXAMPLE/"),
        "{auth}"
    );
    assert!(auth.contains("/us-east-1/bedrock/aws4_request"), "{auth}");
    assert!(
        auth.contains("SignedHeaders=") && auth.contains("Signature="),
        "{auth}"
    );
    assert!(auth.contains("x-amz-date"), "{auth}");
    assert!(req.header("x-amz-date").is_some());
    assert_eq!(req.header("x-amz-security-token"), Some("SESSION-TOKEN"));
    assert!(!format!("{:?}", req).contains(SECRET));
    assert!(!format!("{m:?}").contains(SECRET));
    assert!(!format!("{m:?}").contains("SESSION-TOKEN"));
}

/// `with_region` signs for another region and leaves the endpoint; `with_base_url`
/// sends to another endpoint; together they reach another region's Bedrock, as
/// docs/providers.md shows.
#[tokio::test]
async fn with_region_signs_for_it_and_with_base_url_sends_there() {
    let first = TestServer::start(Bedrock.endpoint());
    let other = Bedrock.serve(Bedrock.stream_reply(text("ok")));
    let at_first = model(&first);
    let signed_elsewhere = at_first.clone().with_region("eu-west-1");
    assert_eq!(signed_elsewhere.region(), "eu-west-1");
    assert_eq!(
        signed_elsewhere.base_url(),
        at_first.base_url(),
        "with_region leaves the endpoint"
    );
    let m = signed_elsewhere.with_base_url(other.url());
    assert_eq!(m.base_url(), other.url());
    m.complete(ChatRequest::new(vec![Msg::user("hi")]))
        .await
        .unwrap();
    assert!(first.requests().is_empty());
    let auth = other.requests()[0]
        .header("authorization")
        .unwrap()
        .to_owned();
    assert!(auth.contains("/eu-west-1/bedrock/aws4_request"), "{auth}");

    let guide = include_str!("../../../docs/providers.md");
    let section = guide
        .split("## Amazon Bedrock")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap();
    for method in [".with_region(", ".with_base_url("] {
        assert!(
            section.contains(method),
            "docs/providers.md's Bedrock section does not name `{method}`"
        );
    }
}

/// Whether an error is of the expected kind.
type Check = fn(&ModelError) -> bool;

#[tokio::test]
async fn exceptions_map_to_error_kinds() {
    use reins_bedrock::eventstream::{encode_event, encode_exception};
    let cases: [(&str, Check, usize); 4] = [
        (
            "validationException",
            |e| matches!(e, ModelError::BadRequest { status: 400, .. }),
            1,
        ),
        (
            "accessDeniedException",
            |e| matches!(e, ModelError::Auth { .. }),
            1,
        ),
        (
            "throttlingException",
            |e| matches!(e, ModelError::RateLimited { .. }),
            3,
        ),
        (
            "internalServerException",
            |e| matches!(e, ModelError::Server { .. }),
            3,
        ),
    ];
    for (kind, check, requests) in cases {
        let body = [
            encode_event("messageStart", &json!({"role": "assistant"})),
            encode_exception(kind, "the model said no"),
        ]
        .concat();
        let server = Bedrock.serve(Bedrock.stream_reply(hex(&body)));
        let e = model(&server)
            .complete(ChatRequest::new(vec![Msg::user("hi")]))
            .await
            .unwrap_err();
        assert!(check(&e), "{kind}: {e:?}");
        assert!(e.to_string().contains("the model said no"), "{e}");
        assert_eq!(server.request_count(), requests, "{kind}");
    }
    // As an HTTP status, the same.
    for (status, check) in [
        (
            400u16,
            (|e: &ModelError| matches!(e, ModelError::BadRequest { .. }))
                as fn(&ModelError) -> bool,
        ),
        (403, |e| matches!(e, ModelError::Auth { .. })),
        (429, |e| matches!(e, ModelError::RateLimited { .. })),
    ] {
        let server = Bedrock.serve(reins_model::testing::Reply::json(
            status,
            Bedrock.error_body(status, "refused here"),
        ));
        let e = model(&server)
            .complete(ChatRequest::new(vec![Msg::user("hi")]))
            .await
            .unwrap_err();
        assert!(check(&e), "{status}: {e:?}");
        assert!(e.to_string().contains("refused here"), "{e}");
    }
}

/// An interrupted (unsigned) reasoning block and another provider's reasoning are
/// left out; a call without its result is left out; the request stays valid.
#[tokio::test]
async fn unsigned_and_foreign_reasoning_is_left_out() {
    let req = ChatRequest::new(vec![
        Msg::user("start"),
        Msg::new(
            Role::Assistant,
            vec![
                ContentBlock::Thinking {
                    thinking: "from gemini".into(),
                    signature: Some(signature::seal("gemini", "{}")),
                },
                ContentBlock::Thinking {
                    thinking: "anthropic".into(),
                    signature: Some("EqQBplain".into()),
                },
                ContentBlock::text("Calling."),
                ContentBlock::ToolUse(ToolUse::new(
                    "call_1",
                    "get_weather",
                    json!({"city": "Rome"}),
                )),
            ],
        ),
        Msg::tool_results([ToolResult::success("call_1", "get_weather", "24°C")]),
        // An interrupt mid-reasoning: thinking without its signature.
        Msg::new(Role::Assistant, vec![ContentBlock::thinking("half a thou")]),
        Msg::user("go on"),
    ])
    .with_tools(reins_model::testing::weather_and_delete_tools());
    let body = BedrockChat::new("m").request_body(&req).unwrap();
    valid(&body);
    let text = body.to_string();
    assert!(!text.contains("from gemini") && !text.contains("EqQBplain"));
    assert!(!text.contains("half a thou"));
    assert_eq!(body["messages"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn redacted_reasoning_round_trips() {
    let body = stream(&[
        ("messageStart", json!({"role": "assistant"})),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"redactedContent": "UkVEQUNURUQ="}}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 0})),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"text": "Done."}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 1})),
        ("messageStop", json!({"stopReason": "end_turn"})),
    ]);
    let server = Bedrock.serve(Bedrock.stream_reply(body));
    let done = model(&server)
        .complete(ChatRequest::new(vec![Msg::user("hi")]))
        .await
        .unwrap();
    assert_eq!(done.finish_reason, Some(FinishReason::Stop));
    let req = ChatRequest::new(vec![Msg::user("hi"), done.message, Msg::user("more")]);
    let body = BedrockChat::new("m").request_body(&req).unwrap();
    valid(&body);
    assert_eq!(
        body["messages"][1]["content"][0],
        json!({"reasoningContent": {"redactedContent": "UkVEQUNURUQ="}})
    );
}

#[test]
fn a_conversation_starting_with_the_assistant_gets_a_user_turn_first() {
    let req = ChatRequest::new(vec![
        Msg::assistant("Hello, how can I help?"),
        Msg::user("hi"),
    ]);
    let body = BedrockChat::new("m").request_body(&req).unwrap();
    valid(&body);
    assert_eq!(body["messages"][0]["content"][0]["text"], CONTINUE_TEXT);
}

#[test]
fn structured_output_and_missing_tools_are_typed_errors() {
    let req = ChatRequest::new(vec![Msg::user("hi")]).with_options(ChatOptions {
        response_format: Some(ResponseFormat::JsonObject),
        ..ChatOptions::default()
    });
    assert!(matches!(
        BedrockChat::new("m").request_body(&req),
        Err(ModelError::InvalidRequest(_))
    ));
    let req =
        ChatRequest::new(vec![Msg::user("hi")]).with_tool_choice(ToolChoice::Tool("nope".into()));
    assert!(matches!(
        BedrockChat::new("m").request_body(&req),
        Err(ModelError::InvalidRequest(_))
    ));
}

#[tokio::test]
async fn missing_credentials_are_an_auth_error() {
    let server = Bedrock.serve(Bedrock.stream_reply(text("ok")));
    let http = Bedrock.setup(&server).http_settings("bedrock");
    let m = BedrockChat::from_settings(http, "us-east-1", "", SECRET, MODEL);
    let e = m
        .complete(ChatRequest::new(vec![Msg::user("hi")]))
        .await
        .unwrap_err();
    assert!(matches!(e, ModelError::Auth { .. }), "{e:?}");
    assert!(e.to_string().contains("AWS_ACCESS_KEY_ID"));
    assert_eq!(server.request_count(), 0);
}

/// Snapshots with object keys sorted: they pin the content, not the order serde_json
/// keeps keys in (insertion order when a dependency turns on `preserve_order`).
fn sorted_maps() -> insta::internals::SettingsBindDropGuard {
    let mut settings = insta::Settings::clone_current();
    settings.set_sort_maps(true);
    settings.bind_to_scope()
}
