//! The [`MemoryStore`] trait and the records it keeps.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use reins_message::ToolResult;

pub use crate::commit::Commit;
use crate::error::{Error, Result};
use crate::grant::{Grant, GrantFilter};
use crate::heads::SessionFilter;
use crate::notice::{
    AttemptOutcome, Delivery, DeliveryAttempt, DeliveryFilter, Notice, Subscription,
};
use crate::pending::{PendingFilter, PendingRequirement};

pub use crate::records::{
    ChangeFeed, Claim, DecisionEntry, LedgerEntry, LedgerState, RequirementRecord, SessionHead,
    SessionLock, SessionState, SessionSummary, StoreChange,
};

/// Where sessions live. One transaction per [`commit`](MemoryStore::commit); a stale
/// writer gets [`Error::Conflict`](crate::Error::Conflict), never a silent overwrite.
#[async_trait]
pub trait MemoryStore: Send + Sync + 'static {
    /// Loads the session, creating it (empty, version 0) when it does not exist.
    async fn open_session(&self, id: &str) -> Result<SessionState>;

    /// Loads the session; [`Error::SessionNotFound`](crate::Error::SessionNotFound)
    /// when it does not exist.
    async fn load_session(&self, id: &str) -> Result<SessionState>;

    /// Applies `commit` in one transaction and returns the new version. The commit's
    /// `expected_version` must equal the stored version. On any error nothing changes.
    /// An empty commit writes nothing and returns the current version. See [`Commit`]
    /// for the order in which its parts apply.
    async fn commit(&self, id: &str, commit: Commit) -> Result<u64>;

    /// Every session, ordered by id.
    async fn list_sessions(&self) -> Result<Vec<SessionSummary>>;

    /// Every session without its transcript (its run state and open requirements),
    /// ordered by id: what a list of sessions needs, read at a cost that does not grow
    /// with the transcripts' length. The provided method loads each session in turn;
    /// the built-in stores answer with two queries however many sessions there are.
    async fn list_session_heads(&self) -> Result<Vec<SessionHead>> {
        let mut heads = Vec::new();
        for s in self.list_sessions().await? {
            match self.load_session(&s.id).await {
                Ok(state) => heads.push(SessionHead::of(state)),
                // Deleted since it was listed.
                Err(crate::Error::SessionNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(heads)
    }

    /// One page of sessions without their transcripts, most recently active first
    /// (`updated_at` descending, then id), as `filter` selects them: what a list of
    /// sessions shows. The built-in SQL stores answer from an index, at a cost that does
    /// not grow with the number of stored sessions; the provided method (and the
    /// in-memory store) scan [`list_session_heads`](MemoryStore::list_session_heads).
    async fn session_heads_page(&self, filter: &SessionFilter) -> Result<Vec<SessionHead>> {
        Ok(crate::heads::page_of(
            self.list_session_heads().await?,
            filter,
        ))
    }

    /// The heads of the sessions named (those that exist, each once, in any order): what a list
    /// needs of the sessions on one page. The built-in SQL stores answer with one
    /// statement; the provided method loads each session in turn.
    async fn session_heads(&self, ids: &[String]) -> Result<Vec<SessionHead>> {
        let mut heads = Vec::with_capacity(ids.len());
        let ids: std::collections::BTreeSet<&String> = ids.iter().collect();
        for id in ids {
            match self.load_session(id).await {
                Ok(state) => heads.push(SessionHead::of(state)),
                Err(crate::Error::SessionNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(heads)
    }

    /// One page of the open requirements across sessions, in [`PendingKey`](crate::PendingKey) order
    /// (newest first), as `filter` selects them: what an inbox lists. The built-in SQL
    /// stores answer from an index, at a cost that does not grow with the number of
    /// stored sessions; the provided method (and the in-memory store) scan
    /// [`list_session_heads`](MemoryStore::list_session_heads).
    async fn pending_requirements(
        &self,
        filter: &PendingFilter,
    ) -> Result<Vec<PendingRequirement>> {
        Ok(crate::pending::page_of(
            &self.list_session_heads().await?,
            filter,
        ))
    }

    /// Deletes the session with its messages, requirements, ledger entries and lock.
    /// Deleting a session that does not exist is not an error.
    async fn delete_session(&self, id: &str) -> Result<()>;

    /// Claims a tool call in the ledger before running it (see [`Claim`]). A new call
    /// is recorded as running with a lease of `lease`. A running call whose lease
    /// expired is re-leased to this caller when `allow_takeover` is true (exactly one
    /// of racing callers wins), otherwise [`Claim::Expired`] is returned. A claim whose
    /// fingerprint differs from the recorded one fails with
    /// [`Error::FingerprintMismatch`](crate::Error::FingerprintMismatch).
    async fn claim(
        &self,
        session: &str,
        tool_use_id: &str,
        fingerprint: &str,
        lease: Duration,
        allow_takeover: bool,
    ) -> Result<Claim>;

    /// Records the final result of a claimed call. Finishing twice keeps the first
    /// result and returns `Ok`.
    async fn finish(&self, session: &str, tool_use_id: &str, result: &ToolResult) -> Result<()>;

    /// The ledger entry of a tool call, if it was ever claimed.
    async fn ledger_entry(&self, session: &str, tool_use_id: &str) -> Result<Option<LedgerEntry>>;

    /// Takes (or renews) the session's run lock for `lease`. True when acquired: no
    /// lock was held, `owner` already held it, or the previous lease expired.
    async fn try_lock_session(&self, session: &str, owner: &str, lease: Duration) -> Result<bool>;

    /// Releases the run lock if `owner` holds it (otherwise does nothing).
    async fn unlock_session(&self, session: &str, owner: &str) -> Result<()>;

    /// Takes (or renews) the run lock as [`try_lock_session`](MemoryStore::try_lock_session)
    /// does and, when it is acquired, reads the session's version as
    /// [`session_version`](MemoryStore::session_version) does — what a run needs before
    /// it starts, in one step. The provided method makes the two calls; the built-in
    /// stores answer with one round trip.
    async fn try_lock_session_reading_version(
        &self,
        session: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<SessionLock> {
        if !self.try_lock_session(session, owner, lease).await? {
            return Ok(SessionLock::Busy);
        }
        Ok(SessionLock::Acquired {
            version: self.session_version(session).await?,
        })
    }

    /// Whether [`commit`](MemoryStore::commit) honours [`Commit::release_lock`]
    /// (releases the run lock in the commit's own transaction). The provided method says
    /// no, and callers then release with [`unlock_session`](MemoryStore::unlock_session);
    /// the built-in stores say yes.
    fn commit_releases_lock(&self) -> bool {
        false
    }

    /// Whether [`commit`](MemoryStore::commit) honours [`Commit::acquire_lock`] (takes
    /// the run lock in the commit's own transaction, refusing with
    /// [`Error::SessionLocked`](crate::Error::SessionLocked) when another owner holds
    /// it). The provided method says no, and callers then take the lock first with
    /// [`try_lock_session_reading_version`](MemoryStore::try_lock_session_reading_version);
    /// the built-in stores say yes. A store that says yes must also honour
    /// [`Commit::release_lock`].
    fn commit_takes_lock(&self) -> bool {
        false
    }

    /// The session's stored version, without loading it (`None` when it does not
    /// exist): one cheap read that tells a cached view whether it is still current.
    async fn session_version(&self, id: &str) -> Result<Option<u64>>;

    /// Appends entries to the session's decision log without changing its version
    /// (refused decisions are recorded this way; accepted ones travel in the
    /// [`Commit`] that applies them). Fails with
    /// [`Error::SessionNotFound`](crate::Error::SessionNotFound) for an unknown session.
    async fn append_decisions(&self, session: &str, entries: Vec<DecisionEntry>) -> Result<()>;

    /// The session's decision log, oldest first (empty for an unknown session).
    async fn decisions(&self, session: &str) -> Result<Vec<DecisionEntry>>;

    /// Turns the evidence chain on or off for this handle and its clones (see
    /// [`crate::evidence`] and docs/evidence.md): while it is on, every decision-log entry
    /// and every ledger outcome (a claim granted, a result recorded) adds an entry to its
    /// session's hash chain in the same transaction; while it is off (the default)
    /// nothing is computed or written. The provided method does nothing.
    fn record_evidence(&self, on: bool) {
        let _ = on;
    }

    /// Whether the evidence chain is on (see [`record_evidence`](MemoryStore::record_evidence)).
    fn records_evidence(&self) -> bool {
        false
    }

    /// The session's evidence chain, oldest first (empty for an unknown session, or one
    /// that recorded nothing while the chain was on). The provided method answers
    /// [`Error::Unsupported`]; the built-in stores keep the chain.
    async fn evidence(&self, session: &str) -> Result<Vec<crate::evidence::ChainEntry>> {
        let _ = session;
        Err(crate::evidence::unsupported())
    }

    /// Appends one entry to the session's chain, in one transaction, whether or not the
    /// chain is on: `seal` is given the chain's head and the entry's time and returns the
    /// entry's body (a signed receipt: [`crate::evidence::Seal`]). The provided method
    /// answers [`Error::Unsupported`].
    async fn append_evidence(
        &self,
        session: &str,
        seal: crate::evidence::Seal,
    ) -> Result<crate::evidence::ChainEntry> {
        let _ = (session, seal);
        Err(crate::evidence::unsupported())
    }

    /// Asks the process running the session (the holder of its run lock) to interrupt
    /// it. True when a live lock holder was flagged; false when no run holds the
    /// session (nothing to interrupt). The flag lives on the lock, so it ends with the
    /// run and never reaches a later one.
    async fn request_interrupt(&self, session: &str) -> Result<bool>;

    /// The sessions whose run lock `owner` holds and whose run someone asked to
    /// interrupt (one query, however many runs the owner has in flight).
    async fn interrupt_requests(&self, owner: &str) -> Result<Vec<String>>;

    /// The part of [`changes`](MemoryStore::changes) that may be interrupt requests:
    /// what a worker listens to so that its runs stop when asked, without waking for
    /// every commit.
    async fn interrupt_notices(&self) -> Result<ChangeFeed>;

    /// A feed of changes made by any writer — this process or another sharing the
    /// store (PostgreSQL: LISTEN/NOTIFY; SQLite: polling `PRAGMA data_version`;
    /// in memory: direct). Used to notice pauses, resumes and interrupt requests made
    /// elsewhere without polling every session.
    async fn changes(&self) -> Result<ChangeFeed>;

    /// Stores a new standing grant (see [`Grant`]); it is checked with
    /// [`Grant::validate`] first ([`Error::InvalidGrant`]), and an id already taken is
    /// [`Error::DuplicateGrant`]. On any error nothing is stored. The provided method
    /// answers [`Error::Unsupported`]; the built-in stores keep grants.
    async fn create_grant(&self, grant: &Grant) -> Result<()> {
        let _ = grant;
        Err(Error::Unsupported {
            what: "standing grants".to_owned(),
        })
    }

    /// The grants `filter` admits, oldest first (then by id). The provided method
    /// answers [`Error::Unsupported`].
    async fn list_grants(&self, filter: &GrantFilter) -> Result<Vec<Grant>> {
        let _ = filter;
        Err(Error::Unsupported {
            what: "standing grants".to_owned(),
        })
    }

    /// One grant by id, revoked or not (`None` when there is none). The provided method
    /// answers [`Error::Unsupported`].
    async fn grant(&self, id: &str) -> Result<Option<Grant>> {
        let _ = id;
        Err(Error::Unsupported {
            what: "standing grants".to_owned(),
        })
    }

    /// Revokes a grant: records who and when, and returns the revoked grant. Exactly one
    /// of racing revocations succeeds; the others get [`Error::GrantAlreadyRevoked`]
    /// naming the first. An unknown id is [`Error::GrantNotFound`]. The provided method
    /// answers [`Error::Unsupported`].
    async fn revoke_grant(&self, id: &str, by: Option<&str>, at: DateTime<Utc>) -> Result<Grant> {
        let _ = (id, by, at);
        Err(Error::Unsupported {
            what: "standing grants".to_owned(),
        })
    }

    /// Turns the outbox on or off for this handle and its clones (see [`crate::notice`]):
    /// while it is on, the notices a [`Commit`] carries and those of grant changes are
    /// written with them; while it is off (the default) they are dropped. The provided
    /// method does nothing (a store without an outbox).
    fn record_notices(&self, on: bool) {
        let _ = on;
    }

    /// Whether the outbox is on (see [`record_notices`](MemoryStore::record_notices)).
    fn records_notices(&self) -> bool {
        false
    }

    /// Writes notices that do not travel with a change of their own (an escalation), in
    /// one transaction, whether or not the outbox is on. A notice id already stored is
    /// skipped. The provided method answers [`Error::Unsupported`].
    async fn append_notices(&self, notices: Vec<Notice>) -> Result<()> {
        let _ = notices;
        Err(Error::Unsupported {
            what: "the notification outbox".to_owned(),
        })
    }

    /// Up to `limit` notices not yet routed, oldest first.
    async fn unrouted_notices(&self, limit: usize) -> Result<Vec<Notice>> {
        let _ = limit;
        Err(Error::Unsupported {
            what: "the notification outbox".to_owned(),
        })
    }

    /// Routes a notice: one pending [`Delivery`] per destination, due now, and the
    /// notice marked routed, in one transaction. Idempotent: a delivery that exists is
    /// kept as it is, and routing a routed notice again adds only new destinations.
    async fn route_notice(&self, notice: &str, destinations: &[String]) -> Result<()> {
        let _ = (notice, destinations);
        Err(Error::Unsupported {
            what: "the notification outbox".to_owned(),
        })
    }

    /// Claims up to `limit` due deliveries for `owner`: pending, due, and not leased to
    /// another owner (or with its lease ended). Each gets a lease of `lease` and its
    /// attempt count raised by one; oldest due first. Racing claimers never get the
    /// same delivery while a lease lasts.
    async fn claim_deliveries(
        &self,
        owner: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<Delivery>> {
        let _ = (owner, limit, lease);
        Err(Error::Unsupported {
            what: "the notification outbox".to_owned(),
        })
    }

    /// Records the outcome of attempt `attempt` of a delivery `owner` claimed: appends
    /// to its attempt log and settles it ([`AttemptOutcome`]), releasing the lease. When
    /// `owner` no longer holds the lease for that attempt (it ended and someone else
    /// claimed it) nothing changes and the answer is false.
    async fn record_attempt(
        &self,
        delivery: &str,
        owner: &str,
        attempt: u32,
        outcome: AttemptOutcome,
    ) -> Result<bool> {
        let _ = (delivery, owner, attempt, outcome);
        Err(Error::Unsupported {
            what: "the notification outbox".to_owned(),
        })
    }

    /// The deliveries `filter` admits, newest first.
    async fn deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>> {
        let _ = filter;
        Err(Error::Unsupported {
            what: "the notification outbox".to_owned(),
        })
    }

    /// A delivery's attempt log, oldest first.
    async fn delivery_attempts(&self, delivery: &str) -> Result<Vec<DeliveryAttempt>> {
        let _ = delivery;
        Err(Error::Unsupported {
            what: "the notification outbox".to_owned(),
        })
    }

    /// Makes a delivery pending and due now again (a person asked to redeliver), keeping
    /// its attempt log; a lease in flight is left to end. [`Error::DeliveryNotFound`]
    /// for an unknown id.
    async fn redeliver(&self, delivery: &str) -> Result<Delivery> {
        let _ = delivery;
        Err(Error::Unsupported {
            what: "the notification outbox".to_owned(),
        })
    }

    /// Stores a subscription, replacing one with the same id.
    async fn put_subscription(&self, subscription: &Subscription) -> Result<()> {
        let _ = subscription;
        Err(Error::Unsupported {
            what: "notification subscriptions".to_owned(),
        })
    }

    /// The subscriptions of `kind`, oldest first.
    async fn subscriptions(&self, kind: &str) -> Result<Vec<Subscription>> {
        let _ = kind;
        Err(Error::Unsupported {
            what: "notification subscriptions".to_owned(),
        })
    }

    /// Deletes a subscription; whether there was one.
    async fn delete_subscription(&self, id: &str) -> Result<bool> {
        let _ = id;
        Err(Error::Unsupported {
            what: "notification subscriptions".to_owned(),
        })
    }
}

macro_rules! forward_store {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<T: MemoryStore + ?Sized> MemoryStore for $ty {
            async fn open_session(&self, id: &str) -> Result<SessionState> {
                (**self).open_session(id).await
            }
            async fn load_session(&self, id: &str) -> Result<SessionState> {
                (**self).load_session(id).await
            }
            async fn commit(&self, id: &str, commit: Commit) -> Result<u64> {
                (**self).commit(id, commit).await
            }
            async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
                (**self).list_sessions().await
            }
            async fn list_session_heads(&self) -> Result<Vec<SessionHead>> {
                (**self).list_session_heads().await
            }
            async fn session_heads(&self, ids: &[String]) -> Result<Vec<SessionHead>> {
                (**self).session_heads(ids).await
            }
            async fn session_heads_page(&self, filter: &SessionFilter) -> Result<Vec<SessionHead>> {
                (**self).session_heads_page(filter).await
            }
            async fn pending_requirements(&self, filter: &PendingFilter) -> Result<Vec<PendingRequirement>> {
                (**self).pending_requirements(filter).await
            }
            async fn delete_session(&self, id: &str) -> Result<()> {
                (**self).delete_session(id).await
            }
            async fn claim(
                &self,
                session: &str,
                tool_use_id: &str,
                fingerprint: &str,
                lease: Duration,
                allow_takeover: bool,
            ) -> Result<Claim> {
                (**self)
                    .claim(session, tool_use_id, fingerprint, lease, allow_takeover)
                    .await
            }
            async fn finish(&self, session: &str, tool_use_id: &str, result: &ToolResult) -> Result<()> {
                (**self).finish(session, tool_use_id, result).await
            }
            async fn ledger_entry(&self, session: &str, tool_use_id: &str) -> Result<Option<LedgerEntry>> {
                (**self).ledger_entry(session, tool_use_id).await
            }
            async fn try_lock_session(&self, session: &str, owner: &str, lease: Duration) -> Result<bool> {
                (**self).try_lock_session(session, owner, lease).await
            }
            async fn unlock_session(&self, session: &str, owner: &str) -> Result<()> {
                (**self).unlock_session(session, owner).await
            }
            async fn try_lock_session_reading_version(
                &self,
                session: &str,
                owner: &str,
                lease: Duration,
            ) -> Result<SessionLock> {
                (**self).try_lock_session_reading_version(session, owner, lease).await
            }
            fn commit_releases_lock(&self) -> bool {
                (**self).commit_releases_lock()
            }
            fn commit_takes_lock(&self) -> bool {
                (**self).commit_takes_lock()
            }
            async fn session_version(&self, id: &str) -> Result<Option<u64>> {
                (**self).session_version(id).await
            }
            async fn append_decisions(&self, session: &str, entries: Vec<DecisionEntry>) -> Result<()> {
                (**self).append_decisions(session, entries).await
            }
            async fn decisions(&self, session: &str) -> Result<Vec<DecisionEntry>> {
                (**self).decisions(session).await
            }
            fn record_evidence(&self, on: bool) {
                (**self).record_evidence(on)
            }
            fn records_evidence(&self) -> bool {
                (**self).records_evidence()
            }
            async fn evidence(&self, session: &str) -> Result<Vec<crate::evidence::ChainEntry>> {
                (**self).evidence(session).await
            }
            async fn append_evidence(&self, session: &str, seal: crate::evidence::Seal) -> Result<crate::evidence::ChainEntry> {
                (**self).append_evidence(session, seal).await
            }
            async fn request_interrupt(&self, session: &str) -> Result<bool> {
                (**self).request_interrupt(session).await
            }
            async fn interrupt_requests(&self, owner: &str) -> Result<Vec<String>> {
                (**self).interrupt_requests(owner).await
            }
            async fn changes(&self) -> Result<ChangeFeed> {
                (**self).changes().await
            }
            async fn interrupt_notices(&self) -> Result<ChangeFeed> {
                (**self).interrupt_notices().await
            }
            async fn create_grant(&self, grant: &Grant) -> Result<()> {
                (**self).create_grant(grant).await
            }
            async fn list_grants(&self, filter: &GrantFilter) -> Result<Vec<Grant>> {
                (**self).list_grants(filter).await
            }
            async fn grant(&self, id: &str) -> Result<Option<Grant>> {
                (**self).grant(id).await
            }
            async fn revoke_grant(&self, id: &str, by: Option<&str>, at: DateTime<Utc>) -> Result<Grant> {
                (**self).revoke_grant(id, by, at).await
            }
            fn record_notices(&self, on: bool) {
                (**self).record_notices(on)
            }
            fn records_notices(&self) -> bool {
                (**self).records_notices()
            }
            async fn append_notices(&self, notices: Vec<Notice>) -> Result<()> {
                (**self).append_notices(notices).await
            }
            async fn unrouted_notices(&self, limit: usize) -> Result<Vec<Notice>> {
                (**self).unrouted_notices(limit).await
            }
            async fn route_notice(&self, notice: &str, destinations: &[String]) -> Result<()> {
                (**self).route_notice(notice, destinations).await
            }
            async fn claim_deliveries(&self, owner: &str, limit: usize, lease: Duration) -> Result<Vec<Delivery>> {
                (**self).claim_deliveries(owner, limit, lease).await
            }
            async fn record_attempt(&self, delivery: &str, owner: &str, attempt: u32, outcome: AttemptOutcome) -> Result<bool> {
                (**self).record_attempt(delivery, owner, attempt, outcome).await
            }
            async fn deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>> {
                (**self).deliveries(filter).await
            }
            async fn delivery_attempts(&self, delivery: &str) -> Result<Vec<DeliveryAttempt>> {
                (**self).delivery_attempts(delivery).await
            }
            async fn redeliver(&self, delivery: &str) -> Result<Delivery> {
                (**self).redeliver(delivery).await
            }
            async fn put_subscription(&self, subscription: &Subscription) -> Result<()> {
                (**self).put_subscription(subscription).await
            }
            async fn subscriptions(&self, kind: &str) -> Result<Vec<Subscription>> {
                (**self).subscriptions(kind).await
            }
            async fn delete_subscription(&self, id: &str) -> Result<bool> {
                (**self).delete_subscription(id).await
            }
        }
    )*};
}

forward_store!(Arc<T>, Box<T>);

/// The longest lease any backend records (100 years); longer ones are cut to it.
pub(crate) const MAX_LEASE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `now + lease` (at most [`MAX_LEASE`]).
pub(crate) fn lease_end(now: DateTime<Utc>, lease: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(lease.min(MAX_LEASE))
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}
