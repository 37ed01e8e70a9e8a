//! Shared test parts: a scripted agent with an approval tool, a slow tool and the
//! client tools' verbs, and the real TypeScript ACP SDK client run as a child whose
//! stdin/stdout are the ACP wire.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_agent::Agent;
use reins_memory::MemoryStore;
use reins_message::Role;
use reins_model::{ChatRequest, ScriptedModel, ScriptedResponse};
use reins_tool::{ToolContext, ToolError, ToolPolicy, Toolkit};
use serde_json::json;

/// What the tools ran, in order: in memory, or in a file ([`Ran::file`]) for tools
/// that run in another process (a Restate service) or a client that reads it.
#[derive(Clone, Default)]
pub struct Ran(Arc<Mutex<Vec<String>>>, Option<PathBuf>);

impl Ran {
    /// A record kept in `path`, one line per run.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self(Arc::default(), Some(path.into()))
    }
    pub fn push(&self, what: String) {
        if let Some(path) = &self.1 {
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

/// `delete X` (confirm), `tag X` (user input), `slow X` (~20 s unless interrupted), `read X` / `write X` /
/// `run` / `plan` (the client tools); tool results are summarized; anything else is
/// echoed.
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
    let call = |name: &str, args| ScriptedResponse::tool_call_with_id(call_id(), name, args);
    match verb {
        "delete" => call("delete_file", json!({ "path": arg })),
        "slow" => call("slow_scan", json!({ "path": arg })),
        "tag" => call("tag_file", json!({ "path": arg })),
        "read" => call("read_text_file", json!({ "path": arg })),
        "write" => call(
            "write_text_file",
            json!({ "path": arg, "content": "new text" }),
        ),
        "run" => call(
            "run_in_terminal",
            json!({ "command": "echo", "args": ["hi"] }),
        ),
        "plan" => call(
            "update_plan",
            json!({ "entries": [
                { "content": "Read the file", "priority": "high", "status": "in_progress" },
                { "content": "Fix it", "status": "pending" }
            ]}),
        ),
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
        .model(ScriptedModel::from_fn(respond).with_chunk_size(4))
        .toolkit(toolkit(ran))
        .store_arc(store)
        .session_lease(Duration::from_secs(3))
        .tool_lease(Duration::from_secs(3))
        .interrupt_grace(Duration::from_millis(300))
        .build()
        .unwrap()
}

/// The SDK client's directory (its package.json, lockfile and scripts).
pub fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/client")
}

/// Whether the pinned client is installed; under `CI=true` its absence fails the
/// test, elsewhere the test is skipped loudly.
pub fn client_installed() -> bool {
    let sdk = client_dir().join("node_modules/@agentclientprotocol/sdk/package.json");
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if sdk.exists() && node {
        return true;
    }
    let why = format!(
        "the TypeScript ACP SDK client is not installed (node found: {node}); run\n  npm ci --no-audit --no-fund --prefix {}",
        client_dir().display()
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    eprintln!("SKIPPED: {why}");
    false
}
