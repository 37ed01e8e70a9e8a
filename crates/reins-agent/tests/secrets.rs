//! Secrets: an API key never appears in `Debug` output, errors, logs or stored
//! sessions. Both provider clients get a recognizable fake key and fail against a
//! local server in every way we can make them fail — including servers that echo
//! the key back in their error messages — while an agent with a SQLite store runs
//! over them and a tracing subscriber captures every log line (TRACE level, all
//! targets). Then we grep all of it, and the raw database files, for the key.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_agent::Agent;
use reins_anthropic::AnthropicChat;
use reins_memory::{MemoryStore, SqliteStore};
use reins_message::Msg;
use reins_model::{ChatModel, RetryPolicy};
use reins_openai::OpenAiChat;
use reins_tool::ToolPolicy;
use support::*;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const KEY: &str = "sk-REINS-CANARY-7f3a9c2e51d04b";

/// A `MakeWriter` that appends every log line to a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 2,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(2),
        max_elapsed: Duration::from_secs(10),
        jitter: 0.0,
    }
}

/// Failing HTTP responses, several of which quote the key back.
fn http_faults() -> Vec<(&'static str, ResponseTemplate)> {
    let echo = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {KEY}. Find your key at https://example.invalid","type":"invalid_request_error","code":"invalid_api_key"}},"type":"error"}}"#
    );
    let anthropic_echo = format!(
        r#"{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key {KEY}"}}}}"#
    );
    vec![
        (
            "401 echo",
            ResponseTemplate::new(401).set_body_string(echo.clone()),
        ),
        (
            "401 anthropic echo",
            ResponseTemplate::new(401).set_body_string(anthropic_echo),
        ),
        (
            "403 plain",
            ResponseTemplate::new(403).set_body_string("forbidden"),
        ),
        (
            "500 echo",
            ResponseTemplate::new(500).set_body_string(format!("upstream saw key {KEY}")),
        ),
        (
            "429 echo",
            ResponseTemplate::new(429)
                .insert_header("retry-after", "0")
                .set_body_string(echo.clone()),
        ),
        ("400 echo", ResponseTemplate::new(400).set_body_string(echo)),
    ]
}

fn sse(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(body)
}

/// Streams that fail with text quoting the key: an error event before any output,
/// an error event after output started, and a malformed event.
fn stream_faults() -> Vec<(&'static str, ResponseTemplate)> {
    let openai_text = r#"data: {"choices":[{"index":0,"delta":{"content":"hel"},"finish_reason":null}]}

"#;
    let anthropic_text = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"c\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hel\"}}\n\n",
    );
    let error_event = format!(
        "event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"api_error\",\"message\":\"bad key {KEY}\"}}}}\n\n"
    );
    vec![
        ("stream error event before output", sse(error_event.clone())),
        (
            "openai-style stream error after output",
            sse(format!("{openai_text}{error_event}")),
        ),
        (
            "anthropic-style stream error after output",
            sse(format!("{anthropic_text}{error_event}")),
        ),
        (
            "malformed event quoting the key",
            sse(format!("data: {{\"key\": \"{KEY}\"\n\n")),
        ),
    ]
}

fn assert_clean(what: &str, text: &str) {
    assert!(
        !text.contains(KEY),
        "the API key leaked into {what}:\n{}",
        &text[text.find(KEY).unwrap().saturating_sub(200)..]
    );
}

fn file_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            (
                e.path().display().to_string(),
                std::fs::read(e.path()).unwrap_or_default(),
            )
        })
        .collect()
}

/// Runs an agent over both providers against each fault, then greps everything.
async fn no_key_anywhere(
    providers: &[&'static str],
    faults: fn() -> Vec<(&'static str, ResponseTemplate)>,
    only: Option<&[&str]>,
) {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("secrets.db");
    let store: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(&db).await.unwrap());
    let mut texts: Vec<(String, String)> = Vec::new();
    let mut failures = 0;

    let mut expected = 0;
    for (provider, fault) in providers
        .iter()
        .flat_map(|p| (0..faults().len()).map(move |i| (*p, i)))
    {
        let (name, response) = faults().swap_remove(fault);
        if only.is_some_and(|o| !o.contains(&name)) {
            continue;
        }
        expected += 1;
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(response)
            .mount(&server)
            .await;
        let model: Arc<dyn ChatModel> = if provider == "openai" {
            let m = OpenAiChat::compatible(format!("{}/v1", server.uri()), "gpt-test")
                .with_api_key(KEY)
                .with_retry(retry());
            texts.push((format!("{provider} Debug"), format!("{m:?} {m:#?}")));
            Arc::new(m)
        } else {
            let m = AnthropicChat::new("claude-test")
                .with_base_url(server.uri())
                .with_api_key(KEY)
                .with_retry(retry());
            texts.push((format!("{provider} Debug"), format!("{m:?} {m:#?}")));
            Arc::new(m)
        };
        let counter = Counter::default();
        let agent = Agent::builder()
            .model_arc(model)
            .toolkit(toolkit(&counter, ToolPolicy::confirm()))
            .store_arc(store.clone())
            .build()
            .unwrap();
        texts.push(("agent Debug".into(), format!("{agent:?} {agent:#?}")));
        let session = agent.session(&format!("{provider}-{fault}")).await.unwrap();
        texts.push(("session Debug".into(), format!("{session:?}")));
        let err = session
            .send(Msg::user("use the key"))
            .await
            .expect_err(name);
        failures += 1;
        texts.push((
            format!("{provider} {name}: error"),
            format!("{err} | {err:?} | {:?}", std::error::Error::source(&err)),
        ));
        // The run's events report the failure too.
        let mut run = session.send(Msg::user("again")).start().await.unwrap();
        let mut seen = Vec::new();
        while let Some(ev) = futures::StreamExt::next(run.events()).await {
            seen.push(format!("{ev:?}"));
        }
        texts.push((format!("{provider} {name}: events"), seen.join("\n")));
        let snapshot = session.snapshot().await.unwrap();
        texts.push(("snapshot".into(), snapshot.to_json().unwrap()));
    }
    assert_eq!(failures, expected);

    for (what, text) in &texts {
        assert_clean(what, text);
    }
    let captured = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(
        captured.contains("retrying") || captured.contains("model error") || !captured.is_empty(),
        "the subscriber captured nothing"
    );
    assert_clean("the captured logs", &captured);
    drop(store);
    for (file, bytes) in file_bytes(dir.path()) {
        assert!(
            !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
            "the API key is stored in {file}"
        );
    }
    println!(
        "secrets: {} texts, {} bytes of logs and the SQLite files checked; the key appears nowhere",
        texts.len(),
        captured.len()
    );
}

#[tokio::test]
async fn the_api_key_never_appears_in_debug_errors_logs_or_the_store() {
    no_key_anywhere(&["openai", "anthropic"], http_faults, None).await;
}

#[tokio::test]
async fn the_api_key_never_appears_when_a_stream_quotes_it() {
    no_key_anywhere(&["openai", "anthropic"], stream_faults, None).await;
}
