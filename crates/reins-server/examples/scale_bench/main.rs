//! The scale of the waiting (not a test): a store holding N sessions of 20 messages,
//! M of them paused on a pending requirement, served by reins-server on loopback;
//! the latency of what a person and the inbox do over HTTP, the store work of a
//! decision, and the server's memory with N stored against 1,000 stored.
//!
//! ```text
//! cargo xtask bench --scale [--sessions N] [--paused M] [--store sqlite|postgres|both]
//! cargo run --release -p reins-server --all-features --example scale_bench -- \
//!     --store sqlite [--sessions 20000 --paused 2000] [--database-url postgres://..]
//! ```
//!
//! The stores are seeded directly ([`seed`]): reins itself writes three template
//! sessions through an agent (10 turns each; two end paused on a confirmation, of
//! `send_email` or `delete_file`), and bulk SQL copies their rows, as stored, to N
//! sessions in large transactions, changing only the session id, the times and the
//! pending requirement's time. The data is the bench's own: a SQLite file in a
//! temporary directory, or a PostgreSQL schema of its own (dropped at the end).
//!
//! The server runs in a process of its own (this program again, with
//! `--serve-child`), so its RSS is the server's alone; requests go one at a time.
//! Sessions are `u<k>/s<i>` (ten users, `u0` to `u9`, in turn by blocks of N / M);
//! every (N / M)-th one is paused, one in ten of those on `delete_file`.
//!
//! `--inline-checkpoints` opens SQLite with SQLite's own WAL checkpoints, inside the
//! commit that fills the log, instead of the store's background thread
//! (`SqliteOptions::background_checkpoints`): the comparison for a decision's tail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod measure;
mod plans;
mod seed;
mod timed;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use reins_agent::Agent;
use reins_memory::MemoryStore;
use reins_message::Role;
use reins_model::{ChatRequest, ScriptedModel, ScriptedResponse};
use reins_server::{AccessRole, Auth, Principal, Server};
use reins_tool::{ToolError, ToolPolicy, Toolkit};
use serde_json::json;

/// The tool use id of every paused session's pending call.
pub(crate) const CALL_ID: &str = "call_scale";

/// `--inline-checkpoints`: SQLite's own checkpoints, in the commits.
static INLINE_CHECKPOINTS: AtomicBool = AtomicBool::new(false);

/// Whether `--inline-checkpoints` was given.
pub(crate) fn inline_checkpoints() -> bool {
    INLINE_CHECKPOINTS.load(Ordering::Relaxed)
}

/// The SQLite store at `path`, with the checkpoints the command line asks for.
pub(crate) async fn open_sqlite(
    path: impl AsRef<Path>,
) -> reins_memory::Result<reins_memory::SqliteStore> {
    let options =
        reins_memory::SqliteOptions::default().background_checkpoints(!inline_checkpoints());
    reins_memory::SqliteStore::open_with(path, options).await
}

/// What the command line asks for.
#[derive(Debug, Clone)]
pub(crate) struct Args {
    pub sessions: usize,
    pub paused: usize,
    pub store: String,
    pub database_url: Option<String>,
    pub samples: usize,
}

fn parse_args() -> Result<(Args, Option<(String, String)>), String> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| -> Option<String> {
        argv.iter()
            .position(|a| a == name)
            .and_then(|i| argv.get(i + 1).cloned())
    };
    let number = |name: &str, default: usize| -> Result<usize, String> {
        match value(name) {
            None => Ok(default),
            Some(v) => v
                .replace('_', "")
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{name} needs a positive number, not `{v}`")),
        }
    };
    let args = Args {
        sessions: number("--sessions", 1_000_000)?,
        paused: number("--paused", 100_000)?,
        store: value("--store").unwrap_or_else(|| "sqlite".to_owned()),
        database_url: value("--database-url")
            .or_else(|| std::env::var("REINS_BENCH_POSTGRES_URL").ok()),
        samples: number("--samples", 200)?,
    };
    INLINE_CHECKPOINTS.store(
        argv.iter().any(|a| a == "--inline-checkpoints"),
        Ordering::Relaxed,
    );
    if args.paused > args.sessions {
        return Err("--paused cannot exceed --sessions".to_owned());
    }
    if !["sqlite", "postgres"].contains(&args.store.as_str()) {
        return Err(format!(
            "--store is sqlite or postgres, not `{}`",
            args.store
        ));
    }
    let child =
        value("--serve-child").map(|port_file| (port_file, value("--target").unwrap_or_default()));
    Ok((args, child))
}

fn main() {
    let (args, child) = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("scale_bench: {e}");
            std::process::exit(2);
        }
    };
    if let Some((port_file, target)) = child {
        serve_child(&args.store, &target, Path::new(&port_file));
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Err(e) = rt.block_on(measure::run(args)) {
        eprintln!("scale_bench: {e}");
        std::process::exit(1);
    }
}

/// What the scripted model answers (no latency): a tool call when the last user
/// message asks for one, `done` after a tool result, otherwise a 200-character reply.
fn respond(req: &ChatRequest) -> ScriptedResponse {
    let last = req.messages.iter().rev().find(|m| m.role != Role::System);
    match last {
        Some(m) if m.role == Role::Tool => ScriptedResponse::text("done"),
        Some(m) if m.text().starts_with("mail") => {
            ScriptedResponse::tool_call_with_id(CALL_ID, "send_email", json!({"to": "bob"}))
        }
        Some(m) if m.text().starts_with("delete") => {
            ScriptedResponse::tool_call_with_id(CALL_ID, "delete_file", json!({"path": "/tmp/x"}))
        }
        _ => ScriptedResponse::text("x".repeat(200)),
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct MailArgs {
    /// Recipient.
    to: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// The file.
    path: String,
}

/// The agent every process of the bench builds: two confirm-gated tools, the
/// scripted model.
pub(crate) fn agent(store: Arc<dyn MemoryStore>) -> Agent {
    let mut tools = Toolkit::new();
    tools
        .add(
            Toolkit::function(
                "send_email",
                "Send an email",
                |a: MailArgs, _ctx| async move { Ok::<_, ToolError>(format!("mailed {}", a.to)) },
            )
            .policy(ToolPolicy::confirm()),
        )
        .unwrap();
    tools
        .add(
            Toolkit::function("delete_file", "Delete a file", |a: PathArgs, _ctx| async move {
                Ok::<_, ToolError>(format!("deleted {}", a.path))
            })
            .policy(ToolPolicy::confirm()),
        )
        .unwrap();
    Agent::builder()
        .model(ScriptedModel::from_fn(respond).with_recording(false))
        .toolkit(tools)
        .store_arc(store)
        .build()
        .unwrap()
}

/// The tokens: `admin`; `approver` (decides `delete_file` only); `u0`..`u9` (users,
/// each owning `u<k>/`).
pub(crate) fn auth() -> Auth {
    let mut auth = Auth::new()
        .token("admin", Principal::new("admin", [AccessRole::Admin]))
        .token(
            "approver",
            Principal::new("approver", [AccessRole::Approver]).tools(["delete_file"]),
        );
    for k in 0..10 {
        auth = auth.token(
            &format!("u{k}"),
            Principal::new(format!("u{k}"), [AccessRole::User]),
        );
    }
    auth
}

/// Opens the store `target` names: a SQLite file path, or `postgres|URL|SCHEMA`.
pub(crate) async fn open_store(kind: &str, target: &str) -> Result<Arc<dyn MemoryStore>, String> {
    match kind {
        "sqlite" => Ok(Arc::new(
            open_sqlite(PathBuf::from(target))
                .await
                .map_err(|e| format!("open {target}: {e}"))?,
        )),
        _ => {
            let (url, schema) = target
                .split_once('|')
                .ok_or("a postgres target is URL|SCHEMA")?;
            let options = reins_memory::PostgresOptions::default().schema(schema);
            Ok(Arc::new(
                reins_memory::PostgresStore::connect_with(url, options)
                    .await
                    .map_err(|e| format!("connect {url}: {e}"))?,
            ))
        }
    }
}

/// In the child: serve until stdin closes.
fn serve_child(kind: &str, target: &str, port_file: &Path) {
    std::thread::spawn(|| {
        let mut sink = [0u8; 64];
        while std::io::stdin().read(&mut sink).is_ok_and(|n| n > 0) {}
        std::process::exit(0);
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = open_store(kind, target).await.unwrap();
        let server = Server::new(agent(store)).auth(auth());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let tmp = port_file.with_extension("tmp");
        std::fs::write(&tmp, port.to_string()).unwrap();
        std::fs::rename(&tmp, port_file).unwrap();
        server.serve(listener).await.unwrap();
    });
}
