//! [`PostgresStore`]: many workers on many machines.
//!
//! The steps are the shared ones of [`super::flow`], in the PostgreSQL [`DIALECT`]
//! below, run through sqlx ([`Pg`]). Each statement is a network round trip, so the
//! dialect folds what it can into one statement: the version check, the counters, the
//! run state and the change notice (`pg_notify`) are one `UPDATE ... RETURNING`; the
//! appended messages are one `INSERT ... UNNEST`.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use reins_message::ToolResult;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection as _, Row as _};

mod dialect;
mod exec;
mod listen;

use super::ChangeHub;
use super::flow::{self, Committed};
use super::is_unique_violation;
use crate::commit::Commit;
use crate::error::{Error, Result};
use crate::heads::SessionFilter;
use crate::pending::{PendingFilter, PendingRequirement};
use crate::store::{
    ChangeFeed, Claim, DecisionEntry, LedgerEntry, MemoryStore, SessionHead, SessionLock,
    SessionState, SessionSummary,
};
use dialect::{DIALECT, EVIDENCE, GRANTS, OUTBOX};
use exec::Pg;
use listen::{change_channel, listen_for_changes};

/// Migrations, in order: (version, SQL). Shipped in the crate.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("schema.sql")),
    (2, include_str!("schema_v2.sql")),
    (3, include_str!("schema_v3.sql")),
    (4, include_str!("schema_v4.sql")),
    (5, include_str!("schema_v5.sql")),
    (6, include_str!("schema_v6.sql")),
    (7, include_str!("schema_v7.sql")),
];

/// The newest schema version this build writes.
pub const POSTGRES_SCHEMA_VERSION: i64 = 7;

/// What the single-statement commit fails with when the run lock it takes is another
/// owner's: it casts this text to an integer, so that the failure undoes the whole
/// statement (plain SQL has no `RAISE`).
const LOCK_HELD: &str = "reins: the session run lock is held by another owner";

/// Options for [`PostgresStore::connect_with`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// The schema the tables live in (created if missing); `None` uses the
    /// connection's `search_path` (usually `public`). Letters, digits and `_` only.
    pub schema: Option<String>,
    /// The most connections the pool opens.
    pub max_connections: u32,
    /// How long to wait for a free connection.
    pub acquire_timeout: Duration,
    /// A pooled connection idle for longer than this is pinged before it is handed out
    /// (a connection closed by a server restart or a proxy is then replaced instead of
    /// failing the next statement). A connection used more recently is handed out
    /// without the extra round trip. `Duration::ZERO` pings every time (sqlx's
    /// default); `Duration::MAX` never pings.
    pub ping_when_idle_for: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            schema: None,
            max_connections: 10,
            acquire_timeout: Duration::from_secs(30),
            ping_when_idle_for: Duration::from_secs(1),
        }
    }
}

impl PostgresOptions {
    /// Puts the tables in `schema`.
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// Sets the pool size (at least 1).
    #[must_use]
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Sets how long a pooled connection may sit idle before it is pinged on its next
    /// use (see [`PostgresOptions::ping_when_idle_for`]).
    #[must_use]
    pub fn ping_when_idle_for(mut self, idle: Duration) -> Self {
        self.ping_when_idle_for = idle;
        self
    }
}

/// Sessions in PostgreSQL, for many stateless workers: any worker can resume any
/// session. Version checks take the session row's lock (`SELECT ... FOR UPDATE`), and
/// ledger claims and run locks are single conditional statements or row-locked
/// read-modify-writes, so concurrent workers never both win. Leases are measured by
/// the database's clock, so workers' clocks need not agree.
///
/// ```no_run
/// # async fn demo() -> reins_memory::Result<()> {
/// use reins_memory::{MemoryStore, PostgresStore};
/// let store = PostgresStore::connect("postgres://reins@db.internal/reins").await?;
/// let session = store.open_session("user-7/chat-1").await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    changes: std::sync::Arc<ChangeHub>,
    /// The LISTEN/NOTIFY channel of this store's schema.
    channel: String,
    /// Whether the outbox records the notices of changes.
    notices_on: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Whether decisions and ledger outcomes add to the evidence chain.
    evidence_on: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl PostgresStore {
    /// The chain's SQL when the store records evidence.
    fn evidence_sql(&self) -> Option<&'static flow::EvidenceSql> {
        self.records_evidence().then_some(&EVIDENCE)
    }

    /// Connects with default options and brings the schema up to date.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects with `options` and brings the schema up to date.
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Self> {
        let mut connect = PgConnectOptions::from_str(url)?;
        if let Some(schema) = &options.schema {
            if schema.is_empty()
                || !schema
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return Err(Error::Database(format!(
                    "schema name `{schema}` must be ASCII letters, digits and underscores"
                )));
            }
            connect = connect.options([("search_path", schema.as_str())]);
        }
        let ping_after = options.ping_when_idle_for;
        // sqlx pings every connection before handing it out by default: one more
        // round trip per store call, a third of an agent turn's. Only connections idle
        // for a while are checked here; one in steady use has just proved itself.
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(options.acquire_timeout)
            .test_before_acquire(false)
            .before_acquire(move |conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= ping_after {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(connect)
            .await?;
        if let Some(schema) = &options.schema {
            // Racing workers may both try to create it; the loser sees a unique
            // violation on the catalog, which means it exists.
            let created = sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
                .execute(&pool)
                .await;
            if let Err(e) = created {
                if !is_unique_violation(&e) {
                    return Err(e.into());
                }
            }
        }
        let channel = change_channel(options.schema.as_deref());
        let store = Self {
            pool,
            changes: ChangeHub::new(),
            channel,
            notices_on: std::sync::Arc::default(),
            evidence_on: std::sync::Arc::default(),
        };
        store.migrate().await?;
        Ok(store)
    }

    /// The connection pool, for inspection and maintenance.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema version the database is at.
    pub async fn schema_version(&self) -> Result<i64> {
        let mut conn = self.pool.acquire().await?;
        flow::schema_version(&mut Pg(&mut conn), &DIALECT).await
    }

    /// Brings the schema up to date; the advisory lock serializes racing workers.
    async fn migrate(&self) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        flow::migrate(
            &mut Pg(&mut tx),
            &DIALECT,
            MIGRATIONS,
            POSTGRES_SCHEMA_VERSION,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A session as stored, in one statement ([`LOAD`]): one round trip, and one
    /// snapshot for the row, its messages and its requirements without a transaction
    /// (three statements in a read-only transaction took six).
    async fn load(&self, id: &str) -> Result<Option<SessionState>> {
        let rows = sqlx::query(LOAD).bind(id).fetch_all(&self.pool).await?;
        let mut rows = rows.iter();
        let part = |r: &PgRow| r.try_get::<i16, _>(0);
        let Some(head) = rows.next() else {
            return Ok(None);
        };
        if part(head)? != 0 {
            // Messages or requirements without their session row: not a session.
            return Ok(None);
        }
        let (mut messages, mut requirements) = (Vec::new(), Vec::new());
        for r in rows {
            let (seq, item, body): (i64, String, String) =
                (r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
            if part(r)? == 1 {
                messages.push(super::decode_message(id, seq, &item, &body)?);
            } else {
                requirements.push(super::decode_requirement(id, &item, &body)?);
            }
        }
        Ok(Some(SessionState {
            id: id.to_owned(),
            version: super::to_u64(head.try_get(1)?),
            messages,
            requirements,
            run_state: super::decode_run_state(
                id,
                head.try_get::<Option<String>, _>(3)?.as_deref(),
            )?,
            created_at: head.try_get(4)?,
            updated_at: head.try_get(5)?,
        }))
    }

    async fn subscribe_changes(&self, interrupts_only: bool) -> Result<ChangeFeed> {
        let pool = self.pool.clone();
        let channel = self.channel.clone();
        self.changes
            .subscribe(interrupts_only, |feeds| async move {
                let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await?;
                listener.listen(&channel).await?;
                Ok(Some(tokio::spawn(listen_for_changes(listener, feeds))))
            })
            .await
    }
}

/// The session row (part 0: its version and run state), then its messages (part 1)
/// and its requirements (part 2), each in stored order: what `flow::load` reads in
/// three statements, as one.
const LOAD: &str = "\
    SELECT 0::int2 AS part, version AS n, ''::text AS item, run_state::text AS body, created_at, updated_at \
      FROM reins_sessions WHERE id = $1 \
    UNION ALL \
    SELECT 1::int2, seq, id, body::text, NULL, NULL FROM reins_messages WHERE session_id = $1 \
    UNION ALL \
    SELECT 2::int2, seq, id, body::text, NULL, NULL FROM reins_requirements WHERE session_id = $1 \
    ORDER BY part, n";

#[async_trait]
impl MemoryStore for PostgresStore {
    async fn open_session(&self, id: &str) -> Result<SessionState> {
        if let Some(s) = self.load(id).await? {
            return Ok(s);
        }
        let mut conn = self.pool.acquire().await?;
        flow::create_session(&mut Pg(&mut conn), &DIALECT, id).await?;
        drop(conn);
        self.load(id)
            .await?
            .ok_or_else(|| Error::SessionNotFound { id: id.to_owned() })
    }

    async fn load_session(&self, id: &str) -> Result<SessionState> {
        self.load(id)
            .await?
            .ok_or_else(|| Error::SessionNotFound { id: id.to_owned() })
    }

    async fn commit(&self, id: &str, mut commit: Commit) -> Result<u64> {
        if !self.records_notices() {
            commit.notices.clear();
        }
        if flow::appends_only(&DIALECT, &commit) {
            // An agent's turn: one statement, no transaction round trips.
            let mut conn = self.pool.acquire().await?;
            let done =
                flow::commit_appending(&mut Pg(&mut conn), &DIALECT, id, commit, &self.channel)
                    .await
                    .map_err(|e| match e {
                        // The statement failed on purpose, undoing everything it did.
                        Error::Database(m) if m.contains(LOCK_HELD) => Error::SessionLocked {
                            session: id.to_owned(),
                        },
                        e => e,
                    })?;
            return Ok(match done {
                Committed::Unchanged(v) | Committed::Changed(v) => v,
            });
        }
        let releases = commit.release_lock.is_some()
            || commit.acquire_lock.is_some()
            || !commit.notices.is_empty();
        let mut tx = self.pool.begin().await?;
        let done = flow::commit(
            &mut Pg(&mut tx),
            &DIALECT,
            id,
            commit,
            &self.channel,
            &OUTBOX,
            self.evidence_sql(),
        )
        .await?;
        match done {
            Committed::Unchanged(v) if releases => {
                tx.commit().await?;
                Ok(v)
            }
            // Nothing written: nothing to commit.
            Committed::Unchanged(v) => Ok(v),
            Committed::Changed(v) => {
                tx.commit().await?;
                Ok(v)
            }
        }
    }

    async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
        let mut conn = self.pool.acquire().await?;
        flow::list_sessions(&mut Pg(&mut conn), &DIALECT).await
    }

    async fn session_heads(&self, ids: &[String]) -> Result<Vec<SessionHead>> {
        let mut conn = self.pool.acquire().await?;
        flow::session_heads(&mut Pg(&mut conn), &DIALECT, ids).await
    }

    async fn session_heads_page(&self, filter: &SessionFilter) -> Result<Vec<SessionHead>> {
        let mut conn = self.pool.acquire().await?;
        flow::session_heads_page(&mut Pg(&mut conn), &DIALECT, filter).await
    }

    async fn pending_requirements(
        &self,
        filter: &PendingFilter,
    ) -> Result<Vec<PendingRequirement>> {
        if filter.tools.as_ref().is_some_and(|t| t.len() > 1) {
            // One snapshot for the per-tool walks.
            let mut tx = self.pool.begin().await?;
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                .execute(&mut *tx)
                .await?;
            let rows = flow::pending_requirements(&mut Pg(&mut tx), &DIALECT, filter).await?;
            tx.commit().await?;
            return Ok(rows);
        }
        let mut conn = self.pool.acquire().await?;
        flow::pending_requirements(&mut Pg(&mut conn), &DIALECT, filter).await
    }

    async fn list_session_heads(&self) -> Result<Vec<SessionHead>> {
        // One snapshot for both queries.
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let heads = flow::list_session_heads(&mut Pg(&mut tx), &DIALECT).await?;
        tx.commit().await?;
        Ok(heads)
    }

    async fn delete_session(&self, id: &str) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        flow::delete_session(&mut Pg(&mut tx), &DIALECT, id).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn claim(
        &self,
        session: &str,
        tool_use_id: &str,
        fingerprint: &str,
        lease: Duration,
        allow_takeover: bool,
    ) -> Result<Claim> {
        // The entry may be deleted between the insert and the locked read: try again.
        for _ in 0..3 {
            let mut tx = self.pool.begin().await?;
            let claim = flow::claim(
                &mut Pg(&mut tx),
                &DIALECT,
                session,
                tool_use_id,
                fingerprint,
                lease,
                allow_takeover,
                self.evidence_sql(),
            )
            .await?;
            if let Some(claim) = claim {
                tx.commit().await?;
                return Ok(claim);
            }
        }
        Err(Error::Database(format!(
            "ledger entry `{tool_use_id}` of session `{session}` kept changing while being claimed"
        )))
    }

    async fn finish(&self, session: &str, tool_use_id: &str, result: &ToolResult) -> Result<()> {
        if let Some(ev) = self.evidence_sql() {
            // The result and its chain entry in one transaction.
            let mut tx = self.pool.begin().await?;
            let args = (session, tool_use_id, result);
            flow::finish(&mut Pg(&mut tx), &DIALECT, args.0, args.1, args.2, Some(ev)).await?;
            tx.commit().await?;
            return Ok(());
        }
        let mut conn = self.pool.acquire().await?;
        flow::finish(
            &mut Pg(&mut conn),
            &DIALECT,
            session,
            tool_use_id,
            result,
            None,
        )
        .await
    }

    async fn ledger_entry(&self, session: &str, tool_use_id: &str) -> Result<Option<LedgerEntry>> {
        let mut conn = self.pool.acquire().await?;
        flow::ledger_entry(&mut Pg(&mut conn), &DIALECT, session, tool_use_id).await
    }

    async fn try_lock_session(&self, session: &str, owner: &str, lease: Duration) -> Result<bool> {
        let mut conn = self.pool.acquire().await?;
        flow::try_lock(&mut Pg(&mut conn), &DIALECT, session, owner, lease).await
    }

    async fn try_lock_session_reading_version(
        &self,
        session: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<SessionLock> {
        let mut conn = self.pool.acquire().await?;
        flow::try_lock_reading_version(&mut Pg(&mut conn), &DIALECT, session, owner, lease).await
    }

    fn commit_releases_lock(&self) -> bool {
        true
    }

    fn commit_takes_lock(&self) -> bool {
        true
    }

    async fn unlock_session(&self, session: &str, owner: &str) -> Result<()> {
        let mut conn = self.pool.acquire().await?;
        flow::unlock(&mut Pg(&mut conn), &DIALECT, session, owner).await
    }

    async fn session_version(&self, id: &str) -> Result<Option<u64>> {
        let mut conn = self.pool.acquire().await?;
        flow::session_version(&mut Pg(&mut conn), &DIALECT, id).await
    }

    async fn append_decisions(&self, session: &str, entries: Vec<DecisionEntry>) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let ev = self.evidence_sql();
        flow::append_decisions(&mut Pg(&mut tx), &DIALECT, session, &entries, ev).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn decisions(&self, session: &str) -> Result<Vec<DecisionEntry>> {
        let mut conn = self.pool.acquire().await?;
        flow::decisions(&mut Pg(&mut conn), &DIALECT, session).await
    }

    async fn request_interrupt(&self, session: &str) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let flagged = flow::request_interrupt(&mut Pg(&mut tx), &DIALECT, session).await?;
        if flagged {
            // Delivered when the transaction commits.
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(&self.channel)
                .bind(flow::notice_payload(session, true))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(flagged)
    }

    async fn interrupt_requests(&self, owner: &str) -> Result<Vec<String>> {
        let mut conn = self.pool.acquire().await?;
        flow::interrupt_requests(&mut Pg(&mut conn), &DIALECT, owner).await
    }

    async fn changes(&self) -> Result<ChangeFeed> {
        self.subscribe_changes(false).await
    }

    async fn interrupt_notices(&self) -> Result<ChangeFeed> {
        self.subscribe_changes(true).await
    }

    async fn create_grant(&self, grant: &crate::grant::Grant) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        flow::create_grant(&mut Pg(&mut tx), &GRANTS, grant).await?;
        if self.records_notices() {
            let n = crate::Notice::grant_created(grant);
            flow::insert_notices(&mut Pg(&mut tx), &OUTBOX, &[n]).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn list_grants(
        &self,
        filter: &crate::grant::GrantFilter,
    ) -> Result<Vec<crate::grant::Grant>> {
        let mut conn = self.pool.acquire().await?;
        flow::list_grants(&mut Pg(&mut conn), &GRANTS, filter).await
    }

    async fn grant(&self, id: &str) -> Result<Option<crate::grant::Grant>> {
        let mut conn = self.pool.acquire().await?;
        flow::grant(&mut Pg(&mut conn), &GRANTS, id).await
    }

    async fn revoke_grant(
        &self,
        id: &str,
        by: Option<&str>,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<crate::grant::Grant> {
        let mut tx = self.pool.begin().await?;
        let g = flow::revoke_grant(&mut Pg(&mut tx), &GRANTS, id, by, at).await?;
        if self.records_notices() {
            let n = crate::Notice::grant_revoked(&g);
            flow::insert_notices(&mut Pg(&mut tx), &OUTBOX, &[n]).await?;
        }
        tx.commit().await?;
        Ok(g)
    }

    fn record_notices(&self, on: bool) {
        self.notices_on
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    fn records_notices(&self) -> bool {
        self.notices_on.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn record_evidence(&self, on: bool) {
        self.evidence_on
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    fn records_evidence(&self) -> bool {
        self.evidence_on.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn evidence(&self, session: &str) -> Result<Vec<crate::evidence::ChainEntry>> {
        let mut conn = self.pool.acquire().await?;
        flow::chain(&mut Pg(&mut conn), &EVIDENCE, session).await
    }

    async fn append_evidence(
        &self,
        session: &str,
        seal: crate::evidence::Seal,
    ) -> Result<crate::evidence::ChainEntry> {
        let mut tx = self.pool.begin().await?;
        if flow::session_version(&mut Pg(&mut tx), &DIALECT, session)
            .await?
            .is_none()
        {
            return Err(Error::SessionNotFound {
                id: session.to_owned(),
            });
        }
        let entry = flow::append_sealed(&mut Pg(&mut tx), &EVIDENCE, session, seal).await?;
        tx.commit().await?;
        Ok(entry)
    }

    async fn append_notices(&self, notices: Vec<crate::Notice>) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        flow::insert_notices(&mut Pg(&mut tx), &OUTBOX, &notices).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn unrouted_notices(&self, limit: usize) -> Result<Vec<crate::Notice>> {
        let mut conn = self.pool.acquire().await?;
        flow::unrouted(&mut Pg(&mut conn), &OUTBOX, limit).await
    }

    async fn route_notice(&self, notice: &str, destinations: &[String]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        flow::route(&mut Pg(&mut tx), &OUTBOX, notice, destinations).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn claim_deliveries(
        &self,
        owner: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<crate::Delivery>> {
        // One statement: `FOR UPDATE SKIP LOCKED` keeps racing instances apart.
        let mut conn = self.pool.acquire().await?;
        flow::claim_deliveries(&mut Pg(&mut conn), &OUTBOX, owner, limit, lease).await
    }

    async fn record_attempt(
        &self,
        delivery: &str,
        owner: &str,
        attempt: u32,
        outcome: crate::AttemptOutcome,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let done =
            flow::record_attempt(&mut Pg(&mut tx), &OUTBOX, delivery, owner, attempt, outcome)
                .await?;
        tx.commit().await?;
        Ok(done)
    }

    async fn deliveries(&self, filter: &crate::DeliveryFilter) -> Result<Vec<crate::Delivery>> {
        let mut conn = self.pool.acquire().await?;
        flow::list_deliveries(&mut Pg(&mut conn), &OUTBOX, filter).await
    }

    async fn delivery_attempts(&self, delivery: &str) -> Result<Vec<crate::DeliveryAttempt>> {
        let mut conn = self.pool.acquire().await?;
        flow::delivery_attempts(&mut Pg(&mut conn), &OUTBOX, delivery).await
    }

    async fn put_subscription(&self, subscription: &crate::Subscription) -> Result<()> {
        let mut conn = self.pool.acquire().await?;
        flow::put_subscription(&mut Pg(&mut conn), &OUTBOX, subscription).await
    }

    async fn subscriptions(&self, kind: &str) -> Result<Vec<crate::Subscription>> {
        let mut conn = self.pool.acquire().await?;
        flow::subscriptions(&mut Pg(&mut conn), &OUTBOX, kind).await
    }

    async fn delete_subscription(&self, id: &str) -> Result<bool> {
        let mut conn = self.pool.acquire().await?;
        flow::delete_subscription(&mut Pg(&mut conn), &OUTBOX, id).await
    }

    async fn redeliver(&self, delivery: &str) -> Result<crate::Delivery> {
        let mut tx = self.pool.begin().await?;
        let d = flow::redeliver(&mut Pg(&mut tx), &OUTBOX, delivery, chrono::Utc::now()).await?;
        tx.commit().await?;
        Ok(d)
    }
}
