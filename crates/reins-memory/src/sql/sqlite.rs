//! [`SqliteStore`]: the embedded store.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use reins_message::ToolResult;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Row, Sqlite, Transaction};

use super::{
    ChangeHub, Feeds, decode_decision, decode_ledger, decode_message, decode_requirement,
    decode_run_state, decode_time, encode_json, encode_message, encode_time, is_unique_violation,
    to_i64, to_u64,
};
use crate::commit::Commit;
use crate::error::{Error, Result};
use crate::store::{
    ChangeFeed, Claim, DecisionEntry, LedgerEntry, LedgerState, MemoryStore, RequirementRecord,
    SessionState, SessionSummary, lease_end,
};

/// Migrations, in order: (version, SQL). Shipped in the crate.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("sqlite_schema.sql")),
    (2, include_str!("sqlite_schema_v2.sql")),
];

/// The newest schema version this build writes.
pub const SQLITE_SCHEMA_VERSION: i64 = 2;

/// How hard a commit tries to survive a crash.
///
/// Both levels use SQLite's write-ahead log (WAL) and one transaction per commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = NORMAL`: a committed step survives the process crashing; after a
    /// power loss or OS crash the last commits before it may be lost (the database
    /// stays consistent). The fast default.
    #[default]
    Normal,
    /// `synchronous = FULL`: every commit is fsync'd before it returns, so it survives
    /// power loss too. One fsync per commit call.
    Full,
}

/// Options for [`SqliteStore::open_with`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// See [`Durability`].
    pub durability: Durability,
    /// How long a writer waits for another process's write lock before failing.
    pub busy_timeout: Duration,
    /// The most connections the pool opens (readers run concurrently in WAL mode).
    pub max_connections: u32,
    /// Create the database file when it does not exist.
    pub create_if_missing: bool,
    /// How often [`MemoryStore::changes`] polls `PRAGMA data_version` to notice other
    /// processes' writes (only while someone listens). Writes through this store are
    /// announced at once.
    pub change_poll_interval: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            durability: Durability::Normal,
            busy_timeout: Duration::from_secs(10),
            max_connections: 4,
            create_if_missing: true,
            change_poll_interval: Duration::from_millis(100),
        }
    }
}

impl SqliteOptions {
    /// Sets the durability level.
    #[must_use]
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }

    /// Sets the busy timeout.
    #[must_use]
    pub fn busy_timeout(mut self, t: Duration) -> Self {
        self.busy_timeout = t;
        self
    }

    /// Sets the pool size (at least 1).
    #[must_use]
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Sets how often other processes' writes are polled for (at least 5 ms).
    #[must_use]
    pub fn change_poll_interval(mut self, every: Duration) -> Self {
        self.change_poll_interval = every.max(Duration::from_millis(5));
        self
    }
}

/// Sessions in a SQLite database (bundled SQLite; no system library needed).
///
/// WAL mode, one `BEGIN IMMEDIATE` transaction per commit (so writers from several
/// processes serialize instead of failing), messages as append-only rows, the schema
/// as migrations in the crate. A database written by a newer reins is refused with
/// [`Error::UnsupportedSchema`]. Cloning gives another handle to the same pool.
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
    pool: SqlitePool,
    /// The session run locks' connection: `synchronous = OFF`, because a lock row
    /// lost in a crash only expires (its lease ends), so it needs no fsync. Messages
    /// and the ledger keep the configured [`Durability`] on `pool`. For an in-memory
    /// database it is the same pool.
    locks: SqlitePool,
    /// The change feed; `poll` is how the listener connects (`None` in memory, where
    /// every writer goes through this store).
    changes: std::sync::Arc<ChangeHub>,
    poll: Option<(SqliteConnectOptions, Duration)>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` with default options. The
    /// path `:memory:` gives [`SqliteStore::in_memory`].
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Opens the database at `path` with `options`.
    pub async fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self> {
        let path = path.as_ref();
        if path.as_os_str() == ":memory:" {
            return Self::in_memory().await;
        }
        let connect = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(options.create_if_missing)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match options.durability {
                Durability::Normal => SqliteSynchronous::Normal,
                Durability::Full => SqliteSynchronous::Full,
            })
            .busy_timeout(options.busy_timeout)
            .foreign_keys(false);
        // An embedded database has no network link to test: skip the ping sqlx
        // sends before handing out a connection (one worker round trip per use).
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .test_before_acquire(false)
            .connect_with(connect.clone())
            .await?;
        let store = Self {
            locks: pool.clone(),
            pool,
            changes: ChangeHub::new(),
            poll: Some((connect.clone(), options.change_poll_interval)),
        };
        // Migrate before the lock connection opens: it expects the tables.
        store.migrate().await?;
        let locks = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect_with(connect.synchronous(SqliteSynchronous::Off))
            .await?;
        Ok(Self { locks, ..store })
    }

    /// A private database in memory, gone when the store (every clone) is dropped.
    pub async fn in_memory() -> Result<Self> {
        let connect = SqliteConnectOptions::from_str("sqlite::memory:")?
            .journal_mode(SqliteJournalMode::Memory);
        // One connection that never closes: each in-memory connection is its own
        // database.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(connect)
            .await?;
        let store = Self {
            locks: pool.clone(),
            pool,
            changes: ChangeHub::new(),
            poll: None,
        };
        store.migrate().await?;
        Ok(store)
    }

    /// The connection pool, for inspection and maintenance.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The schema version the database is at.
    pub async fn schema_version(&self) -> Result<i64> {
        let v: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM reins_schema_version")
            .fetch_one(&self.pool)
            .await?;
        Ok(v.unwrap_or(0))
    }

    async fn migrate(&self) -> Result<()> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("CREATE TABLE IF NOT EXISTS reins_schema_version (version INTEGER NOT NULL)")
            .execute(&mut *tx)
            .await?;
        let current: Option<i64> =
            sqlx::query_scalar("SELECT MAX(version) FROM reins_schema_version")
                .fetch_one(&mut *tx)
                .await?;
        let current = current.unwrap_or(0);
        if current > SQLITE_SCHEMA_VERSION {
            return Err(Error::UnsupportedSchema {
                found: current,
                supported: SQLITE_SCHEMA_VERSION,
            });
        }
        for &(version, sql) in MIGRATIONS {
            if version <= current {
                continue;
            }
            sqlx::Executor::execute(&mut *tx, sqlx::raw_sql(sql)).await?;
            sqlx::query("INSERT INTO reins_schema_version (version) VALUES (?)")
                .bind(version)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn load(&self, id: &str) -> Result<Option<SessionState>> {
        let mut tx = self.pool.begin().await?;
        let Some(row) = sqlx::query(
            "SELECT version, run_state, created_at, updated_at FROM reins_sessions WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(None);
        };
        let version: i64 = row.try_get(0)?;
        let run_state: Option<String> = row.try_get(1)?;
        let created_at: String = row.try_get(2)?;
        let updated_at: String = row.try_get(3)?;
        let rows = sqlx::query(
            "SELECT seq, id, body FROM reins_messages WHERE session_id = ? ORDER BY seq",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        let mut messages = Vec::with_capacity(rows.len());
        for r in &rows {
            let seq: i64 = r.try_get(0)?;
            let mid: &str = r.try_get(1)?;
            let body: &str = r.try_get(2)?;
            messages.push(decode_message(id, seq, mid, body)?);
        }
        let req_rows = sqlx::query(
            "SELECT id, body FROM reins_requirements WHERE session_id = ? ORDER BY seq",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        let mut requirements = Vec::with_capacity(req_rows.len());
        for r in &req_rows {
            let rid: &str = r.try_get(0)?;
            let body: &str = r.try_get(1)?;
            requirements.push(decode_requirement(id, rid, body)?);
        }
        tx.commit().await?;
        Ok(Some(SessionState {
            id: id.to_owned(),
            version: to_u64(version),
            messages,
            requirements,
            run_state: decode_run_state(id, run_state.as_deref())?,
            created_at: decode_time(id, "session row created_at", &created_at)?,
            updated_at: decode_time(id, "session row updated_at", &updated_at)?,
        }))
    }
}

async fn apply(
    tx: &mut Transaction<'static, Sqlite>,
    session: &str,
    commit: Commit,
    next_seq: i64,
    message_count: i64,
    now: DateTime<Utc>,
) -> Result<(i64, i64)> {
    let mut next_seq = next_seq;
    let mut count = message_count;
    for id in &commit.remove {
        let done = sqlx::query("DELETE FROM reins_messages WHERE session_id = ? AND id = ?")
            .bind(session)
            .bind(id)
            .execute(&mut **tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(Error::MessageNotFound {
                session: session.to_owned(),
                id: id.clone(),
            });
        }
        count -= 1;
    }
    for m in &commit.replace {
        let done =
            sqlx::query("UPDATE reins_messages SET body = ? WHERE session_id = ? AND id = ?")
                .bind(encode_message(m)?)
                .bind(session)
                .bind(&m.id)
                .execute(&mut **tx)
                .await?;
        if done.rows_affected() == 0 {
            return Err(Error::MessageNotFound {
                session: session.to_owned(),
                id: m.id.clone(),
            });
        }
    }
    for m in &commit.append {
        let res = sqlx::query(
            "INSERT INTO reins_messages (session_id, seq, id, body) VALUES (?, ?, ?, ?)",
        )
        .bind(session)
        .bind(next_seq)
        .bind(&m.id)
        .bind(encode_message(m)?)
        .execute(&mut **tx)
        .await;
        match res {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => {
                return Err(Error::DuplicateMessage {
                    session: session.to_owned(),
                    id: m.id.clone(),
                });
            }
            Err(e) => return Err(e.into()),
        }
        next_seq += 1;
        count += 1;
    }
    if commit.clear_requirements {
        sqlx::query("DELETE FROM reins_requirements WHERE session_id = ?")
            .bind(session)
            .execute(&mut **tx)
            .await?;
    }
    for r in &commit.add_requirements {
        let open: Option<i64> = sqlx::query_scalar(
            "SELECT is_open FROM reins_requirements WHERE session_id = ? AND id = ?",
        )
        .bind(session)
        .bind(&r.id)
        .fetch_optional(&mut **tx)
        .await?;
        match open {
            Some(1) => {
                return Err(Error::DuplicateRequirement {
                    session: session.to_owned(),
                    id: r.id.clone(),
                });
            }
            Some(_) => {
                sqlx::query("DELETE FROM reins_requirements WHERE session_id = ? AND id = ?")
                    .bind(session)
                    .bind(&r.id)
                    .execute(&mut **tx)
                    .await?;
            }
            None => {}
        }
        sqlx::query(
            "INSERT INTO reins_requirements (session_id, id, seq, is_open, body) VALUES (?, ?, \
             (SELECT COALESCE(MAX(seq), 0) + 1 FROM reins_requirements WHERE session_id = ?), ?, ?)",
        )
        .bind(session)
        .bind(&r.id)
        .bind(session)
        .bind(i64::from(r.is_open()))
        .bind(encode_json("requirement", r)?)
        .execute(&mut **tx)
        .await?;
    }
    for (id, decision) in &commit.decide {
        let body: Option<String> = sqlx::query_scalar(
            "SELECT body FROM reins_requirements WHERE session_id = ? AND id = ?",
        )
        .bind(session)
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?;
        let Some(body) = body else {
            return Err(Error::RequirementNotFound {
                session: session.to_owned(),
                id: id.clone(),
            });
        };
        let mut r: RequirementRecord = decode_requirement(session, id, &body)?;
        if !r.is_open() {
            return Err(Error::RequirementAlreadyDecided {
                session: session.to_owned(),
                id: id.clone(),
            });
        }
        r.decision = Some(decision.clone());
        r.decided_at = Some(now);
        sqlx::query(
            "UPDATE reins_requirements SET is_open = 0, body = ? WHERE session_id = ? AND id = ?",
        )
        .bind(encode_json("requirement", &r)?)
        .bind(session)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    }
    insert_decisions(tx, session, &commit.decisions, now).await?;
    Ok((next_seq, count))
}

fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

fn from_micros(session: &str, what: &str, us: i64) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(us).ok_or_else(|| Error::Corrupt {
        session: session.to_owned(),
        detail: format!("{what}: timestamp {us} out of range"),
    })
}

#[async_trait]
impl MemoryStore for SqliteStore {
    async fn open_session(&self, id: &str) -> Result<SessionState> {
        if let Some(s) = self.load(id).await? {
            return Ok(s);
        }
        let now = encode_time(Utc::now());
        sqlx::query(
            "INSERT INTO reins_sessions (id, version, next_seq, message_count, run_state, created_at, updated_at) \
             VALUES (?, 0, 0, 0, NULL, ?, ?) ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(&now)
        .bind(&now)
        .execute(&self.pool)
        .await?;
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
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let Some(row) = sqlx::query(
            "SELECT version, next_seq, message_count, run_state FROM reins_sessions WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Err(Error::SessionNotFound { id: id.to_owned() });
        };
        let version = to_u64(row.try_get(0)?);
        if version != commit.expected_version {
            return Err(Error::Conflict {
                session: id.to_owned(),
                expected: commit.expected_version,
                actual: version,
            });
        }
        if commit.is_empty() {
            return Ok(version);
        }
        // The run state is written with the session row, below (one statement).
        let run_state = commit
            .run_state
            .take()
            .map(|rs| rs.map(|v| encode_json("run state", &v)).transpose())
            .transpose()?;
        if commit.is_empty() {
            // Only the run state: when it is what is stored, nothing changes (and
            // nothing is written, so a Full commit costs no fsync).
            let stored: Option<String> = row.try_get(3)?;
            if run_state.as_ref().is_none_or(|rs| *rs == stored) {
                return Ok(version);
            }
        }
        let now = Utc::now();
        let (next_seq, count) =
            apply(&mut tx, id, commit, row.try_get(1)?, row.try_get(2)?, now).await?;
        let new_version = version + 1;
        let sql = if run_state.is_some() {
            "UPDATE reins_sessions SET version = ?, next_seq = ?, message_count = ?, updated_at = ?, run_state = ? WHERE id = ?"
        } else {
            "UPDATE reins_sessions SET version = ?, next_seq = ?, message_count = ?, updated_at = ? WHERE id = ?"
        };
        let mut update = sqlx::query(sql)
            .bind(to_i64(new_version))
            .bind(next_seq)
            .bind(count)
            .bind(encode_time(now));
        if let Some(rs) = run_state {
            update = update.bind(rs);
        }
        update.bind(id).execute(&mut *tx).await?;
        tx.commit().await?;
        self.changes.notify(Some(id), false);
        Ok(new_version)
    }

    async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
        let rows = sqlx::query(
            "SELECT s.id, s.version, s.message_count, s.updated_at, \
             EXISTS (SELECT 1 FROM reins_requirements r WHERE r.session_id = s.id AND r.is_open = 1) \
             FROM reins_sessions s ORDER BY s.id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get(0)?;
                let updated: String = r.try_get(3)?;
                Ok(SessionSummary {
                    version: to_u64(r.try_get(1)?),
                    message_count: to_u64(r.try_get(2)?),
                    updated_at: decode_time(&id, "session row updated_at", &updated)?,
                    has_open_requirements: r.try_get::<i64, _>(4)? != 0,
                    id,
                })
            })
            .collect()
    }

    async fn delete_session(&self, id: &str) -> Result<()> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        for table in [
            "DELETE FROM reins_messages WHERE session_id = ?",
            "DELETE FROM reins_requirements WHERE session_id = ?",
            "DELETE FROM reins_ledger WHERE session_id = ?",
            "DELETE FROM reins_session_locks WHERE session_id = ?",
            "DELETE FROM reins_decisions WHERE session_id = ?",
            "DELETE FROM reins_sessions WHERE id = ?",
        ] {
            sqlx::query(table).bind(id).execute(&mut *tx).await?;
        }
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
        // BEGIN IMMEDIATE takes the database's write lock first, so the read and the
        // write below are one atomic step, across processes too.
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let now = Utc::now();
        let until = micros(lease_end(now, lease));
        let row = sqlx::query(
            "SELECT fingerprint, state, lease_until, result FROM reins_ledger WHERE session_id = ? AND tool_use_id = ?",
        )
        .bind(session)
        .bind(tool_use_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            sqlx::query(
                "INSERT INTO reins_ledger (session_id, tool_use_id, fingerprint, state, lease_until, result, attempts) \
                 VALUES (?, ?, ?, 'running', ?, NULL, 1)",
            )
            .bind(session)
            .bind(tool_use_id)
            .bind(fingerprint)
            .bind(until)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            return Ok(Claim::Granted);
        };
        let recorded: String = row.try_get(0)?;
        if recorded != fingerprint {
            return Err(Error::FingerprintMismatch {
                session: session.to_owned(),
                tool_use_id: tool_use_id.to_owned(),
                recorded,
                found: fingerprint.to_owned(),
            });
        }
        let state: String = row.try_get(1)?;
        let result: Option<String> = row.try_get(3)?;
        let (state, result) = decode_ledger(session, tool_use_id, &state, result.as_deref())?;
        if let (LedgerState::Finished, Some(r)) = (state, result) {
            return Ok(Claim::Finished(r));
        }
        let lease_until: i64 = row.try_get(2)?;
        if lease_until > micros(now) {
            return Ok(Claim::InFlight {
                lease_until: from_micros(session, "ledger row lease_until", lease_until)?,
            });
        }
        if !allow_takeover {
            return Ok(Claim::Expired);
        }
        sqlx::query(
            "UPDATE reins_ledger SET lease_until = ?, attempts = attempts + 1 WHERE session_id = ? AND tool_use_id = ?",
        )
        .bind(until)
        .bind(session)
        .bind(tool_use_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Claim::Granted)
    }

    async fn finish(&self, session: &str, tool_use_id: &str, result: &ToolResult) -> Result<()> {
        let done = sqlx::query(
            "UPDATE reins_ledger SET state = 'finished', result = ? \
             WHERE session_id = ? AND tool_use_id = ? AND state = 'running'",
        )
        .bind(encode_json("tool result", result)?)
        .bind(session)
        .bind(tool_use_id)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 && self.ledger_entry(session, tool_use_id).await?.is_none() {
            return Err(Error::LedgerEntryNotFound {
                session: session.to_owned(),
                tool_use_id: tool_use_id.to_owned(),
            });
        }
        Ok(())
    }

    async fn ledger_entry(&self, session: &str, tool_use_id: &str) -> Result<Option<LedgerEntry>> {
        let Some(row) = sqlx::query(
            "SELECT fingerprint, state, lease_until, result, attempts FROM reins_ledger WHERE session_id = ? AND tool_use_id = ?",
        )
        .bind(session)
        .bind(tool_use_id)
        .fetch_optional(&self.pool)
        .await?
        else {
            return Ok(None);
        };
        let state: String = row.try_get(1)?;
        let result: Option<String> = row.try_get(3)?;
        let (state, result) = decode_ledger(session, tool_use_id, &state, result.as_deref())?;
        Ok(Some(LedgerEntry {
            tool_use_id: tool_use_id.to_owned(),
            fingerprint: row.try_get(0)?,
            state,
            lease_until: from_micros(session, "ledger row lease_until", row.try_get(2)?)?,
            result,
            attempts: u32::try_from(row.try_get::<i64, _>(4)?).unwrap_or(u32::MAX),
        }))
    }

    async fn try_lock_session(&self, session: &str, owner: &str, lease: Duration) -> Result<bool> {
        let now = Utc::now();
        let done = sqlx::query(
            "INSERT INTO reins_session_locks (session_id, owner, lease_until) VALUES (?, ?, ?) \
             ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, lease_until = excluded.lease_until, \
             interrupt_requested = CASE WHEN reins_session_locks.owner = excluded.owner \
             THEN reins_session_locks.interrupt_requested ELSE 0 END \
             WHERE reins_session_locks.owner = excluded.owner OR reins_session_locks.lease_until <= ?",
        )
        .bind(session)
        .bind(owner)
        .bind(micros(lease_end(now, lease)))
        .bind(micros(now))
        .execute(&self.locks)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn unlock_session(&self, session: &str, owner: &str) -> Result<()> {
        sqlx::query("DELETE FROM reins_session_locks WHERE session_id = ? AND owner = ?")
            .bind(session)
            .bind(owner)
            .execute(&self.locks)
            .await?;
        Ok(())
    }

    async fn session_version(&self, id: &str) -> Result<Option<u64>> {
        let v: Option<i64> = sqlx::query_scalar("SELECT version FROM reins_sessions WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(v.map(to_u64))
    }

    async fn append_decisions(&self, session: &str, entries: Vec<DecisionEntry>) -> Result<()> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM reins_sessions WHERE id = ?")
            .bind(session)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Err(Error::SessionNotFound {
                id: session.to_owned(),
            });
        }
        insert_decisions(&mut tx, session, &entries, Utc::now()).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn decisions(&self, session: &str) -> Result<Vec<DecisionEntry>> {
        let rows = sqlx::query(
            "SELECT requirement_id, at, record FROM reins_decisions WHERE session_id = ? ORDER BY seq",
        )
        .bind(session)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .enumerate()
            .map(|(i, r)| {
                let at: &str = r.try_get(1)?;
                let at = decode_time(session, "decision row at", at)?;
                decode_decision(session, i + 1, r.try_get(0)?, at, r.try_get(2)?)
            })
            .collect()
    }

    async fn request_interrupt(&self, session: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE reins_session_locks SET interrupt_requested = 1 WHERE session_id = ? AND lease_until > ?",
        )
        .bind(session)
        .bind(micros(Utc::now()))
        .execute(&self.locks)
        .await?;
        let flagged = done.rows_affected() == 1;
        if flagged {
            self.changes.notify(Some(session), true);
        }
        Ok(flagged)
    }

    async fn interrupt_requests(&self, owner: &str) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT session_id FROM reins_session_locks WHERE owner = ? AND interrupt_requested = 1 \
             ORDER BY session_id",
        )
        .bind(owner)
        .fetch_all(&self.locks)
        .await?)
    }

    async fn changes(&self) -> Result<ChangeFeed> {
        self.subscribe_changes(false).await
    }

    async fn interrupt_notices(&self) -> Result<ChangeFeed> {
        self.subscribe_changes(true).await
    }
}

impl SqliteStore {
    async fn subscribe_changes(&self, interrupts_only: bool) -> Result<ChangeFeed> {
        let poll = self.poll.clone();
        self.changes
            .subscribe(interrupts_only, |feeds| async move {
                let Some((connect, every)) = poll else {
                    return Ok(None);
                };
                let mut conn: sqlx::SqliteConnection =
                    sqlx::ConnectOptions::connect(&connect).await?;
                // The baseline is read before the subscriber gets its feed, so a write
                // made right after `changes()` returns is announced, never absorbed.
                let baseline: i64 = sqlx::query_scalar("PRAGMA data_version")
                    .fetch_one(&mut conn)
                    .await?;
                Ok(Some(tokio::spawn(poll_data_version(
                    conn, baseline, every, feeds,
                ))))
            })
            .await
    }
}

/// Appends decision log rows inside a transaction.
async fn insert_decisions(
    tx: &mut Transaction<'static, Sqlite>,
    session: &str,
    entries: &[DecisionEntry],
    now: DateTime<Utc>,
) -> Result<()> {
    for e in entries {
        sqlx::query(
            "INSERT INTO reins_decisions (session_id, requirement_id, at, record) VALUES (?, ?, ?, ?)",
        )
        .bind(session)
        .bind(&e.requirement_id)
        .bind(encode_time(e.at.min(now)))
        .bind(encode_json("decision record", &e.record)?)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Notices other connections' commits: `PRAGMA data_version` on a connection of its
/// own changes whenever another connection (of this process or another) committed.
/// Ends when nobody listens any more.
async fn poll_data_version(
    mut conn: sqlx::SqliteConnection,
    baseline: i64,
    every: Duration,
    feeds: Feeds,
) {
    let mut last = baseline;
    loop {
        tokio::time::sleep(every).await;
        if !feeds.listened() {
            break;
        }
        match sqlx::query_scalar::<_, i64>("PRAGMA data_version")
            .fetch_one(&mut conn)
            .await
        {
            Ok(v) => {
                if v != last {
                    feeds.send(None, true);
                    last = v;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "polling SQLite for changes failed");
                feeds.send(None, true);
            }
        }
    }
}
