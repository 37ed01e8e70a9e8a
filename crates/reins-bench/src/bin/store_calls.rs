//! Where a durable turn's time goes: every store call an agent makes during 25-turn
//! conversations, counted and timed, per store. Prints one JSON object per store: the
//! wall time per turn and, for each store method, how many calls a turn makes and
//! their mean time.
//!
//! ```text
//! cargo run --release -p reins-bench --bin store_calls [-- --conversations N] [-- --multi-thread]
//! ```
//!
//! Stores: SQLite at `Durability::Normal` and `Durability::Full` (files in a temporary
//! directory), and PostgreSQL when `REINS_BENCH_POSTGRES_URL` or
//! `REINS_TEST_POSTGRES_URL` is set (in a schema of its own, dropped afterwards).
//! The model is a `ScriptedModel` with 200-character replies and no latency, as in
//! `peer_bench`; a current-thread runtime unless `--multi-thread` (two workers).
//! The timing is a [`MemoryStore`] wrapper that forwards every call to the real
//! store, so the agent runs exactly as it would without it.

use std::collections::BTreeMap;
use std::error::Error;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reins::memory::Durability;
use reins::memory::{
    ChangeFeed, Claim, Commit, DecisionEntry, LedgerEntry, PostgresOptions, Result as StoreResult,
    SessionLock, SessionState, SessionSummary, SqliteOptions,
};
use reins::message::ToolResult;
use reins::prelude::*;
use serde_json::json;

type Res<T> = std::result::Result<T, Box<dyn Error>>;

/// Calls and total microseconds per store method.
#[derive(Default)]
struct Tally(Mutex<BTreeMap<&'static str, (u64, f64)>>);

impl Tally {
    fn add(&self, method: &'static str, since: Instant) {
        let us = since.elapsed().as_secs_f64() * 1e6;
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let e = map.entry(method).or_insert((0, 0.0));
        e.0 += 1;
        e.1 += us;
    }
}

/// A store that times every call it forwards.
struct Timed<S> {
    store: S,
    tally: std::sync::Arc<Tally>,
}

macro_rules! timed {
    ($self:ident, $name:literal, $call:expr) => {{
        let at = Instant::now();
        let out = $call.await;
        $self.tally.add($name, at);
        out
    }};
}

#[reins::async_trait]
impl<S: MemoryStore> MemoryStore for Timed<S> {
    async fn open_session(&self, id: &str) -> StoreResult<SessionState> {
        timed!(self, "open_session", self.store.open_session(id))
    }
    async fn load_session(&self, id: &str) -> StoreResult<SessionState> {
        timed!(self, "load_session", self.store.load_session(id))
    }
    async fn commit(&self, id: &str, commit: Commit) -> StoreResult<u64> {
        timed!(self, "commit", self.store.commit(id, commit))
    }
    async fn list_sessions(&self) -> StoreResult<Vec<SessionSummary>> {
        timed!(self, "list_sessions", self.store.list_sessions())
    }
    async fn delete_session(&self, id: &str) -> StoreResult<()> {
        timed!(self, "delete_session", self.store.delete_session(id))
    }
    async fn claim(
        &self,
        session: &str,
        tool_use_id: &str,
        fingerprint: &str,
        lease: Duration,
        allow_takeover: bool,
    ) -> StoreResult<Claim> {
        timed!(
            self,
            "claim",
            self.store
                .claim(session, tool_use_id, fingerprint, lease, allow_takeover)
        )
    }
    async fn finish(
        &self,
        session: &str,
        tool_use_id: &str,
        result: &ToolResult,
    ) -> StoreResult<()> {
        timed!(
            self,
            "finish",
            self.store.finish(session, tool_use_id, result)
        )
    }
    async fn ledger_entry(
        &self,
        session: &str,
        tool_use_id: &str,
    ) -> StoreResult<Option<LedgerEntry>> {
        timed!(
            self,
            "ledger_entry",
            self.store.ledger_entry(session, tool_use_id)
        )
    }
    async fn try_lock_session(
        &self,
        session: &str,
        owner: &str,
        lease: Duration,
    ) -> StoreResult<bool> {
        timed!(
            self,
            "try_lock_session",
            self.store.try_lock_session(session, owner, lease)
        )
    }
    async fn unlock_session(&self, session: &str, owner: &str) -> StoreResult<()> {
        timed!(
            self,
            "unlock_session",
            self.store.unlock_session(session, owner)
        )
    }
    async fn try_lock_session_reading_version(
        &self,
        session: &str,
        owner: &str,
        lease: Duration,
    ) -> StoreResult<SessionLock> {
        timed!(
            self,
            "try_lock_session_reading_version",
            self.store
                .try_lock_session_reading_version(session, owner, lease)
        )
    }
    fn commit_releases_lock(&self) -> bool {
        self.store.commit_releases_lock()
    }
    fn commit_takes_lock(&self) -> bool {
        self.store.commit_takes_lock()
    }
    async fn session_version(&self, id: &str) -> StoreResult<Option<u64>> {
        timed!(self, "session_version", self.store.session_version(id))
    }
    async fn append_decisions(
        &self,
        session: &str,
        entries: Vec<DecisionEntry>,
    ) -> StoreResult<()> {
        timed!(
            self,
            "append_decisions",
            self.store.append_decisions(session, entries)
        )
    }
    async fn decisions(&self, session: &str) -> StoreResult<Vec<DecisionEntry>> {
        timed!(self, "decisions", self.store.decisions(session))
    }
    async fn request_interrupt(&self, session: &str) -> StoreResult<bool> {
        timed!(
            self,
            "request_interrupt",
            self.store.request_interrupt(session)
        )
    }
    async fn interrupt_requests(&self, owner: &str) -> StoreResult<Vec<String>> {
        timed!(
            self,
            "interrupt_requests",
            self.store.interrupt_requests(owner)
        )
    }
    async fn interrupt_notices(&self) -> StoreResult<ChangeFeed> {
        self.store.interrupt_notices().await
    }
    async fn changes(&self) -> StoreResult<ChangeFeed> {
        self.store.changes().await
    }
}

const TURNS: usize = 25;

/// `conversations` conversations of 25 turns on `store`; only the turns are timed
/// (opening each session is not).
async fn conversations<S: MemoryStore>(store: S, conversations: usize) -> Res<serde_json::Value> {
    let tally = std::sync::Arc::new(Tally::default());
    let agent = Agent::builder()
        .model(
            ScriptedModel::from_fn(|_| ScriptedResponse::text("x".repeat(200)))
                .with_recording(false),
        )
        .store(Timed {
            store,
            tally: tally.clone(),
        })
        .build()?;
    let mut sessions = Vec::with_capacity(conversations);
    for c in 0..conversations {
        sessions.push(agent.session(&format!("conversation-{c}")).await?);
    }
    tally.0.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let at = Instant::now();
    for session in &sessions {
        for i in 0..TURNS {
            black_box(session.send(Msg::user(format!("turn {i}"))).await?);
        }
    }
    let turns = (conversations * TURNS) as f64;
    let wall = at.elapsed().as_secs_f64() * 1e6 / turns;
    let calls: serde_json::Map<String, serde_json::Value> = tally
        .0
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(name, (n, us))| {
            (
                (*name).to_owned(),
                json!({
                    "per_turn": *n as f64 / turns,
                    "mean_us": us / *n as f64,
                }),
            )
        })
        .collect();
    Ok(json!({ "turn_us": wall, "calls": calls }))
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let count = match args.iter().position(|a| a == "--conversations") {
        Some(i) => args
            .get(i + 1)
            .ok_or("--conversations needs a number")?
            .parse()?,
        None => 20,
    };
    let rt = if args.iter().any(|a| a == "--multi-thread") {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    };
    let dir = tempfile::tempdir()?;
    let mut out = serde_json::Map::new();
    rt.block_on(async {
        for (key, durability) in [
            ("sqlite_normal", Durability::Normal),
            ("sqlite_full", Durability::Full),
        ] {
            let options = SqliteOptions::default().durability(durability);
            let store =
                SqliteStore::open_with(dir.path().join(format!("{key}.db")), options).await?;
            out.insert(key.to_owned(), conversations(store, count).await?);
        }
        let url = std::env::var("REINS_BENCH_POSTGRES_URL")
            .or_else(|_| std::env::var("REINS_TEST_POSTGRES_URL"))
            .ok()
            .filter(|u| !u.is_empty());
        match url {
            Some(url) => {
                let schema = format!("reins_store_calls_{}", std::process::id());
                let options = PostgresOptions::default().schema(schema.clone());
                let store = PostgresStore::connect_with(&url, options).await?;
                let pool = store.pool().clone();
                out.insert("postgres".to_owned(), conversations(store, count).await?);
                sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
                    .execute(&pool)
                    .await?;
            }
            None => {
                out.insert(
                    "postgres_skipped".to_owned(),
                    json!("neither REINS_BENCH_POSTGRES_URL nor REINS_TEST_POSTGRES_URL is set"),
                );
            }
        }
        Ok::<_, Box<dyn Error>>(())
    })?;
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
