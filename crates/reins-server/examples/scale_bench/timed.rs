//! A store that adds up the time of every call it forwards (the store work of a
//! decision, measured in this process on the same data).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// Forwards every call to `inner`, adding its time to `spent`.
pub(crate) struct Timed {
    pub inner: Arc<dyn MemoryStore>,
    pub spent: Arc<AtomicU64>,
}

impl Timed {
    async fn time<T>(&self, call: impl std::future::Future<Output = T>) -> T {
        let at = Instant::now();
        let out = call.await;
        let ns = u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.spent.fetch_add(ns, Ordering::Relaxed);
        out
    }
}

#[async_trait]
impl MemoryStore for Timed {
    async fn open_session(&self, id: &str) -> Result<SessionState> {
        self.time(self.inner.open_session(id)).await
    }
    async fn load_session(&self, id: &str) -> Result<SessionState> {
        self.time(self.inner.load_session(id)).await
    }
    async fn commit(&self, id: &str, commit: Commit) -> Result<u64> {
        self.time(self.inner.commit(id, commit)).await
    }
    async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
        self.time(self.inner.list_sessions()).await
    }
    async fn list_session_heads(&self) -> Result<Vec<SessionHead>> {
        self.time(self.inner.list_session_heads()).await
    }
    async fn pending_requirements(
        &self,
        filter: &PendingFilter,
    ) -> Result<Vec<PendingRequirement>> {
        self.time(self.inner.pending_requirements(filter)).await
    }
    async fn delete_session(&self, id: &str) -> Result<()> {
        self.time(self.inner.delete_session(id)).await
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
            self.inner
                .claim(session, tool_use_id, fingerprint, lease, allow_takeover),
        )
        .await
    }
    async fn finish(&self, session: &str, tool_use_id: &str, result: &ToolResult) -> Result<()> {
        self.time(self.inner.finish(session, tool_use_id, result))
            .await
    }
    async fn ledger_entry(&self, session: &str, tool_use_id: &str) -> Result<Option<LedgerEntry>> {
        self.time(self.inner.ledger_entry(session, tool_use_id))
            .await
    }
    async fn try_lock_session(&self, session: &str, owner: &str, lease: Duration) -> Result<bool> {
        self.time(self.inner.try_lock_session(session, owner, lease))
            .await
    }
    async fn unlock_session(&self, session: &str, owner: &str) -> Result<()> {
        self.time(self.inner.unlock_session(session, owner)).await
    }
    async fn try_lock_session_reading_version(
        &self,
        session: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<SessionLock> {
        self.time(
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
        self.time(self.inner.session_version(id)).await
    }
    async fn append_decisions(&self, session: &str, entries: Vec<DecisionEntry>) -> Result<()> {
        self.time(self.inner.append_decisions(session, entries))
            .await
    }
    async fn decisions(&self, session: &str) -> Result<Vec<DecisionEntry>> {
        self.time(self.inner.decisions(session)).await
    }
    async fn request_interrupt(&self, session: &str) -> Result<bool> {
        self.time(self.inner.request_interrupt(session)).await
    }
    async fn interrupt_requests(&self, owner: &str) -> Result<Vec<String>> {
        self.time(self.inner.interrupt_requests(owner)).await
    }
    async fn changes(&self) -> Result<ChangeFeed> {
        self.time(self.inner.changes()).await
    }
    async fn interrupt_notices(&self) -> Result<ChangeFeed> {
        self.time(self.inner.interrupt_notices()).await
    }
    async fn create_grant(&self, grant: &Grant) -> Result<()> {
        self.time(self.inner.create_grant(grant)).await
    }
    async fn list_grants(&self, filter: &GrantFilter) -> Result<Vec<Grant>> {
        self.time(self.inner.list_grants(filter)).await
    }
    async fn grant(&self, id: &str) -> Result<Option<Grant>> {
        self.time(self.inner.grant(id)).await
    }
    async fn revoke_grant(&self, id: &str, by: Option<&str>, at: DateTime<Utc>) -> Result<Grant> {
        self.time(self.inner.revoke_grant(id, by, at)).await
    }
    fn record_notices(&self, on: bool) {
        self.inner.record_notices(on)
    }
    fn records_notices(&self) -> bool {
        self.inner.records_notices()
    }
    async fn append_notices(&self, notices: Vec<Notice>) -> Result<()> {
        self.time(self.inner.append_notices(notices)).await
    }
    async fn unrouted_notices(&self, limit: usize) -> Result<Vec<Notice>> {
        self.time(self.inner.unrouted_notices(limit)).await
    }
    async fn route_notice(&self, notice: &str, destinations: &[String]) -> Result<()> {
        self.time(self.inner.route_notice(notice, destinations))
            .await
    }
    async fn claim_deliveries(
        &self,
        owner: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<Delivery>> {
        self.time(self.inner.claim_deliveries(owner, limit, lease))
            .await
    }
    async fn record_attempt(
        &self,
        delivery: &str,
        owner: &str,
        attempt: u32,
        outcome: AttemptOutcome,
    ) -> Result<bool> {
        self.time(self.inner.record_attempt(delivery, owner, attempt, outcome))
            .await
    }
    async fn deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>> {
        self.time(self.inner.deliveries(filter)).await
    }
    async fn delivery_attempts(&self, delivery: &str) -> Result<Vec<DeliveryAttempt>> {
        self.time(self.inner.delivery_attempts(delivery)).await
    }
    async fn redeliver(&self, delivery: &str) -> Result<Delivery> {
        self.time(self.inner.redeliver(delivery)).await
    }
    async fn put_subscription(&self, subscription: &Subscription) -> Result<()> {
        self.time(self.inner.put_subscription(subscription)).await
    }
    async fn subscriptions(&self, kind: &str) -> Result<Vec<Subscription>> {
        self.time(self.inner.subscriptions(kind)).await
    }
    async fn delete_subscription(&self, id: &str) -> Result<bool> {
        self.time(self.inner.delete_subscription(id)).await
    }
}
