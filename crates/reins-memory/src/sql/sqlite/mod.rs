//! [`SqliteStore`]: the embedded store.
//!
//! The steps are the shared ones of [`super::flow`], in the SQLite [`DIALECT`] below.
//! They run with rusqlite on the store's own connections ([`conn`]) rather than
//! through sqlx: sqlx hands every SQLite statement to a worker thread and back, and at
//! ~15 statements per agent turn those round trips cost more than SQLite's work. A
//! store operation here runs all of its statements (prepared once, cached) in one go:
//! on the caller's thread when that cannot make it wait (see [`conn::Threads`]),
//! otherwise as one hop to a connection thread.

mod checkpoint;
mod conn;
mod dialect;
mod options;
mod poll;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reins_message::ToolResult;

use super::ChangeHub;
use super::flow::{self, Committed, run_ready};
use crate::commit::Commit;
use crate::error::{Error, Result};
use crate::heads::SessionFilter;
use crate::pending::{PendingFilter, PendingRequirement};
use crate::store::{
    ChangeFeed, Claim, DecisionEntry, LedgerEntry, MemoryStore, SessionHead, SessionLock,
    SessionState, SessionSummary,
};
use conn::{Conns, On, Target, Threads};
use dialect::{DIALECT, EVIDENCE, GRANTS, OUTBOX};
pub use options::{Durability, SqliteOptions};
use poll::{data_version, poll_data_version};

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
pub const SQLITE_SCHEMA_VERSION: i64 = 7;

/// Sessions in a SQLite database (bundled SQLite; no system library needed).
///
/// WAL mode, one `BEGIN IMMEDIATE` transaction per commit (so writers from several
/// processes serialize instead of failing), messages as append-only rows, the schema
/// as migrations in the crate. A database written by a newer reins is refused with
/// [`Error::UnsupportedSchema`]. Cloning gives another handle to the same connections.
///
/// Each store keeps its own connections, each with a thread (see
/// [`SqliteOptions::max_connections`]). An operation that does not have to wait (a
/// read; a write whose lock is free and whose commit needs no fsync) runs on the
/// caller's thread; anything else is one hop to a connection thread and back,
/// whatever the number of statements it runs. A `Durability::Full` commit runs on the
/// caller's thread only under tokio's multi-thread runtime, inside `block_in_place`.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use reins_memory::{Commit, MemoryStore, SqliteStore};
/// use reins_message::Msg;
///
/// let store = SqliteStore::in_memory().await?; // or SqliteStore::open("sessions.db")
/// let s = store.open_session("chat-1").await?;
/// store.commit("chat-1", Commit::at(s.version).append(Msg::user("hi"))).await?;
/// assert_eq!(store.load_session("chat-1").await?.messages[0].text(), "hi");
/// # Ok::<(), reins_memory::Error>(()) }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// The connection threads. At [`Durability::Full`] the session run locks go to
    /// each thread's second connection, at `synchronous = OFF`: a lock row lost in a
    /// crash only expires (its lease ends), so it needs no fsync. Messages and the
    /// ledger keep the configured [`Durability`]. At `Normal` and in memory one
    /// connection serves both.
    threads: Arc<Threads>,
    /// The change feed; `poll` is how the listener connects (`None` in memory, where
    /// every writer goes through this store).
    changes: Arc<ChangeHub>,
    poll: Option<(PathBuf, Duration)>,
    /// Whether the outbox records the notices of changes.
    notices_on: Arc<std::sync::atomic::AtomicBool>,
    /// Whether decisions and ledger outcomes add to the evidence chain.
    evidence_on: Arc<std::sync::atomic::AtomicBool>,
    /// The WAL's checkpoint thread (see [`SqliteOptions::background_checkpoints`]),
    /// stopped when the last clone is dropped.
    _checkpoints: Option<Arc<checkpoint::Checkpointer>>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` with default options. The
    /// path `:memory:` gives [`SqliteStore::in_memory`].
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Opens the database at `path` with `options`.
    pub async fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self> {
        let path = path.as_ref().to_owned();
        if path.as_os_str() == ":memory:" {
            return Self::in_memory().await;
        }
        let synchronous = match options.durability {
            Durability::Normal => "NORMAL",
            Durability::Full => "FULL",
        };
        let (timeout, create) = (options.busy_timeout, options.create_if_missing);
        // Migrate on a first connection: the threads' lock connections expect the
        // tables.
        let first = path.clone();
        tokio::task::spawn_blocking(move || -> Result<()> {
            let c = conn::open(&first, create, synchronous, timeout)?;
            conn::write(&c, |on| {
                run_ready(flow::migrate(
                    on,
                    &DIALECT,
                    MIGRATIONS,
                    SQLITE_SCHEMA_VERSION,
                ))
            })
        })
        .await
        .map_err(|e| Error::Database(format!("opening the SQLite database failed: {e}")))??;
        let at = path.clone();
        // A commit at `Durability::Full` fsyncs; run locks need no fsync, so they get a
        // connection of their own at `synchronous = OFF`. At `Normal` no commit waits
        // for the disk and one connection serves both: its page cache stays warm
        // (another connection's write makes SQLite reread the pages it touched).
        let full = options.durability == Durability::Full;
        let background = options.background_checkpoints;
        let open = move |synchronous: &str| -> Result<rusqlite::Connection> {
            let c = conn::open(&at, false, synchronous, timeout)?;
            if background {
                c.pragma_update(None, "wal_autocheckpoint", checkpoint::BACKSTOP_PAGES)?;
            }
            Ok(c)
        };
        let threads = Threads::start(
            options.max_connections as usize,
            timeout,
            !full,
            move || {
                Ok(Conns {
                    main: open(synchronous)?,
                    locks: if full { Some(open("OFF")?) } else { None },
                })
            },
        )?;
        let checkpoints = if background {
            Some(Arc::new(checkpoint::Checkpointer::start(
                &path,
                synchronous,
                timeout,
            )?))
        } else {
            None
        };
        Ok(Self {
            threads,
            changes: ChangeHub::new(),
            poll: Some((path, options.change_poll_interval)),
            notices_on: Arc::default(),
            evidence_on: Arc::default(),
            _checkpoints: checkpoints,
        })
    }

    /// A private database in memory, gone when the store (every clone) is dropped.
    pub async fn in_memory() -> Result<Self> {
        // One connection (so one thread): each in-memory connection is its own
        // database.
        let threads = Threads::start(1, Duration::ZERO, true, || {
            let main = rusqlite::Connection::open_in_memory()?;
            main.pragma_update(None, "journal_mode", "MEMORY")?;
            main.set_prepared_statement_cache_capacity(64);
            Ok(Conns { main, locks: None })
        })?;
        let store = Self {
            threads,
            changes: ChangeHub::new(),
            poll: None,
            notices_on: Arc::default(),
            evidence_on: Arc::default(),
            _checkpoints: None,
        };
        store
            .write(|on| {
                run_ready(flow::migrate(
                    on,
                    &DIALECT,
                    MIGRATIONS,
                    SQLITE_SCHEMA_VERSION,
                ))
            })
            .await?;
        Ok(store)
    }

    /// Runs `f` on one of the store's connections (at the configured durability), on
    /// its connection thread: for inspection and maintenance.
    pub async fn with_connection<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.threads
            .call(move |c| f(&c.main).map_err(Error::from))
            .await
    }

    /// Closes the store's connections (every clone's) once the operations under way
    /// finished; later operations fail.
    pub async fn close(&self) {
        self.threads.close().await;
    }

    /// The schema version the database is at.
    pub async fn schema_version(&self) -> Result<i64> {
        self.read(|on| run_ready(flow::schema_version(on, &DIALECT)))
            .await
    }

    /// Runs `f` in a write transaction on the main connection.
    async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut On<'_>) -> Result<T> + Send + 'static,
    {
        self.threads.write(Target::Main, f).await
    }

    /// Runs `f` in a read transaction on the main connection.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut On<'_>) -> Result<T> + Send + 'static,
    {
        self.threads.read(Target::Main, f).await
    }

    /// Runs `f` in a write transaction on the run locks' connection.
    async fn on_locks<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut On<'_>) -> Result<T> + Send + 'static,
    {
        self.threads.write(Target::Locks, f).await
    }

    async fn subscribe_changes(&self, interrupts_only: bool) -> Result<ChangeFeed> {
        let poll = self.poll.clone();
        self.changes
            .subscribe(interrupts_only, |feeds| async move {
                let Some((path, every)) = poll else {
                    return Ok(None);
                };
                let conn = conn::open(&path, false, "NORMAL", Duration::from_secs(1))?;
                // The baseline is read before the subscriber gets its feed, so a write
                // made right after `changes()` returns is announced, never absorbed.
                let baseline = data_version(&conn)?;
                Ok(Some(tokio::spawn(poll_data_version(
                    conn, baseline, every, feeds,
                ))))
            })
            .await
    }
}

fn owned(s: &str) -> String {
    s.to_owned()
}

impl SqliteStore {
    /// The chain's SQL when the store records evidence.
    fn evidence_sql(&self) -> Option<&'static flow::EvidenceSql> {
        self.records_evidence().then_some(&EVIDENCE)
    }

    /// `f()` when the outbox records notices, else nothing.
    fn notices_on(&self, f: impl FnOnce() -> Vec<crate::Notice>) -> Vec<crate::Notice> {
        if self.records_notices() {
            f()
        } else {
            Vec::new()
        }
    }
}

#[async_trait]
impl MemoryStore for SqliteStore {
    async fn open_session(&self, id: &str) -> Result<SessionState> {
        let id = owned(id);
        self.write(move |on| {
            run_ready(async {
                if let Some(s) = flow::load(on, &DIALECT, &id).await? {
                    return Ok(s);
                }
                flow::create_session(on, &DIALECT, &id).await?;
                flow::load(on, &DIALECT, &id)
                    .await?
                    .ok_or_else(|| Error::SessionNotFound { id: id.clone() })
            })
        })
        .await
    }

    async fn load_session(&self, id: &str) -> Result<SessionState> {
        let id = owned(id);
        self.read(move |on| {
            run_ready(flow::load(on, &DIALECT, &id))?
                .ok_or_else(|| Error::SessionNotFound { id: id.clone() })
        })
        .await
    }

    async fn commit(&self, id: &str, commit: Commit) -> Result<u64> {
        let session = owned(id);
        let mut commit = commit;
        if !self.records_notices() {
            commit.notices.clear();
        }
        let ev = self.evidence_sql();
        let done = self
            .write(move |on| {
                run_ready(flow::commit(
                    on, &DIALECT, &session, commit, "", &OUTBOX, ev,
                ))
            })
            .await?;
        Ok(match done {
            Committed::Unchanged(v) => v,
            Committed::Changed(v) => {
                self.changes.notify(Some(id), false);
                v
            }
        })
    }

    async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
        self.read(|on| run_ready(flow::list_sessions(on, &DIALECT)))
            .await
    }

    async fn list_session_heads(&self) -> Result<Vec<SessionHead>> {
        self.read(|on| run_ready(flow::list_session_heads(on, &DIALECT)))
            .await
    }

    async fn session_heads(&self, ids: &[String]) -> Result<Vec<SessionHead>> {
        let ids = ids.to_vec();
        self.read(move |on| run_ready(flow::session_heads(on, &DIALECT, &ids)))
            .await
    }

    async fn session_heads_page(&self, filter: &SessionFilter) -> Result<Vec<SessionHead>> {
        let filter = filter.clone();
        self.read(move |on| run_ready(flow::session_heads_page(on, &DIALECT, &filter)))
            .await
    }

    async fn pending_requirements(
        &self,
        filter: &PendingFilter,
    ) -> Result<Vec<PendingRequirement>> {
        let filter = filter.clone();
        self.read(move |on| run_ready(flow::pending_requirements(on, &DIALECT, &filter)))
            .await
    }

    async fn delete_session(&self, id: &str) -> Result<()> {
        let id = owned(id);
        self.write(move |on| run_ready(flow::delete_session(on, &DIALECT, &id)))
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
        let (s, t, f) = (owned(session), owned(tool_use_id), owned(fingerprint));
        let ev = self.evidence_sql();
        // `BEGIN IMMEDIATE` takes the write lock first: the read and the write are one
        // atomic step, across processes too, so the entry never vanishes in between.
        let claim = self
            .write(move |on| {
                run_ready(flow::claim(
                    on,
                    &DIALECT,
                    &s,
                    &t,
                    &f,
                    lease,
                    allow_takeover,
                    ev,
                ))
            })
            .await?;
        claim.ok_or_else(|| {
            Error::Database(format!(
                "ledger entry `{tool_use_id}` of session `{session}` vanished while being claimed"
            ))
        })
    }

    async fn finish(&self, session: &str, tool_use_id: &str, result: &ToolResult) -> Result<()> {
        let (s, t, r) = (owned(session), owned(tool_use_id), result.clone());
        let ev = self.evidence_sql();
        self.write(move |on| run_ready(flow::finish(on, &DIALECT, &s, &t, &r, ev)))
            .await
    }

    async fn ledger_entry(&self, session: &str, tool_use_id: &str) -> Result<Option<LedgerEntry>> {
        let (s, t) = (owned(session), owned(tool_use_id));
        self.read(move |on| run_ready(flow::ledger_entry(on, &DIALECT, &s, &t)))
            .await
    }

    async fn try_lock_session(&self, session: &str, owner: &str, lease: Duration) -> Result<bool> {
        let (s, o) = (owned(session), owned(owner));
        self.on_locks(move |on| run_ready(flow::try_lock(on, &DIALECT, &s, &o, lease)))
            .await
    }

    async fn try_lock_session_reading_version(
        &self,
        session: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<SessionLock> {
        let (s, o) = (owned(session), owned(owner));
        self.on_locks(move |on| {
            run_ready(flow::try_lock_reading_version(on, &DIALECT, &s, &o, lease))
        })
        .await
    }

    fn commit_releases_lock(&self) -> bool {
        true
    }

    fn commit_takes_lock(&self) -> bool {
        true
    }

    async fn unlock_session(&self, session: &str, owner: &str) -> Result<()> {
        let (s, o) = (owned(session), owned(owner));
        self.on_locks(move |on| run_ready(flow::unlock(on, &DIALECT, &s, &o)))
            .await
    }

    async fn session_version(&self, id: &str) -> Result<Option<u64>> {
        let id = owned(id);
        self.read(move |on| run_ready(flow::session_version(on, &DIALECT, &id)))
            .await
    }

    async fn append_decisions(&self, session: &str, entries: Vec<DecisionEntry>) -> Result<()> {
        let s = owned(session);
        let ev = self.evidence_sql();
        self.write(move |on| run_ready(flow::append_decisions(on, &DIALECT, &s, &entries, ev)))
            .await
    }

    async fn decisions(&self, session: &str) -> Result<Vec<DecisionEntry>> {
        let s = owned(session);
        self.read(move |on| run_ready(flow::decisions(on, &DIALECT, &s)))
            .await
    }

    async fn request_interrupt(&self, session: &str) -> Result<bool> {
        let s = owned(session);
        let flagged = self
            .on_locks(move |on| run_ready(flow::request_interrupt(on, &DIALECT, &s)))
            .await?;
        if flagged {
            self.changes.notify(Some(session), true);
        }
        Ok(flagged)
    }

    async fn interrupt_requests(&self, owner: &str) -> Result<Vec<String>> {
        let o = owned(owner);
        self.threads
            .read(Target::Locks, move |on| {
                run_ready(flow::interrupt_requests(on, &DIALECT, &o))
            })
            .await
    }

    async fn changes(&self) -> Result<ChangeFeed> {
        self.subscribe_changes(false).await
    }

    async fn interrupt_notices(&self) -> Result<ChangeFeed> {
        self.subscribe_changes(true).await
    }

    async fn create_grant(&self, grant: &crate::grant::Grant) -> Result<()> {
        let g = grant.clone();
        let notices = self.notices_on(|| vec![crate::Notice::grant_created(grant)]);
        self.write(move |on| {
            run_ready(async {
                flow::create_grant(on, &GRANTS, &g).await?;
                flow::insert_notices(on, &OUTBOX, &notices).await
            })
        })
        .await
    }

    async fn list_grants(
        &self,
        filter: &crate::grant::GrantFilter,
    ) -> Result<Vec<crate::grant::Grant>> {
        let f = filter.clone();
        self.read(move |on| run_ready(flow::list_grants(on, &GRANTS, &f)))
            .await
    }

    async fn grant(&self, id: &str) -> Result<Option<crate::grant::Grant>> {
        let id = owned(id);
        self.read(move |on| run_ready(flow::grant(on, &GRANTS, &id)))
            .await
    }

    async fn revoke_grant(
        &self,
        id: &str,
        by: Option<&str>,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<crate::grant::Grant> {
        let (id, by) = (owned(id), by.map(owned));
        let record = self.records_notices();
        self.write(move |on| {
            run_ready(async {
                let g = flow::revoke_grant(on, &GRANTS, &id, by.as_deref(), at).await?;
                if record {
                    flow::insert_notices(on, &OUTBOX, &[crate::Notice::grant_revoked(&g)]).await?;
                }
                Ok(g)
            })
        })
        .await
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
        let s = owned(session);
        self.read(move |on| run_ready(flow::chain(on, &EVIDENCE, &s)))
            .await
    }

    async fn append_evidence(
        &self,
        session: &str,
        seal: crate::evidence::Seal,
    ) -> Result<crate::evidence::ChainEntry> {
        let s = owned(session);
        // On the run locks' connection (`synchronous = OFF`): a receipt needs no fsync of
        // its own. It follows the change it attests, which is durable already; the next
        // durable commit makes it durable too, and a crash before that loses only the
        // receipt, leaving a chain that verifies (docs/evidence.md). At
        // `Durability::Full` this saves a receipt its own fsync (docs/evidence.md, Cost).
        self.on_locks(move |on| {
            if run_ready(flow::session_version(on, &DIALECT, &s))?.is_none() {
                return Err(Error::SessionNotFound { id: s.clone() });
            }
            run_ready(flow::append_sealed(on, &EVIDENCE, &s, seal))
        })
        .await
    }

    async fn append_notices(&self, notices: Vec<crate::Notice>) -> Result<()> {
        self.write(move |on| run_ready(flow::insert_notices(on, &OUTBOX, &notices)))
            .await?;
        self.changes.notify(None, false);
        Ok(())
    }

    async fn unrouted_notices(&self, limit: usize) -> Result<Vec<crate::Notice>> {
        self.read(move |on| run_ready(flow::unrouted(on, &OUTBOX, limit)))
            .await
    }

    async fn route_notice(&self, notice: &str, destinations: &[String]) -> Result<()> {
        let (notice, to) = (owned(notice), destinations.to_vec());
        self.write(move |on| run_ready(flow::route(on, &OUTBOX, &notice, &to)))
            .await
    }

    async fn claim_deliveries(
        &self,
        owner: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<crate::Delivery>> {
        let owner = owned(owner);
        self.write(move |on| run_ready(flow::claim_deliveries(on, &OUTBOX, &owner, limit, lease)))
            .await
    }

    async fn record_attempt(
        &self,
        delivery: &str,
        owner: &str,
        attempt: u32,
        outcome: crate::AttemptOutcome,
    ) -> Result<bool> {
        let (delivery, owner) = (owned(delivery), owned(owner));
        self.write(move |on| {
            run_ready(flow::record_attempt(
                on, &OUTBOX, &delivery, &owner, attempt, outcome,
            ))
        })
        .await
    }

    async fn deliveries(&self, filter: &crate::DeliveryFilter) -> Result<Vec<crate::Delivery>> {
        let f = filter.clone();
        self.read(move |on| run_ready(flow::list_deliveries(on, &OUTBOX, &f)))
            .await
    }

    async fn delivery_attempts(&self, delivery: &str) -> Result<Vec<crate::DeliveryAttempt>> {
        let delivery = owned(delivery);
        self.read(move |on| run_ready(flow::delivery_attempts(on, &OUTBOX, &delivery)))
            .await
    }

    async fn put_subscription(&self, subscription: &crate::Subscription) -> Result<()> {
        let sub = subscription.clone();
        self.write(move |on| run_ready(flow::put_subscription(on, &OUTBOX, &sub)))
            .await
    }

    async fn subscriptions(&self, kind: &str) -> Result<Vec<crate::Subscription>> {
        let kind = owned(kind);
        self.read(move |on| run_ready(flow::subscriptions(on, &OUTBOX, &kind)))
            .await
    }

    async fn delete_subscription(&self, id: &str) -> Result<bool> {
        let id = owned(id);
        self.write(move |on| run_ready(flow::delete_subscription(on, &OUTBOX, &id)))
            .await
    }

    async fn redeliver(&self, delivery: &str) -> Result<crate::Delivery> {
        let delivery = owned(delivery);
        let d = self
            .write(move |on| run_ready(flow::redeliver(on, &OUTBOX, &delivery, chrono::Utc::now())))
            .await?;
        self.changes.notify(None, false);
        Ok(d)
    }
}
