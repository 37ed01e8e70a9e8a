//! [`Recorded`]: a store that forwards every call to another and writes down, in
//! order, which calls it forwarded. For tests that hold a path to its store traffic
//! ("a decision reads the session once before its commit") and for finding out what
//! a door or driver asks of the store.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use reins_message::ToolResult;

use crate::commit::Commit;
use crate::error::Result;
use crate::grant::{Grant, GrantFilter};
use crate::heads::SessionFilter;
use crate::notice::{
    AttemptOutcome, Delivery, DeliveryAttempt, DeliveryFilter, Notice, Subscription,
};
use crate::pending::{PendingFilter, PendingRequirement};
use crate::store::{
    ChangeFeed, Claim, DecisionEntry, LedgerEntry, MemoryStore, SessionHead, SessionLock,
    SessionState, SessionSummary,
};

/// One call a [`Recorded`] store forwarded: the method's name and, for a call about
/// one session, its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreCall {
    /// The [`MemoryStore`] method, e.g. `"load_session"`.
    pub method: &'static str,
    /// The session the call was about, when it names one.
    pub session: Option<String>,
}

/// A [`MemoryStore`] that forwards every call to `inner` and records each async call
/// ([`StoreCall`]) before forwarding it. The flags (`commit_takes_lock`,
/// `records_notices`, ...) are forwarded unrecorded, so the wrapped store behaves as
/// the store it wraps. Cloning gives another handle to the same record.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use reins_memory::{Commit, InMemoryStore, MemoryStore, Recorded};
///
/// let store = Recorded::new(InMemoryStore::new());
/// let s = store.open_session("chat-1").await?;
/// store.commit("chat-1", Commit::at(s.version)).await?;
/// let methods: Vec<_> = store.take().into_iter().map(|c| c.method).collect();
/// assert_eq!(methods, ["open_session", "commit"]);
/// # Ok::<(), reins_memory::Error>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct Recorded {
    inner: Arc<dyn MemoryStore>,
    calls: Arc<Mutex<Vec<StoreCall>>>,
}

impl std::fmt::Debug for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorded")
            .field("calls", &self.calls.lock().map_or(0, |c| c.len()))
            .finish_non_exhaustive()
    }
}

impl Recorded {
    /// Records the calls made to `inner`.
    pub fn new(inner: impl MemoryStore) -> Self {
        Self::wrap(Arc::new(inner))
    }

    /// Records the calls made to a store already shared.
    pub fn wrap(inner: Arc<dyn MemoryStore>) -> Self {
        Self {
            inner,
            calls: Arc::default(),
        }
    }

    /// The store the calls go to.
    pub fn inner(&self) -> &Arc<dyn MemoryStore> {
        &self.inner
    }

    /// The calls recorded so far, oldest first (the record is kept).
    pub fn calls(&self) -> Vec<StoreCall> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The calls recorded so far, oldest first, and a fresh record from here on.
    pub fn take(&self) -> Vec<StoreCall> {
        std::mem::take(&mut *self.calls.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn note(&self, method: &'static str, session: Option<&str>) {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(StoreCall {
                method,
                session: session.map(str::to_owned),
            });
    }
}

#[async_trait]
impl MemoryStore for Recorded {
    async fn open_session(&self, id: &str) -> Result<SessionState> {
        self.note("open_session", Some(id));
        self.inner.open_session(id).await
    }

    async fn load_session(&self, id: &str) -> Result<SessionState> {
        self.note("load_session", Some(id));
        self.inner.load_session(id).await
    }

    async fn commit(&self, id: &str, commit: Commit) -> Result<u64> {
        self.note("commit", Some(id));
        self.inner.commit(id, commit).await
    }

    async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
        self.note("list_sessions", None);
        self.inner.list_sessions().await
    }

    async fn list_session_heads(&self) -> Result<Vec<SessionHead>> {
        self.note("list_session_heads", None);
        self.inner.list_session_heads().await
    }

    async fn session_heads_page(&self, filter: &SessionFilter) -> Result<Vec<SessionHead>> {
        self.note("session_heads_page", None);
        self.inner.session_heads_page(filter).await
    }

    async fn session_heads(&self, ids: &[String]) -> Result<Vec<SessionHead>> {
        self.note("session_heads", None);
        self.inner.session_heads(ids).await
    }

    async fn pending_requirements(
        &self,
        filter: &PendingFilter,
    ) -> Result<Vec<PendingRequirement>> {
        self.note("pending_requirements", None);
        self.inner.pending_requirements(filter).await
    }

    async fn delete_session(&self, id: &str) -> Result<()> {
        self.note("delete_session", Some(id));
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
        self.note("claim", Some(session));
        self.inner
            .claim(session, tool_use_id, fingerprint, lease, allow_takeover)
            .await
    }

    async fn finish(&self, session: &str, tool_use_id: &str, result: &ToolResult) -> Result<()> {
        self.note("finish", Some(session));
        self.inner.finish(session, tool_use_id, result).await
    }

    async fn ledger_entry(&self, session: &str, tool_use_id: &str) -> Result<Option<LedgerEntry>> {
        self.note("ledger_entry", Some(session));
        self.inner.ledger_entry(session, tool_use_id).await
    }

    async fn try_lock_session(&self, session: &str, owner: &str, lease: Duration) -> Result<bool> {
        self.note("try_lock_session", Some(session));
        self.inner.try_lock_session(session, owner, lease).await
    }

    async fn unlock_session(&self, session: &str, owner: &str) -> Result<()> {
        self.note("unlock_session", Some(session));
        self.inner.unlock_session(session, owner).await
    }

    async fn try_lock_session_reading_version(
        &self,
        session: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<SessionLock> {
        self.note("try_lock_session_reading_version", Some(session));
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
        self.note("session_version", Some(id));
        self.inner.session_version(id).await
    }

    async fn append_decisions(&self, session: &str, entries: Vec<DecisionEntry>) -> Result<()> {
        self.note("append_decisions", Some(session));
        self.inner.append_decisions(session, entries).await
    }

    async fn decisions(&self, session: &str) -> Result<Vec<DecisionEntry>> {
        self.note("decisions", Some(session));
        self.inner.decisions(session).await
    }

    fn record_evidence(&self, on: bool) {
        self.inner.record_evidence(on)
    }

    fn records_evidence(&self) -> bool {
        self.inner.records_evidence()
    }

    async fn evidence(&self, session: &str) -> Result<Vec<crate::evidence::ChainEntry>> {
        self.note("evidence", Some(session));
        self.inner.evidence(session).await
    }

    async fn append_evidence(
        &self,
        session: &str,
        seal: crate::evidence::Seal,
    ) -> Result<crate::evidence::ChainEntry> {
        self.note("append_evidence", Some(session));
        self.inner.append_evidence(session, seal).await
    }

    async fn request_interrupt(&self, session: &str) -> Result<bool> {
        self.note("request_interrupt", Some(session));
        self.inner.request_interrupt(session).await
    }

    async fn interrupt_requests(&self, owner: &str) -> Result<Vec<String>> {
        self.note("interrupt_requests", None);
        self.inner.interrupt_requests(owner).await
    }

    async fn interrupt_notices(&self) -> Result<ChangeFeed> {
        self.note("interrupt_notices", None);
        self.inner.interrupt_notices().await
    }

    async fn changes(&self) -> Result<ChangeFeed> {
        self.note("changes", None);
        self.inner.changes().await
    }

    async fn create_grant(&self, grant: &Grant) -> Result<()> {
        self.note("create_grant", None);
        self.inner.create_grant(grant).await
    }

    async fn list_grants(&self, filter: &GrantFilter) -> Result<Vec<Grant>> {
        self.note("list_grants", None);
        self.inner.list_grants(filter).await
    }

    async fn grant(&self, id: &str) -> Result<Option<Grant>> {
        self.note("grant", Some(id));
        self.inner.grant(id).await
    }

    async fn revoke_grant(&self, id: &str, by: Option<&str>, at: DateTime<Utc>) -> Result<Grant> {
        self.note("revoke_grant", Some(id));
        self.inner.revoke_grant(id, by, at).await
    }

    fn record_notices(&self, on: bool) {
        self.inner.record_notices(on)
    }

    fn records_notices(&self) -> bool {
        self.inner.records_notices()
    }

    async fn append_notices(&self, notices: Vec<Notice>) -> Result<()> {
        self.note("append_notices", None);
        self.inner.append_notices(notices).await
    }

    async fn unrouted_notices(&self, limit: usize) -> Result<Vec<Notice>> {
        self.note("unrouted_notices", None);
        self.inner.unrouted_notices(limit).await
    }

    async fn route_notice(&self, notice: &str, destinations: &[String]) -> Result<()> {
        self.note("route_notice", None);
        self.inner.route_notice(notice, destinations).await
    }

    async fn claim_deliveries(
        &self,
        owner: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<Delivery>> {
        self.note("claim_deliveries", None);
        self.inner.claim_deliveries(owner, limit, lease).await
    }

    async fn record_attempt(
        &self,
        delivery: &str,
        owner: &str,
        attempt: u32,
        outcome: AttemptOutcome,
    ) -> Result<bool> {
        self.note("record_attempt", None);
        self.inner
            .record_attempt(delivery, owner, attempt, outcome)
            .await
    }

    async fn deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>> {
        self.note("deliveries", None);
        self.inner.deliveries(filter).await
    }

    async fn delivery_attempts(&self, delivery: &str) -> Result<Vec<DeliveryAttempt>> {
        self.note("delivery_attempts", None);
        self.inner.delivery_attempts(delivery).await
    }

    async fn redeliver(&self, delivery: &str) -> Result<Delivery> {
        self.note("redeliver", None);
        self.inner.redeliver(delivery).await
    }

    async fn put_subscription(&self, subscription: &Subscription) -> Result<()> {
        self.note("put_subscription", None);
        self.inner.put_subscription(subscription).await
    }

    async fn subscriptions(&self, kind: &str) -> Result<Vec<Subscription>> {
        self.note("subscriptions", None);
        self.inner.subscriptions(kind).await
    }

    async fn delete_subscription(&self, id: &str) -> Result<bool> {
        self.note("delete_subscription", Some(id));
        self.inner.delete_subscription(id).await
    }
}
