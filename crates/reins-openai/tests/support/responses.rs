//! The Responses API wire for reins-model's conformance kit, and documented
//! example streams (shapes from OpenAI's API reference for streaming events).
#![allow(dead_code)]

use reins_model::testing::{Endpoint, ModelSetup, ProviderFixture, TestServer, sse_typed};
use reins_openai::OpenAiResponses;
use serde_json::{Value, json};

/// The key every test model sends.
pub const KEY: &str = "sk-responses-test-secret";

/// An OpenAI Responses API server at `/v1`, as the kit sees it.
pub struct Responses;

/// A model pointed at the test server.
pub fn model(server: &TestServer) -> OpenAiResponses {
    Responses.model_at(server)
}

/// A body of typed events, each named after its `type`.
pub fn stream(events: &[Value]) -> String {
    let events: Vec<String> = events.iter().map(Value::to_string).collect();
    sse_typed(&events)
}

pub fn created() -> Value {
    json!({"type": "response.created", "sequence_number": 0,
           "response": {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}})
}

pub fn message_added(output_index: u64) -> Value {
    json!({"type": "response.output_item.added", "output_index": output_index,
           "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}})
}

pub fn text_delta(output_index: u64, delta: &str) -> Value {
    json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": output_index,
           "content_index": 0, "delta": delta})
}

pub fn reasoning_added(output_index: u64, id: &str) -> Value {
    json!({"type": "response.output_item.added", "output_index": output_index,
           "item": {"id": id, "type": "reasoning", "summary": []}})
}

pub fn summary_delta(output_index: u64, id: &str, summary_index: u64, delta: &str) -> Value {
    json!({"type": "response.reasoning_summary_text.delta", "item_id": id,
           "output_index": output_index, "summary_index": summary_index, "delta": delta})
}

pub fn reasoning_done(output_index: u64, id: &str, summary: &str, encrypted: &str) -> Value {
    let summary = if summary.is_empty() {
        json!([])
    } else {
        json!([{"type": "summary_text", "text": summary}])
    };
    json!({"type": "response.output_item.done", "output_index": output_index,
           "item": {"id": id, "type": "reasoning", "summary": summary, "encrypted_content": encrypted}})
}

pub fn call_added(output_index: u64, call_id: &str, name: &str) -> Value {
    json!({"type": "response.output_item.added", "output_index": output_index,
           "item": {"id": format!("fc_{call_id}"), "type": "function_call", "status": "in_progress",
                    "call_id": call_id, "name": name, "arguments": ""}})
}

pub fn args_delta(output_index: u64, call_id: &str, delta: &str) -> Value {
    json!({"type": "response.function_call_arguments.delta", "item_id": format!("fc_{call_id}"),
           "output_index": output_index, "delta": delta})
}

pub fn call_done(output_index: u64, call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"type": "response.output_item.done", "output_index": output_index,
           "item": {"id": format!("fc_{call_id}"), "type": "function_call", "status": "completed",
                    "call_id": call_id, "name": name, "arguments": arguments}})
}

pub fn completed(reasoning_tokens: u64) -> Value {
    json!({"type": "response.completed", "sequence_number": 99,
           "response": {"id": "resp_1", "object": "response", "status": "completed",
                        "usage": {"input_tokens": 36, "input_tokens_details": {"cached_tokens": 4},
                                  "output_tokens": 87, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                                  "total_tokens": 123}}})
}

/// A complete answer: reasoning (summary `thought`, encrypted `enc`), then a call of
/// `name` with `arguments`.
pub fn reasoning_then_call(
    rs: &str,
    thought: &str,
    enc: &str,
    call_id: &str,
    name: &str,
    arguments: &str,
) -> String {
    stream(&[
        created(),
        reasoning_added(0, rs),
        summary_delta(0, rs, 0, thought),
        reasoning_done(0, rs, thought, enc),
        call_added(1, call_id, name),
        args_delta(1, call_id, arguments),
        call_done(1, call_id, name, arguments),
        completed(64),
    ])
}

/// A complete text answer.
pub fn text(t: &str) -> String {
    stream(&[created(), message_added(0), text_delta(0, t), completed(0)])
}

impl ProviderFixture for Responses {
    type Model = OpenAiResponses;
    const API_KEY: &'static str = KEY;

    fn endpoint(&self) -> Endpoint {
        Endpoint::post("/v1/responses").with_header("authorization", format!("Bearer {KEY}"))
    }

    fn model(&self, setup: &ModelSetup) -> OpenAiResponses {
        let http = setup
            .http_settings("openai")
            .with_base_url(format!("{}/v1", setup.base_url));
        OpenAiResponses::from_settings(http, "gpt-test")
    }

    fn error_body(&self, status: u16, message: &str) -> String {
        let kind = if status == 429 {
            "rate_limit_exceeded"
        } else {
            "invalid_request_error"
        };
        json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
            .to_string()
    }

    fn text_answer(&self, t: &str) -> String {
        text(t)
    }

    fn text_begun(&self, t: &str) -> String {
        stream(&[created(), message_added(0), text_delta(0, t)])
    }

    fn tool_call_begun(&self, id: &str, name: &str, arguments: &str) -> String {
        stream(&[
            created(),
            call_added(0, id, name),
            args_delta(0, id, arguments),
        ])
    }

    fn tool_call_answer(&self, id: &str, name: &str, arguments: &str) -> String {
        stream(&[
            created(),
            call_added(0, id, name),
            args_delta(0, id, arguments),
            call_done(0, id, name, arguments),
            completed(0),
        ])
    }

    fn empty_answer(&self) -> String {
        stream(&[created(), completed(0)])
    }

    fn malformed_bodies(&self) -> Vec<String> {
        vec![
            "event: response.created\ndata: {this is not json\n\n".to_owned(),
            "data: [1,2,3]\n\n".to_owned(),
            format!(
                "{}data: \u{0}\u{7f}garbage\n\n",
                stream(&[created(), message_added(0), text_delta(0, "ok")])
            ),
        ]
    }
}
