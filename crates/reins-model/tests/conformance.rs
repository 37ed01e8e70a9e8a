#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! The conformance kit run against a third provider, written here in full: the
//! made-up "lines" API (one JSON object per `data:` event) on `HttpSettings`. It is
//! what a new provider crate does: implement `ProviderFixture` for its wire format
//! and call `provider_conformance_tests!`.

use reins_message::{Msg, Usage};
use reins_model::http::{HttpSettings, WireFormat};
use reins_model::sse::{SseDecoder, SseEvent};
use reins_model::testing::{
    Endpoint, ModelSetup, ProviderFixture, Reply, assert_key_from_env, assert_key_redacted,
    collect, expect_empty_answer, sent_body, sse_data,
};
use reins_model::{
    ChatChunk, ChatModel, ChatRequest, ChatStream, FinishReason, ModelError, Result, RetryPolicy,
};
use serde_json::{Value, json};
use std::collections::VecDeque;

// ----- the provider --------------------------------------------------------------------

/// A chat model for the "lines" API: `POST {base}/generate` with
/// `{"model", "prompt"}`, answered by events `{"text"}`, `{"call": {"id", "name"}}`,
/// `{"args"}`, `{"usage": {"input", "output"}}`, `{"error"}` and `{"finish"}`.
#[derive(Debug, Clone)]
struct LinesChat {
    http: HttpSettings,
    model: String,
}

impl LinesChat {
    fn from_settings(http: HttpSettings, model: &str) -> Self {
        Self {
            http,
            model: model.to_owned(),
        }
    }
}

#[async_trait::async_trait]
impl ChatModel for LinesChat {
    fn model_name(&self) -> &str {
        &self.model
    }
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream> {
        let prompt = request.messages.last().map(Msg::text).unwrap_or_default();
        let body = json!({"model": self.model, "prompt": prompt});
        self.http.stream(&LinesWire, &body).await
    }
}

struct LinesWire;

impl WireFormat for LinesWire {
    type Decoder = LinesDecoder;
    fn path(&self) -> &str {
        "/generate"
    }
    fn decoder(&self) -> LinesDecoder {
        LinesDecoder::default()
    }
}

#[derive(Default)]
struct LinesDecoder {
    calls: usize,
    seen: bool,
}

impl SseDecoder for LinesDecoder {
    fn decode(&mut self, e: &SseEvent, out: &mut VecDeque<ChatChunk>) -> Result<bool> {
        self.seen = true;
        let malformed = || ModelError::MalformedStream(format!("not a lines event: {}", e.data));
        let v: Value = serde_json::from_str(&e.data).map_err(|_| malformed())?;
        if let Some(text) = v.get("text").and_then(Value::as_str) {
            out.push_back(ChatChunk::TextDelta { text: text.into() });
        } else if let Some(call) = v.get("call") {
            let field = |k: &str| call.get(k).and_then(Value::as_str).map(str::to_owned);
            let (Some(id), Some(name)) = (field("id"), field("name")) else {
                return Err(malformed());
            };
            self.calls += 1;
            out.push_back(ChatChunk::ToolCallStart {
                index: self.calls - 1,
                id,
                name,
            });
        } else if let Some(args) = v.get("args").and_then(Value::as_str) {
            let index = self.calls.checked_sub(1).ok_or_else(malformed)?;
            out.push_back(ChatChunk::ToolArgsDelta {
                index,
                fragment: args.into(),
            });
        } else if let Some(usage) = v.get("usage") {
            let n = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
            out.push_back(ChatChunk::Usage(Usage {
                input_tokens: n("input"),
                output_tokens: n("output"),
                ..Usage::default()
            }));
        } else if let Some(message) = v.get("error").and_then(Value::as_str) {
            return Err(ModelError::Server {
                status: 0,
                message: message.into(),
            });
        } else if let Some(reason) = v.get("finish").and_then(Value::as_str) {
            let reason = match reason {
                "stop" => FinishReason::Stop,
                "tool_use" => FinishReason::ToolUse,
                other => FinishReason::Other(other.into()),
            };
            out.push_back(ChatChunk::Finish { reason });
            return Ok(true);
        } else {
            return Err(malformed());
        }
        Ok(false)
    }

    fn end(&mut self, _out: &mut VecDeque<ChatChunk>) -> Result<()> {
        Err(ModelError::MalformedStream(if self.seen {
            "the stream ended before the model finished".into()
        } else {
            "the server answered with an empty body".into()
        }))
    }
}

// ----- its fixture and the suite -------------------------------------------------------

const KEY: &str = "sk-lines-test-secret";

struct Lines;

fn text(t: &str) -> String {
    json!({ "text": t }).to_string()
}

fn call(id: &str, name: &str) -> String {
    json!({"call": {"id": id, "name": name}}).to_string()
}

fn args(a: &str) -> String {
    json!({ "args": a }).to_string()
}

impl ProviderFixture for Lines {
    type Model = LinesChat;
    const API_KEY: &'static str = KEY;
    fn endpoint(&self) -> Endpoint {
        Endpoint::post("/generate").with_header("authorization", format!("Bearer {KEY}"))
    }
    fn model(&self, setup: &ModelSetup) -> LinesChat {
        LinesChat::from_settings(setup.http_settings("lines"), "lines-1")
    }
    fn error_body(&self, _status: u16, message: &str) -> String {
        json!({ "error": message }).to_string()
    }
    fn text_answer(&self, t: &str) -> String {
        sse_data(&[
            r#"{"usage":{"input":3}}"#.to_owned(),
            text(t),
            r#"{"finish":"stop"}"#.to_owned(),
        ])
    }
    fn text_begun(&self, t: &str) -> String {
        sse_data(&[r#"{"usage":{"input":3}}"#.to_owned(), text(t)])
    }
    fn tool_call_begun(&self, id: &str, name: &str, arguments: &str) -> String {
        sse_data(&[call(id, name), args(arguments)])
    }
    fn tool_call_answer(&self, id: &str, name: &str, arguments: &str) -> String {
        sse_data(&[
            call(id, name),
            args(arguments),
            r#"{"finish":"tool_use"}"#.to_owned(),
        ])
    }
    fn empty_answer(&self) -> String {
        sse_data(&[r#"{"finish":"stop"}"#])
    }
    fn malformed_bodies(&self) -> Vec<String> {
        vec![
            sse_data(&["{not json"]),
            sse_data(&["[1,2,3]"]),
            sse_data(&[text("ok"), "\u{0}garbage".to_owned()]),
        ]
    }
}

reins_model::provider_conformance_tests!(Lines);

// ----- the kit's other helpers, on the same provider ------------------------------------

#[tokio::test]
async fn sent_body_captures_what_the_model_sent() {
    let req = ChatRequest::new(vec![Msg::user("hello there")]);
    let body = sent_body(&Lines, req, |m| m).await;
    assert_eq!(body, json!({"model": "lines-1", "prompt": "hello there"}));
    let renamed = sent_body(&Lines, ChatRequest::new(vec![Msg::user("x")]), |mut m| {
        m.model = "lines-2".into();
        m
    })
    .await;
    assert_eq!(renamed["model"], "lines-2");
}

#[tokio::test]
async fn a_missing_header_is_answered_404_and_recorded() {
    let server = Lines.serve(Reply::sse(Lines.text_answer("hi")));
    let setup = Lines.setup(&server);
    let keyless = LinesChat::from_settings(
        HttpSettings::new("lines", setup.base_url).with_retry(RetryPolicy::none()),
        "m",
    );
    let e = keyless
        .stream(ChatRequest::new(vec![Msg::user("hi")]))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&e, ModelError::BadRequest { status: 404, message } if message.contains("`authorization` is missing")),
        "{e:?}"
    );
    assert_eq!(server.request_count(), 1);
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/generate");
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(sent.json().unwrap()["prompt"], "hi");
}

#[tokio::test]
async fn rules_on_the_body_come_before_the_default() {
    let server = Lines.serve(Reply::sse(Lines.text_answer("plain")));
    server.reply_when_json(
        |body| body["prompt"] == "special",
        Reply::sse(Lines.text_answer("special")),
    );
    let model = Lines.model_at(&server);
    let ask = |p: &str| ChatRequest::new(vec![Msg::user(p)]);
    assert_eq!(
        model.complete(ask("x")).await.unwrap().message.text(),
        "plain"
    );
    assert_eq!(
        model.complete(ask("special")).await.unwrap().message.text(),
        "special"
    );
    let items = collect(&model, ask("x")).await.unwrap();
    assert_eq!(items.len(), 3, "{items:?}");
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn the_key_and_empty_answer_checks_pass_on_it() {
    const VAR: &str = "REINS_TEST_LINES_KEY_SURELY_UNSET";
    let from_env = HttpSettings::new("lines", "http://127.0.0.1:9").with_api_key_from_env(VAR);
    let has_key = from_env.has_api_key();
    assert_key_from_env(&LinesChat::from_settings(from_env, "m"), VAR, has_key).await;
    let keyed = HttpSettings::new("lines", "http://h").with_api_key("sk-lines-very-secret");
    assert_key_redacted(
        &LinesChat::from_settings(keyed, "m"),
        "sk-lines-very-secret",
    );

    let server = Lines.serve(Reply::sse(Lines.empty_answer()));
    let done = expect_empty_answer(&Lines.model_at(&server)).await;
    assert_eq!(done.usage, Usage::default());
}
