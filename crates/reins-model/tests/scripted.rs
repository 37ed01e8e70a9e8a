#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! `ScriptedModel`: plays scripts and rules, streams in chunks, fails on demand.

use std::time::Duration;

use futures::StreamExt;
use reins_message::{ContentBlock, Msg, Usage};
use reins_model::{
    ChatChunk, ChatModel, ChatRequest, FinishReason, ModelError, ScriptedModel, ScriptedResponse,
};
use serde_json::json;

fn req(text: &str) -> ChatRequest {
    ChatRequest::new(vec![Msg::user(text)])
}

#[tokio::test]
async fn plays_the_script_in_order_then_refuses() {
    let model = ScriptedModel::new([
        ScriptedResponse::text("one"),
        ScriptedResponse::tool_call("a", json!({"x": 1})).then_tool_call("b", json!({})),
    ])
    .with_name("fake-1");
    assert_eq!(model.model_name(), "fake-1");
    let first = model.complete(req("1")).await.unwrap();
    assert_eq!(first.message.text(), "one");
    assert_eq!(first.finish_reason, Some(FinishReason::Stop));
    let second = model.complete(req("2")).await.unwrap();
    let ids: Vec<_> = second.message.tool_uses().map(|u| u.id.clone()).collect();
    assert_eq!(ids, ["call_1", "call_2"]);
    assert_eq!(second.finish_reason, Some(FinishReason::ToolUse));
    let err = model.complete(req("3")).await.unwrap_err();
    assert_eq!(
        err,
        ModelError::InvalidRequest("scripted model has no response left (2 played)".into())
    );
    assert_eq!(model.calls(), 3);
    let seen: Vec<_> = model
        .requests()
        .iter()
        .map(|r| r.messages[0].text())
        .collect();
    assert_eq!(seen, ["1", "2", "3"]);
}

#[tokio::test]
async fn rules_come_first_and_clones_share_state() {
    let model = ScriptedModel::new([ScriptedResponse::text("scripted")]).with_rule(|r| {
        r.messages
            .last()
            .filter(|m| m.text().contains("weather"))
            .map(|_| ScriptedResponse::text("sunny"))
    });
    let clone = model.clone();
    assert_eq!(
        clone
            .complete(req("weather?"))
            .await
            .unwrap()
            .message
            .text(),
        "sunny"
    );
    assert_eq!(
        model.complete(req("hi")).await.unwrap().message.text(),
        "scripted"
    );
    assert_eq!(model.calls(), 2);
    assert_eq!(clone.requests().len(), 2);
    assert_eq!(model.remaining(), 0);

    let echo = ScriptedModel::from_fn(|r| ScriptedResponse::text(r.messages[0].text()));
    for word in ["a", "b", "c"] {
        assert_eq!(echo.complete(req(word)).await.unwrap().message.text(), word);
    }
}

#[tokio::test]
async fn streams_in_chunks_of_the_configured_size() {
    let model = ScriptedModel::new([ScriptedResponse::text("abcdefgh")
        .thinking("why", Some("sig".into()))
        .with_usage(Usage {
            input_tokens: 3,
            output_tokens: 4,
            ..Usage::default()
        })])
    .with_chunk_size(3);
    let chunks: Vec<_> = model
        .stream(req("x"))
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(
        chunks,
        vec![
            ChatChunk::TextDelta { text: "abc".into() },
            ChatChunk::TextDelta { text: "def".into() },
            ChatChunk::TextDelta { text: "gh".into() },
            ChatChunk::ThinkingDelta { text: "why".into() },
            ChatChunk::ThinkingSignature {
                signature: "sig".into()
            },
            ChatChunk::Usage(Usage {
                input_tokens: 3,
                output_tokens: 4,
                ..Usage::default()
            }),
            ChatChunk::Finish {
                reason: FinishReason::Stop
            },
        ]
    );
}

#[tokio::test]
async fn malformed_arguments_reach_the_message_raw() {
    let model = ScriptedModel::new([
        ScriptedResponse::raw_tool_call("write", "{\"path\": oops"),
        ScriptedResponse::tool_call_with_id("my-id", "read", json!({"p": "é"})),
    ])
    .with_chunk_size(2);
    let m = model.complete(req("x")).await.unwrap().message;
    let u = m.tool_uses().next().unwrap();
    assert!(u.has_malformed_input());
    assert_eq!(u.raw_input.as_deref(), Some("{\"path\": oops"));
    let m = model.complete(req("y")).await.unwrap().message;
    assert_eq!(
        m.content,
        vec![ContentBlock::ToolUse(reins_message::ToolUse::new(
            "my-id",
            "read",
            json!({"p": "é"})
        ))]
    );
}

#[tokio::test]
async fn errors_before_and_during_the_stream() {
    let model = ScriptedModel::new([
        ScriptedResponse::error(ModelError::Auth {
            message: "bad key".into(),
        }),
        ScriptedResponse::text("abcdefgh")
            .fail_after_chunks(1, ModelError::Network("reset".into())),
    ])
    .with_chunk_size(2);
    assert!(matches!(
        model.stream(req("x")).await.err(),
        Some(ModelError::Auth { .. })
    ));
    let items: Vec<_> = model.stream(req("y")).await.unwrap().collect().await;
    assert_eq!(items.len(), 2);
    assert_eq!(items[0], Ok(ChatChunk::TextDelta { text: "ab".into() }));
    assert_eq!(items[1], Err(ModelError::Network("reset".into())));
    assert_eq!(model.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn latency_waits_before_the_first_chunk() {
    let model = ScriptedModel::new([
        ScriptedResponse::text("slow"),
        ScriptedResponse::text("slower").with_latency(Duration::from_secs(5)),
    ])
    .with_latency(Duration::from_secs(2));
    let t0 = tokio::time::Instant::now();
    model.complete(req("a")).await.unwrap();
    assert_eq!(t0.elapsed().as_secs(), 2);
    model.complete(req("b")).await.unwrap();
    assert_eq!(t0.elapsed().as_secs(), 7);
}
