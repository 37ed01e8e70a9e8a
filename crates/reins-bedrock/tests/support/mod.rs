//! The Bedrock wire for reins-model's conformance kit, and documented example
//! streams (shapes from the Bedrock Runtime API reference: ConverseStream events,
//! tool use, reasoning content with its signature).
#![allow(dead_code)]

use reins_bedrock::BedrockChat;
use reins_bedrock::eventstream::{encode, encode_event};
use reins_model::testing::{Endpoint, ModelSetup, ProviderFixture, Reply, TestServer};
use serde_json::{Value, json};

/// The secret key every test model signs with.
pub const SECRET: &str = "wJalrXUtnFEMI-test-secret-key";

/// The access key id every test model sends.
pub const KEY_ID: &str = "AKIDTESTEXAMPLE";

/// The model every test talks to (its `:` is percent-encoded in the path).
pub const MODEL: &str = "anthropic.claude-test-v1:0";

/// The path the model posts to.
pub const PATH: &str = "/model/anthropic.claude-test-v1%3A0/converse-stream";

/// A Bedrock Runtime endpoint, as the kit sees it.
pub struct Bedrock;

/// A model pointed at the test server.
pub fn model(server: &TestServer) -> BedrockChat {
    Bedrock.model_at(server)
}

/// Frames written as the hex text the fixture's bodies travel in.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0))
        .collect()
}

/// A stream of `(event type, payload)` events, as fixture text.
pub fn stream(events: &[(&str, Value)]) -> String {
    hex(&events
        .iter()
        .flat_map(|(t, p)| encode_event(t, p))
        .collect::<Vec<u8>>())
}

/// The events of a text block at `index`.
pub fn text_block(index: u64, text: &str) -> Vec<(&'static str, Value)> {
    vec![
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": index, "delta": {"text": text}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": index})),
    ]
}

/// The events of a reasoning block at `index` with its signature.
pub fn reasoning_block(index: u64, text: &str, sig: &str) -> Vec<(&'static str, Value)> {
    vec![
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": index, "delta": {"reasoningContent": {"text": text}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": index, "delta": {"reasoningContent": {"signature": sig}}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": index})),
    ]
}

/// The events of a tool-use block at `index` (input streamed as `input` text).
pub fn tool_block(index: u64, id: &str, name: &str, input: &str) -> Vec<(&'static str, Value)> {
    vec![
        (
            "contentBlockStart",
            json!({"contentBlockIndex": index, "start": {"toolUse": {"toolUseId": id, "name": name}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": index, "delta": {"toolUse": {"input": input}}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": index})),
    ]
}

/// A whole response: `messageStart`, the blocks, `messageStop`, `metadata`.
pub fn response(blocks: Vec<Vec<(&'static str, Value)>>, stop: &str) -> String {
    let mut events = vec![("messageStart", json!({"role": "assistant"}))];
    for b in blocks {
        events.extend(b);
    }
    events.push(("messageStop", json!({"stopReason": stop})));
    events.push((
        "metadata",
        json!({"usage": {"inputTokens": 30, "outputTokens": 12, "totalTokens": 42},
               "metrics": {"latencyMs": 120}}),
    ));
    stream(&events)
}

/// A complete text answer.
pub fn text(t: &str) -> String {
    response(vec![text_block(0, t)], "end_turn")
}

/// A complete answer reasoning, then calling `name` with `input`.
pub fn reasoned_call(reasoning: &str, sig: &str, id: &str, name: &str, input: &str) -> String {
    response(
        vec![
            reasoning_block(0, reasoning, sig),
            tool_block(1, id, name, input),
        ],
        "tool_use",
    )
}

impl ProviderFixture for Bedrock {
    type Model = BedrockChat;
    const API_KEY: &'static str = SECRET;

    fn endpoint(&self) -> Endpoint {
        Endpoint::post(PATH).with_header("accept", "application/vnd.amazon.eventstream")
    }

    fn model(&self, setup: &ModelSetup) -> BedrockChat {
        let http = setup.http_settings("bedrock");
        BedrockChat::from_settings(http, "us-east-1", KEY_ID, setup.api_key.clone(), MODEL)
    }

    fn error_body(&self, _status: u16, message: &str) -> String {
        json!({ "message": message }).to_string()
    }

    fn text_answer(&self, t: &str) -> String {
        text(t)
    }

    fn text_begun(&self, t: &str) -> String {
        stream(&[
            ("messageStart", json!({"role": "assistant"})),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": t}}),
            ),
        ])
    }

    fn tool_call_begun(&self, id: &str, name: &str, arguments: &str) -> String {
        let mut events = vec![("messageStart", json!({"role": "assistant"}))];
        let mut block = tool_block(0, id, name, arguments);
        block.pop();
        events.extend(block);
        stream(&events)
    }

    fn tool_call_answer(&self, id: &str, name: &str, arguments: &str) -> String {
        response(vec![tool_block(0, id, name, arguments)], "tool_use")
    }

    fn empty_answer(&self) -> String {
        response(vec![], "end_turn")
    }

    fn malformed_bodies(&self) -> Vec<String> {
        let good = encode_event("messageStart", &json!({"role": "assistant"}));
        let mut bad_crc = encode_event(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 0, "delta": {"text": "ok"}}),
        );
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 0xff;
        vec![
            // A payload that is not JSON.
            hex(&encode(
                &[
                    (":event-type", "contentBlockDelta"),
                    (":message-type", "event"),
                ],
                b"{this is not json",
            )),
            // JSON of the wrong shape.
            hex(&[
                good.clone(),
                encode_event("contentBlockDelta", &json!([1, 2, 3])),
            ]
            .concat()),
            // A frame whose CRC does not match, after a good one.
            hex(&[good, bad_crc].concat()),
            // Bytes that are not an event stream at all.
            hex(b"\x00\x00\x00\x05garbage garbage garbage"),
        ]
    }

    fn stream_reply(&self, body: impl Into<String>) -> Reply {
        Reply::new(200)
            .with_header("content-type", "application/vnd.amazon.eventstream")
            .with_body(unhex(&body.into()))
    }
}
