//! Reasoning that survives a pause: an agent over the real provider clients, against
//! a loopback server replaying documented streams. A tool call made with reasoning
//! pauses for a person; a second agent over the same store (SQLite: two pools on
//! one file, as a new process has) resolves it; the next request carries the
//! reasoning exactly and passes the provider's validity rules. Also: an approval
//! with edited arguments, a rejection, an interrupt in the middle of a reasoning
//! stream, a fork before the call, and a transcript continued on another provider.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use reins_agent::{Agent, Decision, RunEvent, RunStatus};
use reins_anthropic::AnthropicChat;
use reins_gemini::GeminiChat;
use reins_message::Msg;
use reins_model::ChatModel;
use reins_model::testing::rules::{gemini_request_problems, responses_request_problems};
use reins_model::testing::{Endpoint, Reply, TestServer, fast_retry, sse_typed};
use reins_openai::OpenAiResponses;
use reins_tool::ToolPolicy;
use serde_json::{Value, json};
use support::*;

const KEY: &str = "sk-reasoning-test";

fn responses_at(server: &TestServer) -> Arc<dyn ChatModel> {
    Arc::new(
        OpenAiResponses::openai("gpt-test")
            .with_base_url(format!("{}/v1", server.url()))
            .with_api_key(KEY)
            .with_retry(fast_retry()),
    )
}

fn events(evs: &[Value]) -> String {
    let evs: Vec<String> = evs.iter().map(Value::to_string).collect();
    sse_typed(&evs)
}

fn reasoning_start(rs: &str, thought: &str) -> Vec<Value> {
    vec![
        json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": rs, "type": "reasoning", "summary": []}}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": rs, "output_index": 0, "summary_index": 0, "delta": thought}),
    ]
}

/// Reasoning `rs` (encrypted `enc`), then a call of `delete_file`.
fn reasoning_call(rs: &str, enc: &str, call_id: &str, path: &str) -> String {
    let args = json!({ "path": path }).to_string();
    let mut evs = reasoning_start(rs, "The user wants the file gone.");
    evs.extend([
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"id": rs, "type": "reasoning", "summary": [{"type": "summary_text", "text": "The user wants the file gone."}], "encrypted_content": enc}}),
        json!({"type": "response.output_item.added", "output_index": 1, "item": {"id": "fc_1", "type": "function_call", "call_id": call_id, "name": "delete_file", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 1, "delta": args}),
        json!({"type": "response.output_item.done", "output_index": 1, "item": {"id": "fc_1", "type": "function_call", "call_id": call_id, "name": "delete_file", "arguments": args}}),
        json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "usage": {"input_tokens": 20, "output_tokens": 40, "output_tokens_details": {"reasoning_tokens": 32}}}}),
    ]);
    events(&evs)
}

fn text_answer(t: &str) -> String {
    events(&[
        json!({"type": "response.created", "response": {"id": "resp_2", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": t}),
        json!({"type": "response.completed", "response": {"id": "resp_2", "status": "completed"}}),
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

fn valid_responses(body: &Value) {
    let problems = responses_request_problems(body);
    assert!(problems.is_empty(), "{problems:#?}\n{body:#}");
}

fn body(server: &TestServer, i: usize) -> Value {
    server.requests()[i].json().unwrap()
}

fn server() -> TestServer {
    TestServer::start(Endpoint::post("/v1/responses"))
}

/// The pause and the decision, on a second agent over the same store; returns the
/// server, the counter and the request that followed the decision.
async fn paused_then(
    decision: Decision,
    store_a: SharedStore,
    store_b: SharedStore,
) -> (TestServer, Counter, Value) {
    let server = server();
    server.reply_once(Reply::sse(reasoning_call(
        "rs_keep", "ENC-KEEP", "call_del", "a.txt",
    )));
    server.reply(Reply::sse(text_answer("Done.")));
    let counter = Counter::default();
    {
        let first = agent_on(responses_at(&server), store_a, &counter);
        let s = first.session("rs").await.unwrap();
        let out = s.send(Msg::user("delete a.txt")).await.unwrap();
        assert_eq!(out.status, RunStatus::Paused);
    }
    let second = agent_on(responses_at(&server), store_b, &counter);
    let s = second.session("rs").await.unwrap();
    let out = s.resolve(vec![decision]).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed, "{out:?}");
    assert_eq!(server.request_count(), 2);
    let next = body(&server, 1);
    valid_responses(&next);
    assert_valid(&s.messages().await.unwrap());
    (server, counter, next)
}

fn reasoning_items(body: &Value) -> Vec<Value> {
    body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "reasoning")
        .cloned()
        .collect()
}

#[tokio::test]
async fn responses_reasoning_survives_a_pause_and_a_resume_elsewhere() {
    for (label, a, b, _keep) in store_pairs("rs_pause").await {
        let (_server, counter, next) = paused_then(Decision::approve("call_del"), a, b).await;
        assert_eq!(counter.count("delete_file"), 1, "{label}");
        let input = next["input"].as_array().unwrap();
        let at = input.iter().position(|i| i["type"] == "reasoning").unwrap();
        assert_eq!(input[at]["id"], "rs_keep", "{label}");
        assert_eq!(input[at]["encrypted_content"], "ENC-KEEP", "{label}");
        assert_eq!(input[at + 1]["type"], "function_call", "{label}");
        assert_eq!(input[at + 1]["call_id"], "call_del");
        assert_eq!(input[at + 2]["type"], "function_call_output");
    }
}

#[tokio::test]
async fn responses_edited_arguments_and_a_rejection_give_valid_requests() {
    for (label, a, b, _keep) in store_pairs("rs_edit").await {
        let (_s, counter, next) = paused_then(
            Decision::approve_with("call_del", json!({"path": "b.txt"})),
            a,
            b,
        )
        .await;
        assert_eq!(
            counter.args("delete_file"),
            vec![json!({"path": "b.txt"})],
            "{label}"
        );
        assert_eq!(reasoning_items(&next)[0]["encrypted_content"], "ENC-KEEP");
    }
    for (label, a, b, _keep) in store_pairs("rs_reject").await {
        let (_s, counter, next) = paused_then(Decision::reject("call_del", "keep it"), a, b).await;
        assert_eq!(counter.count("delete_file"), 0, "{label}");
        assert_eq!(reasoning_items(&next)[0]["encrypted_content"], "ENC-KEEP");
        let out = next["input"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "function_call_output")
            .unwrap()
            .clone();
        assert!(out["output"].as_str().unwrap().contains("keep it"), "{out}");
    }
}

/// An interrupt while the reasoning summary streams: nothing of the turn is kept,
/// and the next request carries no orphan reasoning.
#[tokio::test]
async fn responses_an_interrupt_mid_reasoning_leaves_the_next_request_valid() {
    let server = server();
    server.reply_once(Reply::sse(events(&reasoning_start("rs_cut", "Thinking ab"))).then_silence());
    server.reply(Reply::sse(text_answer("Hello.")));
    let counter = Counter::default();
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    let agent = agent_on(responses_at(&server), store, &counter);
    let s = agent.session("cut").await.unwrap();
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
    valid_responses(&next);
    assert!(reasoning_items(&next).is_empty(), "{next:#}");
}

/// A fork from before the call: the fork's next request has neither the call nor
/// its reasoning.
#[tokio::test]
async fn responses_a_fork_before_the_call_is_valid() {
    let server = server();
    server.reply_once(Reply::sse(reasoning_call(
        "rs_f", "ENC-F", "call_f", "a.txt",
    )));
    server.reply(Reply::sse(text_answer("Forked.")));
    let counter = Counter::default();
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    let agent = agent_on(responses_at(&server), store, &counter);
    let s = agent.session("orig").await.unwrap();
    assert_eq!(
        s.send(Msg::user("delete a.txt")).await.unwrap().status,
        RunStatus::Paused
    );
    let fork = s
        .fork(reins_agent::ForkPoint::Messages(1), "forked")
        .await
        .unwrap();
    let out = fork.send(Msg::user("just say hi")).await.unwrap();
    assert_eq!(out.message.text(), "Forked.");
    let next = body(&server, 1);
    valid_responses(&next);
    assert!(!next.to_string().contains("ENC-F"), "{next:#}");
}

/// A transcript made on the Responses API and continued on Anthropic: the sealed
/// reasoning is left out (logged), the request is one Anthropic accepts.
#[tokio::test]
async fn a_responses_transcript_continues_on_anthropic_without_its_reasoning() {
    let server = server();
    server.reply_once(Reply::sse(reasoning_call(
        "rs_x", "ENC-X", "call_x", "a.txt",
    )));
    let counter = Counter::default();
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    {
        let first = agent_on(responses_at(&server), store.clone(), &counter);
        let s = first.session("cross").await.unwrap();
        assert_eq!(
            s.send(Msg::user("delete a.txt")).await.unwrap().status,
            RunStatus::Paused
        );
    }
    let anthropic_server = TestServer::start(Endpoint::post("/v1/messages"));
    anthropic_server.reply(Reply::sse(sse_typed(&[
        r#"{"type":"message_start","message":{"usage":{"input_tokens":5}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Deleted."}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#,
        r#"{"type":"message_stop"}"#,
    ])));
    let claude: Arc<dyn ChatModel> = Arc::new(
        AnthropicChat::new("claude-test")
            .with_base_url(anthropic_server.url())
            .with_api_key(KEY)
            .with_retry(fast_retry()),
    );
    let second = agent_on(claude, store, &counter);
    let s = second.session("cross").await.unwrap();
    let out = s.resolve(vec![Decision::approve("call_x")]).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    let sent: Value = anthropic_server.requests()[0].json().unwrap();
    let text = sent.to_string();
    assert!(
        !text.contains("ENC-X") && !text.contains("openai-responses"),
        "{sent:#}"
    );
    assert!(!text.contains("\"thinking\""), "{sent:#}");
    assert!(
        text.contains("tool_use") && text.contains("tool_result"),
        "{sent:#}"
    );
}

// ---- Gemini: thought signatures on function calls -------------------------------

const GEMINI_PATH: &str = "/v1beta/models/gemini-test:streamGenerateContent";

fn gemini_at(server: &TestServer) -> Arc<dyn ChatModel> {
    Arc::new(
        GeminiChat::new("gemini-test")
            .with_base_url(format!("{}/v1beta", server.url()))
            .with_api_key(KEY)
            .with_retry(fast_retry()),
    )
}

fn gemini_server() -> TestServer {
    TestServer::start(Endpoint::post(GEMINI_PATH))
}

fn data(chunks: &[Value]) -> String {
    let chunks: Vec<String> = chunks.iter().map(Value::to_string).collect();
    reins_model::testing::sse_data(&chunks)
}

/// A thought, then a signed call of `delete_file` (id `call_id`).
fn gemini_call(sig: &str, call_id: &str, path: &str) -> String {
    data(&[
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "The user wants it gone.", "thought": true}]}}]}),
        json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"id": call_id, "name": "delete_file", "args": {"path": path}}, "thoughtSignature": sig}
        ]}, "finishReason": "STOP"}],
         "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 9, "thoughtsTokenCount": 31}}),
    ])
}

fn gemini_text(t: &str) -> String {
    data(&[
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": t}]}, "finishReason": "STOP"}]}),
    ])
}

fn valid_gemini(body: &Value) {
    let problems = gemini_request_problems(body);
    assert!(problems.is_empty(), "{problems:#?}\n{body:#}");
}

async fn gemini_paused_then(
    decision: Decision,
    store_a: SharedStore,
    store_b: SharedStore,
) -> (Counter, Value) {
    let server = gemini_server();
    server.reply_once(Reply::sse(gemini_call("SIG-KEEP", "call_g", "a.txt")));
    server.reply(Reply::sse(gemini_text("Done.")));
    let counter = Counter::default();
    {
        let first = agent_on(gemini_at(&server), store_a, &counter);
        let s = first.session("g").await.unwrap();
        assert_eq!(
            s.send(Msg::user("delete a.txt")).await.unwrap().status,
            RunStatus::Paused
        );
    }
    let second = agent_on(gemini_at(&server), store_b, &counter);
    let s = second.session("g").await.unwrap();
    let out = s.resolve(vec![decision]).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed, "{out:?}");
    let next = body(&server, 1);
    valid_gemini(&next);
    assert_valid(&s.messages().await.unwrap());
    (counter, next)
}

/// The model turn of `body` that calls `delete_file`, and its first call part.
fn signed_part(body: &Value) -> Value {
    body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] == "model")
        .flat_map(|c| c["parts"].as_array().unwrap().clone())
        .find(|p| p.get("functionCall").is_some())
        .unwrap()
}

#[tokio::test]
async fn gemini_thought_signature_survives_a_pause_and_a_resume_elsewhere() {
    for (label, a, b, _keep) in store_pairs("g_pause").await {
        let (counter, next) = gemini_paused_then(Decision::approve("call_g"), a, b).await;
        assert_eq!(counter.count("delete_file"), 1, "{label}");
        let part = signed_part(&next);
        assert_eq!(part["thoughtSignature"], "SIG-KEEP", "{label}");
        assert_eq!(part["functionCall"]["id"], "call_g");
        assert!(
            !next.to_string().contains("The user wants it gone."),
            "thoughts are not sent back"
        );
    }
}

#[tokio::test]
async fn gemini_edited_arguments_and_a_rejection_give_valid_requests() {
    for (label, a, b, _keep) in store_pairs("g_edit").await {
        let (counter, next) = gemini_paused_then(
            Decision::approve_with("call_g", json!({"path": "b.txt"})),
            a,
            b,
        )
        .await;
        assert_eq!(
            counter.args("delete_file"),
            vec![json!({"path": "b.txt"})],
            "{label}"
        );
        assert_eq!(signed_part(&next)["thoughtSignature"], "SIG-KEEP");
    }
    for (label, a, b, _keep) in store_pairs("g_reject").await {
        let (counter, next) = gemini_paused_then(Decision::reject("call_g", "keep it"), a, b).await;
        assert_eq!(counter.count("delete_file"), 0, "{label}");
        assert_eq!(signed_part(&next)["thoughtSignature"], "SIG-KEEP");
        assert!(next.to_string().contains("keep it"), "{next:#}");
        assert!(
            next.to_string().contains("\"error\""),
            "a rejection is an error response: {next:#}"
        );
    }
}

#[tokio::test]
async fn gemini_an_interrupt_mid_thought_leaves_the_next_request_valid() {
    let server = gemini_server();
    server.reply_once(
        Reply::sse(data(&[json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Thinking ab", "thought": true}]}}]})]))
            .then_silence(),
    );
    server.reply(Reply::sse(gemini_text("Hello.")));
    let counter = Counter::default();
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    let agent = agent_on(gemini_at(&server), store, &counter);
    let s = agent.session("g_cut").await.unwrap();
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
    valid_gemini(&next);
    assert!(!next.to_string().contains("thoughtSignature"), "{next:#}");
}

#[tokio::test]
async fn gemini_a_fork_before_the_call_is_valid() {
    let server = gemini_server();
    server.reply_once(Reply::sse(gemini_call("SIG-F", "call_f", "a.txt")));
    server.reply(Reply::sse(gemini_text("Forked.")));
    let counter = Counter::default();
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    let agent = agent_on(gemini_at(&server), store, &counter);
    let s = agent.session("g_orig").await.unwrap();
    assert_eq!(
        s.send(Msg::user("delete a.txt")).await.unwrap().status,
        RunStatus::Paused
    );
    let fork = s
        .fork(reins_agent::ForkPoint::Messages(1), "g_forked")
        .await
        .unwrap();
    let out = fork.send(Msg::user("just say hi")).await.unwrap();
    assert_eq!(out.message.text(), "Forked.");
    let next = body(&server, 1);
    valid_gemini(&next);
    assert!(!next.to_string().contains("SIG-F"), "{next:#}");
}

/// A transcript made on Gemini and continued on the Responses API, and one made on
/// the Responses API continued on Gemini: each drops the other's tokens and sends a
/// request its rules accept.
#[tokio::test]
async fn transcripts_cross_between_gemini_and_responses() {
    // Gemini → Responses.
    let g = gemini_server();
    g.reply_once(Reply::sse(gemini_call("SIG-X", "call_x", "a.txt")));
    let r = server();
    r.reply(Reply::sse(text_answer("Deleted.")));
    let counter = Counter::default();
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    {
        let first = agent_on(gemini_at(&g), store.clone(), &counter);
        let s = first.session("x").await.unwrap();
        assert_eq!(
            s.send(Msg::user("delete a.txt")).await.unwrap().status,
            RunStatus::Paused
        );
    }
    let second = agent_on(responses_at(&r), store, &counter);
    let s = second.session("x").await.unwrap();
    assert_eq!(
        s.resolve(vec![Decision::approve("call_x")])
            .await
            .unwrap()
            .status,
        RunStatus::Completed
    );
    let sent = body(&r, 0);
    valid_responses(&sent);
    assert!(!sent.to_string().contains("SIG-X"), "{sent:#}");

    // Responses → Gemini.
    let r = server();
    r.reply_once(Reply::sse(reasoning_call(
        "rs_y", "ENC-Y", "call_y", "a.txt",
    )));
    let g = gemini_server();
    g.reply(Reply::sse(gemini_text("Deleted.")));
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    {
        let first = agent_on(responses_at(&r), store.clone(), &counter);
        let s = first.session("y").await.unwrap();
        assert_eq!(
            s.send(Msg::user("delete a.txt")).await.unwrap().status,
            RunStatus::Paused
        );
    }
    let second = agent_on(gemini_at(&g), store, &counter);
    let s = second.session("y").await.unwrap();
    assert_eq!(
        s.resolve(vec![Decision::approve("call_y")])
            .await
            .unwrap()
            .status,
        RunStatus::Completed
    );
    let sent = body(&g, 0);
    valid_gemini(&sent);
    assert!(!sent.to_string().contains("ENC-Y"), "{sent:#}");
    assert_eq!(
        signed_part(&sent)["thoughtSignature"],
        reins_gemini::PLACEHOLDER_SIGNATURE
    );
}
