//! The Chat Completions wire for reins-model's conformance kit: the fixture the
//! shared suite runs on, and the helpers every test file here uses.
#![allow(dead_code)]

use reins_model::testing::{Endpoint, ModelSetup, ProviderFixture, TestServer, sse_data};
use reins_openai::OpenAiChat;
use serde_json::json;

/// The key every test model sends.
pub const KEY: &str = "sk-test-secret-key";

/// An OpenAI-compatible server at `/v1`, as the kit sees it.
pub struct OpenAi;

/// An SSE body: one `data:` event per item, then `data: [DONE]` when `done`.
pub fn sse(events: &[&str], done: bool) -> String {
    let mut body = sse_data(events);
    if done {
        body.push_str("data: [DONE]\n\n");
    }
    body
}

/// A model pointed at the test server, with the test key and the kit's fast
/// retries.
pub fn model(server: &TestServer) -> OpenAiChat {
    OpenAi.model_at(server)
}

fn delta(delta: serde_json::Value, finish: Option<&str>) -> String {
    json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).to_string()
}

fn tool_call_start(id: &str, name: &str) -> String {
    delta(
        json!({"role": "assistant", "tool_calls": [
            {"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}
        ]}),
        None,
    )
}

fn tool_args(arguments: &str) -> String {
    delta(
        json!({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
        None,
    )
}

impl ProviderFixture for OpenAi {
    type Model = OpenAiChat;
    const API_KEY: &'static str = KEY;

    fn endpoint(&self) -> Endpoint {
        Endpoint::post("/v1/chat/completions")
    }

    fn model(&self, setup: &ModelSetup) -> OpenAiChat {
        // What `OpenAiChat::compatible` builds, at the server's `/v1`.
        let http = setup
            .http_settings("compatible")
            .with_base_url(format!("{}/v1", setup.base_url));
        OpenAiChat::from_settings(http, "test-model")
    }

    fn error_body(&self, status: u16, message: &str) -> String {
        if status == 429 {
            json!({"error": {"message": message, "type": "rate_limit"}}).to_string()
        } else {
            json!({"error": {"message": message}}).to_string()
        }
    }

    fn text_answer(&self, text: &str) -> String {
        sse(
            &[
                &delta(json!({"role": "assistant", "content": text}), None),
                &delta(json!({}), Some("stop")),
            ],
            true,
        )
    }

    fn text_begun(&self, text: &str) -> String {
        sse(&[&delta(json!({ "content": text }), None)], false)
    }

    fn tool_call_begun(&self, id: &str, name: &str, arguments: &str) -> String {
        sse(&[&tool_call_start(id, name), &tool_args(arguments)], false)
    }

    fn tool_call_answer(&self, id: &str, name: &str, arguments: &str) -> String {
        sse(
            &[
                &tool_call_start(id, name),
                &tool_args(arguments),
                &delta(json!({}), Some("tool_calls")),
            ],
            true,
        )
    }

    fn empty_answer(&self) -> String {
        // `data: [DONE]` with nothing before it: a complete, empty answer.
        sse(&[], true)
    }

    fn malformed_bodies(&self) -> Vec<String> {
        vec![
            "data: {this is not json\n\n".to_owned(),
            "data: [1,2,3]\n\n".to_owned(),
            format!(
                "data: {}\n\ndata: \u{0}\u{7f}garbage\n\n",
                delta(json!({"role": "assistant", "content": "ok"}), None)
            ),
        ]
    }
}
