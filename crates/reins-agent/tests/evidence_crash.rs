//! A crash between a change and its receipt leaves a chain that verifies (issue #53):
//! for random histories of approved, rejected and automatic calls on SQLite, the agent
//! "dies" at a random kill point — right after a commit carrying decisions (before
//! their receipts), right after a call's result is recorded (before its receipt), or
//! before or after any write — and is dropped there: every later store call of that
//! process hangs, as after a SIGKILL. The chain read then verifies; another agent on a
//! new connection to the same file takes the session over (once the dead one's lease
//! runs out), settles it, runs the history again, and the exported bundle verifies,
//! with at most the one receipt the kill cut missing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use proptest::prelude::*;
use reins_agent::{Agent, AgentError, Decision, RunStatus, Session};
use reins_evidence::{Bundle, Keyring, Signer, verify};
use reins_memory::{
    ChangeFeed, Claim, Commit, DecisionEntry, LedgerEntry, MemoryStore, Result, SessionLock,
    SessionState, SessionSummary, SqliteStore,
};
use reins_message::{Msg, Role, ToolResult};
use reins_model::ScriptedModel;
use reins_tool::ToolPolicy;
use serde_json::{Value, json};
use support::*;

const SESSION: &str = "ev-crash";

fn signer() -> Signer {
    Signer::from_seed("crash-2026", [6; 32])
}

/// Where the process dies.
#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// Right after the `n`-th commit that carries decisions is stored, before their
    /// receipts.
    AfterDecisions(usize),
    /// Right after the `n`-th call result is recorded, before its receipt.
    AfterFinish(usize),
    /// At the `n`-th write of any kind (commit, claim, finish, audit, chain), before or
    /// after it reaches the store.
    AtWrite { n: usize, before: bool },
}

/// One step of a history.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// A call that needs a person: approved or rejected.
    Delete { approve: bool },
    /// A call that runs without asking.
    Search,
    /// No call.
    Chat,
}

/// The write a store call is, for the kill point.
#[derive(Clone, Copy, PartialEq)]
enum Write {
    Commit { decisions: bool },
    Finish,
    Other,
}

/// A store whose process dies at a kill point: from then on every call hangs.
struct Mortal {
    inner: Arc<dyn MemoryStore>,
    at: KillPoint,
    writes: AtomicUsize,
    decision_commits: AtomicUsize,
    finishes: AtomicUsize,
    dead: AtomicBool,
    /// Told when the process dies.
    died: Arc<tokio::sync::Notify>,
}

impl Mortal {
    /// Hangs forever once dead.
    async fn alive(&self) {
        if self.dead.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }

    /// Counts `w` and says whether the process dies before it (`Some(true)`), after it
    /// (`Some(false)`), or not at it.
    fn dies_at(&self, w: Write) -> Option<bool> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        match (self.at, w) {
            (KillPoint::AtWrite { n: k, before }, _) if k == n => Some(before),
            (KillPoint::AfterDecisions(k), Write::Commit { decisions: true }) => {
                (self.decision_commits.fetch_add(1, Ordering::SeqCst) + 1 == k).then_some(false)
            }
            (KillPoint::AfterFinish(k), Write::Finish) => {
                (self.finishes.fetch_add(1, Ordering::SeqCst) + 1 == k).then_some(false)
            }
            _ => None,
        }
    }

    fn die(&self) {
        self.dead.store(true, Ordering::SeqCst);
        self.died.notify_one();
    }

    /// A write: the process may die before it reaches the store, or right after.
    async fn write<T>(&self, w: Write, op: impl std::future::Future<Output = T>) -> T {
        self.alive().await;
        let at = self.dies_at(w);
        if at == Some(true) {
            self.die();
            self.alive().await;
        }
        let out = op.await;
        if at == Some(false) {
            self.die();
            self.alive().await;
        }
        out
    }
}

#[async_trait]
impl MemoryStore for Mortal {
    async fn open_session(&self, id: &str) -> Result<SessionState> {
        self.alive().await;
        self.inner.open_session(id).await
    }
    async fn load_session(&self, id: &str) -> Result<SessionState> {
        self.alive().await;
        self.inner.load_session(id).await
    }
    async fn commit(&self, id: &str, commit: Commit) -> Result<u64> {
        let decisions = !commit.decisions.is_empty();
        self.write(Write::Commit { decisions }, self.inner.commit(id, commit))
            .await
    }
    async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
        self.alive().await;
        self.inner.list_sessions().await
    }
    async fn delete_session(&self, id: &str) -> Result<()> {
        self.write(Write::Other, self.inner.delete_session(id))
            .await
    }
    async fn claim(
        &self,
        session: &str,
        tool_use_id: &str,
        fingerprint: &str,
        lease: Duration,
        allow_takeover: bool,
    ) -> Result<Claim> {
        let claim = self
            .inner
            .claim(session, tool_use_id, fingerprint, lease, allow_takeover);
        self.write(Write::Other, claim).await
    }
    async fn finish(&self, session: &str, tool_use_id: &str, result: &ToolResult) -> Result<()> {
        self.write(
            Write::Finish,
            self.inner.finish(session, tool_use_id, result),
        )
        .await
    }
    async fn ledger_entry(&self, session: &str, tool_use_id: &str) -> Result<Option<LedgerEntry>> {
        self.alive().await;
        self.inner.ledger_entry(session, tool_use_id).await
    }
    async fn try_lock_session(&self, session: &str, owner: &str, lease: Duration) -> Result<bool> {
        self.alive().await;
        self.inner.try_lock_session(session, owner, lease).await
    }
    async fn unlock_session(&self, session: &str, owner: &str) -> Result<()> {
        self.alive().await;
        self.inner.unlock_session(session, owner).await
    }
    async fn try_lock_session_reading_version(
        &self,
        session: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<SessionLock> {
        self.alive().await;
        self.inner
            .try_lock_session_reading_version(session, owner, lease)
            .await
    }
    fn commit_releases_lock(&self) -> bool {
        self.inner.commit_releases_lock()
    }
    fn commit_takes_lock(&self) -> bool {
        self.inner.commit_takes_lock()
    }
    async fn session_version(&self, id: &str) -> Result<Option<u64>> {
        self.alive().await;
        self.inner.session_version(id).await
    }
    async fn append_decisions(&self, session: &str, entries: Vec<DecisionEntry>) -> Result<()> {
        self.write(Write::Other, self.inner.append_decisions(session, entries))
            .await
    }
    async fn decisions(&self, session: &str) -> Result<Vec<DecisionEntry>> {
        self.alive().await;
        self.inner.decisions(session).await
    }
    fn record_evidence(&self, on: bool) {
        self.inner.record_evidence(on);
    }
    fn records_evidence(&self) -> bool {
        self.inner.records_evidence()
    }
    async fn evidence(&self, session: &str) -> Result<Vec<reins_evidence::ChainEntry>> {
        self.alive().await;
        self.inner.evidence(session).await
    }
    async fn append_evidence(
        &self,
        session: &str,
        seal: reins_memory::evidence::Seal,
    ) -> Result<reins_evidence::ChainEntry> {
        self.write(Write::Other, self.inner.append_evidence(session, seal))
            .await
    }
    async fn request_interrupt(&self, session: &str) -> Result<bool> {
        self.alive().await;
        self.inner.request_interrupt(session).await
    }
    async fn interrupt_requests(&self, owner: &str) -> Result<Vec<String>> {
        self.alive().await;
        self.inner.interrupt_requests(owner).await
    }
    async fn interrupt_notices(&self) -> Result<ChangeFeed> {
        self.inner.interrupt_notices().await
    }
    async fn changes(&self) -> Result<ChangeFeed> {
        self.inner.changes().await
    }
}

/// The model: `delete` calls `delete_file`, `search` calls `search_web`, a tool result
/// gets `done`, anything else `ok`. Call ids come from the request's length, so a
/// model call made again after a crash asks for the same call.
fn model() -> ScriptedModel {
    ScriptedModel::from_fn(|req| {
        let n = req.messages.len();
        match req.messages.last() {
            Some(m) if m.role == Role::Tool => text("done"),
            Some(m) if m.role == Role::User && m.text() == "delete" => {
                call(&format!("d{n}"), "delete_file", json!({"path": "a.txt"}))
            }
            Some(m) if m.role == Role::User && m.text() == "search" => {
                call(&format!("s{n}"), "search_web", json!({"query": "q"}))
            }
            _ => text("ok"),
        }
    })
}

/// An agent on `store` that signs receipts; short leases, so that another takes over
/// soon after a crash.
fn signing_agent(store: Arc<dyn MemoryStore>) -> Agent {
    agent(model(), toolkit(&Counter::default(), ToolPolicy::confirm()))
        .store_arc(store)
        .session_lease(Duration::from_millis(150))
        .tool_lease(Duration::from_millis(50))
        .evidence_signer(signer(), Keyring::new())
        .build()
        .unwrap()
}

/// Retries `f` while another process's lease holds the session or a call: they run
/// out (the dead process renews nothing).
async fn patiently<T, F, Fut>(what: &str, mut f: F) -> reins_agent::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = reins_agent::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match f().await {
            Err(AgentError::SessionBusy { .. } | AgentError::ToolInFlight { .. }) => {
                assert!(
                    Instant::now() < deadline,
                    "{what}: the dead process's leases never ran out"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => return other,
        }
    }
}

/// Decides what waits as the history says (`approve`), until nothing does.
async fn decide_all(s: &Session, approve: bool) {
    loop {
        let pending = patiently("requirements", || s.requirements())
            .await
            .unwrap();
        if pending.is_empty() {
            return;
        }
        let ds: Vec<Decision> = pending
            .iter()
            .map(|r| {
                if approve {
                    Decision::approve(&r.id)
                } else {
                    Decision::reject(&r.id, "no")
                }
            })
            .collect();
        patiently("resolve", || async { s.resolve(ds.clone()).await })
            .await
            .unwrap();
    }
}

/// Runs the history on `s`.
async fn run_history(s: &Session, history: &[Step]) {
    for step in history {
        let text = match step {
            Step::Delete { .. } => "delete",
            Step::Search => "search",
            Step::Chat => "hi",
        };
        let out = patiently("send", || async { s.send(Msg::user(text)).await })
            .await
            .unwrap();
        if out.status == RunStatus::Paused {
            decide_all(s, matches!(step, Step::Delete { approve: true })).await;
        }
    }
}

/// After a crash: the session taken over and brought to rest (a run the crash cut
/// resumed, what waits decided).
async fn settle(s: &Session) {
    for _ in 0..10 {
        decide_all(s, true).await;
        match patiently("resume", || async { s.resume().await }).await {
            Ok(out) if out.status == RunStatus::Paused => {}
            Ok(_) | Err(AgentError::NothingToResume { .. }) => return,
            Err(e) => panic!("resume after a crash: {e}"),
        }
    }
    panic!("the session did not come to rest");
}

/// The session's bundle, read on a new connection, and its checks.
async fn bundle(path: &Path) -> String {
    let store = SqliteStore::open(path).await.unwrap();
    let chain = store.evidence(SESSION).await.unwrap();
    let mut keys = Keyring::new();
    keys.insert_signer(&signer());
    Bundle::new(SESSION, chain, keys).to_jsonl().unwrap()
}

fn entries(bundle: &str) -> Vec<Value> {
    bundle
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "entry")
        .map(|v| v["entry"].clone())
        .collect()
}

/// Applied decisions without an approval receipt for their call.
fn unsealed_decisions(bundle: &str) -> usize {
    let chain = entries(bundle);
    let applied = chain
        .iter()
        .filter(|e| e["kind"] == "decision" && e["body"]["record"]["verdict"] == "applied")
        .count();
    let sealed = chain
        .iter()
        .filter(|e| e["kind"] == "receipt" && e["body"]["receipt"]["kind"] == "approval")
        .count();
    applied.saturating_sub(sealed)
}

/// One history with one kill point.
async fn crash_and_recover(history: Vec<Step>, at: KillPoint) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evidence.sqlite");
    let died = Arc::new(tokio::sync::Notify::new());
    let mortal = Arc::new(Mortal {
        inner: Arc::new(SqliteStore::open(&path).await.unwrap()),
        at,
        writes: AtomicUsize::new(0),
        decision_commits: AtomicUsize::new(0),
        finishes: AtomicUsize::new(0),
        dead: AtomicBool::new(false),
        died: Arc::clone(&died),
    });
    let first = signing_agent(mortal.clone());
    let s = first.session(SESSION).await.unwrap();
    tokio::select! {
        () = run_history(&s, &history) => {}
        () = died.notified() => {}
    }
    // The process is gone: its futures dropped, its store hangs.
    drop(s);
    drop(first);
    let killed = mortal.dead.load(Ordering::SeqCst);

    // What the crash left verifies.
    let left = bundle(&path).await;
    if let Err(e) = verify(&left) {
        panic!("the chain a crash at {at:?} left does not verify: {e}\n{left}");
    }
    assert!(
        unsealed_decisions(&left) <= 1,
        "more than the one receipt the kill cut is missing:\n{left}"
    );

    // Another process takes over, brings the session to rest and runs on.
    let store: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let second = signing_agent(store);
    let s = second.session(SESSION).await.unwrap();
    settle(&s).await;
    run_history(&s, &history).await;
    let after = bundle(&path).await;
    let report = verify(&after)
        .unwrap_or_else(|e| panic!("after a crash at {at:?} and a takeover: {e}\n{after}"));
    assert!(report.entries >= entries(&left).len() as u64);
    let missing = unsealed_decisions(&after);
    assert!(
        missing <= usize::from(killed),
        "{missing} decisions without a receipt after a crash at {at:?} (killed: {killed}):\n{after}"
    );
    // The chain the second process wrote continues the first one's.
    let before: Vec<Value> = entries(&left);
    assert_eq!(&entries(&after)[..before.len()], &before[..]);
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => any::<bool>().prop_map(|approve| Step::Delete { approve }),
        2 => Just(Step::Search),
        1 => Just(Step::Chat),
    ]
}

fn kill_point() -> impl Strategy<Value = KillPoint> {
    prop_oneof![
        (1usize..4).prop_map(KillPoint::AfterDecisions),
        (1usize..4).prop_map(KillPoint::AfterFinish),
        (1usize..30, any::<bool>()).prop_map(|(n, before)| KillPoint::AtWrite { n, before }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if is_long() { 200 } else { 24 },
        ..ProptestConfig::default()
    })]

    /// For any history and any kill point, the chain left verifies, the chain after a
    /// takeover verifies, and no receipt is missing but the one the kill cut.
    #[test]
    fn a_crash_between_a_change_and_its_receipt_leaves_a_chain_that_verifies(
        history in proptest::collection::vec(step(), 1..6),
        at in kill_point(),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(crash_and_recover(history, at));
        // The dead process's tasks hang in its store: the runtime goes with them.
        rt.shutdown_background();
    }
}

/// Kills land where they are aimed: right after a decision's commit, before its
/// receipt, the chain has the decision and not the receipt — and verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_right_after_a_decision_leaves_it_without_its_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evidence.sqlite");
    let died = Arc::new(tokio::sync::Notify::new());
    let mortal = Arc::new(Mortal {
        inner: Arc::new(SqliteStore::open(&path).await.unwrap()),
        at: KillPoint::AfterDecisions(1),
        writes: AtomicUsize::new(0),
        decision_commits: AtomicUsize::new(0),
        finishes: AtomicUsize::new(0),
        dead: AtomicBool::new(false),
        died: Arc::clone(&died),
    });
    let first = signing_agent(mortal.clone());
    let s = first.session(SESSION).await.unwrap();
    tokio::select! {
        () = run_history(&s, &[Step::Delete { approve: true }]) => panic!("the kill point was never reached"),
        () = died.notified() => {}
    }
    let left = bundle(&path).await;
    verify(&left).unwrap();
    let kinds: Vec<Value> = entries(&left).iter().map(|e| e["kind"].clone()).collect();
    assert_eq!(kinds, [json!("decision")], "{left}");
    assert_eq!(unsealed_decisions(&left), 1);
    // The other process runs the approved call: its claim, result and receipt follow.
    let second = signing_agent(Arc::new(SqliteStore::open(&path).await.unwrap()));
    let s = second.session(SESSION).await.unwrap();
    settle(&s).await;
    let after = bundle(&path).await;
    let report = verify(&after).unwrap();
    let kinds: Vec<Value> = entries(&after).iter().map(|e| e["kind"].clone()).collect();
    assert_eq!(
        kinds,
        [
            json!("decision"),
            json!("claim"),
            json!("finish"),
            json!("receipt")
        ],
        "{after}"
    );
    assert_eq!(report.receipts, 1);
}
