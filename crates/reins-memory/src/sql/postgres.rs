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
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{Column, Connection as _, Row as _, TypeInfo, ValueRef};

use super::ChangeHub;
use super::feeds::Feeds;
use super::flow::{self, Arg, Committed, Dialect, Exec, MultiInsert, Row, Val};
use super::is_unique_violation;
use crate::commit::Commit;
use crate::error::{Error, Result};
use crate::heads::SessionFilter;
use crate::pending::{PendingFilter, PendingRequirement};
use crate::store::{
    ChangeFeed, Claim, DecisionEntry, LedgerEntry, MAX_LEASE, MemoryStore, SessionHead,
    SessionLock, SessionState, SessionSummary,
};

/// Migrations, in order: (version, SQL). Shipped in the crate.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("postgres_schema.sql")),
    (2, include_str!("postgres_schema_v2.sql")),
    (3, include_str!("postgres_schema_v3.sql")),
    (4, include_str!("postgres_schema_v4.sql")),
    (5, include_str!("postgres_schema_v5.sql")),
];

/// The SQL of the grant steps.
const GRANTS: flow::GrantSql = flow::GrantSql {
    insert: "INSERT INTO reins_grants (id, tool, created_at, revoked, body) VALUES ($1, $2, $3, FALSE, $4::jsonb)",
    list: "SELECT body::text FROM reins_grants WHERE ($1::text IS NULL OR tool = $1) AND ($2 OR NOT revoked) \
         ORDER BY created_at, id",
    get: "SELECT body::text FROM reins_grants WHERE id = $1",
    revoke: "UPDATE reins_grants SET revoked = TRUE, body = $2::jsonb WHERE id = $1 AND NOT revoked",
};

/// The SQL of the outbox steps.
const OUTBOX: flow::OutboxSql = flow::OutboxSql {
    put_subscription: "INSERT INTO reins_subscriptions (id, kind, created_at, body) VALUES ($1, $2, $3, $4::jsonb) \
         ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, body = excluded.body",
    subscriptions: "SELECT id, created_at, body::text FROM reins_subscriptions WHERE kind = $1 ORDER BY created_at, id",
    delete_subscription: "DELETE FROM reins_subscriptions WHERE id = $1",
    insert_notice: "INSERT INTO reins_notices (id, kind, session_id, requirement, created_at, body) VALUES ($1, $2, $3, $4, $5, $6::jsonb) ON CONFLICT (id) DO NOTHING",
    unrouted: "SELECT body::text FROM reins_notices WHERE NOT routed ORDER BY seq LIMIT $1",
    notice: "SELECT body::text FROM reins_notices WHERE id = $1",
    mark_routed: "UPDATE reins_notices SET routed = TRUE WHERE id = $1",
    insert_delivery: "INSERT INTO reins_deliveries (id, notice_id, destination, session_id, requirement, state, attempts, next_at, updated_at, body) \
         VALUES ($1, $2, $3, $4, $5, 'pending', 0, $6, $6, $7::jsonb) ON CONFLICT (id) DO NOTHING",
    claim: "UPDATE reins_deliveries SET attempts = attempts + 1, lease_owner = $1, lease_until = $4, updated_at = $3 \
         WHERE id IN (SELECT id FROM reins_deliveries WHERE state = 'pending' AND next_at <= $3 \
         AND (lease_until IS NULL OR lease_until <= $3) ORDER BY next_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED) \
         RETURNING id, destination, state, attempts, next_at, lease_owner, lease_until, last_error, updated_at, body::text",
    settle: "UPDATE reins_deliveries SET state = $4, next_at = $5, last_error = $6::text, lease_owner = NULL, lease_until = NULL, updated_at = $7 \
         WHERE id = $1 AND lease_owner = $2 AND attempts = $3",
    log_attempt: "INSERT INTO reins_delivery_attempts (delivery_id, attempt, owner, at, outcome, error) VALUES ($1, $2, $3, $4, $5, $6::text) \
         ON CONFLICT (delivery_id, attempt) DO NOTHING",
    list: "SELECT id, destination, state, attempts, next_at, lease_owner, lease_until, last_error, updated_at, body::text FROM reins_deliveries \
         WHERE ($1::text IS NULL OR left(destination, length($1)) = $1) AND ($2::text IS NULL OR session_id = $2) \
         AND ($3::text IS NULL OR requirement = $3) AND ($4::text IS NULL OR notice_id = $4) ORDER BY seq DESC LIMIT $5",
    attempts: "SELECT attempt, owner, at, outcome, error FROM reins_delivery_attempts WHERE delivery_id = $1 ORDER BY attempt",
    redeliver: "UPDATE reins_deliveries SET state = 'pending', next_at = $2, updated_at = $2 WHERE id = $1",
    delivery: "SELECT id, destination, state, attempts, next_at, lease_owner, lease_until, last_error, updated_at, body::text FROM reins_deliveries WHERE id = $1",
};

/// The newest schema version this build writes.
pub const POSTGRES_SCHEMA_VERSION: i64 = 5;

/// The SQL of each step (see [`Dialect`] for the parameters). Leases and `updated_at`
/// use the database's clock (`now()`), so workers' clocks need not agree; the
/// caller's `Instant`/`Stamp` parameters are then unused (sqlx declares every
/// parameter's type, which PostgreSQL accepts unreferenced). JSON columns are `JSONB`,
/// read back as text.
const DIALECT: Dialect = Dialect {
    load_session: "SELECT version, run_state::text, created_at, updated_at FROM reins_sessions WHERE id = $1",
    load_messages: "SELECT seq, id, body::text FROM reins_messages WHERE session_id = $1 ORDER BY seq",
    load_requirements: "SELECT id, body::text FROM reins_requirements WHERE session_id = $1 ORDER BY seq",
    create_session: "INSERT INTO reins_sessions (id, version, next_seq, message_count, run_state, created_at, updated_at) \
         VALUES ($1, 0, 0, 0, NULL, now(), now()) ON CONFLICT (id) DO NOTHING",
    session_version: "SELECT version FROM reins_sessions WHERE id = $1",
    bump_session: "UPDATE reins_sessions SET version = version + 1, next_seq = next_seq + $3, \
         message_count = message_count + $4, updated_at = now(), \
         run_state = CASE WHEN $6 THEN $7::jsonb ELSE run_state END \
         WHERE id = $1 AND version = $2 AND NOT ($8 AND run_state IS NOT DISTINCT FROM $7::jsonb) \
         RETURNING next_seq - $3, pg_notify($9, $10)::text",
    remove_message: "DELETE FROM reins_messages WHERE session_id = $1 AND id = $2",
    replace_message: "UPDATE reins_messages SET body = $3::jsonb WHERE session_id = $1 AND id = $2",
    append_messages: MultiInsert::Arrays(
        "INSERT INTO reins_messages (session_id, seq, id, body) \
         SELECT $1, t.s, t.i, t.b::jsonb FROM UNNEST($2::bigint[], $3::text[], $4::text[]) AS t(s, i, b) \
         ON CONFLICT DO NOTHING",
    ),
    append_commit: Some(
        "WITH s AS (UPDATE reins_sessions SET version = version + 1, next_seq = next_seq + $3, \
         message_count = message_count + $4, updated_at = now(), \
         run_state = CASE WHEN $6 THEN $7::jsonb ELSE run_state END \
         WHERE id = $1 AND version = $2 AND NOT ($8 AND run_state IS NOT DISTINCT FROM $7::jsonb) \
         RETURNING next_seq - $3 AS first), \
         m AS (INSERT INTO reins_messages (session_id, seq, id, body) \
         SELECT $1, s.first + t.o - 1, t.i, t.b::jsonb \
         FROM s, UNNEST($11::text[], $12::text[]) WITH ORDINALITY AS t(i, b, o)), \
         u AS (DELETE FROM reins_session_locks WHERE session_id = $1 AND owner = $13 \
         AND EXISTS (SELECT 1 FROM s)), \
         l AS (INSERT INTO reins_session_locks (session_id, owner, lease_until) \
         SELECT $1, $14, now() + make_interval(secs => $15) FROM s WHERE $14::text IS NOT NULL \
         ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until, \
         interrupt_requested = reins_session_locks.interrupt_requested AND reins_session_locks.owner = EXCLUDED.owner \
         WHERE reins_session_locks.owner = EXCLUDED.owner OR reins_session_locks.lease_until <= now() \
         RETURNING 1) \
         SELECT s.first, pg_notify($9, $10)::text, \
         (CASE WHEN $14::text IS NULL OR EXISTS (SELECT 1 FROM l) THEN '0' \
         ELSE 'reins: the session run lock is held by another owner' END)::int FROM s",
    ),
    message_seq: "SELECT seq FROM reins_messages WHERE session_id = $1 AND id = $2",
    clear_requirements: "DELETE FROM reins_requirements WHERE session_id = $1",
    requirement: "SELECT is_open, body::text FROM reins_requirements WHERE session_id = $1 AND id = $2",
    delete_requirement: "DELETE FROM reins_requirements WHERE session_id = $1 AND id = $2",
    insert_requirement: "INSERT INTO reins_requirements (session_id, id, is_open, body, open_order, tool) \
         VALUES ($1, $2, $3, $4::jsonb, $5, $6)",
    pending_requirements: "SELECT session_id, id, tool, open_order FROM reins_requirements \
         WHERE is_open AND (open_order, session_id COLLATE \"C\", id COLLATE \"C\") > ($1, $2, $3) \
         AND ($4::text IS NULL OR starts_with(session_id, $4)) \
         ORDER BY open_order, session_id COLLATE \"C\", id COLLATE \"C\" LIMIT $5",
    pending_requirements_tool: "SELECT session_id, id, tool, open_order FROM reins_requirements \
         WHERE is_open AND tool = $6 AND (open_order, session_id COLLATE \"C\", id COLLATE \"C\") > ($1, $2, $3) \
         AND ($4::text IS NULL OR starts_with(session_id, $4)) \
         ORDER BY open_order, session_id COLLATE \"C\", id COLLATE \"C\" LIMIT $5",
    session_heads: "SELECT s.id, s.version, s.message_count, s.created_at, s.updated_at, s.run_state::text, r.id, r.body::text \
         FROM reins_sessions s LEFT JOIN reins_requirements r ON r.session_id = s.id AND r.is_open \
         WHERE s.id = ANY($1) ORDER BY s.id, r.seq",
    ids_as_json: false,
    session_heads_page: "SELECT p.id, p.version, p.message_count, p.created_at, p.updated_at, p.run_state::text, r.id, r.body::text \
         FROM (SELECT id, version, message_count, created_at, updated_at, run_state FROM reins_sessions s \
           WHERE s.updated_at <= $1 AND (s.updated_at < $1 OR s.id COLLATE \"C\" > $2) \
           AND ($3::text IS NULL OR starts_with(s.id, $3)) \
           AND ($4::text IS NULL OR EXISTS (SELECT 1 FROM reins_requirements q \
             WHERE q.session_id = s.id AND q.is_open AND q.tool = $4)) \
           ORDER BY s.updated_at DESC, s.id COLLATE \"C\" LIMIT $5) p \
         LEFT JOIN reins_requirements r ON r.session_id = p.id AND r.is_open \
         ORDER BY p.updated_at DESC, p.id COLLATE \"C\", r.seq",
    unindexed_requirements: "SELECT session_id, id, body::text FROM reins_requirements WHERE is_open AND open_order IS NULL",
    index_requirement: "UPDATE reins_requirements SET open_order = $3, tool = $4 WHERE session_id = $1 AND id = $2",
    decide_requirement: "UPDATE reins_requirements SET is_open = FALSE, body = $3::jsonb WHERE session_id = $1 AND id = $2",
    insert_decision: "INSERT INTO reins_decisions (session_id, requirement_id, at, record) \
         VALUES ($1, $2, LEAST($3, now()), $4::jsonb)",
    decisions: "SELECT requirement_id, at, record::text FROM reins_decisions WHERE session_id = $1 ORDER BY seq",
    list_sessions: "SELECT s.id, s.version, s.message_count, s.updated_at, \
         EXISTS (SELECT 1 FROM reins_requirements r WHERE r.session_id = s.id AND r.is_open) \
         FROM reins_sessions s ORDER BY s.id COLLATE \"C\"",
    list_session_heads: "SELECT id, version, message_count, created_at, updated_at, run_state::text \
         FROM reins_sessions ORDER BY id COLLATE \"C\"",
    open_requirements: "SELECT session_id, id, body::text FROM reins_requirements WHERE is_open \
         ORDER BY session_id, seq",
    delete_session: &[
        "DELETE FROM reins_messages WHERE session_id = $1",
        "DELETE FROM reins_requirements WHERE session_id = $1",
        "DELETE FROM reins_ledger WHERE session_id = $1",
        "DELETE FROM reins_session_locks WHERE session_id = $1",
        "DELETE FROM reins_decisions WHERE session_id = $1",
        "DELETE FROM reins_sessions WHERE id = $1",
    ],
    claim_insert: "INSERT INTO reins_ledger (session_id, tool_use_id, fingerprint, state, lease_until, result, attempts) \
         VALUES ($1, $2, $3, 'running', now() + make_interval(secs => $5), NULL, 1) \
         ON CONFLICT (session_id, tool_use_id) DO NOTHING",
    // The row lock makes the decision and the takeover one step.
    claim_select: "SELECT fingerprint, state, lease_until, result::text, lease_until <= now() \
         FROM reins_ledger WHERE session_id = $1 AND tool_use_id = $2 FOR UPDATE",
    claim_takeover: "UPDATE reins_ledger SET lease_until = now() + make_interval(secs => $4), \
         attempts = attempts + 1 WHERE session_id = $1 AND tool_use_id = $2",
    finish: "UPDATE reins_ledger SET state = 'finished', result = $3::jsonb \
         WHERE session_id = $1 AND tool_use_id = $2 AND state = 'running'",
    ledger_entry: "SELECT fingerprint, state, lease_until, result::text, attempts FROM reins_ledger \
         WHERE session_id = $1 AND tool_use_id = $2",
    try_lock: "INSERT INTO reins_session_locks (session_id, owner, lease_until) \
         VALUES ($1, $2, now() + make_interval(secs => $4)) \
         ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until, \
         interrupt_requested = reins_session_locks.interrupt_requested AND reins_session_locks.owner = EXCLUDED.owner \
         WHERE reins_session_locks.owner = EXCLUDED.owner OR reins_session_locks.lease_until <= now()",
    try_lock_version: Some(
        "WITH l AS (INSERT INTO reins_session_locks (session_id, owner, lease_until) \
         VALUES ($1, $2, now() + make_interval(secs => $4)) \
         ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until, \
         interrupt_requested = reins_session_locks.interrupt_requested AND reins_session_locks.owner = EXCLUDED.owner \
         WHERE reins_session_locks.owner = EXCLUDED.owner OR reins_session_locks.lease_until <= now() \
         RETURNING 1) \
         SELECT (SELECT COUNT(*) FROM l), (SELECT version FROM reins_sessions WHERE id = $1)",
    ),
    unlock: "DELETE FROM reins_session_locks WHERE session_id = $1 AND owner = $2",
    request_interrupt: "UPDATE reins_session_locks SET interrupt_requested = TRUE \
         WHERE session_id = $1 AND lease_until > now()",
    interrupt_requests: "SELECT session_id FROM reins_session_locks WHERE owner = $1 AND interrupt_requested \
         ORDER BY session_id COLLATE \"C\"",
    // The key spells "reins1" (0x7265_696e_7331): racing workers migrate one at a time.
    migration_lock: Some("SELECT pg_advisory_xact_lock(125779886109489)::text"),
    create_version_table: "CREATE TABLE IF NOT EXISTS reins_schema_version (version BIGINT NOT NULL)",
    schema_version: "SELECT MAX(version) FROM reins_schema_version",
    record_version: "INSERT INTO reins_schema_version (version) VALUES ($1)",
};

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

    async fn load(&self, id: &str) -> Result<Option<SessionState>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let state = flow::load(&mut Pg(&mut tx), &DIALECT, id).await?;
        tx.commit().await?;
        Ok(state)
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

/// [`Exec`] through sqlx on one PostgreSQL connection.
struct Pg<'c>(&'c mut PgConnection);

fn bind<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    args: &[Arg<'q>],
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    for arg in args {
        q = match arg {
            Arg::Int(v) => q.bind(*v),
            Arg::Bool(b) => q.bind(*b),
            Arg::Text(s) => q.bind(*s),
            Arg::OptText(s) => q.bind(*s),
            Arg::Stamp(t) | Arg::Instant(t) => q.bind(*t),
            Arg::Lease(d) => q.bind(d.min(&MAX_LEASE).as_secs_f64()),
            Arg::Ints(v) => q.bind(*v),
            Arg::Texts(v) => q.bind(*v),
        };
    }
    q
}

fn decode_row(row: &PgRow) -> Result<Row> {
    let mut out = Vec::with_capacity(row.len());
    for (i, col) in row.columns().iter().enumerate() {
        if row.try_get_raw(i)?.is_null() {
            out.push(Val::Null);
            continue;
        }
        out.push(match col.type_info().name() {
            "INT8" => Val::Int(row.try_get(i)?),
            "INT4" => Val::Int(i64::from(row.try_get::<i32, _>(i)?)),
            "INT2" => Val::Int(i64::from(row.try_get::<i16, _>(i)?)),
            "BOOL" => Val::Bool(row.try_get(i)?),
            "TIMESTAMPTZ" => Val::Time(row.try_get(i)?),
            "TEXT" | "VARCHAR" | "NAME" => Val::Text(row.try_get(i)?),
            _ => Val::Null,
        });
    }
    Ok(out)
}

impl Exec for Pg<'_> {
    async fn run(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64> {
        let done = bind(sqlx::query(sql), args).execute(&mut *self.0).await?;
        Ok(done.rows_affected())
    }

    async fn rows(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Row>> {
        let rows = bind(sqlx::query(sql), args).fetch_all(&mut *self.0).await?;
        rows.iter().map(decode_row).collect()
    }

    async fn rows_or_duplicate(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Option<Vec<Row>>> {
        match bind(sqlx::query(sql), args).fetch_all(&mut *self.0).await {
            Ok(rows) => rows.iter().map(decode_row).collect::<Result<_>>().map(Some),
            Err(e) if is_unique_violation(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn script(&mut self, sql: &str) -> Result<()> {
        sqlx::Executor::execute(&mut *self.0, sqlx::raw_sql(sql)).await?;
        Ok(())
    }
}

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
        let mut conn = self.pool.acquire().await?;
        flow::finish(&mut Pg(&mut conn), &DIALECT, session, tool_use_id, result).await
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
        flow::append_decisions(&mut Pg(&mut tx), &DIALECT, session, &entries).await?;
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
