//! `serve --otlp` against a real OTLP receiver: Arize Phoenix (PyPI `arize-phoenix`,
//! pinned in tests/phoenix/requirements.txt, in a venv that `.ci/run` makes), started
//! on loopback by this test with its working directory in a temp dir.
//!
//! A call pauses in one `serve` process (spans over OTLP/HTTP), the process stops, and
//! a second one (spans over OTLP/gRPC) resumes it once another principal approves.
//! Phoenix's own REST API then returns the spans: two traces, one per turn, with
//! `invoke_agent` at the root and `chat` / `execute_tool` under it, the GenAI
//! attributes, the `reins.*` events of the wait and the decision, and the second turn
//! linked to the first.
//!
//! With `REINS_WRITE_SCREENSHOTS=1` (as reins-server's browser tests) the test also
//! saves Phoenix's view of the second trace — the span tree of the approved turn — to
//! docs/screenshots/otel-span-tree.png (headless Chromium through chromedriver);
//! without it nothing is written.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The trace and span ids of the caller of the first turn (its `traceparent` header).
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// The approver's token (another principal than the `dev` one `serve` prints).
const ANA: &str = "ana-approves-0123456789";

fn phoenix_binary() -> Option<PathBuf> {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/phoenix/.venv/bin/phoenix");
    if bin.exists() {
        return Some(bin);
    }
    let install = "python3 -m venv crates/reins-demo/tests/phoenix/.venv && crates/reins-demo/tests/phoenix/.venv/bin/pip install -q -r crates/reins-demo/tests/phoenix/requirements.txt";
    assert!(
        std::env::var_os("CI").is_none(),
        "Arize Phoenix is not installed: {install}"
    );
    eprintln!("SKIPPED: Arize Phoenix is not installed ({install})");
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Phoenix on loopback, its data in `dir`; up once its page answers. Its start (a
/// Python application creating its database) takes seconds on a quiet machine and
/// minutes on a loaded one: the wait ends when it answers, or fails when the process
/// exits; the bound (10 min) only keeps a hung start from hanging the suite.
async fn start_phoenix(bin: &Path, dir: &Path) -> (Child, u16, u16) {
    let (http, grpc) = (free_port(), free_port());
    let mut child = Command::new(bin)
        .arg("serve")
        .current_dir(dir)
        .env("PHOENIX_WORKING_DIR", dir)
        .env("PHOENIX_HOST", "127.0.0.1")
        .env("PHOENIX_PORT", http.to_string())
        .env("PHOENIX_GRPC_PORT", grpc.to_string())
        .env("PHOENIX_TELEMETRY_ENABLED", "false")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("phoenix.log")).unwrap())
        .stderr(std::fs::File::create(dir.join("phoenix.err")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if let Ok(r) = reqwest::get(format!("http://127.0.0.1:{http}/v1/projects")).await
            && r.status().is_success()
        {
            break;
        }
        let err = || std::fs::read_to_string(dir.join("phoenix.err")).unwrap_or_default();
        if let Ok(Some(status)) = child.try_wait() {
            panic!("Phoenix exited before it answered ({status}): {}", err());
        }
        assert!(
            Instant::now() < deadline,
            "Phoenix did not answer in 10 min: {}",
            err()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    (child, http, grpc)
}

struct Serve {
    child: Child,
    /// The `dev` principal's token `serve` printed (a user who starts runs).
    token: String,
    base: String,
    client: reqwest::Client,
}

async fn start_serve(cwd: &Path, port: u16, otlp: &[&str]) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_serve"))
        .args(["--port", &port.to_string(), "--auth", "auth.json"])
        .args(otlp)
        .current_dir(cwd)
        .env_remove("DASHSCOPE_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(cwd.join(format!("serve-{port}.err"))).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    let token = loop {
        let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
            .await
            .expect("serve did not start in 60 s")
            .unwrap();
        match line {
            Some(l) if l.starts_with("token: ") => break l["token: ".len()..].trim().to_owned(),
            Some(_) => {}
            None => panic!(
                "serve exited before it served: {}",
                std::fs::read_to_string(cwd.join(format!("serve-{port}.err"))).unwrap_or_default()
            ),
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.get(format!("{base}/readyz")).send().await.is_err() {
        assert!(Instant::now() < deadline, "serve is not ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Serve {
        child,
        token,
        base,
        client,
    }
}

impl Serve {
    async fn post(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
        self.post_traced(token, path, body, None).await
    }

    /// A POST with a W3C `traceparent` header (the caller's span), when given.
    async fn post_traced(
        &self,
        token: &str,
        path: &str,
        body: Value,
        traceparent: Option<&str>,
    ) -> (u16, Value) {
        let mut req = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(&body);
        if let Some(tp) = traceparent {
            req = req.header("traceparent", tp);
        }
        let r = req.send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// Ctrl-C, as a person stops it: the exporter flushes what it holds.
    async fn stop(mut self) {
        let pid = rustix::process::Pid::from_raw(i32::try_from(self.child.id().unwrap()).unwrap())
            .unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("serve stops on Ctrl-C")
            .unwrap();
        assert!(status.success(), "{status}");
    }
}

/// The spans Phoenix holds, in its OTLP form.
async fn spans(phoenix: u16) -> Vec<Value> {
    let body: Value = reqwest::get(format!(
        "http://127.0.0.1:{phoenix}/v1/projects/default/spans/otlpv1?limit=1000"
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    body["data"].as_array().cloned().unwrap_or_default()
}

/// An attribute's value (OTLP JSON: `{"key", "value": {"string_value" | ...}}`).
fn attr(span: &Value, key: &str) -> Value {
    let attrs = span["attributes"].as_array().cloned().unwrap_or_default();
    let Some(a) = attrs.iter().find(|a| a["key"] == key) else {
        return Value::Null;
    };
    let v = &a["value"];
    for k in ["string_value", "int_value", "bool_value", "double_value"] {
        if !v[k].is_null() {
            return v[k].clone();
        }
    }
    v.clone()
}

fn named<'a>(all: &'a [Value], name: &str) -> Vec<&'a Value> {
    all.iter().filter(|s| s["name"] == name).collect()
}

fn event<'a>(span: &'a Value, name: &str) -> Option<&'a Value> {
    span["events"]
        .as_array()
        .and_then(|es| es.iter().find(|e| e["name"] == name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_turn_and_its_approval_in_another_process_show_in_phoenix() {
    let Some(bin) = phoenix_binary() else {
        return;
    };
    let started = Instant::now();
    let phoenix_dir = tempfile::tempdir().unwrap();
    let (mut phoenix, http, grpc) = start_phoenix(&bin, phoenix_dir.path()).await;
    let phoenix_start = started.elapsed();

    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    std::fs::write(
        cwd.join("auth.json"),
        json!({"principals": [{"name": "ana", "token_sha256": reins_server::hash_token(ANA), "roles": ["approver"]}]})
            .to_string(),
    )
    .unwrap();
    let port = free_port();
    let otlp_http = format!("http://127.0.0.1:{http}");
    let otlp_grpc = format!("http://127.0.0.1:{grpc}");

    // Turn 1, over OTLP/HTTP: the call pauses. The caller sends its own trace
    // context (a span of its own, not exported): the turn joins its trace.
    let s = start_serve(cwd, port, &["--otlp", &otlp_http]).await;
    let (st, out) = s
        .post_traced(
            &s.token,
            "/v1/sessions/dev%2Fone/runs",
            json!({"message": "delete temp.txt"}),
            Some(&format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")),
        )
        .await;
    assert_eq!((st, out["status"].as_str()), (200, Some("paused")), "{out}");
    let call = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let fingerprint = out["requirements"][0]["fingerprint"]
        .as_str()
        .unwrap()
        .to_owned();
    s.stop().await;

    // Turn 2, in another process, over OTLP/gRPC: another principal approves.
    let s = start_serve(
        cwd,
        port,
        &["--otlp", &otlp_grpc, "--otlp-protocol", "grpc"],
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (st, out) = s
        .post(
            ANA,
            "/v1/sessions/dev%2Fone/decisions",
            json!({"decisions": [{"requirement_id": call, "action": "approve"}]}),
        )
        .await;
    assert_eq!(
        (st, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );
    s.stop().await;

    // Phoenix has both turns (it stores what it receives shortly after; minutes on a
    // loaded machine).
    let deadline = Instant::now() + Duration::from_secs(120);
    let all = loop {
        let all = spans(http).await;
        if named(&all, "invoke_agent SafeAgent").len() >= 2
            && !named(&all, "execute_tool delete_file").is_empty()
        {
            break all;
        }
        assert!(Instant::now() < deadline, "Phoenix has: {all:#?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let turns = named(&all, "invoke_agent SafeAgent");
    assert_eq!(turns.len(), 2, "{all:#?}");
    let (first, second) = if attr(turns[0], "reins.resumed") == json!(true) {
        (turns[1], turns[0])
    } else {
        (turns[0], turns[1])
    };
    // One trace per turn: the first in its caller's trace (the `traceparent` header
    // it came with names the parent), the second rooted at its invoke_agent span.
    assert_ne!(first["trace_id"], second["trace_id"]);
    assert_eq!(first["trace_id"], CALLER_TRACE, "{first}");
    assert_eq!(first["parent_span_id"], CALLER_SPAN, "{first}");
    assert!(
        second["parent_span_id"].as_str().is_none_or(str::is_empty),
        "{second}"
    );
    // The names of the GenAI conventions (invoke_agent internal span).
    for t in [first, second] {
        assert_eq!(attr(t, "gen_ai.operation.name"), "invoke_agent");
        assert_eq!(attr(t, "gen_ai.provider.name"), "offline", "{t}");
        assert_eq!(attr(t, "gen_ai.agent.name"), "SafeAgent");
        assert_eq!(attr(t, "gen_ai.conversation.id"), "dev/one");
        assert!(
            attr(t, "gen_ai.request.model")
                .as_str()
                .is_some_and(|m| m.starts_with("offline")),
            "{t}"
        );
    }
    assert_eq!(attr(first, "reins.run.status"), "paused");
    assert_eq!(attr(second, "reins.run.status"), "completed");
    // The second turn continues the first: linked to its invoke_agent span.
    let tp = format!(
        "00-{}-{}-01",
        first["trace_id"].as_str().unwrap(),
        first["span_id"].as_str().unwrap()
    );
    assert_eq!(attr(second, "reins.resumes"), tp.as_str(), "{second}");
    let links = second["links"].as_array().cloned().unwrap_or_default();
    if !links.is_empty() {
        assert_eq!(links[0]["trace_id"], first["trace_id"], "{second}");
        assert_eq!(links[0]["span_id"], first["span_id"], "{second}");
    }
    // The wait began in the first turn, and was decided in the second: by whom,
    // through which door, on which arguments, after how long.
    let pending = event(first, "reins.requirement.pending").expect("the pending event");
    let pending_attrs = json!({"attributes": pending["attributes"]});
    assert_eq!(attr(&pending_attrs, "gen_ai.tool.name"), "delete_file");
    assert_eq!(
        attr(&pending_attrs, "reins.fingerprint"),
        fingerprint.as_str()
    );
    let decided = event(second, "reins.requirement.decided").expect("the decided event");
    let decided_attrs = json!({"attributes": decided["attributes"]});
    assert_eq!(attr(&decided_attrs, "reins.decision.by"), "ana");
    assert_eq!(attr(&decided_attrs, "reins.decision.door"), "api");
    assert_eq!(attr(&decided_attrs, "reins.decision.verdict"), "approve");
    assert_eq!(
        attr(&decided_attrs, "reins.fingerprint"),
        fingerprint.as_str()
    );
    assert!(attr(&decided_attrs, "reins.wait.seconds").as_f64().unwrap() > 0.0);

    // Under each turn: its model calls, and in the second the approved tool call.
    let child_of = |s: &Value, parent: &Value| {
        s["trace_id"] == parent["trace_id"] && s["parent_span_id"] == parent["span_id"]
    };
    // The demo's offline model: `offline (built-in rules, no network)`.
    let chats: Vec<&Value> = all
        .iter()
        .filter(|s| {
            s["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("chat offline"))
        })
        .collect();
    assert!(chats.iter().any(|c| child_of(c, first)), "{all:#?}");
    assert!(chats.iter().any(|c| child_of(c, second)), "{all:#?}");
    for c in &chats {
        assert_eq!(attr(c, "gen_ai.operation.name"), "chat");
        assert_eq!(attr(c, "gen_ai.provider.name"), "offline", "{c}");
        assert!(
            attr(c, "gen_ai.request.model")
                .as_str()
                .is_some_and(|m| m.starts_with("offline")),
            "{c}"
        );
        // Token counts are ints (Phoenix's OTLP JSON writes an int64 as a string,
        // in `int_value`).
        for k in ["gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"] {
            let v = c["attributes"]
                .as_array()
                .and_then(|a| a.iter().find(|a| a["key"] == k))
                .unwrap_or_else(|| panic!("no {k}: {c}"));
            assert!(!v["value"]["int_value"].is_null(), "{k}: {c}");
        }
        // A string array, as the conventions type it.
        let reasons = attr(c, "gen_ai.response.finish_reasons");
        let reasons = reasons["array_value"]["values"]
            .as_array()
            .unwrap_or_else(|| panic!("{c}"));
        assert!(
            reasons.iter().all(|r| ["stop", "tool_call", "length"]
                .contains(&r["string_value"].as_str().unwrap_or_default())),
            "{c}"
        );
        // Message content stays off unless opted in.
        assert!(attr(c, "gen_ai.input.messages").is_null(), "{c}");
    }
    let tools = named(&all, "execute_tool delete_file");
    assert_eq!(tools.len(), 1, "{all:#?}");
    let tool = tools[0];
    assert!(child_of(tool, second), "{tool}");
    assert_eq!(attr(tool, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(attr(tool, "gen_ai.tool.name"), "delete_file");
    assert_eq!(attr(tool, "gen_ai.tool.type"), "function");
    assert_eq!(attr(tool, "gen_ai.tool.call.id"), call.as_str());
    assert_eq!(attr(tool, "reins.tool.outcome"), "success");

    if std::env::var("REINS_WRITE_SCREENSHOTS").is_ok_and(|v| !v.is_empty() && v != "0") {
        screenshot(http, second["trace_id"].as_str().unwrap()).await;
    }
    eprintln!(
        "phoenix started in {phoenix_start:?}; spans checked: {} ({} traces); whole test {:?}",
        all.len(),
        2,
        started.elapsed()
    );
    phoenix.kill().await.unwrap();
}

/// Saves Phoenix's view of a trace — its span tree, the invoke_agent span at the
/// root and `chat` / `execute_tool` under it — to docs/screenshots/otel-span-tree.png
/// (headless Chromium through chromedriver).
async fn screenshot(phoenix: u16, trace: &str) {
    let port = free_port();
    let profile = tempfile::tempdir().unwrap();
    let mut driver = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver (Debian's chromium-driver) is installed");
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        json!({"args": [
            "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-dev-shm-usage", "--window-size=1600,1000",
            format!("--user-data-dir={}", profile.path().display()),
        ]}),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let c = loop {
        match fantoccini::ClientBuilder::new(
            hyper_util::client::legacy::connect::HttpConnector::new(),
        )
        .capabilities(caps.clone())
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        {
            Ok(c) => break c,
            Err(e) => {
                assert!(Instant::now() < deadline, "chromedriver: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    // Phoenix's first project (`Project:1`, base64 in its ids) holds the spans.
    c.goto(&format!(
        "http://127.0.0.1:{phoenix}/projects/UHJvamVjdDox/traces/{trace}"
    ))
    .await
    .unwrap();
    // The tree is drawn once every span of the trace shows its name.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let html = c.source().await.unwrap_or_default();
        if [
            "invoke_agent SafeAgent",
            "execute_tool delete_file",
            "chat offline",
        ]
        .iter()
        .all(|n| html.contains(n))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Phoenix's page never showed the span tree: {}",
            &html[..html.len().min(4000)]
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let png = c.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("otel-span-tree.png"), png).unwrap();
    eprintln!("wrote {}", dir.join("otel-span-tree.png").display());
    c.close().await.unwrap();
    driver.kill().await.unwrap();
}
