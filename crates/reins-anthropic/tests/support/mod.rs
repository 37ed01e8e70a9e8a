//! The Messages API wire for reins-model's conformance kit: the fixture the shared
//! suite runs on, and the event builders every test file here uses.
#![allow(dead_code)]

use reins_anthropic::AnthropicChat;
use reins_model::testing::{Endpoint, ModelSetup, ProviderFixture, Reply, TestServer};
use serde_json::json;

/// The key every test model sends.
pub const KEY: &str = "sk-ant-test-secret";

/// The Messages API, as the kit sees it: `POST /v1/messages` with the key and the
/// API version in their headers.
pub struct Anthropic;

/// An SSE body: each event as `event: <type>` + `data: <json>`.
pub use reins_model::testing::sse_typed as sse;

/// `message_start` with the given input tokens.
pub fn message_start(input_tokens: u64) -> String {
    format!(
        r#"{{"type":"message_start","message":{{"id":"msg_01","type":"message","role":"assistant","content":[],"model":"claude-test","stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{input_tokens},"cache_creation_input_tokens":0,"cache_read_input_tokens":5,"output_tokens":1}}}}}}"#
    )
}

/// `message_delta` with a stop reason and output tokens, then `message_stop`.
pub fn message_end(stop_reason: &str, output_tokens: u64) -> [String; 2] {
    [
        format!(
            r#"{{"type":"message_delta","delta":{{"stop_reason":"{stop_reason}","stop_sequence":null}},"usage":{{"output_tokens":{output_tokens}}}}}"#
        ),
        r#"{"type":"message_stop"}"#.to_owned(),
    ]
}

/// A JSON error response in the Messages API's shape.
pub fn error_response(status: u16, kind: &str, message: &str) -> Reply {
    Reply::json(status, error_body(kind, message))
}

fn error_body(kind: &str, message: &str) -> String {
    json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
}

/// A model pointed at the test server, with the test key and the kit's fast
/// retries.
pub fn model(server: &TestServer) -> AnthropicChat {
    Anthropic.model_at(server)
}

fn block_start(index: usize, block: serde_json::Value) -> String {
    json!({"type": "content_block_start", "index": index, "content_block": block}).to_string()
}

fn block_delta(index: usize, delta: serde_json::Value) -> String {
    json!({"type": "content_block_delta", "index": index, "delta": delta}).to_string()
}

fn block_stop(index: usize) -> String {
    json!({"type": "content_block_stop", "index": index}).to_string()
}

fn text_begun(text: &str) -> Vec<String> {
    vec![
        message_start(3),
        block_start(0, json!({"type": "text", "text": ""})),
        block_delta(0, json!({"type": "text_delta", "text": text})),
    ]
}

fn tool_call_begun(id: &str, name: &str, arguments: &str) -> Vec<String> {
    vec![
        message_start(3),
        block_start(
            0,
            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
        ),
        block_delta(
            0,
            json!({"type": "input_json_delta", "partial_json": arguments}),
        ),
    ]
}

impl ProviderFixture for Anthropic {
    type Model = AnthropicChat;
    const API_KEY: &'static str = KEY;

    fn endpoint(&self) -> Endpoint {
        Endpoint::post("/v1/messages")
            .with_header("x-api-key", KEY)
            .with_header("anthropic-version", "2023-06-01")
    }

    fn model(&self, setup: &ModelSetup) -> AnthropicChat {
        AnthropicChat::from_settings(setup.http_settings("anthropic"), "claude-test")
    }

    fn error_body(&self, status: u16, message: &str) -> String {
        let kind = if status == 429 {
            "rate_limit_error"
        } else {
            "overloaded_error"
        };
        error_body(kind, message)
    }

    fn text_answer(&self, text: &str) -> String {
        let mut events = text_begun(text);
        events.push(block_stop(0));
        events.extend(message_end("end_turn", 2));
        sse(&events)
    }

    fn text_begun(&self, text: &str) -> String {
        sse(&text_begun(text))
    }

    fn tool_call_begun(&self, id: &str, name: &str, arguments: &str) -> String {
        sse(&tool_call_begun(id, name, arguments))
    }

    fn tool_call_answer(&self, id: &str, name: &str, arguments: &str) -> String {
        let mut events = tool_call_begun(id, name, arguments);
        events.push(block_stop(0));
        events.extend(message_end("tool_use", 9));
        sse(&events)
    }

    fn empty_answer(&self) -> String {
        // A message that starts and stops with no content.
        let mut events = vec![message_start(1)];
        events.extend(message_end("end_turn", 0));
        sse(&events)
    }

    fn malformed_bodies(&self) -> Vec<String> {
        vec![
            "event: message_start\ndata: {this is not json\n\n".to_owned(),
            "event: message_start\ndata: [1,2,3]\n\n".to_owned(),
            format!(
                "{}event: content_block_delta\ndata: \u{0}\u{7f}garbage\n\n",
                sse(&[message_start(1)])
            ),
        ]
    }

    fn server_error_statuses(&self) -> Vec<u16> {
        // 529: the API's "overloaded".
        vec![500, 502, 503, 529]
    }
}
