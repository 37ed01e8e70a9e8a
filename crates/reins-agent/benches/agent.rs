//! Agent overhead benchmarks: everything except the model's latency.
//!
//! With a zero-latency `ScriptedModel` and the `InMemoryStore`: building an agent with
//! one tool, a single-turn text run, a tool-call run (two model turns), and a 25-turn
//! conversation with the history in context. With the `SqliteStore` (a file in a
//! temporary directory): the 25-turn conversation at both durability levels, and the
//! cost of one turn at turns 1-10 versus turns 191-200 of a growing session.
//! The same scenarios as `crates/reins-bench/src/bin/peer_bench.rs`.
//!
//! `session_read`: what a read (`is_paused()`) costs now that every read checks the
//! stored version first — on an in-memory store and on a SQLite file, for a session
//! of 50 messages that nobody else changed (the version read only) and, for SQLite,
//! one that another worker changed before each read (version read + reload).
//!
//! `fork`: what `Session::fork` costs against the source's length (10, 100 and 400
//! tool-call turns, 4 messages and one ledger entry each), on memory and SQLite: a
//! fork before the first turn (copies nothing, records every call: one ledger read
//! each) and a fork at the end (copies every message, records nothing).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use reins_agent::{Agent, RunStatus};
use reins_memory::{Durability, InMemoryStore, SqliteOptions, SqliteStore};
use reins_message::{Msg, Role};
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_tool::{ToolError, Toolkit};
use serde_json::json;

/// Arguments of the `add` tool.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    /// The first addend.
    a: i64,
    /// The second addend.
    b: i64,
}

fn add_toolkit() -> Toolkit {
    let mut tools = Toolkit::new();
    tools
        .add(Toolkit::function(
            "add",
            "Add two integers.",
            |args: AddArgs, _ctx| async move { Ok::<_, ToolError>((args.a + args.b).to_string()) },
        ))
        .unwrap();
    tools
}

/// Calls `add` when the last message is not a tool result, else answers with text
/// (the peer's scripted model does the same).
fn tool_model() -> ScriptedModel {
    ScriptedModel::from_fn(|req| {
        if req.messages.last().is_some_and(|m| m.role == Role::Tool) {
            ScriptedResponse::text("3")
        } else {
            ScriptedResponse::tool_call("add", json!({ "a": 1, "b": 2 }))
        }
    })
    .with_recording(false)
}

fn text_model(reply: &str) -> ScriptedModel {
    let reply = reply.to_owned();
    ScriptedModel::from_fn(move |_| ScriptedResponse::text(reply.clone())).with_recording(false)
}

fn construct() -> Agent {
    Agent::builder()
        .model(tool_model())
        .toolkit(add_toolkit())
        .build()
        .unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

static NEXT: AtomicU64 = AtomicU64::new(0);

fn fresh_id() -> String {
    format!("s-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// One run on a fresh session (the peer runs without a session id, so each run
/// starts a new session with no history).
async fn one_run(agent: &Agent, text: &str) {
    let session = agent.session(&fresh_id()).await.unwrap();
    let out = session.send(Msg::user(text)).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    black_box(out);
}

/// `turns` turns on one new session, history in context.
async fn conversation(agent: &Agent, turns: usize) {
    let session = agent.session(&fresh_id()).await.unwrap();
    for i in 0..turns {
        let out = session.send(Msg::user(format!("turn {i}"))).await.unwrap();
        black_box(out);
    }
}

fn in_memory(c: &mut Criterion) {
    let rt = rt();
    let mut g = c.benchmark_group("agent");
    g.sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));

    g.bench_function("construct", |b| b.iter(|| black_box(construct())));

    let text_agent = Agent::builder().model(text_model("done")).build().unwrap();
    g.bench_function("single_turn", |b| {
        b.iter(|| rt.block_on(one_run(&text_agent, "hello")));
    });

    let tool_agent = construct();
    g.bench_function("tool_call_run", |b| {
        b.iter(|| rt.block_on(one_run(&tool_agent, "add 1 and 2")));
    });

    g.sample_size(10);
    g.bench_function("conversation_25_turns", |b| {
        b.iter_batched(
            || {
                Agent::builder()
                    .model(text_model(&"x".repeat(200)))
                    .store(InMemoryStore::new())
                    .build()
                    .unwrap()
            },
            |agent| rt.block_on(conversation(&agent, 25)),
            criterion::BatchSize::PerIteration,
        );
    });
    g.finish();
}

async fn sqlite_store(dir: &std::path::Path, durability: Durability) -> SqliteStore {
    SqliteStore::open_with(
        dir.join("bench.db"),
        SqliteOptions::default().durability(durability),
    )
    .await
    .unwrap()
}

fn sqlite(c: &mut Criterion) {
    let rt = rt();
    let mut g = c.benchmark_group("agent_sqlite");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));

    for (name, durability) in [("full", Durability::Full), ("normal", Durability::Normal)] {
        let dir = tempfile::tempdir().unwrap();
        let store = rt.block_on(sqlite_store(dir.path(), durability));
        g.bench_function(BenchmarkId::new("conversation_25_turns", name), |b| {
            b.iter_batched(
                || {
                    Agent::builder()
                        .model(text_model(&"x".repeat(200)))
                        .store(store.clone())
                        .build()
                        .unwrap()
                },
                |agent| rt.block_on(conversation(&agent, 25)),
                criterion::BatchSize::PerIteration,
            );
        });
    }

    // Per-turn cost as a session grows: turns 1-10 versus turns 191-200 (500-char
    // prompts, 2,000-char replies, the last 3 turns in context). Each iteration is
    // one turn; `iter_custom` replays the session from the right length.
    let dir = tempfile::tempdir().unwrap();
    let store = rt.block_on(sqlite_store(dir.path(), Durability::Normal));
    let agent = Agent::builder()
        .model(text_model(&"x".repeat(2000)))
        .store(store)
        .history_turns(3)
        .build()
        .unwrap();
    let prompt = format!("hello {}", "y".repeat(500));
    for (name, start) in [("turns_1_10", 0usize), ("turns_191_200", 190)] {
        g.bench_function(BenchmarkId::new("growth_turn", name), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    let mut done = 0u64;
                    while done < iters {
                        // A session grown to `start` turns, then timed for up to 10.
                        let session = agent.session(&fresh_id()).await.unwrap();
                        for _ in 0..start {
                            session.send(Msg::user(prompt.clone())).await.unwrap();
                        }
                        for _ in 0..10 {
                            if done == iters {
                                break;
                            }
                            let t = Instant::now();
                            black_box(session.send(Msg::user(prompt.clone())).await.unwrap());
                            total += t.elapsed();
                            done += 1;
                        }
                    }
                    total
                })
            });
        });
    }
    g.finish();
}

/// An in-memory store and a SQLite file (Normal durability) in `dir`, labelled.
fn memory_and_sqlite(
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
) -> [(&'static str, std::sync::Arc<dyn reins_memory::MemoryStore>); 2] {
    [
        ("memory", std::sync::Arc::new(InMemoryStore::new())),
        (
            "sqlite",
            std::sync::Arc::new(rt.block_on(sqlite_store(dir, Durability::Normal))),
        ),
    ]
}

fn session_read(c: &mut Criterion) {
    let rt = rt();
    let mut g = c.benchmark_group("session_read");
    g.sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let dir = tempfile::tempdir().unwrap();
    let [memory, sqlite] = memory_and_sqlite(&rt, dir.path());
    let sqlite = sqlite.1;
    for (name, store) in [memory, ("sqlite", sqlite.clone())] {
        let agent = Agent::builder()
            .model(text_model("ok"))
            .store_arc(store)
            .build()
            .unwrap();
        let session = rt.block_on(async {
            let s = agent.session("read-bench").await.unwrap();
            for i in 0..25 {
                s.send(Msg::user(format!("turn {i}"))).await.unwrap();
            }
            s
        });
        g.bench_function(BenchmarkId::new("unchanged", name), |b| {
            b.iter(|| black_box(rt.block_on(session.is_paused()).unwrap()));
        });
    }
    // Another worker (a second agent on the same file) writes before each read.
    let reader = Agent::builder()
        .model(text_model("ok"))
        .store_arc(sqlite.clone())
        .build()
        .unwrap();
    let writer = Agent::builder()
        .model(text_model("ok"))
        .store_arc(sqlite)
        .build()
        .unwrap();
    let (r, w) = rt.block_on(async {
        let w = writer.session("moving").await.unwrap();
        for i in 0..25 {
            w.send(Msg::user(format!("turn {i}"))).await.unwrap();
        }
        (reader.session("moving").await.unwrap(), w)
    });
    g.bench_function(BenchmarkId::new("changed_elsewhere", "sqlite"), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for i in 0..iters {
                    w.send(Msg::user(format!("more {i}"))).await.unwrap();
                    let t = Instant::now();
                    black_box(r.is_paused().await.unwrap());
                    total += t.elapsed();
                }
                total
            })
        });
    });
    g.finish();
}

fn fork(c: &mut Criterion) {
    use reins_agent::ForkPoint;
    let rt = rt();
    let mut g = c.benchmark_group("fork");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let dir = tempfile::tempdir().unwrap();
    for (name, store) in memory_and_sqlite(&rt, dir.path()) {
        let agent = Agent::builder()
            .model(tool_model())
            .toolkit(add_toolkit())
            .store_arc(store)
            .build()
            .unwrap();
        for turns in [10usize, 100, 400] {
            let source = rt.block_on(async {
                let s = agent.session(&format!("src-{turns}")).await.unwrap();
                for i in 0..turns {
                    s.send(Msg::user(format!("add {i}"))).await.unwrap();
                }
                s
            });
            let len = rt.block_on(source.messages()).unwrap().len();
            for (point, at) in [
                ("start", ForkPoint::BeforeTurn(0)),
                ("end", ForkPoint::Messages(len)),
            ] {
                g.bench_function(BenchmarkId::new(format!("{name}/{point}"), turns), |b| {
                    b.iter(|| {
                        rt.block_on(async {
                            let f = source.fork(at, fresh_id()).await.unwrap();
                            black_box(f.id().len())
                        })
                    });
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, in_memory, sqlite, session_read, fork);
criterion_main!(benches);
