//! What the A2A tests share: the venv's Python (or a loud skip), two stores on one
//! database, two live servers on them, a test agent with a quick ungated tool, and a
//! run of one of the client scripts in this directory against the servers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use reins_agent::Agent;
use reins_memory::MemoryStore;
use reins_message::Role;
use reins_model::{ChatRequest, ScriptedModel, ScriptedResponse};
use reins_tool::{ToolError, Toolkit};
use serde_json::{Value, json};

use crate::support::{self, Ran, TestServer};

pub fn client_dir() -> PathBuf {
    // From reins-server and from the crates that share this harness (reins-restate).
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-server/tests/a2a")
}

/// The venv's Python, or `None` (the test is skipped; under `CI=true` it fails).
pub fn client_available(test: &str) -> Option<PathBuf> {
    let p = client_dir().join(".venv/bin/python");
    if p.exists() {
        return Some(p);
    }
    let why = "the A2A client is not installed (python3 -m venv crates/reins-server/tests/a2a/.venv && \
               crates/reins-server/tests/a2a/.venv/bin/pip install -r crates/reins-server/tests/a2a/requirements.txt)";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {why}; CI must run this test");
    }
    eprintln!("SKIPPED {test}: {why}");
    None
}

/// Two stores on one database: PostgreSQL when the test harness gives one (a schema
/// of the test's own, since tests run at once and an approver lists every task), else
/// one SQLite file.
pub async fn two_stores() -> (
    Option<tempfile::TempDir>,
    Arc<dyn MemoryStore>,
    Arc<dyn MemoryStore>,
) {
    if let Ok(url) = std::env::var("REINS_TEST_POSTGRES_URL") {
        let options = reins_memory::PostgresOptions::default()
            .schema(format!("a2a_{}", uuid::Uuid::new_v4().simple()));
        let a = reins_memory::PostgresStore::connect_with(&url, options.clone())
            .await
            .unwrap();
        let b = reins_memory::PostgresStore::connect_with(&url, options)
            .await
            .unwrap();
        return (None, Arc::new(a), Arc::new(b));
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("a2a: REINS_TEST_POSTGRES_URL is not set under CI (run `cargo xtask test`)");
    }
    let dir = tempfile::tempdir().unwrap();
    let a = reins_memory::SqliteStore::open(dir.path().join("s.db"))
        .await
        .unwrap();
    let b = reins_memory::SqliteStore::open(dir.path().join("s.db"))
        .await
        .unwrap();
    (Some(dir), Arc::new(a), Arc::new(b))
}

/// The shared test agent, plus `search_web` (ungated, quick: `search X` calls it), so
/// that a turn that runs a tool and completes shows how often the tool ran.
pub fn agent_with_search(store: Arc<dyn MemoryStore>, ran: &Ran) -> Agent {
    let mut toolkit = support::toolkit(ran);
    let r = ran.clone();
    toolkit
        .add(Toolkit::function(
            "search_web",
            "Search the web",
            move |a: QueryArgs, _ctx| {
                let r = r.clone();
                async move {
                    r.lock().unwrap().push(format!("search:{}", a.query));
                    Ok::<_, ToolError>(format!("results for {}", a.query))
                }
            },
        ))
        .unwrap();
    Agent::builder()
        .name("TestAgent")
        .model(ScriptedModel::from_fn(respond).with_chunk_size(4))
        .toolkit(toolkit)
        .store_arc(store)
        .session_lease(Duration::from_secs(3))
        .tool_lease(Duration::from_secs(3))
        .interrupt_grace(Duration::from_millis(500))
        .build()
        .unwrap()
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct QueryArgs {
    /// What to search.
    query: String,
}

/// [`support::respond`], and `search X` calls `search_web`. A session whose user said
/// something starting with `slowly ` gets every answer after 400 ms (the rest of the
/// message is what counts), so that a second request arrives while its run executes.
fn respond(req: &ChatRequest) -> ScriptedResponse {
    let users: Vec<String> = req
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.text())
        .collect();
    let slow = users.iter().any(|t| t.starts_with("slowly "));
    let last = req.messages.iter().rev().find(|m| m.role != Role::System);
    let text = last
        .filter(|m| m.role == Role::User)
        .map(|m| m.text())
        .unwrap_or_default();
    let text = text.strip_prefix("slowly ").unwrap_or(&text);
    let call = |name: &str, args: Value| {
        ScriptedResponse::tool_call_with_id(
            format!("call_{}", uuid::Uuid::new_v4().simple()),
            name,
            args,
        )
    };
    let answer = if let Some(query) = text.strip_prefix("search ") {
        call("search_web", json!({"query": query}))
    } else if let Some(path) = text.strip_prefix("delete ") {
        call("delete_file", json!({"path": path}))
    } else {
        support::respond(req)
    };
    if slow {
        answer.with_latency(Duration::from_millis(400))
    } else {
        answer
    }
}

/// Two live servers with the [`agent_with_search`] agent on one database; both record
/// into the same [`Ran`].
pub async fn two_servers() -> (TestServer, TestServer) {
    let (dir, store_a, store_b) = two_stores().await;
    let ran: Ran = Arc::default();
    let a = support::serve(agent_with_search(store_a, &ran), ran.clone(), dir, |s| s).await;
    let b = support::serve(agent_with_search(store_b, &ran), ran.clone(), None, |s| s).await;
    (a, b)
}

/// Runs `script` (in this directory) against `a` and `b` with `env`, and gives its
/// report; panics with the script's output when it fails.
pub async fn run_client(
    python: &std::path::Path,
    script: &str,
    a: &TestServer,
    b: &TestServer,
    env: &[(&str, &str)],
) -> Value {
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(client_dir().join(script))
        .arg(&a.base)
        .arg(&b.base)
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = tokio::time::timeout(Duration::from_secs(180), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{script} did not finish within 180 s"))
        .expect("python could not be started");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} failed:\n{stderr}\n{stdout}"
    );
    serde_json::from_str(stdout.trim()).expect("the client's report")
}
