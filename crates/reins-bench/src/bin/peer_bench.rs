//! The side-by-side peer benchmark: the workloads of `shared/peer/agno_bench.py`, run
//! on reins with the same repetitions and medians, printed as one JSON object with the
//! same keys.
//!
//! Every scenario talks to an in-process [`ScriptedModel`] with no latency, so what is
//! timed is the framework's own overhead: building requests, dispatching the tool,
//! writing the store.
//!
//! ```text
//! cargo run --release -p reins-bench --bin peer_bench [-- --quick]
//! ```
//!
//! Keys (microseconds unless named `_kib` or `_turns`):
//! - `construct_us`, `construct_kib`: an agent with one tool (model + toolkit + agent),
//!   time and heap bytes held per agent (a counting global allocator);
//! - `single_turn_us`: one text run on a fresh session;
//! - `tool_call_run_us`: one run in which the model calls `add`, then answers;
//! - `single_turn_allocs` / `tool_call_run_allocs` (and `..._alloc_kib`): heap
//!   allocations (and KiB asked for) per run of those two scenarios, counted by the
//!   program's global allocator over 100 runs;
//! - `conversation_25_turns_us`: 25 turns on one session, 200-char replies, the whole
//!   history in context (`InMemoryStore`);
//! - `conversation_25_turns_sqlite_us` / `..._normal_us`: the same on a `SqliteStore`
//!   file at `Durability::Full` / `Durability::Normal`;
//! - `sqlite_commit_floor_us`: one bare SQLite transaction (rusqlite, WAL,
//!   `synchronous=FULL`) inserting one turn's two message rows, on a file in the same
//!   directory: the physical floor of a durable turn on this machine;
//! - `sqlite_turn_first10_us` / `sqlite_turn_last10_us` / `sqlite_growth_turns`: the
//!   median turn of the first and last 10 of a growing session at `Durability::Normal`
//!   (500-char prompts, 2,000-char replies, the last 3 turns in context, as the peer's
//!   `num_history_runs=3`);
//! - `conversation_25_turns_postgres_us`, `postgres_commit_floor_us`,
//!   `postgres_turn_first10_us` / `postgres_turn_last10_us` / `postgres_growth_turns`:
//!   the 25-turn conversation and the growth run on a `PostgresStore` (in a schema of
//!   its own, dropped afterwards), and a bare transaction inserting one turn's two
//!   message rows on the same server. Only when `REINS_BENCH_POSTGRES_URL` or
//!   `REINS_TEST_POSTGRES_URL` is set; otherwise `postgres_skipped` says why.

use std::error::Error;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use reins::memory::Durability;
use reins::prelude::*;
use reins_bench::alloc::{Counting, INSTRUMENTED_SYSTEM, Snapshot};
use reins_bench::scenario::{Res, fresh_id, one_run, text_model, tool_agent};
use serde_json::json;

/// Counts allocations and the bytes the process holds (`construct_kib`, `*_allocs`).
#[global_allocator]
static ALLOC: &Counting = &INSTRUMENTED_SYSTEM;

struct Plan {
    reps: usize,
    warm: usize,
    conversations: usize,
    sqlite_conversations: usize,
    growth_turns: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Warms up, then returns the median of `reps` timed calls, in microseconds.
fn median_us(plan: &Plan, mut f: impl FnMut() -> Res<()>) -> Res<f64> {
    for _ in 0..plan.warm {
        f()?;
    }
    let mut samples = Vec::with_capacity(plan.reps);
    for _ in 0..plan.reps {
        let t = Instant::now();
        f()?;
        samples.push(us(t.elapsed()));
    }
    Ok(median(samples))
}

/// Heap bytes held per agent: 100 agents kept alive, after one to warm lazy statics.
fn construction_kib() -> Res<f64> {
    drop(tool_agent()?);
    let mut keep = Vec::with_capacity(100);
    let before = Snapshot::of(ALLOC);
    for _ in 0..100 {
        keep.push(tool_agent()?);
    }
    let used = Snapshot::of(ALLOC).since(before).held;
    drop(keep);
    Ok(used as f64 / 100.0 / 1024.0)
}

/// Allocations and bytes allocated per call of `f`, over 100 calls after `plan.warm`
/// (the process is single-threaded here, so the counts are the calls' own).
fn allocs_per_call(plan: &Plan, mut f: impl FnMut() -> Res<()>) -> Res<(f64, f64)> {
    for _ in 0..plan.warm {
        f()?;
    }
    let before = Snapshot::of(ALLOC);
    for _ in 0..100 {
        f()?;
    }
    let d = Snapshot::of(ALLOC).since(before);
    Ok((
        d.allocations as f64 / 100.0,
        d.bytes as f64 / 100.0 / 1024.0,
    ))
}

/// `turns` turns on a new session of a new agent on `store`; only the turns are timed.
async fn conversation<S: MemoryStore>(store: S, turns: usize) -> Res<f64> {
    let agent = Agent::builder()
        .model(text_model("x".repeat(200)))
        .store(store)
        .build()?;
    let session = agent.session(&fresh_id()).await?;
    let t = Instant::now();
    for i in 0..turns {
        black_box(session.send(Msg::user(format!("turn {i}"))).await?);
    }
    Ok(us(t.elapsed()))
}

/// Per-turn cost as a session grows on `store`: the median turn of the first 10 and
/// of the last 10 of `plan.growth_turns` (500-char prompts, 2,000-char replies, the
/// last 3 turns in context).
async fn growth<S: MemoryStore>(plan: &Plan, store: S) -> Res<(f64, f64)> {
    let agent = Agent::builder()
        .model(text_model("x".repeat(2000)))
        .store(store)
        .history_turns(3)
        .build()?;
    let session = agent.session("growth").await?;
    let prompt = format!("hello {}", "y".repeat(500));
    let mut times = Vec::with_capacity(plan.growth_turns);
    for _ in 0..plan.growth_turns {
        let t = Instant::now();
        black_box(session.send(Msg::user(prompt.clone())).await?);
        times.push(us(t.elapsed()));
    }
    Ok((
        median(times[..10].to_vec()),
        median(times[times.len() - 10..].to_vec()),
    ))
}

async fn open_store(dir: &Path, name: &str, durability: Durability) -> Res<SqliteStore> {
    let options = reins::memory::SqliteOptions::default().durability(durability);
    Ok(SqliteStore::open_with(dir.join(name), options).await?)
}

/// The PostgreSQL scenarios, when a server is named (see the module doc).
async fn postgres_scenarios(plan: &Plan, url: &str) -> Res<Vec<(&'static str, f64)>> {
    let schema = format!("reins_peer_bench_{}", std::process::id());
    let options = reins::memory::PostgresOptions::default().schema(schema.clone());
    let store = PostgresStore::connect_with(url, options).await?;
    let mut kv = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..plan.sqlite_conversations {
        runs.push(conversation(store.clone(), 25).await?);
    }
    kv.push(("conversation_25_turns_postgres_us", median(runs)));
    kv.push((
        "postgres_commit_floor_us",
        postgres_commit_floor(plan, store.pool()).await?,
    ));
    let (first10, last10) = growth(plan, store.clone()).await?;
    kv.push(("postgres_turn_first10_us", first10));
    kv.push(("postgres_turn_last10_us", last10));
    sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(store.pool())
        .await?;
    Ok(kv)
}

/// A bare PostgreSQL transaction inserting one turn's two message rows (as the SQLite
/// floor does), in a scratch table of the bench's schema: the floor of a durable turn
/// on that server.
async fn postgres_commit_floor(plan: &Plan, pool: &sqlx::PgPool) -> Res<f64> {
    sqlx::query(
        "CREATE TABLE floor_rows (session_id TEXT NOT NULL, seq BIGINT NOT NULL, \
         id TEXT NOT NULL, body JSONB NOT NULL, PRIMARY KEY (session_id, seq))",
    )
    .execute(pool)
    .await?;
    let user = Msg::user("turn 1");
    let reply = Msg::assistant("x".repeat(200));
    let bodies = [
        (user.id.clone(), serde_json::to_string(&user)?),
        (reply.id.clone(), serde_json::to_string(&reply)?),
    ];
    let mut seq = 0i64;
    let mut samples = Vec::with_capacity(plan.reps);
    for i in 0..plan.warm + plan.reps {
        let t = Instant::now();
        let mut tx = pool.begin().await?;
        for (id, body) in &bodies {
            sqlx::query(
                "INSERT INTO floor_rows (session_id, seq, id, body) VALUES ($1, $2, $3, $4::jsonb)",
            )
            .bind("floor")
            .bind(seq)
            .bind(id)
            .bind(body)
            .execute(&mut *tx)
            .await?;
            seq += 1;
        }
        tx.commit().await?;
        if i >= plan.warm {
            samples.push(us(t.elapsed()));
        }
    }
    Ok(median(samples))
}

/// A bare commit of one turn's rows (the user message and a 200-char reply), as
/// encoded by reins, at `synchronous=FULL` in WAL mode: one `BEGIN IMMEDIATE`
/// transaction with two cached `INSERT`s, straight on a rusqlite connection (no thread
/// hop, no async).
fn commit_floor(plan: &Plan, dir: &Path) -> Res<f64> {
    let conn = rusqlite::Connection::open(dir.join("floor.db"))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(
        "CREATE TABLE rows (session_id TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL, \
         body TEXT NOT NULL, PRIMARY KEY (session_id, seq))",
    )?;
    let user = Msg::user("turn 1");
    let reply = Msg::assistant("x".repeat(200));
    let bodies = [
        (user.id.clone(), serde_json::to_string(&user)?),
        (reply.id.clone(), serde_json::to_string(&reply)?),
    ];
    let mut seq = 0i64;
    let mut samples = Vec::with_capacity(plan.reps);
    for i in 0..plan.warm + plan.reps {
        let t = Instant::now();
        conn.execute_batch("BEGIN IMMEDIATE")?;
        for (id, body) in &bodies {
            conn.prepare_cached(
                "INSERT INTO rows (session_id, seq, id, body) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(rusqlite::params!["floor", seq, id, body])?;
            seq += 1;
        }
        conn.execute_batch("COMMIT")?;
        if i >= plan.warm {
            samples.push(us(t.elapsed()));
        }
    }
    Ok(median(samples))
}

fn main() -> Res<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let plan = if quick {
        Plan {
            reps: 60,
            warm: 10,
            conversations: 5,
            sqlite_conversations: 3,
            growth_turns: 100,
        }
    } else {
        Plan {
            reps: 300,
            warm: 50,
            conversations: 15,
            sqlite_conversations: 7,
            growth_turns: 200,
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut out = serde_json::Map::new();
    let mut put = |k: &str, v: f64| {
        out.insert(k.to_owned(), json!(v));
    };

    put(
        "construct_us",
        median_us(&plan, || {
            black_box(tool_agent()?);
            Ok(())
        })?,
    );
    put("construct_kib", construction_kib()?);

    let text_agent = Agent::builder()
        .model(text_model("done".to_owned()))
        .build()?;
    put(
        "single_turn_us",
        median_us(&plan, || rt.block_on(one_run(&text_agent, "hello")))?,
    );
    let (n, kib) = allocs_per_call(&plan, || rt.block_on(one_run(&text_agent, "hello")))?;
    put("single_turn_allocs", n);
    put("single_turn_alloc_kib", kib);
    drop(text_agent);

    let tool_agent = tool_agent()?;
    put(
        "tool_call_run_us",
        median_us(&plan, || rt.block_on(one_run(&tool_agent, "add 1 and 2")))?,
    );
    let (n, kib) = allocs_per_call(&plan, || rt.block_on(one_run(&tool_agent, "add 1 and 2")))?;
    put("tool_call_run_allocs", n);
    put("tool_call_run_alloc_kib", kib);
    drop(tool_agent);

    let runs = (0..plan.conversations)
        .map(|_| rt.block_on(conversation(InMemoryStore::new(), 25)))
        .collect::<Res<Vec<_>>>()?;
    put("conversation_25_turns_us", median(runs));

    let dir = std::env::temp_dir().join(format!("reins-peer-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = rt.block_on(async {
        let mut kv = Vec::new();
        for (key, name, durability) in [
            (
                "conversation_25_turns_sqlite_us",
                "full.db",
                Durability::Full,
            ),
            (
                "conversation_25_turns_sqlite_normal_us",
                "normal.db",
                Durability::Normal,
            ),
        ] {
            let store = open_store(&dir, name, durability).await?;
            let mut runs = Vec::new();
            for _ in 0..plan.sqlite_conversations {
                runs.push(conversation(store.clone(), 25).await?);
            }
            kv.push((key, median(runs)));
        }
        kv.push(("sqlite_commit_floor_us", commit_floor(&plan, &dir)?));

        // Per-turn cost as a session grows: turns 1-10 versus the last 10.
        let store = open_store(&dir, "growth.db", Durability::Normal).await?;
        let (first10, last10) = growth(&plan, store).await?;
        kv.push(("sqlite_turn_first10_us", first10));
        kv.push(("sqlite_turn_last10_us", last10));
        Ok::<_, Box<dyn Error>>(kv)
    });
    let _ = std::fs::remove_dir_all(&dir);
    for (k, v) in result? {
        put(k, v);
    }
    out.insert("sqlite_growth_turns".to_owned(), json!(plan.growth_turns));
    let pg_url = std::env::var("REINS_BENCH_POSTGRES_URL")
        .or_else(|_| std::env::var("REINS_TEST_POSTGRES_URL"))
        .ok()
        .filter(|u| !u.is_empty());
    if let Some(url) = pg_url {
        for (k, v) in rt.block_on(postgres_scenarios(&plan, &url))? {
            out.insert(k.to_owned(), json!(v));
        }
        out.insert("postgres_growth_turns".to_owned(), json!(plan.growth_turns));
    } else {
        let why = "neither REINS_BENCH_POSTGRES_URL nor REINS_TEST_POSTGRES_URL is set";
        eprintln!("peer_bench: PostgreSQL scenarios skipped: {why}");
        out.insert("postgres_skipped".to_owned(), json!(why));
    }
    out.insert("framework".to_owned(), json!("reins"));
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
