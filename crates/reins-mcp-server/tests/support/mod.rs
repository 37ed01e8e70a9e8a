//! Shared test parts: a scripted agent with approval, input and slow tools; the
//! server on loopback HTTP or as a stdio child; the real TypeScript SDK clients.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_agent::Agent;
use reins_mcp_server::McpAgentServer;
use reins_memory::MemoryStore;
use reins_message::Role;
use reins_model::{ChatRequest, ScriptedModel, ScriptedResponse};
use reins_tool::{ToolContext, ToolError, ToolPolicy, Toolkit};
use serde_json::{Value, json};

pub const KEY: &[u8; 32] = b"test-key-test-key-test-key-test!";

/// What the tools ran, in order (also appended to `$REINS_MCP_RAN_FILE` when set,
/// or to the file of [`Ran::file`], for tools running in another process).
#[derive(Clone, Default)]
pub struct Ran(Arc<Mutex<Vec<String>>>, Option<PathBuf>);

impl Ran {
    /// A record kept in `path` (one line per run): what tools in another process
    /// ran, read from this one.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self(Arc::default(), Some(path.into()))
    }
    pub fn push(&self, what: String) {
        let path = self
            .1
            .clone()
            .or_else(|| std::env::var_os("REINS_MCP_RAN_FILE").map(PathBuf::from));
        if let Some(path) = path {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            writeln!(f, "{what}").unwrap();
        }
        self.0.lock().unwrap().push(what);
    }
    /// What ran: the file's lines for a [`Ran::file`].
    pub fn all(&self) -> Vec<String> {
        match &self.1 {
            Some(path) => std::fs::read_to_string(path)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect(),
            None => self.0.lock().unwrap().clone(),
        }
    }
    pub fn count(&self, what: &str) -> usize {
        self.all().iter().filter(|r| *r == what).count()
    }
    /// Waits until `what` ran (its line is there), for at most 30 s.
    pub async fn wait_for(&self, what: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.count(what) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "`{what}` never ran: {:?}",
                self.all()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// The file.
    path: String,
    /// A tag (asked from a person).
    #[serde(default)]
    tag: Option<String>,
}

fn call_id() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "call_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// `delete X` (confirm), `tag X` (user input), `slow X` (runs ~20 s unless
/// interrupted); tool results are summarized; anything else is echoed.
pub fn respond(req: &ChatRequest) -> ScriptedResponse {
    let Some(last) = req.messages.iter().rev().find(|m| m.role != Role::System) else {
        return ScriptedResponse::text("hello");
    };
    if last.role == Role::Tool {
        let parts: Vec<String> = last
            .tool_results_iter()
            .map(|r| format!("{}: {:?} {}", r.name, r.outcome, r.text()))
            .collect();
        return ScriptedResponse::text(format!("Outcome — {}", parts.join("; ")));
    }
    let text = last.text();
    let mut words = text.split_whitespace();
    let verb = words.next().unwrap_or("");
    let arg = words.collect::<Vec<_>>().join(" ");
    match verb {
        "delete" => {
            ScriptedResponse::tool_call_with_id(call_id(), "delete_file", json!({ "path": arg }))
        }
        "tag" => ScriptedResponse::tool_call_with_id(call_id(), "tag_file", json!({ "path": arg })),
        "slow" => {
            ScriptedResponse::tool_call_with_id(call_id(), "slow_scan", json!({ "path": arg }))
        }
        _ => ScriptedResponse::text(format!("echo: {text}")),
    }
}

pub fn toolkit(ran: &Ran) -> Toolkit {
    let mut t = Toolkit::new();
    let r = ran.clone();
    t.add(
        Toolkit::function("delete_file", "Delete a file", move |a: PathArgs, _ctx| {
            let r = r.clone();
            async move {
                r.push(format!("delete:{}", a.path));
                Ok::<_, ToolError>(format!("deleted {}", a.path))
            }
        })
        .policy(ToolPolicy::confirm().reason("deleting needs a person's yes")),
    )
    .unwrap();
    let r = ran.clone();
    t.add(
        Toolkit::function("tag_file", "Tag a file", move |a: PathArgs, _ctx| {
            let r = r.clone();
            async move {
                let tag = a.tag.unwrap_or_default();
                r.push(format!("tag:{}={tag}", a.path));
                Ok::<_, ToolError>(format!("tagged {} {tag}", a.path))
            }
        })
        .policy(ToolPolicy::user_input(json!({
            "type": "object",
            "properties": { "tag": { "type": "string", "description": "The tag" } },
            "required": ["tag"]
        }))),
    )
    .unwrap();
    let r = ran.clone();
    t.add(Toolkit::function(
        "slow_scan",
        "Scan a file slowly (about 20 s unless interrupted)",
        move |a: PathArgs, ctx: ToolContext| {
            let r = r.clone();
            async move {
                r.push(format!("slow-start:{}", a.path));
                for _ in 0..400 {
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(50)) => {}
                        () = ctx.cancel.cancelled() => {
                            r.push(format!("slow-stopped:{}", a.path));
                            return Err(ToolError::Cancelled);
                        }
                    }
                }
                r.push(format!("slow-done:{}", a.path));
                Ok::<_, ToolError>(format!("scanned {}", a.path))
            }
        },
    ))
    .unwrap();
    t
}

pub fn agent(store: Arc<dyn MemoryStore>, ran: &Ran) -> Agent {
    Agent::builder()
        .name("files")
        .model(ScriptedModel::from_fn(respond))
        .toolkit(toolkit(ran))
        .store_arc(store)
        .session_lease(Duration::from_secs(3))
        .tool_lease(Duration::from_secs(3))
        .interrupt_grace(Duration::from_millis(300))
        .build()
        .unwrap()
}

pub fn server(sessions: impl reins_agent::port::Sessions + 'static) -> McpAgentServer {
    McpAgentServer::builder(sessions)
        .signing_key(*KEY)
        .state_ttl(Duration::from_secs(3))
        .poll_interval(Duration::from_millis(100))
        .authenticate(|parts| {
            parts
                .headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(|t| t.trim_start_matches("token-").to_owned())
        })
        .build()
        .unwrap()
}

/// Serves on a loopback port until dropped.
pub struct Http {
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Http {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn serve_http(server: McpAgentServer) -> Http {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://127.0.0.1:{}/mcp",
        listener.local_addr().unwrap().port()
    );
    let task = tokio::spawn(async move {
        let _ = server.serve_http(listener).await;
    });
    Http { url, task }
}

/// The folder with the TypeScript clients (package.json, package-lock.json, the
/// scripts); `node_modules` is installed there by .ci/run.
pub fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/client")
}

/// Whether node and the installed SDKs are there. Under CI their absence fails the
/// test; elsewhere it is reported as skipped.
pub fn have_node(test: &str) -> bool {
    let sdk = client_dir().join("node_modules/@modelcontextprotocol");
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if node && sdk.join("sdk").is_dir() && sdk.join("client").is_dir() {
        return true;
    }
    let why = format!(
        "{test}: needs node and `npm ci --prefix {}` (node found: {node})",
        client_dir().display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{why}");
    }
    eprintln!("SKIPPED {why}");
    false
}

/// Runs one TypeScript client script with its arguments; returns the JSON it prints
/// as its last stdout line. The script has 60 s.
pub async fn run_client(script: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(client_dir().join(script))
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the client script took longer than 60 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} {args:?} failed:\n{stdout}\n{stderr}"
    );
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{script} printed no JSON:\n{stdout}\n{stderr}"));
    serde_json::from_str(last).unwrap()
}

pub async fn sqlite_store() -> (tempfile::TempDir, Arc<dyn MemoryStore>) {
    let dir = tempfile::tempdir().unwrap();
    let store = reins_memory::SqliteStore::open(dir.path().join("s.db"))
        .await
        .unwrap();
    (dir, Arc::new(store))
}

/// The Tasks extension's flow (tests/client/tasks.mjs) through two instances of the
/// door, one over port `a` and one over port `b` (on one store, or one deployment):
/// a task created on A is answered and cancelled through B and read on both; a task
/// decided in the inbox (another door's person, through the port's decision path)
/// completes for the MCP client. `ran` is what the tools ran, wherever they run.
pub async fn tasks_flow(
    a: Arc<dyn reins_agent::port::Sessions>,
    b: Arc<dyn reins_agent::port::Sessions>,
    ran: &Ran,
    label: &str,
) {
    use reins_agent::port::Decide;
    use reins_agent::{Actor, Decision};

    let Some(ran_file) = ran.1.clone() else {
        panic!("the tasks flow reads what ran from a file (Ran::file)");
    };
    let http_a = serve_http(server(a.clone())).await;
    let http_b = serve_http(server(b.clone())).await;

    let out = run_client(
        "tasks.mjs",
        &["flow", &http_a.url, &http_b.url, ran_file.to_str().unwrap()],
        &[],
    )
    .await;
    assert_eq!(out["withoutExtension"], "complete", "{label}: {out}");
    assert_eq!(out["created"]["resultType"], "task", "{label}: {out}");
    assert_eq!(out["created"]["status"], "working");
    assert_eq!(out["created"]["pollIntervalMs"], 100);
    let id = out["created"]["taskId"].as_str().unwrap();
    assert!(id.starts_with("mcp/alice/"), "{id}");
    assert_eq!(
        out["waitingOnB"]["status"], "input_required",
        "{label}: {out}"
    );
    assert!(
        out["waitingOnB"]["message"]
            .as_str()
            .unwrap()
            .contains("t.txt")
    );
    assert_eq!(out["foreign"]["code"], -32602, "{label}: {out}");
    assert!(out["update"]["result"].is_object(), "{label}: {out}");
    assert_eq!(out["doneOnA"]["status"], "completed", "{label}: {out}");
    assert!(
        out["doneOnA"]["text"]
            .as_str()
            .unwrap()
            .contains("deleted t.txt")
    );
    assert_eq!(out["doneOnB"]["status"], "completed");
    assert_eq!(out["workingBeforeCancel"], "working", "{label}: {out}");
    assert!(out["cancel"]["result"].is_object(), "{label}: {out}");
    assert_eq!(out["cancelled"]["status"], "cancelled", "{label}: {out}");
    assert_eq!(out["unknown"]["code"], -32602, "{label}: {out}");
    // The approved delete ran once; the slow call was stopped.
    let deletes: Vec<String> = ran
        .all()
        .into_iter()
        .filter(|r| r.starts_with("delete:"))
        .collect();
    assert_eq!(deletes, ["delete:t.txt"], "{label}");
    ran.wait_for("slow-stopped:s.txt").await;
    assert_eq!(ran.count("slow-done:s.txt"), 0, "{label}");

    // A task decided in the inbox (another door's person, through B's port) completes.
    let out = run_client(
        "tasks.mjs",
        &["start", &http_a.url, "delete inbox.txt"],
        &[],
    )
    .await;
    assert_eq!(out["status"], "input_required", "{label}: {out}");
    let id = out["taskId"].as_str().unwrap();
    let view = b.view(id).await.unwrap();
    assert_eq!(view.requirements.len(), 1, "{label}: {view:?}");
    let decide = Decide::new(
        Actor::new("carol@inbox"),
        vec![Decision::approve(&view.requirements[0].id)],
    )
    .at(view.token);
    b.decide(id, decide).await.unwrap().wait().await.unwrap();
    let out = run_client("tasks.mjs", &["get", &http_a.url, id], &[]).await;
    assert_eq!(out["status"], "completed", "{label}: {out}");
    assert!(out["text"].as_str().unwrap().contains("deleted inbox.txt"));
    let audit = b.audit(id).await.unwrap();
    assert_eq!(
        audit.last().unwrap().actor.as_ref().unwrap().principal,
        "carol@inbox"
    );
}
