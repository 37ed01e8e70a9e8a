//! The Gemini wire for reins-model's conformance kit, and documented example
//! responses (shapes from the Gemini API reference: `GenerateContentResponse`,
//! function calling, thought signatures).
#![allow(dead_code)]

use reins_gemini::GeminiChat;
use reins_model::testing::{Endpoint, ModelSetup, ProviderFixture, TestServer, sse_data};
use serde_json::{Value, json};

/// The key every test model sends.
pub const KEY: &str = "AIza-test-secret-key";

/// The model every test talks to.
pub const MODEL: &str = "gemini-test";

/// A Gemini API server at `/v1beta`, as the kit sees it.
pub struct Gemini;

/// A model pointed at the test server.
pub fn model(server: &TestServer) -> GeminiChat {
    Gemini.model_at(server)
}

/// An SSE body: one `data:` event per response chunk.
pub fn stream(chunks: &[Value]) -> String {
    let chunks: Vec<String> = chunks.iter().map(Value::to_string).collect();
    sse_data(&chunks)
}

/// A response chunk with these parts (and a finish reason when given).
pub fn chunk(parts: Value, finish: Option<&str>) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(f) = finish {
        candidate["finishReason"] = json!(f);
    }
    json!({"candidates": [candidate], "modelVersion": MODEL})
}

/// The usage chunk that ends a response.
pub fn usage(thoughts: u64) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP", "index": 0}],
           "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 12, "thoughtsTokenCount": thoughts, "totalTokenCount": 42 + thoughts}})
}

/// A function call part (with `id` when given, and a thought signature when given).
pub fn call(id: Option<&str>, name: &str, args: Value, sig: Option<&str>) -> Value {
    let mut fc = json!({"name": name, "args": args});
    if let Some(id) = id {
        fc["id"] = json!(id);
    }
    let mut part = json!({ "functionCall": fc });
    if let Some(s) = sig {
        part["thoughtSignature"] = json!(s);
    }
    part
}

/// A complete text answer.
pub fn text(t: &str) -> String {
    stream(&[chunk(json!([{"text": t}]), None), usage(0)])
}

/// A complete answer calling `name` with `args`, signed with `sig`.
pub fn signed_call(id: Option<&str>, name: &str, args: Value, sig: &str) -> String {
    stream(&[
        chunk(json!([call(id, name, args, Some(sig))]), Some("STOP")),
        json!({"usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 8, "thoughtsTokenCount": 50}}),
    ])
}

fn args_value(arguments: &str) -> Value {
    // Arguments that are not a JSON object travel as a string, as some gateways
    // send them (the decoder keeps them verbatim).
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => Value::String(arguments.to_owned()),
    }
}

impl ProviderFixture for Gemini {
    type Model = GeminiChat;
    const API_KEY: &'static str = KEY;

    fn endpoint(&self) -> Endpoint {
        Endpoint::post(format!("/v1beta/models/{MODEL}:streamGenerateContent"))
            .with_header("x-goog-api-key", KEY)
    }

    fn model(&self, setup: &ModelSetup) -> GeminiChat {
        let http = setup
            .http_settings("gemini")
            .with_base_url(format!("{}/v1beta", setup.base_url));
        GeminiChat::from_settings(http, MODEL)
    }

    fn error_body(&self, status: u16, message: &str) -> String {
        let name = match status {
            429 => "RESOURCE_EXHAUSTED",
            500 => "INTERNAL",
            503 => "UNAVAILABLE",
            _ => "INVALID_ARGUMENT",
        };
        json!({"error": {"code": status, "message": message, "status": name}}).to_string()
    }

    fn text_answer(&self, t: &str) -> String {
        text(t)
    }

    fn text_begun(&self, t: &str) -> String {
        stream(&[chunk(json!([{ "text": t }]), None)])
    }

    fn tool_call_begun(&self, id: &str, name: &str, _arguments: &str) -> String {
        // Gemini sends a call whole; a stream cut after it has no finishReason.
        stream(&[chunk(json!([call(Some(id), name, json!({}), None)]), None)])
    }

    fn tool_call_answer(&self, id: &str, name: &str, arguments: &str) -> String {
        stream(&[chunk(
            json!([call(Some(id), name, args_value(arguments), None)]),
            Some("STOP"),
        )])
    }

    fn empty_answer(&self) -> String {
        stream(&[chunk(json!([]), Some("STOP"))])
    }

    fn malformed_bodies(&self) -> Vec<String> {
        vec![
            "data: {this is not json\n\n".to_owned(),
            "data: [1,2,3]\n\n".to_owned(),
            format!(
                "{}data: \u{0}\u{7f}garbage\n\n",
                stream(&[chunk(json!([{"text": "ok"}]), None)])
            ),
        ]
    }
}
