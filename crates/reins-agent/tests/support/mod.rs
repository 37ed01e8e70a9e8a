//! Shared helpers for the agent's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_agent::{Agent, AgentBuilder};
use reins_message::{Msg, Role, ToolOutcome};
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_tool::{ToolError, ToolPolicy, Toolkit};
use serde::Deserialize;
use serde_json::{Value, json};

pub mod mail_api;
pub mod subagents;

/// Counts executions per tool name, and what each ran with.
#[derive(Clone, Default)]
pub struct Counter(Arc<Mutex<HashMap<String, Vec<Value>>>>);

impl Counter {
    pub fn record(&self, name: &str, args: Value) {
        self.0
            .lock()
            .unwrap()
            .entry(name.to_owned())
            .or_default()
            .push(args);
    }
    pub fn count(&self, name: &str) -> usize {
        self.0.lock().unwrap().get(name).map_or(0, Vec::len)
    }
    pub fn args(&self, name: &str) -> Vec<Value> {
        self.0
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .unwrap_or_default()
    }
    pub fn total(&self) -> usize {
        self.0.lock().unwrap().values().map(Vec::len).sum()
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct PathArgs {
    /// A file path.
    pub path: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct EmailArgs {
    /// Recipient.
    pub to: String,
    /// Body.
    #[serde(default)]
    pub body: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct QueryArgs {
    /// What to search for.
    pub query: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct SleepArgs {
    /// Milliseconds to sleep.
    pub ms: u64,
}

/// The demo's three tools, with `delete_file` and `send_email` under the given policy,
/// plus `slow` (sleeps, honours cancellation) and `suspend` (suspends itself).
pub fn toolkit(counter: &Counter, gated: ToolPolicy) -> Toolkit {
    let mut t = Toolkit::new();
    let c = counter.clone();
    t.add(
        Toolkit::function("delete_file", "Delete a file", move |a: PathArgs, _ctx| {
            let c = c.clone();
            async move {
                c.record("delete_file", json!({"path": a.path}));
                Ok::<_, ToolError>(format!("deleted {}", a.path))
            }
        })
        .policy(gated.clone()),
    )
    .unwrap();
    let c = counter.clone();
    t.add(
        Toolkit::function("send_email", "Send an email", move |a: EmailArgs, _ctx| {
            let c = c.clone();
            async move {
                c.record("send_email", json!({"to": a.to, "body": a.body}));
                Ok::<_, ToolError>(format!("sent to {}", a.to))
            }
        })
        .policy(gated),
    )
    .unwrap();
    let c = counter.clone();
    t.add(Toolkit::function(
        "search_web",
        "Search the web",
        move |a: QueryArgs, _ctx| {
            let c = c.clone();
            async move {
                c.record("search_web", json!({"query": a.query}));
                Ok::<_, ToolError>(format!("3 results for {}", a.query))
            }
        },
    ))
    .unwrap();
    let c = counter.clone();
    t.add(Toolkit::function("slow", "Sleep a while", move |a: SleepArgs, ctx: reins_tool::ToolContext| {
        let c = c.clone();
        async move {
            c.record("slow", json!({"ms": a.ms}));
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(a.ms)) => Ok::<_, ToolError>("slept".to_owned()),
                _ = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
            }
        }
    }))
    .unwrap();
    let c = counter.clone();
    t.add(Toolkit::function(
        "suspend",
        "Hand the work to the caller",
        move |a: QueryArgs, _ctx| {
            let c = c.clone();
            async move {
                c.record("suspend", json!({"query": a.query}));
                Err::<String, _>(ToolError::Suspend(format!(
                    "needs a person to look up {}",
                    a.query
                )))
            }
        },
    ))
    .unwrap();
    t
}

pub fn agent(model: ScriptedModel, tools: Toolkit) -> AgentBuilder {
    Agent::builder()
        .name("SafeAgent")
        .system_prompt("You are careful.")
        .model(model)
        .toolkit(tools)
}

pub fn call(id: &str, name: &str, args: Value) -> ScriptedResponse {
    ScriptedResponse::tool_call_with_id(id, name, args)
}

pub fn text(t: &str) -> ScriptedResponse {
    ScriptedResponse::text(t)
}

/// Provider validity: every tool use has exactly one result after it and before the
/// next assistant message, and no result lacks its use.
pub fn assert_valid(messages: &[Msg]) {
    let mut open: Vec<String> = Vec::new();
    let mut seen_uses = std::collections::HashSet::new();
    for m in messages {
        match m.role {
            Role::Assistant => {
                assert!(
                    open.is_empty(),
                    "tool uses {open:?} have no result before the next assistant message"
                );
                for u in m.tool_uses() {
                    assert!(
                        seen_uses.insert(u.id.clone()),
                        "tool use id {} appears twice",
                        u.id
                    );
                    open.push(u.id.clone());
                }
            }
            _ => {
                assert!(
                    m.role == Role::Tool || !m.has_tool_results(),
                    "tool results outside a tool message"
                );
                for r in m.tool_results_iter() {
                    let pos = open.iter().position(|id| *id == r.id);
                    assert!(
                        pos.is_some(),
                        "tool result {} has no pending tool use",
                        r.id
                    );
                    open.remove(pos.unwrap());
                }
                if m.role == Role::User {
                    assert!(
                        open.is_empty(),
                        "user message while tool uses {open:?} are open"
                    );
                }
            }
        }
    }
}

/// The outcomes of every tool result in the transcript, by tool use id.
pub fn outcomes(messages: &[Msg]) -> HashMap<String, ToolOutcome> {
    messages
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .map(|r| (r.id.clone(), r.outcome.clone()))
        .collect()
}

/// The text of the result for a tool use id.
pub fn result_text(messages: &[Msg], id: &str) -> String {
    messages
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .find(|r| r.id == id)
        .map(|r| r.text())
        .unwrap_or_default()
}

pub fn count_calls(c: &AtomicUsize) -> usize {
    c.load(Ordering::SeqCst)
}

/// A model that streams `chunks` text pieces, `every` apart (for interrupts mid-stream).
#[derive(Clone)]
pub struct DripModel {
    pub chunks: usize,
    pub every: Duration,
    pub calls: Arc<AtomicUsize>,
}

impl DripModel {
    pub fn new(chunks: usize, every: Duration) -> Self {
        Self {
            chunks,
            every,
            calls: Arc::default(),
        }
    }
}

#[async_trait::async_trait]
impl reins_model::ChatModel for DripModel {
    fn model_name(&self) -> &str {
        "drip"
    }
    async fn stream(
        &self,
        _req: reins_model::ChatRequest,
    ) -> reins_model::Result<reins_model::ChatStream> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let (n, every) = (self.chunks, self.every);
        let s = futures::stream::unfold(0usize, move |i| async move {
            if i > n {
                return None;
            }
            tokio::time::sleep(every).await;
            let chunk = if i == n {
                reins_model::ChatChunk::Finish {
                    reason: reins_model::FinishReason::Stop,
                }
            } else {
                reins_model::ChatChunk::TextDelta {
                    text: format!("w{i} "),
                }
            };
            Some((Ok(chunk), i + 1))
        });
        Ok(Box::pin(s))
    }
}

// ----- process harnesses (crash.rs, races.rs) ---------------------------------------

/// The environment variable naming a PostgreSQL server for the process harnesses.
pub const PG_URL_VAR: &str = "REINS_TEST_POSTGRES_URL";

/// Whether the long versions of the harnesses run (`REINS_LONG=1`).
pub fn is_long() -> bool {
    std::env::var("REINS_LONG").is_ok_and(|v| v == "1")
}

/// Where a child process finds its store: passed to it through the environment.
#[derive(Clone, Debug)]
pub enum StoreSpec {
    /// A SQLite file.
    Sqlite(std::path::PathBuf),
    /// A PostgreSQL server, in a schema of the test's own.
    Postgres { url: String, schema: String },
}

impl StoreSpec {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Sqlite(_) => "sqlite",
            Self::Postgres { .. } => "postgres",
        }
    }

    /// The environment a child needs to open the same store.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Self::Sqlite(p) => vec![
                ("REINS_STORE", "sqlite".to_owned()),
                ("REINS_STORE_PATH", p.display().to_string()),
            ],
            Self::Postgres { url, schema } => vec![
                ("REINS_STORE", "postgres".to_owned()),
                ("REINS_STORE_URL", url.clone()),
                ("REINS_STORE_SCHEMA", schema.clone()),
            ],
        }
    }

    /// Reads what [`StoreSpec::env`] set.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set"));
        match var("REINS_STORE").as_str() {
            "sqlite" => Self::Sqlite(var("REINS_STORE_PATH").into()),
            "postgres" => Self::Postgres {
                url: var("REINS_STORE_URL"),
                schema: var("REINS_STORE_SCHEMA"),
            },
            other => panic!("unknown REINS_STORE {other}"),
        }
    }

    /// Opens a fresh connection (pool) to the store.
    pub async fn open(&self) -> Arc<dyn reins_memory::MemoryStore> {
        match self {
            Self::Sqlite(p) => Arc::new(reins_memory::SqliteStore::open(p).await.unwrap()),
            #[cfg(feature = "postgres")]
            Self::Postgres { url, schema } => Arc::new(
                reins_memory::PostgresStore::connect_with(
                    url,
                    reins_memory::PostgresOptions::default()
                        .schema(schema.clone())
                        .max_connections(4),
                )
                .await
                .unwrap(),
            ),
            #[cfg(not(feature = "postgres"))]
            Self::Postgres { .. } => panic!("built without the `postgres` feature"),
        }
    }
}

/// The stores a process harness runs on: SQLite (a file in `dir`) always, and
/// PostgreSQL when `REINS_TEST_POSTGRES_URL` is set. Without it the PostgreSQL half
/// fails under `CI=true` and is reported SKIPPED (loudly) elsewhere.
pub fn harness_stores(dir: &std::path::Path, what: &str) -> Vec<StoreSpec> {
    let mut out = vec![StoreSpec::Sqlite(dir.join(format!("{what}.db")))];
    let url = std::env::var(PG_URL_VAR).ok().filter(|u| !u.is_empty());
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    match url {
        Some(url) if cfg!(feature = "postgres") => out.push(StoreSpec::Postgres {
            url,
            schema: format!("reins_{what}_{}", reins_message::new_id().replace('-', "")),
        }),
        Some(_) => {
            assert!(
                !ci,
                "{PG_URL_VAR} is set but reins-agent was built without the `postgres` feature \
                 (run `cargo xtask test`, which enables all features)"
            );
            eprintln!(
                "SKIPPED: {what} on PostgreSQL: reins-agent was built without the `postgres` feature"
            );
        }
        None => {
            assert!(
                !ci,
                "{PG_URL_VAR} is not set, but CI=true: the {what} harness must run on PostgreSQL in CI \
                 (run it through `cargo xtask test`, which starts a throwaway server)"
            );
            eprintln!(
                "SKIPPED: {what} on PostgreSQL: {PG_URL_VAR} is not set (run `cargo xtask test`, \
                 or point it at a scratch server)"
            );
        }
    }
    out
}

/// A command that re-runs this test binary for one ignored child test.
pub fn child_test(name: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    cmd
}

/// Appends one line to a side-effect log and syncs it to disk, so that a parent
/// process counts every execution even if this process is killed right after.
pub fn log_effect(path: &std::path::Path, line: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
    f.sync_all().unwrap();
}

/// The lines of a side-effect log (none when it does not exist).
pub fn effects(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Prints a line for the parent process and flushes it at once.
pub fn tell_parent(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// Reads a child's stdout line by line on a thread. The test harness prints
/// `test <name> ... ` before the child's first line without a newline; it is cut off.
pub fn read_lines(out: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let line = match line.split_once(" ... ") {
                Some((head, rest)) if head.starts_with("test ") => rest.to_owned(),
                _ => line,
            };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// A store shared by two workers: a handle each (for SQL backends, separate pools).
pub type SharedStore = Arc<dyn reins_memory::MemoryStore>;

/// Two handles on one store for each backend — in memory (one store, shared), SQLite
/// (two pools on one file) and PostgreSQL (see [`harness_stores`]): (label, a, b,
/// what keeps the SQLite file alive).
pub async fn store_pairs(
    what: &str,
) -> Vec<(
    &'static str,
    SharedStore,
    SharedStore,
    Option<tempfile::TempDir>,
)> {
    let mut out: Vec<(
        &'static str,
        SharedStore,
        SharedStore,
        Option<tempfile::TempDir>,
    )> = Vec::new();
    let mem: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    out.push(("memory", mem.clone(), mem, None));
    let dir = tempfile::tempdir().unwrap();
    for spec in harness_stores(dir.path(), what) {
        let (a, b) = (spec.open().await, spec.open().await);
        out.push((spec.label(), a, b, None));
    }
    if let Some(first) = out.iter_mut().find(|p| p.0 == "sqlite") {
        first.3 = Some(dir);
    }
    out
}
