//! What a run asks of its store: the lock taken by the run's first commit on a current
//! cache (or with the stored version in one call otherwise), the release in the run's
//! last commit (where the store supports it), and nothing else — counted on a real
//! `InMemoryStore` behind a spy that forwards every call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use reins_agent::{Agent, AgentError, RunStatus};
use reins_memory::{
    ChangeFeed, Claim, Commit, DecisionEntry, Error, InMemoryStore, LedgerEntry, MemoryStore,
    Result, SessionLock, SessionState, SessionSummary,
};
use reins_message::{Msg, ToolResult};
use reins_model::ScriptedModel;
use reins_tool::ToolPolicy;
use serde_json::json;
use support::*;

/// Forwards to an `InMemoryStore`, counting calls; optionally says it cannot release
/// or take locks in commits, or fails commits that carry a release.
#[derive(Default)]
struct Spy {
    store: InMemoryStore,
    calls: Mutex<BTreeMap<&'static str, usize>>,
    no_release_in_commit: bool,
    no_take_in_commit: bool,
    fail_releasing_commits: bool,
}

impl Spy {
    fn count(&self, name: &'static str) {
        *self.calls.lock().unwrap().entry(name).or_default() += 1;
    }

    /// The calls since the last look, and starts counting afresh.
    fn take(&self) -> BTreeMap<&'static str, usize> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

#[async_trait]
impl MemoryStore for Spy {
    async fn open_session(&self, id: &str) -> Result<SessionState> {
        self.count("open_session");
        self.store.open_session(id).await
    }
    async fn load_session(&self, id: &str) -> Result<SessionState> {
        self.count("load_session");
        self.store.load_session(id).await
    }
    async fn commit(&self, id: &str, commit: Commit) -> Result<u64> {
        self.count("commit");
        if commit.acquire_lock.is_some() {
            self.count("commit taking the lock");
        }
        // The spy records no notices (`records_notices` is the provided `false`): a
        // run makes none for it, so every count below also says no commit carried one.
        if !commit.notices.is_empty() {
            self.count("commit carrying notices");
        }

        if self.fail_releasing_commits && commit.release_lock.is_some() {
            return Err(Error::Database("the disk is full".to_owned()));
        }
        self.store.commit(id, commit).await
    }
    async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
        self.count("list_sessions");
        self.store.list_sessions().await
    }
    async fn delete_session(&self, id: &str) -> Result<()> {
        self.count("delete_session");
        self.store.delete_session(id).await
    }
    async fn claim(
        &self,
        session: &str,
        tool_use_id: &str,
        fingerprint: &str,
        lease: Duration,
        allow_takeover: bool,
    ) -> Result<Claim> {
        self.count("claim");
        self.store
            .claim(session, tool_use_id, fingerprint, lease, allow_takeover)
            .await
    }
    async fn finish(&self, session: &str, tool_use_id: &str, result: &ToolResult) -> Result<()> {
        self.count("finish");
        self.store.finish(session, tool_use_id, result).await
    }
    async fn ledger_entry(&self, session: &str, tool_use_id: &str) -> Result<Option<LedgerEntry>> {
        self.count("ledger_entry");
        self.store.ledger_entry(session, tool_use_id).await
    }
    async fn try_lock_session(&self, session: &str, owner: &str, lease: Duration) -> Result<bool> {
        self.count("try_lock_session");
        self.store.try_lock_session(session, owner, lease).await
    }
    async fn unlock_session(&self, session: &str, owner: &str) -> Result<()> {
        self.count("unlock_session");
        self.store.unlock_session(session, owner).await
    }
    async fn try_lock_session_reading_version(
        &self,
        session: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<SessionLock> {
        self.count("try_lock_session_reading_version");
        self.store
            .try_lock_session_reading_version(session, owner, lease)
            .await
    }
    fn commit_releases_lock(&self) -> bool {
        !self.no_release_in_commit && self.store.commit_releases_lock()
    }
    fn commit_takes_lock(&self) -> bool {
        !self.no_release_in_commit && !self.no_take_in_commit && self.store.commit_takes_lock()
    }
    async fn session_version(&self, id: &str) -> Result<Option<u64>> {
        self.count("session_version");
        self.store.session_version(id).await
    }
    async fn append_decisions(&self, session: &str, entries: Vec<DecisionEntry>) -> Result<()> {
        self.count("append_decisions");
        self.store.append_decisions(session, entries).await
    }
    async fn decisions(&self, session: &str) -> Result<Vec<DecisionEntry>> {
        self.count("decisions");
        self.store.decisions(session).await
    }
    async fn request_interrupt(&self, session: &str) -> Result<bool> {
        self.count("request_interrupt");
        self.store.request_interrupt(session).await
    }
    async fn interrupt_requests(&self, owner: &str) -> Result<Vec<String>> {
        self.count("interrupt_requests");
        self.store.interrupt_requests(owner).await
    }
    async fn interrupt_notices(&self) -> Result<ChangeFeed> {
        self.store.interrupt_notices().await
    }
    async fn changes(&self) -> Result<ChangeFeed> {
        self.store.changes().await
    }
}

fn calls(pairs: &[(&'static str, usize)]) -> BTreeMap<&'static str, usize> {
    pairs.iter().copied().collect()
}

/// Whether a worker other than the agent could take the session's lock now (and leaves
/// it free again).
async fn lock_is_free(spy: &Spy, session: &str) -> bool {
    let free = spy
        .store
        .try_lock_session(session, "another-worker", Duration::from_secs(60))
        .await
        .unwrap();
    if free {
        spy.store
            .unlock_session(session, "another-worker")
            .await
            .unwrap();
    }
    free
}

fn text_agent(spy: &Arc<Spy>) -> Agent {
    Agent::builder()
        .model(ScriptedModel::from_fn(|_| text("done")))
        .store(spy.clone())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_text_turn_is_two_store_calls() {
    let spy = Arc::new(Spy::default());
    let agent = text_agent(&spy);
    let session = agent.session("s").await.unwrap();
    spy.take();
    for turn in 0..3 {
        let out = session
            .send(Msg::user(format!("turn {turn}")))
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed);
        assert_eq!(
            spy.take(),
            calls(&[("commit", 2), ("commit taking the lock", 1)]),
            "turn {turn}: the message with the lock, the reply with the release"
        );
    }
    assert!(lock_is_free(&spy, "s").await, "the last commit released it");
    assert_eq!(spy.store.load_session("s").await.unwrap().messages.len(), 6);
}

#[tokio::test]
async fn a_tool_call_run_commits_each_step_once() {
    let spy = Arc::new(Spy::default());
    let counter = Counter::default();
    let agent = agent(
        ScriptedModel::new([
            call("c1", "search_web", json!({"query": "rust"})),
            text("done"),
        ]),
        toolkit(&counter, ToolPolicy::auto()),
    )
    .store(spy.clone())
    .build()
    .unwrap();
    let session = agent.session("s").await.unwrap();
    spy.take();
    let out = session.send(Msg::user("search for rust")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("search_web"), 1);
    // The user's message with the lock; the model's tool use (before the tool runs);
    // the result (recorded in the ledger by `finish`) with the answer and the release.
    assert_eq!(
        spy.take(),
        calls(&[
            ("claim", 1),
            ("commit", 3),
            ("commit taking the lock", 1),
            ("finish", 1),
        ])
    );
    assert!(lock_is_free(&spy, "s").await);
}

#[tokio::test]
async fn a_store_that_cannot_take_the_lock_in_a_commit_takes_it_first() {
    let spy = Arc::new(Spy {
        no_take_in_commit: true,
        ..Spy::default()
    });
    let agent = text_agent(&spy);
    let session = agent.session("s").await.unwrap();
    spy.take();
    for turn in 0..2 {
        session.send(Msg::user(format!("{turn}"))).await.unwrap();
        assert_eq!(
            spy.take(),
            calls(&[("commit", 2), ("try_lock_session_reading_version", 1)]),
            "turn {turn}"
        );
    }
    assert!(lock_is_free(&spy, "s").await);
}

#[tokio::test]
async fn a_tool_call_run_on_a_store_that_cannot_take_the_lock_in_a_commit_keeps_four_commits() {
    let spy = Arc::new(Spy {
        no_take_in_commit: true,
        ..Spy::default()
    });
    let counter = Counter::default();
    let agent = agent(
        ScriptedModel::new([
            call("c1", "search_web", json!({"query": "rust"})),
            text("done"),
        ]),
        toolkit(&counter, ToolPolicy::auto()),
    )
    .store(spy.clone())
    .build()
    .unwrap();
    let session = agent.session("s").await.unwrap();
    spy.take();
    session.send(Msg::user("search for rust")).await.unwrap();
    assert_eq!(
        spy.take(),
        calls(&[
            ("claim", 1),
            ("commit", 4),
            ("finish", 1),
            ("try_lock_session_reading_version", 1),
        ])
    );
    assert!(lock_is_free(&spy, "s").await);
}

#[tokio::test]
async fn a_started_run_takes_the_lock_before_its_handle_exists() {
    let spy = Arc::new(Spy::default());
    let agent = text_agent(&spy);
    let session = agent.session("s").await.unwrap();
    spy.take();
    for turn in 0..2 {
        let out = session
            .send(Msg::user(format!("turn {turn}")))
            .start()
            .await
            .unwrap()
            .wait()
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed);
        assert_eq!(
            spy.take(),
            calls(&[("commit", 2), ("try_lock_session_reading_version", 1)]),
            "turn {turn}: the lock before the handle, the message, the reply with the release"
        );
    }
    assert!(lock_is_free(&spy, "s").await);
    assert_eq!(spy.store.load_session("s").await.unwrap().messages.len(), 4);
}

#[tokio::test]
async fn a_started_run_on_a_session_locked_elsewhere_is_refused_before_a_handle_exists() {
    let spy = Arc::new(Spy::default());
    let agent = text_agent(&spy);
    let session = agent.session("s").await.unwrap();
    session.send(Msg::user("one")).await.unwrap();
    assert!(
        spy.store
            .try_lock_session("s", "another-worker", Duration::from_secs(60))
            .await
            .unwrap()
    );
    spy.take();
    let err = session.send(Msg::user("two")).start().await.unwrap_err();
    assert!(matches!(err, AgentError::SessionBusy { .. }), "{err}");
    assert_eq!(
        spy.take(),
        calls(&[("try_lock_session_reading_version", 1)]),
        "the lock was refused and nothing was written"
    );
    assert_eq!(spy.store.load_session("s").await.unwrap().messages.len(), 2);
    spy.store
        .unlock_session("s", "another-worker")
        .await
        .unwrap();
    // The second caller, once the session is free: the turn runs on a reloaded copy.
    let out = session
        .send(Msg::user("two"))
        .start()
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    let texts: Vec<String> = spy
        .store
        .load_session("s")
        .await
        .unwrap()
        .messages
        .iter()
        .map(Msg::text)
        .collect();
    assert_eq!(texts, ["one", "done", "two", "done"]);
    assert!(lock_is_free(&spy, "s").await);
}

/// A session paused on one confirmation of `delete_file` (call `c1`).
async fn paused_on_a_confirmation(spy: &Arc<Spy>, counter: &Counter) -> reins_agent::Session {
    let gated = support::agent(
        ScriptedModel::new([
            call("c1", "delete_file", json!({"path": "tmp.txt"})),
            text("deleted"),
        ]),
        toolkit(counter, ToolPolicy::confirm()),
    )
    .store(spy.clone())
    .build()
    .unwrap();
    let session = gated.session("gated").await.unwrap();
    let paused = session.send(Msg::user("delete tmp.txt")).await.unwrap();
    assert_eq!(paused.status, RunStatus::Paused);
    session
}

#[tokio::test]
async fn a_decision_folds_the_lock_into_its_first_commit() {
    for started in [false, true] {
        let spy = Arc::new(Spy::default());
        let counter = Counter::default();
        let session = paused_on_a_confirmation(&spy, &counter).await;
        spy.take();
        let decide = session.resolve(vec![reins_agent::Decision::approve("c1")]);
        let out = if started {
            decide.start().await.unwrap().wait().await.unwrap()
        } else {
            decide.await.unwrap()
        };
        assert_eq!(out.status, RunStatus::Completed);
        // Awaited: the decision with the lock; started: the lock before the handle,
        // then the decision. The call claimed and finished in the ledger; its result
        // with the answer and the release.
        let expected = if started {
            calls(&[
                ("claim", 1),
                ("commit", 2),
                ("finish", 1),
                ("try_lock_session_reading_version", 1),
            ])
        } else {
            calls(&[
                ("claim", 1),
                ("commit", 2),
                ("commit taking the lock", 1),
                ("finish", 1),
            ])
        };
        assert_eq!(spy.take(), expected, "started: {started}");
        assert_eq!(counter.count("delete_file"), 1);
        assert!(lock_is_free(&spy, "gated").await);
        assert_eq!(spy.store.decisions("gated").await.unwrap().len(), 1);
    }
}

#[tokio::test]
async fn a_decision_on_a_session_locked_elsewhere_waits_then_runs_once() {
    let spy = Arc::new(Spy::default());
    let counter = Counter::default();
    let session = paused_on_a_confirmation(&spy, &counter).await;
    assert!(
        spy.store
            .try_lock_session("gated", "another-worker", Duration::from_secs(60))
            .await
            .unwrap()
    );
    // The other worker lets go while the decision waits for it.
    let store = spy.store.clone();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        store
            .unlock_session("gated", "another-worker")
            .await
            .unwrap();
    });
    let out = session
        .resolve(vec![reins_agent::Decision::approve("c1")])
        .await
        .unwrap();
    release.await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("delete_file"), 1);
    // A second caller with the same decision is told it was already taken.
    let again = session
        .resolve(vec![reins_agent::Decision::approve("c1")])
        .await
        .unwrap_err();
    assert!(
        matches!(again, AgentError::AlreadyDecided { .. }),
        "{again}"
    );
    assert_eq!(counter.count("delete_file"), 1);
    assert_eq!(spy.store.decisions("gated").await.unwrap().len(), 2);
    assert!(lock_is_free(&spy, "gated").await);
}

#[tokio::test]
async fn a_cache_another_instance_made_stale_takes_the_lock_and_reloads() {
    let spy = Arc::new(Spy::default());
    let (a, b) = (text_agent(&spy), text_agent(&spy));
    let on_a = a.session("s").await.unwrap();
    let on_b = b.session("s").await.unwrap();
    on_a.send(Msg::user("from a")).await.unwrap();
    spy.take();
    // B's copy is from before A's turn: its first commit conflicts, writes nothing;
    // B takes the lock with the version, reloads, and runs the turn.
    let out = on_b.send(Msg::user("from b")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(
        spy.take(),
        calls(&[
            ("commit", 3),
            ("commit taking the lock", 1),
            ("load_session", 1),
            ("try_lock_session_reading_version", 1),
        ])
    );
    let texts: Vec<String> = spy
        .store
        .load_session("s")
        .await
        .unwrap()
        .messages
        .iter()
        .map(Msg::text)
        .collect();
    assert_eq!(texts, ["from a", "done", "from b", "done"]);
    assert!(lock_is_free(&spy, "s").await);
    // Current again: B's next turn folds the lock in.
    on_b.send(Msg::user("again")).await.unwrap();
    assert_eq!(
        spy.take(),
        calls(&[("commit", 2), ("commit taking the lock", 1)])
    );
}

#[tokio::test]
async fn a_lock_held_elsewhere_refuses_the_turn_and_writes_nothing() {
    let spy = Arc::new(Spy::default());
    let agent = text_agent(&spy);
    let session = agent.session("s").await.unwrap();
    session.send(Msg::user("one")).await.unwrap();
    assert!(
        spy.store
            .try_lock_session("s", "another-worker", Duration::from_secs(60))
            .await
            .unwrap()
    );
    spy.take();
    let err = session.send(Msg::user("two")).await.unwrap_err();
    assert!(matches!(err, AgentError::SessionBusy { .. }), "{err}");
    assert_eq!(
        spy.take(),
        calls(&[("commit", 1), ("commit taking the lock", 1)])
    );
    assert_eq!(spy.store.load_session("s").await.unwrap().messages.len(), 2);
    // Once it is free, the turn runs on a reloaded copy (the refused turn left the
    // cache marked stale: the lock is taken first, with the version).
    spy.store
        .unlock_session("s", "another-worker")
        .await
        .unwrap();
    session.send(Msg::user("two")).await.unwrap();
    assert_eq!(
        spy.take(),
        calls(&[
            ("commit", 2),
            ("load_session", 1),
            ("try_lock_session_reading_version", 1),
        ])
    );
    let texts: Vec<String> = spy
        .store
        .load_session("s")
        .await
        .unwrap()
        .messages
        .iter()
        .map(Msg::text)
        .collect();
    assert_eq!(texts, ["one", "done", "two", "done"]);
}

#[tokio::test]
async fn a_store_that_cannot_release_in_a_commit_gets_an_unlock() {
    let spy = Arc::new(Spy {
        no_release_in_commit: true,
        ..Spy::default()
    });
    let agent = text_agent(&spy);
    let session = agent.session("s").await.unwrap();
    spy.take();
    session.send(Msg::user("hi")).await.unwrap();
    assert_eq!(
        spy.take(),
        calls(&[
            ("commit", 2),
            ("try_lock_session_reading_version", 1),
            ("unlock_session", 1),
        ])
    );
    assert!(lock_is_free(&spy, "s").await);
}

#[tokio::test]
async fn a_failed_last_commit_still_releases_the_lock() {
    let spy = Arc::new(Spy {
        fail_releasing_commits: true,
        ..Spy::default()
    });
    let agent = text_agent(&spy);
    let session = agent.session("s").await.unwrap();
    let err = session.send(Msg::user("hi")).await.unwrap_err();
    assert!(err.to_string().contains("the disk is full"), "{err}");
    assert!(
        lock_is_free(&spy, "s").await,
        "the run released the lock itself when its last commit failed"
    );
}
