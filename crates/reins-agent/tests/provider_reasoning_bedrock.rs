//! Bedrock reasoning that survives a pause: an agent over `BedrockChat`, against a
//! loopback server replaying documented ConverseStream frames. A tool call made with
//! a signed reasoning block pauses for a person; a second agent over the same store
//! (SQLite: two pools on one file, as a new process has) resolves it; the next
//! request carries the reasoning block and its signature exactly and passes
//! Bedrock's validity rules. Also: edited arguments, a rejection, an interrupt in
//! the middle of the reasoning stream, a fork before the call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use reins_agent::{Agent, Decision, RunEvent, RunStatus};
use reins_bedrock::BedrockChat;
use reins_bedrock::eventstream::encode_event;
use reins_message::Msg;
use reins_model::ChatModel;
use reins_model::http::HttpSettings;
use reins_model::testing::rules::bedrock_request_problems;
use reins_model::testing::{Endpoint, Reply, TestServer, fast_retry};
use reins_tool::ToolPolicy;
use serde_json::{Value, json};
use support::*;

const PATH: &str = "/model/anthropic.claude-test-v1%3A0/converse-stream";
const SIGNATURE: &str = "ErcBCkgIAhABGAIiQK/sig+==";

fn bedrock_at(server: &TestServer) -> Arc<dyn ChatModel> {
    let http = HttpSettings::new("bedrock", server.url()).with_retry(fast_retry());
    Arc::new(BedrockChat::from_settings(
        http,
        "us-west-2",
        "AKIDTEST",
        "bedrock-test-secret",
        "anthropic.claude-test-v1:0",
    ))
}

fn server() -> TestServer {
    TestServer::start(Endpoint::post(PATH))
}

fn frames(events: &[(&str, Value)]) -> Reply {
    let body: Vec<u8> = events
        .iter()
        .flat_map(|(t, p)| encode_event(t, p))
        .collect();
    Reply::new(200)
        .with_header("content-type", "application/vnd.amazon.eventstream")
        .with_body(body)
}

fn reasoning(index: u64, text: &str) -> (&'static str, Value) {
    (
        "contentBlockDelta",
        json!({"contentBlockIndex": index, "delta": {"reasoningContent": {"text": text}}}),
    )
}

/// Signed reasoning, then a call of `delete_file` (id `call_id`).
fn reasoned_call(call_id: &str, path: &str) -> Reply {
    frames(&[
        ("messageStart", json!({"role": "assistant"})),
        reasoning(0, "The user wants "),
        reasoning(0, "the file gone."),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": SIGNATURE}}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 0})),
        (
            "contentBlockStart",
            json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": call_id, "name": "delete_file"}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": json!({"path": path}).to_string()}}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 1})),
        ("messageStop", json!({"stopReason": "tool_use"})),
        (
            "metadata",
            json!({"usage": {"inputTokens": 20, "outputTokens": 40, "totalTokens": 60}, "metrics": {"latencyMs": 300}}),
        ),
    ])
}

fn text_answer(t: &str) -> Reply {
    frames(&[
        ("messageStart", json!({"role": "assistant"})),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": t}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 0})),
        ("messageStop", json!({"stopReason": "end_turn"})),
    ])
}

fn agent_on(model: Arc<dyn ChatModel>, store: SharedStore, counter: &Counter) -> Agent {
    Agent::builder()
        .model_arc(model)
        .toolkit(toolkit(counter, ToolPolicy::confirm()))
        .store_arc(store)
        .build()
        .unwrap()
}

fn valid(body: &Value) {
    let problems = bedrock_request_problems(body);
    assert!(problems.is_empty(), "{problems:#?}\n{body:#}");
}

fn body(server: &TestServer, i: usize) -> Value {
    server.requests()[i].json().unwrap()
}

async fn paused_then(
    decision: Decision,
    store_a: SharedStore,
    store_b: SharedStore,
) -> (Counter, Value) {
    let server = server();
    server.reply_once(reasoned_call("tooluse_del", "a.txt"));
    server.reply(text_answer("Done."));
    let counter = Counter::default();
    {
        let first = agent_on(bedrock_at(&server), store_a, &counter);
        let s = first.session("b").await.unwrap();
        assert_eq!(
            s.send(Msg::user("delete a.txt")).await.unwrap().status,
            RunStatus::Paused
        );
    }
    let second = agent_on(bedrock_at(&server), store_b, &counter);
    let s = second.session("b").await.unwrap();
    let out = s.resolve(vec![decision]).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed, "{out:?}");
    assert_eq!(server.request_count(), 2);
    let next = body(&server, 1);
    valid(&next);
    assert_valid(&s.messages().await.unwrap());
    (counter, next)
}

/// The assistant message of `body` that calls `delete_file`.
fn calling_message(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| {
            m["content"]
                .as_array()
                .unwrap()
                .iter()
                .any(|b| b.get("toolUse").is_some())
        })
        .unwrap()["content"]
        .as_array()
        .unwrap()
        .clone()
}

fn assert_reasoning_kept(next: &Value) {
    let content = calling_message(next);
    assert_eq!(
        content[0],
        json!({"reasoningContent": {"reasoningText": {
            "text": "The user wants the file gone.", "signature": SIGNATURE
        }}}),
        "{next:#}"
    );
    assert_eq!(content[1]["toolUse"]["toolUseId"], "tooluse_del");
}

#[tokio::test]
async fn bedrock_reasoning_survives_a_pause_and_a_resume_elsewhere() {
    for (label, a, b, _keep) in store_pairs("b_pause").await {
        let (counter, next) = paused_then(Decision::approve("tooluse_del"), a, b).await;
        assert_eq!(counter.count("delete_file"), 1, "{label}");
        assert_reasoning_kept(&next);
    }
}

#[tokio::test]
async fn bedrock_edited_arguments_and_a_rejection_give_valid_requests() {
    for (label, a, b, _keep) in store_pairs("b_edit").await {
        let (counter, next) = paused_then(
            Decision::approve_with("tooluse_del", json!({"path": "b.txt"})),
            a,
            b,
        )
        .await;
        assert_eq!(
            counter.args("delete_file"),
            vec![json!({"path": "b.txt"})],
            "{label}"
        );
        assert_reasoning_kept(&next);
    }
    for (label, a, b, _keep) in store_pairs("b_reject").await {
        let (counter, next) = paused_then(Decision::reject("tooluse_del", "keep it"), a, b).await;
        assert_eq!(counter.count("delete_file"), 0, "{label}");
        assert_reasoning_kept(&next);
        let text = next.to_string();
        assert!(text.contains("keep it"), "{next:#}");
        assert!(text.contains("\"status\":\"error\""), "{next:#}");
    }
}

#[tokio::test]
async fn bedrock_an_interrupt_mid_reasoning_leaves_the_next_request_valid() {
    let server = server();
    server.reply_once(
        frames(&[
            ("messageStart", json!({"role": "assistant"})),
            reasoning(0, "Thinking ab"),
        ])
        .then_silence(),
    );
    server.reply(text_answer("Hello."));
    let counter = Counter::default();
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    let agent = agent_on(bedrock_at(&server), store, &counter);
    let s = agent.session("b_cut").await.unwrap();
    let mut run = s.send(Msg::user("delete a.txt")).start().await.unwrap();
    while let Some(ev) = run.next_event().await {
        if matches!(ev, RunEvent::ThinkingDelta { .. }) {
            break;
        }
    }
    run.interrupt();
    let out = tokio::time::timeout(Duration::from_secs(10), run.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status, RunStatus::Cancelled);
    let out = s.send(Msg::user("never mind, say hello")).await.unwrap();
    assert_eq!(out.message.text(), "Hello.");
    let next = body(&server, 1);
    valid(&next);
    assert!(!next.to_string().contains("reasoningContent"), "{next:#}");
    assert!(!next.to_string().contains("Thinking ab"), "{next:#}");
}

#[tokio::test]
async fn bedrock_a_fork_before_the_call_is_valid() {
    let server = server();
    server.reply_once(reasoned_call("tooluse_f", "a.txt"));
    server.reply(text_answer("Forked."));
    let counter = Counter::default();
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    let agent = agent_on(bedrock_at(&server), store, &counter);
    let s = agent.session("b_orig").await.unwrap();
    assert_eq!(
        s.send(Msg::user("delete a.txt")).await.unwrap().status,
        RunStatus::Paused
    );
    let fork = s
        .fork(reins_agent::ForkPoint::Messages(1), "b_forked")
        .await
        .unwrap();
    let out = fork.send(Msg::user("just say hi")).await.unwrap();
    assert_eq!(out.message.text(), "Forked.");
    let next = body(&server, 1);
    valid(&next);
    assert!(!next.to_string().contains(SIGNATURE), "{next:#}");
    assert!(!next.to_string().contains("toolUse"), "{next:#}");
}
