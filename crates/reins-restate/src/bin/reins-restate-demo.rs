//! The SafeAgent demo as a Restate service: a reins session object on an HTTP/2
//! endpoint, with a rule-following offline model (no API key) and tools whose every
//! effect is one line in an outbox file. reins-restate's tests and benchmark start it as
//! a real child process (and kill -9 it). (`cargo xtask serve --restate` serves the
//! SafeAgent demo agent of `crates/reins-demo` instead, behind reins-server.)
//!
//! ```text
//! reins-restate-demo --listen 127.0.0.1:9080 --db /tmp/reins.sqlite --outbox /tmp/outbox.txt
//! ```
//!
//! Flags: `--listen ADDR` (default 127.0.0.1:9080), `--db PATH` (SQLite store; default
//! `reins-restate-demo.sqlite`), `--outbox PATH` (default `outbox.txt`),
//! `--database-url postgres://..` (a PostgreSQL store instead; feature `postgres`),
//! `--tool-lease-ms N` (the ledger lease, default 600000), `--latency-ms N` (the
//! model's delay before it answers, default 0), `--live URL` (a reins-server fronting the deployment, to send live run events to;
//! repeat it for each instance) with `--live-token TOKEN` (its bearer token), `--notify`
//! (this process delivers the store's notices: a `reins_notify::Dispatcher` beside the
//! service, which turns the store's outbox on and posts each notice to the webhook
//! subscribers stored in it; see docs/notifications.md), `--help`.
//!
//! Evidence (docs/evidence.md): with a signing key — `--evidence-key-file PATH` (a file
//! holding a 32-byte Ed25519 seed, base64url) or `REINS_EVIDENCE_KEY` in the environment
//! (the same, inline) — the service signs a receipt for each decision applied and each
//! call that finishes, under the key id `--evidence-kid KID` (or `REINS_EVIDENCE_KID`;
//! default `reins-restate-demo`). The key comes from the configuration, never from the
//! store.
//!
//! What the model does with the last message of a request:
//!
//! | user text | the model calls |
//! |---|---|
//! | `delete PATH` | `delete_file {path}`: needs a person's confirmation |
//! | `work MS` | `work {ms}`: runs at once, takes MS ms, not idempotent |
//! | `sync MS` | `sync {ms}`: runs at once, takes MS ms, idempotent |
//! | `use TOOL` | `TOOL {}`: a tool the request offers (an AG-UI client's own) |
//! | `batch N MS` | N `work {ms}` calls in one answer (one batch: they run at the same time) |
//! | `stream N` | nothing: answers in N text chunks, 100 ms apart |
//! | anything else | nothing: answers `ok` |
//!
//! After tool results it answers `done: ` and the results. Every model call writes
//! `model` to the outbox; every tool writes `<tool> start <session>/<call id> by
//! <name>` when it starts and `<tool> end ...` when it ends (`--name NAME`, default
//! `demo`, tells service processes apart).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reins_agent::Agent;
use reins_memory::{MemoryStore, SqliteStore};
use reins_message::Role;
use reins_model::{ChatChunk, ChatModel, ChatRequest, ChatStream, FinishReason};
use reins_tool::{ToolContext, ToolError, ToolPolicy, Toolkit};

/// Appends one line per effect.
#[derive(Clone)]
struct Outbox(Arc<PathBuf>, Arc<str>);

impl Outbox {
    /// `<tool> <what> <session>/<call id> by <process name>`.
    fn tool(&self, tool: &str, what: &str, ctx: &ToolContext) {
        self.line(&format!(
            "{tool} {what} {}/{} by {}",
            ctx.session_id, ctx.tool_use_id, self.1
        ));
    }

    /// Appends `text` and its newline in one `write` (three service processes append
    /// to one outbox: `writeln!` may write the text and the newline separately, and
    /// another process's line could land between them).
    fn line(&self, text: &str) {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&*self.0);
        match f {
            Ok(mut f) => {
                if let Err(e) = f.write_all(format!("{text}\n").as_bytes()) {
                    eprintln!("outbox: {e}");
                }
            }
            Err(e) => eprintln!("outbox: {e}"),
        }
    }
}

struct RuleModel {
    outbox: Outbox,
    latency: Duration,
}

#[async_trait]
impl ChatModel for RuleModel {
    fn model_name(&self) -> &str {
        "rules"
    }

    async fn stream(&self, request: ChatRequest) -> reins_model::Result<ChatStream> {
        self.outbox.line("model");
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        let n = request.messages.len();
        let last = request.messages.last();
        let call = |name: &str, args: serde_json::Value| {
            vec![
                ChatChunk::ToolCallStart {
                    index: 0,
                    id: format!("call_{n}"),
                    name: name.to_owned(),
                },
                ChatChunk::ToolArgsDelta {
                    index: 0,
                    fragment: args.to_string(),
                },
                ChatChunk::Finish {
                    reason: FinishReason::ToolUse,
                },
            ]
        };
        let text = |t: String| {
            vec![
                ChatChunk::TextDelta { text: t },
                ChatChunk::Finish {
                    reason: FinishReason::Stop,
                },
            ]
        };
        let mut gap = Duration::ZERO;
        let chunks = match last {
            Some(m) if m.role == Role::Tool => {
                let results: Vec<String> = m.tool_results_iter().map(|r| r.text()).collect();
                text(format!("done: {}", results.join("; ")))
            }
            Some(m) if m.role == Role::User => {
                let t = m.text();
                let mut words = t.split_whitespace();
                let (cmd, arg) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                let ms: u64 = arg.parse().unwrap_or(0);
                match cmd {
                    "delete" => call("delete_file", serde_json::json!({"path": arg})),
                    "work" => call("work", serde_json::json!({"ms": ms})),
                    "sync" => call("sync", serde_json::json!({"ms": ms})),
                    // A tool the request offers: the caller's own (AG-UI's client tools).
                    "use" => call(arg, serde_json::json!({})),
                    "batch" => {
                        let each: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                        let count = usize::try_from(ms.min(16)).unwrap_or(0);
                        let mut c = Vec::new();
                        for i in 0..count {
                            c.push(ChatChunk::ToolCallStart {
                                index: i,
                                id: format!("call_{n}_{i}"),
                                name: "work".to_owned(),
                            });
                            c.push(ChatChunk::ToolArgsDelta {
                                index: i,
                                fragment: serde_json::json!({"ms": each}).to_string(),
                            });
                        }
                        c.push(ChatChunk::Finish {
                            reason: FinishReason::ToolUse,
                        });
                        c
                    }
                    "stream" => {
                        gap = Duration::from_millis(100);
                        let mut c: Vec<ChatChunk> = (0..ms)
                            .map(|i| ChatChunk::TextDelta {
                                text: format!("part {i}. "),
                            })
                            .collect();
                        c.push(ChatChunk::Finish {
                            reason: FinishReason::Stop,
                        });
                        c
                    }
                    _ => text("ok".to_owned()),
                }
            }
            _ => text("ok".to_owned()),
        };
        let stream = futures::stream::iter(chunks).then(move |c| async move {
            if !gap.is_zero() {
                tokio::time::sleep(gap).await;
            }
            Ok(c)
        });
        Ok(Box::pin(stream))
    }
}

use futures::StreamExt;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct DeleteArgs {
    /// The file to delete.
    path: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WorkArgs {
    /// How long the work takes, in milliseconds.
    ms: u64,
}

/// A tool body that takes `ms` and logs its start and end.
async fn timed(
    outbox: &Outbox,
    tool: &str,
    ms: u64,
    ctx: &ToolContext,
) -> Result<String, ToolError> {
    outbox.tool(tool, "start", ctx);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    outbox.tool(tool, "end", ctx);
    Ok(format!("{tool} finished after {ms} ms"))
}

fn toolkit(outbox: &Outbox) -> Result<Toolkit, Box<dyn std::error::Error>> {
    let mut tools = Toolkit::new();
    let o = outbox.clone();
    tools.add(
        Toolkit::function("delete_file", "Delete a file", move |a: DeleteArgs, ctx| {
            let o = o.clone();
            async move {
                o.tool("delete_file", "start", &ctx);
                o.tool("delete_file", &format!("end ({})", a.path), &ctx);
                Ok::<_, ToolError>(format!("deleted {}", a.path))
            }
        })
        .policy(ToolPolicy::confirm().reason("deletes a file")),
    )?;
    let o = outbox.clone();
    tools.add(
        Toolkit::function(
            "work",
            "Work for a while (not idempotent)",
            move |a: WorkArgs, ctx| {
                let o = o.clone();
                async move { timed(&o, "work", a.ms, &ctx).await }
            },
        )
        .policy(ToolPolicy::auto()),
    )?;
    let o = outbox.clone();
    tools.add(
        Toolkit::function(
            "sync",
            "Sync for a while (idempotent)",
            move |a: WorkArgs, ctx| {
                let o = o.clone();
                async move { timed(&o, "sync", a.ms, &ctx).await }
            },
        )
        .policy(ToolPolicy::auto().idempotent(true)),
    )?;
    Ok(tools)
}

struct Args {
    listen: String,
    db: PathBuf,
    outbox: PathBuf,
    tool_lease: Duration,
    latency: Duration,
    name: String,
    database_url: Option<String>,
    database_schema: Option<String>,
    live: Vec<String>,
    live_token: Option<String>,
    /// `--notify`: run a dispatcher for the store in this process.
    notify: bool,
    evidence_key_file: Option<PathBuf>,
    evidence_kid: Option<String>,
}

/// The evidence signer of the configuration: the key file's seed, else
/// `REINS_EVIDENCE_KEY`'s; `None` when neither is set.
fn evidence_signer(args: &Args) -> Result<Option<reins_evidence::Signer>, String> {
    let seed = match &args.evidence_key_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("--evidence-key-file {}: {e}", path.display()))?,
        None => match std::env::var("REINS_EVIDENCE_KEY") {
            Ok(seed) => seed,
            Err(_) => return Ok(None),
        },
    };
    let kid = args
        .evidence_kid
        .clone()
        .or_else(|| std::env::var("REINS_EVIDENCE_KID").ok())
        .unwrap_or_else(|| "reins-restate-demo".to_owned());
    reins_evidence::Signer::from_base64url(kid, seed.trim())
        .map(Some)
        .map_err(|e| format!("the evidence key: {e}"))
}

const USAGE: &str =
    "usage: reins-restate-demo [--listen ADDR] [--db PATH] [--outbox PATH] [--database-url URL]
                          [--database-schema NAME]
                          [--tool-lease-ms N] [--latency-ms N] [--name NAME]
                          [--live URL].. [--live-token TOKEN] [--notify]
                          [--evidence-key-file PATH] [--evidence-kid KID]

The rule-following demo service as a Restate endpoint (HTTP/2) on ADDR (default
127.0.0.1:9080); register it with restate-server's admin API. With a key (an Ed25519 seed,
base64url) in --evidence-key-file or REINS_EVIDENCE_KEY it signs evidence receipts,
under the key id --evidence-kid or REINS_EVIDENCE_KID. For the SafeAgent demo
behind reins-server and a local restate-server, run `cargo xtask serve --restate`.
--notify: this process delivers the store's notices (requirement.waiting, run.completed,
...) to the webhook subscribers stored in it (reins_notify::Dispatcher).";

/// The command line; `None` for `--help`.
fn args() -> Result<Option<Args>, String> {
    let mut a = Args {
        listen: "127.0.0.1:9080".to_owned(),
        db: PathBuf::from("reins-restate-demo.sqlite"),
        outbox: PathBuf::from("outbox.txt"),
        tool_lease: Duration::from_secs(600),
        latency: Duration::ZERO,
        name: "demo".to_owned(),
        database_url: None,
        database_schema: None,
        live: Vec::new(),
        live_token: None,
        evidence_key_file: None,
        evidence_kid: None,
        notify: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Ok(None);
        }
        if flag == "--notify" {
            a.notify = true;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let ms = || {
            value
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|e| format!("{flag}: {e}"))
        };
        match flag.as_str() {
            "--listen" => a.listen.clone_from(&value),
            "--db" => a.db = PathBuf::from(&value),
            "--outbox" => a.outbox = PathBuf::from(&value),
            "--tool-lease-ms" => a.tool_lease = ms()?,
            "--latency-ms" => a.latency = ms()?,
            "--name" => a.name.clone_from(&value),
            "--database-url" => a.database_url = Some(value.clone()),
            "--database-schema" => a.database_schema = Some(value.clone()),
            "--live" => a.live.push(value.clone()),
            "--live-token" => a.live_token = Some(value.clone()),
            "--evidence-key-file" => a.evidence_key_file = Some(PathBuf::from(&value)),
            "--evidence-kid" => a.evidence_kid = Some(value.clone()),
            other => return Err(format!("unknown flag {other}\n\n{USAGE}")),
        }
    }
    Ok(Some(a))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = match args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return Ok(());
        }
        Err(e) => {
            eprintln!("reins-restate-demo: {e}");
            std::process::exit(2);
        }
    };
    let outbox = Outbox(Arc::new(args.outbox.clone()), Arc::from(args.name.as_str()));
    let store: Arc<dyn MemoryStore> = match &args.database_url {
        None => Arc::new(SqliteStore::open(&args.db).await?),
        #[cfg(feature = "postgres")]
        Some(url) => {
            let mut options = reins_memory::PostgresOptions::default();
            if let Some(schema) = &args.database_schema {
                options = options.schema(schema);
            }
            Arc::new(reins_memory::PostgresStore::connect_with(url, options).await?)
        }
        #[cfg(not(feature = "postgres"))]
        Some(_) => return Err("--database-url needs the `postgres` feature".into()),
    };
    // Before the agent commits anything: the outbox is on from the first commit, and
    // this process delivers (every process dispatching for the store shares the work).
    let _dispatching = if args.notify {
        let dispatcher = reins_notify::Dispatcher::new(Arc::clone(&store))
            .webhooks()
            .owner(format!("reins-restate-demo/{}", args.name));
        Some(
            dispatcher
                .spawn()
                .ok_or("the dispatcher needs a Tokio runtime")?,
        )
    } else {
        None
    };
    let mut agent = Agent::builder()
        .name("SafeAgent")
        .system_prompt("You are a careful assistant.")
        .model(RuleModel {
            outbox: outbox.clone(),
            latency: args.latency,
        })
        .toolkit(toolkit(&outbox)?)
        .store_arc(store)
        .tool_lease(args.tool_lease);
    match evidence_signer(&args) {
        Ok(Some(signer)) => {
            agent = agent.evidence_signer(signer, reins_evidence::Keyring::new());
        }
        Ok(None) => {}
        Err(e) => {
            eprintln!("reins-restate-demo: {e}");
            std::process::exit(2);
        }
    }
    let agent = agent.build()?;
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    let url = format!("http://{}", listener.local_addr()?);
    println!("reins-restate-demo: serving ReinsSession on {url}");
    let mut relay = reins_restate::LiveRelay::new();
    for url in &args.live {
        relay = relay.to(url.clone());
    }
    if let Some(t) = &args.live_token {
        relay = relay.token(t.clone());
    }
    let object = reins_restate::SessionObject::new(agent)?.live(relay);
    reins_restate::serve(object, listener).await;
    Ok(())
}
