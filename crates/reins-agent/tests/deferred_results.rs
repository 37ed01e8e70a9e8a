//! A batch whose every result the ledger holds as it is rides with the run's next
//! commit instead of a commit of its own (a tool-call run is three commits). These
//! tests show that no result is ever lost that way, on SQLite and with another agent
//! instance going on: a model call failing after the tool ran stores the result before
//! the error is returned; a process dying before the result is stored leaves it in the
//! ledger, and the next run — a resume or a new message, in another instance — takes
//! it from there without running the tool again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use reins_agent::RunStatus;
use reins_memory::{
    ChangeFeed, Claim, Commit, DecisionEntry, Error, LedgerEntry, LedgerState, MemoryStore, Result,
    SessionLock, SessionState, SessionSummary, SqliteStore,
};
use reins_message::{Msg, Role, ToolOutcome, ToolResult};
use reins_model::{ModelError, ScriptedModel, ScriptedResponse};
use reins_tool::ToolPolicy;
use serde_json::json;
use support::*;

/// A store whose process "dies" once a tool's result is in the ledger: every write
/// after that fails, as if nothing after the finish ever reached the store.
struct Dying {
    inner: Arc<dyn MemoryStore>,
    dead: AtomicBool,
}

impl Dying {
    fn check(&self) -> Result<()> {
        if self.dead.load(Ordering::Acquire) {
            return Err(Error::Database("the process died".to_owned()));
        }
        Ok(())
    }
}

#[async_trait]
impl MemoryStore for Dying {
    async fn open_session(&self, id: &str) -> Result<SessionState> {
        self.inner.open_session(id).await
    }
    async fn load_session(&self, id: &str) -> Result<SessionState> {
        self.inner.load_session(id).await
    }
    async fn commit(&self, id: &str, commit: Commit) -> Result<u64> {
        self.check()?;
        self.inner.commit(id, commit).await
    }
    async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
        self.inner.list_sessions().await
    }
    async fn delete_session(&self, id: &str) -> Result<()> {
        self.inner.delete_session(id).await
    }
    async fn claim(
        &self,
        session: &str,
        tool_use_id: &str,
        fingerprint: &str,
        lease: Duration,
        allow_takeover: bool,
    ) -> Result<Claim> {
        self.check()?;
        self.inner
            .claim(session, tool_use_id, fingerprint, lease, allow_takeover)
            .await
    }
    async fn finish(&self, session: &str, tool_use_id: &str, result: &ToolResult) -> Result<()> {
        self.check()?;
        self.inner.finish(session, tool_use_id, result).await?;
        self.dead.store(true, Ordering::Release);
        Ok(())
    }
    async fn ledger_entry(&self, session: &str, tool_use_id: &str) -> Result<Option<LedgerEntry>> {
        self.inner.ledger_entry(session, tool_use_id).await
    }
    async fn try_lock_session(&self, session: &str, owner: &str, lease: Duration) -> Result<bool> {
        self.check()?;
        self.inner.try_lock_session(session, owner, lease).await
    }
    async fn unlock_session(&self, session: &str, owner: &str) -> Result<()> {
        self.check()?;
        self.inner.unlock_session(session, owner).await
    }
    async fn try_lock_session_reading_version(
        &self,
        session: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<SessionLock> {
        self.check()?;
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
        self.inner.session_version(id).await
    }
    async fn append_decisions(&self, session: &str, entries: Vec<DecisionEntry>) -> Result<()> {
        self.check()?;
        self.inner.append_decisions(session, entries).await
    }
    async fn decisions(&self, session: &str) -> Result<Vec<DecisionEntry>> {
        self.inner.decisions(session).await
    }
    async fn request_interrupt(&self, session: &str) -> Result<bool> {
        self.inner.request_interrupt(session).await
    }
    async fn interrupt_requests(&self, owner: &str) -> Result<Vec<String>> {
        self.inner.interrupt_requests(owner).await
    }
    async fn interrupt_notices(&self) -> Result<ChangeFeed> {
        self.inner.interrupt_notices().await
    }
    async fn changes(&self) -> Result<ChangeFeed> {
        self.inner.changes().await
    }
}

fn server_error() -> ScriptedResponse {
    ScriptedResponse::error(ModelError::Server {
        status: 503,
        message: "overloaded".to_owned(),
    })
}

/// How the second instance goes on.
#[derive(Clone, Copy, Debug)]
enum Next {
    Resume,
    NewMessage,
}

/// The second instance, on its own connection to the same database, goes on; the
/// search ran once, its result is stored once, and the transcript is provider-valid.
async fn go_on_elsewhere(path: &std::path::Path, counter: &Counter, next: Next) {
    let store: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(path).await.unwrap());
    let agent = agent(
        ScriptedModel::from_fn(|req| {
            if req.messages.last().is_some_and(|m| m.role == Role::Tool) {
                text("found it")
            } else {
                text("hello again")
            }
        }),
        toolkit(counter, ToolPolicy::auto()),
    )
    .store_arc(store.clone())
    .build()
    .unwrap();
    let session = agent.session("s").await.unwrap();
    let out = match next {
        Next::Resume => session.resume().await,
        Next::NewMessage => session.send(Msg::user("anything new?")).await,
    };
    let out = out.unwrap_or_else(|e| panic!("{next:?}: {e}"));
    assert_eq!(out.status, RunStatus::Completed, "{next:?}");
    assert_eq!(
        counter.count("search_web"),
        1,
        "{next:?}: the search ran once"
    );
    let state = store.load_session("s").await.unwrap();
    assert_valid(&state.messages);
    let results: Vec<&ToolResult> = state
        .messages
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .collect();
    assert_eq!(results.len(), 1, "{next:?}: {:#?}", state.messages);
    assert_eq!(results[0].id, "c1");
    assert_eq!(results[0].outcome, ToolOutcome::Success);
    assert_eq!(results[0].text(), "3 results for rust");
    let ledger = store.ledger_entry("s", "c1").await.unwrap().unwrap();
    assert_eq!(ledger.state, LedgerState::Finished);
    assert_eq!(ledger.result.as_ref(), Some(results[0]));
}

#[tokio::test]
async fn a_model_failing_after_a_tool_ran_stores_the_result_first() {
    for next in [Next::Resume, Next::NewMessage] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let counter = Counter::default();
        let store = Arc::new(SqliteStore::open(&path).await.unwrap());
        let first = agent(
            ScriptedModel::new([
                call("c1", "search_web", json!({"query": "rust"})),
                server_error(),
            ]),
            toolkit(&counter, ToolPolicy::auto()),
        )
        .store(store.clone())
        .build()
        .unwrap();
        let err = first
            .session("s")
            .await
            .unwrap()
            .send(Msg::user("search for rust"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("overloaded"), "{err}");
        // Stored before the error was returned, with the lock's release.
        let state = store.load_session("s").await.unwrap();
        let roles: Vec<Role> = state.messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool]);
        assert!(
            store
                .try_lock_session("s", "someone-else", Duration::from_secs(5))
                .await
                .unwrap()
        );
        store.unlock_session("s", "someone-else").await.unwrap();
        go_on_elsewhere(&path, &counter, next).await;
    }
}

#[tokio::test]
async fn a_process_dying_before_the_result_is_stored_leaves_it_in_the_ledger() {
    for next in [Next::Resume, Next::NewMessage] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let counter = Counter::default();
        let raw: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
        let dying = Arc::new(Dying {
            inner: raw.clone(),
            dead: AtomicBool::new(false),
        });
        let first = agent(
            ScriptedModel::new([
                call("c1", "search_web", json!({"query": "rust"})),
                text("never stored"),
            ]),
            toolkit(&counter, ToolPolicy::auto()),
        )
        .store(dying)
        .session_lease(Duration::from_millis(100))
        .build()
        .unwrap();
        let err = first
            .session("s")
            .await
            .unwrap()
            .send(Msg::user("search for rust"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("the process died"), "{err}");
        // The tool use is stored, its result only in the ledger.
        let state = raw.load_session("s").await.unwrap();
        let roles: Vec<Role> = state.messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant], "{next:?}");
        let ledger = raw.ledger_entry("s", "c1").await.unwrap().unwrap();
        assert_eq!(ledger.state, LedgerState::Finished);
        // The dead process's lock runs out.
        tokio::time::sleep(Duration::from_millis(150)).await;
        go_on_elsewhere(&path, &counter, next).await;
    }
}
