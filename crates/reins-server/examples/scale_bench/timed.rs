//! A store that adds up the time of every call it forwards (the store work of a
//! decision, measured in this process on the same data).

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use reins_memory::grant::{Grant, GrantFilter};
use reins_memory::notice::{
    AttemptOutcome, Delivery, DeliveryAttempt, DeliveryFilter, Notice, Subscription,
};
use reins_memory::{
    ChangeFeed, Claim, Commit, DecisionEntry, LedgerEntry, MemoryStore, PendingFilter,
    PendingRequirement, Result, SessionHead, SessionLock, SessionState, SessionSummary,
};
use reins_message::ToolResult;

/// The calls a [`Timed`] store forwarded: each one's name and time (ns), in order.
pub(crate) type CallLog = Arc<Mutex<Vec<(&'static str, u64)>>>;

/// Forwards every call to `inner`, logging its name and time in `calls`.
pub(crate) struct Timed {
    pub inner: Arc<dyn MemoryStore>,
    pub calls: CallLog,
}

impl Timed {
    async fn time<T>(&self, name: &'static str, call: impl std::future::Future<Output = T>) -> T {
        let at = Instant::now();
        let out = call.await;
        let ns = u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.calls.lock().unwrap().push((name, ns));
        out
    }
}

#[async_trait]
impl MemoryStore for Timed {
    async fn open_session(&self, id: &str) -> Result<SessionState> {
        self.time("open_session", self.inner.open_session(id)).await
    }
    async fn load_session(&self, id: &str) -> Result<SessionState> {
        self.time("load_session", self.inner.load_session(id)).await
    }
    async fn commit(&self, id: &str, commit: Commit) -> Result<u64> {
        self.time("commit", self.inner.commit(id, commit)).await
    }
    async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
        self.time("list_sessions", self.inner.list_sessions()).await
    }
    async fn list_session_heads(&self) -> Result<Vec<SessionHead>> {
        self.time("list_session_heads", self.inner.list_session_heads())
            .await
    }
    async fn pending_requirements(
        &self,
        filter: &PendingFilter,
    ) -> Result<Vec<PendingRequirement>> {
        self.time(
            "pending_requirements",
            self.inner.pending_requirements(filter),
        )
        .await
    }
    async fn delete_session(&self, id: &str) -> Result<()> {
        self.time("delete_session", self.inner.delete_session(id))
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
        self.time(
            "claim",
            self.inner
                .claim(session, tool_use_id, fingerprint, lease, allow_takeover),
        )
        .await
    }
    async fn finish(&self, session: &str, tool_use_id: &str, result: &ToolResult) -> Result<()> {
        self.time("finish", self.inner.finish(session, tool_use_id, result))
            .await
    }
    async fn ledger_entry(&self, session: &str, tool_use_id: &str) -> Result<Option<LedgerEntry>> {
        self.time(
            "ledger_entry",
            self.inner.ledger_entry(session, tool_use_id),
        )
        .await
    }
    async fn try_lock_session(&self, session: &str, owner: &str, lease: Duration) -> Result<bool> {
        self.time(
            "try_lock_session",
            self.inner.try_lock_session(session, owner, lease),
        )
        .await
    }
    async fn unlock_session(&self, session: &str, owner: &str) -> Result<()> {
        self.time("unlock_session", self.inner.unlock_session(session, owner))
            .await
    }
    async fn try_lock_session_reading_version(
        &self,
        session: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<SessionLock> {
        self.time(
            "try_lock_session_reading_version",
            self.inner
                .try_lock_session_reading_version(session, owner, lease),
        )
        .await
    }
    fn commit_releases_lock(&self) -> bool {
        self.inner.commit_releases_lock()
    }
    fn commit_takes_lock(&self) -> bool {
        self.inner.commit_takes_lock()
    }
    async fn session_version(&self, id: &str) -> Result<Option<u64>> {
        self.time("session_version", self.inner.session_version(id))
            .await
    }
    async fn append_decisions(&self, session: &str, entries: Vec<DecisionEntry>) -> Result<()> {
        self.time(
            "append_decisions",
            self.inner.append_decisions(session, entries),
        )
        .await
    }
    async fn decisions(&self, session: &str) -> Result<Vec<DecisionEntry>> {
        self.time("decisions", self.inner.decisions(session)).await
    }
    async fn request_interrupt(&self, session: &str) -> Result<bool> {
        self.time("request_interrupt", self.inner.request_interrupt(session))
            .await
    }
    async fn interrupt_requests(&self, owner: &str) -> Result<Vec<String>> {
        self.time("interrupt_requests", self.inner.interrupt_requests(owner))
            .await
    }
    async fn changes(&self) -> Result<ChangeFeed> {
        self.time("changes", self.inner.changes()).await
    }
    async fn interrupt_notices(&self) -> Result<ChangeFeed> {
        self.time("interrupt_notices", self.inner.interrupt_notices())
            .await
    }
    async fn create_grant(&self, grant: &Grant) -> Result<()> {
        self.time("create_grant", self.inner.create_grant(grant))
            .await
    }
    async fn list_grants(&self, filter: &GrantFilter) -> Result<Vec<Grant>> {
        self.time("list_grants", self.inner.list_grants(filter))
            .await
    }
    async fn grant(&self, id: &str) -> Result<Option<Grant>> {
        self.time("grant", self.inner.grant(id)).await
    }
    async fn revoke_grant(&self, id: &str, by: Option<&str>, at: DateTime<Utc>) -> Result<Grant> {
        self.time("revoke_grant", self.inner.revoke_grant(id, by, at))
            .await
    }
    fn record_notices(&self, on: bool) {
        self.inner.record_notices(on)
    }
    fn records_notices(&self) -> bool {
        self.inner.records_notices()
    }
    async fn append_notices(&self, notices: Vec<Notice>) -> Result<()> {
        self.time("append_notices", self.inner.append_notices(notices))
            .await
    }
    async fn unrouted_notices(&self, limit: usize) -> Result<Vec<Notice>> {
        self.time("unrouted_notices", self.inner.unrouted_notices(limit))
            .await
    }
    async fn route_notice(&self, notice: &str, destinations: &[String]) -> Result<()> {
        self.time(
            "route_notice",
            self.inner.route_notice(notice, destinations),
        )
        .await
    }
    async fn claim_deliveries(
        &self,
        owner: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<Delivery>> {
        self.time(
            "claim_deliveries",
            self.inner.claim_deliveries(owner, limit, lease),
        )
        .await
    }
    async fn record_attempt(
        &self,
        delivery: &str,
        owner: &str,
        attempt: u32,
        outcome: AttemptOutcome,
    ) -> Result<bool> {
        self.time(
            "record_attempt",
            self.inner.record_attempt(delivery, owner, attempt, outcome),
        )
        .await
    }
    async fn deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>> {
        self.time("deliveries", self.inner.deliveries(filter)).await
    }
    async fn delivery_attempts(&self, delivery: &str) -> Result<Vec<DeliveryAttempt>> {
        self.time("delivery_attempts", self.inner.delivery_attempts(delivery))
            .await
    }
    async fn redeliver(&self, delivery: &str) -> Result<Delivery> {
        self.time("redeliver", self.inner.redeliver(delivery)).await
    }
    async fn put_subscription(&self, subscription: &Subscription) -> Result<()> {
        self.time(
            "put_subscription",
            self.inner.put_subscription(subscription),
        )
        .await
    }
    async fn subscriptions(&self, kind: &str) -> Result<Vec<Subscription>> {
        self.time("subscriptions", self.inner.subscriptions(kind))
            .await
    }
    async fn delete_subscription(&self, id: &str) -> Result<bool> {
        self.time("delete_subscription", self.inner.delete_subscription(id))
            .await
    }
}
