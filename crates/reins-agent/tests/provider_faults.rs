//! End to end: an agent over the real OpenAI-compatible and Anthropic clients, against
//! a faulty local server. Invalid tool arguments and unknown tools become error
//! results the model reads and acts on; a server that fails or a stream cut in the
//! middle of a tool call fails the call with a typed error — and in every case the
//! stored session stays provider-valid and the run can be resumed once the server
//! recovers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::sync::Arc;
use std::time::Duration;

use reins_agent::{Agent, AgentError, RunStatus};
use reins_anthropic::AnthropicChat;
use reins_message::{Msg, ToolOutcome};
use reins_model::{ChatModel, ModelError, RetryPolicy};
use reins_openai::OpenAiChat;
use reins_tool::ToolPolicy;
use support::*;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// How one provider speaks on the wire, for the shared scenarios below.
struct Wire {
    path: &'static str,
    model: Arc<dyn ChatModel>,
    /// A complete response: one tool call with these raw arguments.
    tool: fn(&str, &str, &str) -> String,
    /// A complete text response.
    text: fn(&str) -> String,
    /// A response cut in the middle of a tool call's arguments.
    cut: fn() -> String,
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 2,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(2),
        max_elapsed: Duration::from_secs(10),
        jitter: 0.0,
    }
}

fn openai(server: &MockServer) -> Wire {
    fn data(events: &[String]) -> String {
        events
            .iter()
            .map(|e| format!("data: {e}\n\n"))
            .collect::<String>()
            + "data: [DONE]\n\n"
    }
    fn tool(id: &str, name: &str, args: &str) -> String {
        let args = serde_json::to_string(args).unwrap();
        data(&[
            format!(
                r#"{{"choices":[{{"index":0,"delta":{{"role":"assistant","tool_calls":[{{"index":0,"id":"{id}","type":"function","function":{{"name":"{name}","arguments":{args}}}}}]}},"finish_reason":null}}]}}"#
            ),
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#.to_owned(),
        ])
    }
    fn text(t: &str) -> String {
        data(&[
            format!(
                r#"{{"choices":[{{"index":0,"delta":{{"role":"assistant","content":"{t}"}},"finish_reason":null}}]}}"#
            ),
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#.to_owned(),
        ])
    }
    fn cut() -> String {
        [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_cut","type":"function","function":{"name":"search_web","arguments":""}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"query\": \"ru"}}]},"finish_reason":null}]}"#,
        ]
        .iter()
        .map(|e| format!("data: {e}\n\n"))
        .collect()
    }
    Wire {
        path: "/v1/chat/completions",
        model: Arc::new(
            OpenAiChat::compatible(format!("{}/v1", server.uri()), "test-model")
                .with_api_key("sk-e2e")
                .with_retry(fast_retry()),
        ),
        tool,
        text,
        cut,
    }
}

fn anthropic(server: &MockServer) -> Wire {
    fn events(events: &[String]) -> String {
        events
            .iter()
            .map(|e| {
                let kind: serde_json::Value = serde_json::from_str(e).unwrap();
                format!("event: {}\ndata: {e}\n\n", kind["type"].as_str().unwrap())
            })
            .collect()
    }
    const START: &str = r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-test","usage":{"input_tokens":5,"output_tokens":1}}}"#;
    fn tool(id: &str, name: &str, args: &str) -> String {
        let args = serde_json::to_string(args).unwrap();
        events(&[
            START.to_owned(),
            format!(r#"{{"type":"content_block_start","index":0,"content_block":{{"type":"tool_use","id":"{id}","name":"{name}","input":{{}}}}}}"#),
            format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"input_json_delta","partial_json":{args}}}}}"#),
            r#"{"type":"content_block_stop","index":0}"#.to_owned(),
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#.to_owned(),
            r#"{"type":"message_stop"}"#.to_owned(),
        ])
    }
    fn text(t: &str) -> String {
        events(&[
            START.to_owned(),
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_owned(),
            format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{t}"}}}}"#),
            r#"{"type":"content_block_stop","index":0}"#.to_owned(),
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#.to_owned(),
            r#"{"type":"message_stop"}"#.to_owned(),
        ])
    }
    fn cut() -> String {
        events(&[
            START.to_owned(),
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_cut","name":"search_web","input":{}}}"#.to_owned(),
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"query\": \"ru"}}"#.to_owned(),
        ])
    }
    Wire {
        path: "/v1/messages",
        model: Arc::new(
            AnthropicChat::new("claude-test")
                .with_base_url(server.uri())
                .with_api_key("sk-ant-e2e")
                .with_retry(fast_retry()),
        ),
        tool,
        text,
        cut,
    }
}

fn sse(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(body)
}

/// Serves `responses` in order, one request each.
async fn script(server: &MockServer, wire: &Wire, responses: Vec<ResponseTemplate>) {
    for (i, r) in responses.into_iter().enumerate() {
        Mock::given(method("POST"))
            .and(path(wire.path))
            .respond_with(r)
            .up_to_n_times(1)
            .with_priority(u8::try_from(i + 1).unwrap())
            .mount(server)
            .await;
    }
}

async fn bodies(server: &MockServer) -> Vec<String> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

fn build(wire: &Wire, counter: &Counter) -> Agent {
    Agent::builder()
        .model_arc(wire.model.clone())
        .toolkit(toolkit(counter, ToolPolicy::auto()))
        .build()
        .unwrap()
}

/// Invalid JSON arguments, then an unknown tool: both become error results that go
/// back to the model, which then answers.
async fn bad_calls_become_error_results(make: fn(&MockServer) -> Wire) {
    let server = MockServer::start().await;
    let wire = make(&server);
    script(
        &server,
        &wire,
        vec![
            sse((wire.tool)(
                "c_bad",
                "delete_file",
                r#"{"path": "a.txt", oops"#,
            )),
            sse((wire.tool)("c_unknown", "format_disk", r#"{"disk": "C:"}"#)),
            sse((wire.text)("I could not do it.")),
        ],
    )
    .await;
    let counter = Counter::default();
    let agent = build(&wire, &counter);
    let out = agent.send(Msg::user("clean up")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.message.text(), "I could not do it.");
    assert_eq!(counter.total(), 0, "nothing ran");
    let msgs = agent
        .session("default")
        .await
        .unwrap()
        .messages()
        .await
        .unwrap();
    assert_valid(&msgs);
    let o = outcomes(&msgs);
    assert_eq!(o["c_bad"], ToolOutcome::Error);
    assert_eq!(o["c_unknown"], ToolOutcome::Error);
    assert!(result_text(&msgs, "c_bad").contains("not valid JSON"));
    assert!(result_text(&msgs, "c_unknown").contains("format_disk"));
    // The model was shown both errors in the following requests.
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 3);
    assert!(sent[1].contains("not valid JSON"), "{}", sent[1]);
    assert!(sent[2].contains("format_disk"));
}

/// A server that fails, then a stream cut in the middle of a tool call: typed errors,
/// a valid session, and a resume that completes once the server recovers.
async fn failures_keep_the_session_valid(make: fn(&MockServer) -> Wire) {
    let server = MockServer::start().await;
    let wire = make(&server);
    let overloaded = ResponseTemplate::new(503).set_body_string("overloaded");
    script(
        &server,
        &wire,
        vec![
            overloaded.clone(),
            overloaded,
            sse((wire.tool)("c_ok", "search_web", r#"{"query": "rust"}"#)),
            sse((wire.cut)()),
            sse((wire.text)("Here is what I found.")),
        ],
    )
    .await;
    let counter = Counter::default();
    let agent = build(&wire, &counter);
    let s = agent.session("faulty").await.unwrap();

    let err = s.send(Msg::user("search rust")).await.unwrap_err();
    assert!(
        matches!(
            err,
            AgentError::Model(ModelError::Server { status: 503, .. })
        ),
        "{err}"
    );
    assert_eq!(bodies(&server).await.len(), 2, "retried once, then gave up");
    assert_valid(&s.messages().await.unwrap());

    // Recovered: the tool call streams, the tool runs, then the stream breaks off in
    // the middle of the next tool call.
    let err = s.resume().await.unwrap_err();
    assert!(
        matches!(err, AgentError::Model(ModelError::MalformedStream(_))),
        "{err}"
    );
    assert_eq!(counter.count("search_web"), 1);
    let msgs = s.messages().await.unwrap();
    assert_valid(&msgs);
    assert!(
        !msgs
            .iter()
            .flat_map(|m| m.tool_uses())
            .any(|u| u.id.ends_with("_cut")),
        "the half-streamed tool call is not stored"
    );

    let out = s.resume().await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.message.text(), "Here is what I found.");
    assert_eq!(counter.count("search_web"), 1, "not run again");
    assert_valid(&s.messages().await.unwrap());
}

#[tokio::test]
async fn openai_bad_tool_calls_become_error_results() {
    bad_calls_become_error_results(openai).await;
}

#[tokio::test]
async fn anthropic_bad_tool_calls_become_error_results() {
    bad_calls_become_error_results(anthropic).await;
}

#[tokio::test]
async fn openai_failures_keep_the_session_valid_and_resumable() {
    failures_keep_the_session_valid(openai).await;
}

#[tokio::test]
async fn anthropic_failures_keep_the_session_valid_and_resumable() {
    failures_keep_the_session_valid(anthropic).await;
}

#[tokio::test]
async fn a_request_too_large_for_the_server_is_a_typed_error_and_the_session_stays_valid() {
    let server = MockServer::start().await;
    let wire = openai(&server);
    script(
        &server,
        &wire,
        vec![ResponseTemplate::new(413).set_body_string(
            r#"{"error":{"message":"request entity too large","type":"invalid_request_error"}}"#,
        )],
    )
    .await;
    let counter = Counter::default();
    let agent = build(&wire, &counter);
    let s = agent.session("huge").await.unwrap();
    let err = s
        .send(Msg::user("z".repeat(10 * 1024 * 1024)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            AgentError::Model(ModelError::BadRequest { status: 413, .. })
        ),
        "{err}"
    );
    assert_eq!(bodies(&server).await.len(), 1, "a 413 is not retried");
    assert_valid(&s.messages().await.unwrap());
}
