//! [`PostgresStore`]: many workers on many machines.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use reins_message::ToolResult;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Row, Transaction};

use super::{
    ChangeHub, Feeds, decode_decision, decode_ledger, decode_message, decode_requirement,
    decode_run_state, encode_json, encode_message, is_unique_violation, to_i64, to_u64,
};
use crate::commit::Commit;
use crate::error::{Error, Result};
use crate::store::{
    ChangeFeed, Claim, DecisionEntry, LedgerEntry, LedgerState, MAX_LEASE, MemoryStore,
    SessionState, SessionSummary,
};

/// Migrations, in order: (version, SQL). Shipped in the crate.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("postgres_schema.sql")),
    (2, include_str!("postgres_schema_v2.sql")),
];

/// The newest schema version this build writes.
pub const POSTGRES_SCHEMA_VERSION: i64 = 2;

/// Key of the advisory lock that serializes migrations between workers.
const MIGRATION_LOCK: i64 = 0x7265_696e_7331; // "reins1"

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
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            schema: None,
            max_connections: 10,
            acquire_timeout: Duration::from_secs(30),
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
}

impl PostgresStore {
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
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(options.acquire_timeout)
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
        let v: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM reins_schema_version")
            .fetch_one(&self.pool)
            .await?;
        Ok(v.unwrap_or(0))
    }

    async fn migrate(&self) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *tx)
            .await?;
        sqlx::query("CREATE TABLE IF NOT EXISTS reins_schema_version (version BIGINT NOT NULL)")
            .execute(&mut *tx)
            .await?;
        let current: Option<i64> =
            sqlx::query_scalar("SELECT MAX(version) FROM reins_schema_version")
                .fetch_one(&mut *tx)
                .await?;
        let current = current.unwrap_or(0);
        if current > POSTGRES_SCHEMA_VERSION {
            return Err(Error::UnsupportedSchema {
                found: current,
                supported: POSTGRES_SCHEMA_VERSION,
            });
        }
        for &(version, sql) in MIGRATIONS {
            if version <= current {
                continue;
            }
            sqlx::Executor::execute(&mut *tx, sqlx::raw_sql(sql)).await?;
            sqlx::query("INSERT INTO reins_schema_version (version) VALUES ($1)")
                .bind(version)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn load(&self, id: &str) -> Result<Option<SessionState>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let Some(row) = sqlx::query(
            "SELECT version, run_state::text, created_at, updated_at FROM reins_sessions WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(None);
        };
        let rows = sqlx::query(
            "SELECT seq, id, body::text FROM reins_messages WHERE session_id = $1 ORDER BY seq",
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
            "SELECT id, body::text FROM reins_requirements WHERE session_id = $1 ORDER BY seq",
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
        let run_state: Option<String> = row.try_get(1)?;
        Ok(Some(SessionState {
            id: id.to_owned(),
            version: to_u64(row.try_get(0)?),
            messages,
            requirements,
            run_state: decode_run_state(id, run_state.as_deref())?,
            created_at: row.try_get(2)?,
            updated_at: row.try_get(3)?,
        }))
    }
}

fn lease_secs(lease: Duration) -> f64 {
    lease.min(MAX_LEASE).as_secs_f64()
}

async fn apply(
    tx: &mut Transaction<'static, Postgres>,
    session: &str,
    commit: Commit,
    next_seq: i64,
    message_count: i64,
) -> Result<(i64, i64)> {
    let mut next_seq = next_seq;
    let mut count = message_count;
    for id in &commit.remove {
        let done = sqlx::query("DELETE FROM reins_messages WHERE session_id = $1 AND id = $2")
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
        let done = sqlx::query(
            "UPDATE reins_messages SET body = $1::jsonb WHERE session_id = $2 AND id = $3",
        )
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
    if !commit.append.is_empty() {
        let mut seen = std::collections::HashSet::new();
        let mut seqs = Vec::with_capacity(commit.append.len());
        let mut ids = Vec::with_capacity(commit.append.len());
        let mut bodies = Vec::with_capacity(commit.append.len());
        for m in &commit.append {
            if !seen.insert(m.id.as_str()) {
                return Err(Error::DuplicateMessage {
                    session: session.to_owned(),
                    id: m.id.clone(),
                });
            }
            seqs.push(next_seq);
            ids.push(m.id.clone());
            bodies.push(encode_message(m)?);
            next_seq += 1;
            count += 1;
        }
        let taken: Option<String> = sqlx::query_scalar(
            "SELECT id FROM reins_messages WHERE session_id = $1 AND id = ANY($2) LIMIT 1",
        )
        .bind(session)
        .bind(&ids)
        .fetch_optional(&mut **tx)
        .await?;
        if let Some(id) = taken {
            return Err(Error::DuplicateMessage {
                session: session.to_owned(),
                id,
            });
        }
        sqlx::query(
            "INSERT INTO reins_messages (session_id, seq, id, body) \
             SELECT $1, t.s, t.i, t.b::jsonb FROM UNNEST($2::bigint[], $3::text[], $4::text[]) AS t(s, i, b)",
        )
        .bind(session)
        .bind(&seqs)
        .bind(&ids)
        .bind(&bodies)
        .execute(&mut **tx)
        .await?;
    }
    if commit.clear_requirements {
        sqlx::query("DELETE FROM reins_requirements WHERE session_id = $1")
            .bind(session)
            .execute(&mut **tx)
            .await?;
    }
    for r in &commit.add_requirements {
        let open: Option<bool> = sqlx::query_scalar(
            "SELECT is_open FROM reins_requirements WHERE session_id = $1 AND id = $2",
        )
        .bind(session)
        .bind(&r.id)
        .fetch_optional(&mut **tx)
        .await?;
        match open {
            Some(true) => {
                return Err(Error::DuplicateRequirement {
                    session: session.to_owned(),
                    id: r.id.clone(),
                });
            }
            Some(false) => {
                sqlx::query("DELETE FROM reins_requirements WHERE session_id = $1 AND id = $2")
                    .bind(session)
                    .bind(&r.id)
                    .execute(&mut **tx)
                    .await?;
            }
            None => {}
        }
        sqlx::query(
            "INSERT INTO reins_requirements (session_id, id, is_open, body) VALUES ($1, $2, $3, $4::jsonb)",
        )
        .bind(session)
        .bind(&r.id)
        .bind(r.is_open())
        .bind(encode_json("requirement", r)?)
        .execute(&mut **tx)
        .await?;
    }
    for (id, decision) in &commit.decide {
        let body: Option<String> = sqlx::query_scalar(
            "SELECT body::text FROM reins_requirements WHERE session_id = $1 AND id = $2",
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
        let mut r = decode_requirement(session, id, &body)?;
        if !r.is_open() {
            return Err(Error::RequirementAlreadyDecided {
                session: session.to_owned(),
                id: id.clone(),
            });
        }
        r.decision = Some(decision.clone());
        r.decided_at = Some(Utc::now());
        sqlx::query(
            "UPDATE reins_requirements SET is_open = FALSE, body = $1::jsonb WHERE session_id = $2 AND id = $3",
        )
        .bind(encode_json("requirement", &r)?)
        .bind(session)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    }
    if let Some(rs) = &commit.run_state {
        let body = rs
            .as_ref()
            .map(|v| encode_json("run state", v))
            .transpose()?;
        sqlx::query("UPDATE reins_sessions SET run_state = $1::jsonb WHERE id = $2")
            .bind(body)
            .bind(session)
            .execute(&mut **tx)
            .await?;
    }
    insert_decisions(tx, session, &commit.decisions).await?;
    Ok((next_seq, count))
}

#[async_trait]
impl MemoryStore for PostgresStore {
    async fn open_session(&self, id: &str) -> Result<SessionState> {
        if let Some(s) = self.load(id).await? {
            return Ok(s);
        }
        sqlx::query(
            "INSERT INTO reins_sessions (id, version, next_seq, message_count, run_state, created_at, updated_at) \
             VALUES ($1, 0, 0, 0, NULL, now(), now()) ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
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

    async fn commit(&self, id: &str, commit: Commit) -> Result<u64> {
        let mut tx = self.pool.begin().await?;
        let Some(row) = sqlx::query(
            "SELECT version, next_seq, message_count FROM reins_sessions WHERE id = $1 FOR UPDATE",
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
        let (next_seq, count) =
            apply(&mut tx, id, commit, row.try_get(1)?, row.try_get(2)?).await?;
        let new_version = version + 1;
        sqlx::query(
            "UPDATE reins_sessions SET version = $1, next_seq = $2, message_count = $3, updated_at = now() WHERE id = $4",
        )
        .bind(to_i64(new_version))
        .bind(next_seq)
        .bind(count)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        self.notify_in(&mut tx, id, false).await?;
        tx.commit().await?;
        Ok(new_version)
    }

    async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
        let rows = sqlx::query(
            "SELECT s.id, s.version, s.message_count, s.updated_at, \
             EXISTS (SELECT 1 FROM reins_requirements r WHERE r.session_id = s.id AND r.is_open) \
             FROM reins_sessions s ORDER BY s.id COLLATE \"C\"",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(SessionSummary {
                    id: r.try_get(0)?,
                    version: to_u64(r.try_get(1)?),
                    message_count: to_u64(r.try_get(2)?),
                    updated_at: r.try_get(3)?,
                    has_open_requirements: r.try_get(4)?,
                })
            })
            .collect()
    }

    async fn delete_session(&self, id: &str) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        for sql in [
            "DELETE FROM reins_messages WHERE session_id = $1",
            "DELETE FROM reins_requirements WHERE session_id = $1",
            "DELETE FROM reins_ledger WHERE session_id = $1",
            "DELETE FROM reins_session_locks WHERE session_id = $1",
            "DELETE FROM reins_decisions WHERE session_id = $1",
            "DELETE FROM reins_sessions WHERE id = $1",
        ] {
            sqlx::query(sql).bind(id).execute(&mut *tx).await?;
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
        let secs = lease_secs(lease);
        for _ in 0..3 {
            let mut tx = self.pool.begin().await?;
            let inserted = sqlx::query(
                "INSERT INTO reins_ledger (session_id, tool_use_id, fingerprint, state, lease_until, result, attempts) \
                 VALUES ($1, $2, $3, 'running', now() + make_interval(secs => $4), NULL, 1) \
                 ON CONFLICT (session_id, tool_use_id) DO NOTHING",
            )
            .bind(session)
            .bind(tool_use_id)
            .bind(fingerprint)
            .bind(secs)
            .execute(&mut *tx)
            .await?;
            if inserted.rows_affected() == 1 {
                tx.commit().await?;
                return Ok(Claim::Granted);
            }
            // The row exists; lock it so the decision below and the takeover are one step.
            let Some(row) = sqlx::query(
                "SELECT fingerprint, state, lease_until, result::text, lease_until <= now() \
                 FROM reins_ledger WHERE session_id = $1 AND tool_use_id = $2 FOR UPDATE",
            )
            .bind(session)
            .bind(tool_use_id)
            .fetch_optional(&mut *tx)
            .await?
            else {
                continue; // deleted in between: try again
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
            let expired: bool = row.try_get(4)?;
            if !expired {
                return Ok(Claim::InFlight {
                    lease_until: row.try_get(2)?,
                });
            }
            if !allow_takeover {
                return Ok(Claim::Expired);
            }
            sqlx::query(
                "UPDATE reins_ledger SET lease_until = now() + make_interval(secs => $1), attempts = attempts + 1 \
                 WHERE session_id = $2 AND tool_use_id = $3",
            )
            .bind(secs)
            .bind(session)
            .bind(tool_use_id)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            return Ok(Claim::Granted);
        }
        Err(Error::Database(format!(
            "ledger entry `{tool_use_id}` of session `{session}` kept changing while being claimed"
        )))
    }

    async fn finish(&self, session: &str, tool_use_id: &str, result: &ToolResult) -> Result<()> {
        let done = sqlx::query(
            "UPDATE reins_ledger SET state = 'finished', result = $1::jsonb \
             WHERE session_id = $2 AND tool_use_id = $3 AND state = 'running'",
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
            "SELECT fingerprint, state, lease_until, result::text, attempts FROM reins_ledger \
             WHERE session_id = $1 AND tool_use_id = $2",
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
        let lease_until: DateTime<Utc> = row.try_get(2)?;
        Ok(Some(LedgerEntry {
            tool_use_id: tool_use_id.to_owned(),
            fingerprint: row.try_get(0)?,
            state,
            lease_until,
            result,
            attempts: u32::try_from(row.try_get::<i32, _>(4)?).unwrap_or(0),
        }))
    }

    async fn try_lock_session(&self, session: &str, owner: &str, lease: Duration) -> Result<bool> {
        let done = sqlx::query(
            "INSERT INTO reins_session_locks (session_id, owner, lease_until) \
             VALUES ($1, $2, now() + make_interval(secs => $3)) \
             ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until, \
             interrupt_requested = reins_session_locks.interrupt_requested AND reins_session_locks.owner = EXCLUDED.owner \
             WHERE reins_session_locks.owner = EXCLUDED.owner OR reins_session_locks.lease_until <= now()",
        )
        .bind(session)
        .bind(owner)
        .bind(lease_secs(lease))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn unlock_session(&self, session: &str, owner: &str) -> Result<()> {
        sqlx::query("DELETE FROM reins_session_locks WHERE session_id = $1 AND owner = $2")
            .bind(session)
            .bind(owner)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn session_version(&self, id: &str) -> Result<Option<u64>> {
        let v: Option<i64> = sqlx::query_scalar("SELECT version FROM reins_sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(v.map(to_u64))
    }

    async fn append_decisions(&self, session: &str, entries: Vec<DecisionEntry>) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM reins_sessions WHERE id = $1")
            .bind(session)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Err(Error::SessionNotFound {
                id: session.to_owned(),
            });
        }
        insert_decisions(&mut tx, session, &entries).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn decisions(&self, session: &str) -> Result<Vec<DecisionEntry>> {
        let rows = sqlx::query(
            "SELECT requirement_id, at, record::text FROM reins_decisions WHERE session_id = $1 ORDER BY seq",
        )
        .bind(session)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .enumerate()
            .map(|(i, r)| {
                decode_decision(session, i + 1, r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)
            })
            .collect()
    }

    async fn request_interrupt(&self, session: &str) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query(
            "UPDATE reins_session_locks SET interrupt_requested = TRUE WHERE session_id = $1 AND lease_until > now()",
        )
        .bind(session)
        .execute(&mut *tx)
        .await?;
        let flagged = done.rows_affected() == 1;
        if flagged {
            self.notify_in(&mut tx, session, true).await?;
        }
        tx.commit().await?;
        Ok(flagged)
    }

    async fn interrupt_requests(&self, owner: &str) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT session_id FROM reins_session_locks WHERE owner = $1 AND interrupt_requested \
             ORDER BY session_id COLLATE \"C\"",
        )
        .bind(owner)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn changes(&self) -> Result<ChangeFeed> {
        self.subscribe_changes(false).await
    }

    async fn interrupt_notices(&self) -> Result<ChangeFeed> {
        self.subscribe_changes(true).await
    }
}

impl PostgresStore {
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

    /// Queues a NOTIFY for `session` (delivered when the transaction commits): the
    /// payload is `c:<id>` for a commit, `i:<id>` for an interrupt request.
    async fn notify_in(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        session: &str,
        interrupt: bool,
    ) -> Result<()> {
        // NOTIFY payloads are limited to 8000 bytes: a longer id is announced as
        // "something changed".
        let kind = if interrupt { "i:" } else { "c:" };
        let payload = if session.len() < 7900 {
            format!("{kind}{session}")
        } else {
            String::new()
        };
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(&self.channel)
            .bind(payload)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}

/// The LISTEN/NOTIFY channel of a schema: `reins_changes_<schema>`, or, when that would
/// pass PostgreSQL's 63-byte identifier limit, the schema's SHA-256 prefix instead.
fn change_channel(schema: Option<&str>) -> String {
    use sha2::Digest;
    match schema {
        None => "reins_changes".to_owned(),
        Some(s) if s.len() <= 63 - "reins_changes_".len() => format!("reins_changes_{s}"),
        Some(s) => {
            let digest = sha2::Sha256::digest(s.as_bytes());
            let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
            format!("reins_changes_{hex}")
        }
    }
}

/// Appends decision log rows inside a transaction.
async fn insert_decisions(
    tx: &mut Transaction<'static, Postgres>,
    session: &str,
    entries: &[DecisionEntry],
) -> Result<()> {
    for e in entries {
        sqlx::query(
            "INSERT INTO reins_decisions (session_id, requirement_id, at, record) \
             VALUES ($1, $2, LEAST($3, now()), $4::jsonb)",
        )
        .bind(session)
        .bind(&e.requirement_id)
        .bind(e.at)
        .bind(encode_json("decision record", &e.record)?)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Forwards NOTIFYs to the change feed until nobody listens. A lost connection is
/// re-established by the listener; since notices may have been missed meanwhile,
/// listeners are told that anything may have changed.
async fn listen_for_changes(mut listener: sqlx::postgres::PgListener, feeds: Feeds) {
    loop {
        if !feeds.listened() {
            break;
        }
        let next = tokio::time::timeout(Duration::from_secs(1), listener.recv()).await;
        match next {
            Err(_) => {}
            Ok(Ok(n)) => match n.payload().split_at_checked(2) {
                Some(("c:", session)) => feeds.send(Some(session), false),
                Some(("i:", session)) => feeds.send(Some(session), true),
                _ => feeds.send(None, true),
            },
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "listening for PostgreSQL changes failed; reconnecting");
                feeds.send(None, true);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
