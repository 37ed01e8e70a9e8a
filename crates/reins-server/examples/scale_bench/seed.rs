//! Filling a store with N sessions as reins writes them: three template sessions run
//! through the agent on the store itself, then bulk `INSERT .. SELECT` copies of their
//! rows (sessions, messages, open requirements) in transactions of 100,000 sessions,
//! with each copy's id, times and pending requirement's time (in the record, in the run
//! state and in the index column) set; the templates are deleted afterwards.

use std::sync::Arc;
use std::time::Instant;

use reins_memory::MemoryStore;
use reins_message::Msg;

/// The first session's time (2026-01-01T00:00:00Z); session `i` is one second later
/// than session `i - 1`, so newer sessions have larger numbers.
const BASE: i64 = 1_767_225_600;

/// Sessions per seeding transaction.
const CHUNK: usize = 100_000;

/// The templates: (id, what the 10th user message asks).
const TEMPLATES: [(&str, &str); 3] = [
    ("tmpl/idle", "hello"),
    ("tmpl/send", "mail bob"),
    ("tmpl/delete", "delete /tmp/x"),
];

/// Which sessions exist and which are paused.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub sessions: usize,
    pub paused: usize,
}

impl Layout {
    /// Every `stride`-th session (from 0) is paused, the first `paused` of those.
    fn stride(&self) -> usize {
        (self.sessions / self.paused.max(1)).max(1)
    }

    /// The id of session `i`: its user is `u<k>` with k its stride number's last digit
    /// (so that each user has paused sessions).
    pub fn id(&self, i: usize) -> String {
        format!("u{}/s{i:07}", (i / self.stride()) % 10)
    }

    /// The session number of the `j`-th paused session.
    pub fn paused_session(&self, j: usize) -> usize {
        j * self.stride()
    }

    /// An idle session near `k` (one that is not paused).
    pub fn idle_session(&self, k: usize) -> usize {
        let i = (k * 7 + 1) % self.sessions;
        if self.paused > 0 && i % self.stride() == 0 && i / self.stride() < self.paused {
            (i + 1) % self.sessions
        } else {
            i
        }
    }
}

/// Runs the templates through the agent, then copies them to `layout.sessions`
/// sessions. Returns the seconds it took.
pub(crate) async fn seed(
    kind: &str,
    store: Arc<dyn MemoryStore>,
    raw: &Raw,
    layout: Layout,
) -> Result<f64, String> {
    let start = Instant::now();
    let agent = crate::agent(store.clone());
    let mut stamps = Vec::new();
    for (id, last) in TEMPLATES {
        let session = agent.session(id).await.map_err(|e| e.to_string())?;
        for turn in 0..9 {
            session
                .send(Msg::user(format!("turn {turn}")))
                .await
                .map_err(|e| format!("template {id}: {e}"))?;
        }
        let _ = session
            .send(Msg::user(last))
            .await
            .map_err(|e| format!("template {id}: {e}"))?;
        let state = store.load_session(id).await.map_err(|e| e.to_string())?;
        if state.messages.len() != 20 {
            return Err(format!(
                "template {id} has {} messages, not 20",
                state.messages.len()
            ));
        }
        // The pending requirement's time, as it is written in the record and the run
        // state; the copies get their own.
        let stamp = match state.open_requirements().next() {
            Some(r) => {
                let s = serde_json::to_string(&r.created_at).map_err(|e| e.to_string())?;
                let run_state = serde_json::to_string(&state.run_state).unwrap_or_default();
                if !run_state.contains(s.trim_matches('"')) {
                    return Err(format!("template {id}: the run state does not hold {s}"));
                }
                s.trim_matches('"').to_owned()
            }
            None => "\u{1}no pending requirement".to_owned(),
        };
        stamps.push((id, stamp));
    }
    let values = stamps
        .iter()
        .map(|(id, s)| format!("('{id}', '{s}')"))
        .collect::<Vec<_>>()
        .join(", ");
    let stride = layout.stride();
    let mut lo = 0;
    while lo < layout.sessions {
        let hi = (lo + CHUNK).min(layout.sessions);
        let sql = copies(kind, lo, hi, stride, layout.paused, &values);
        raw.batch(&sql).await?;
        lo = hi;
    }
    for (id, _) in TEMPLATES {
        store.delete_session(id).await.map_err(|e| e.to_string())?;
    }
    raw.batch(if kind == "sqlite" {
        "ANALYZE; PRAGMA wal_checkpoint(TRUNCATE);"
    } else {
        "ANALYZE"
    })
    .await?;
    Ok(start.elapsed().as_secs_f64())
}

/// The statements that copy the templates to sessions `lo..hi`, in one transaction.
fn copies(kind: &str, lo: usize, hi: usize, stride: usize, paused: usize, values: &str) -> String {
    let sqlite = kind == "sqlite";
    // s(i, id, tmpl, t): the session number, its id, its template, its time (RFC 3339
    // to the second, as chrono writes a whole second).
    let series = if sqlite {
        format!(
            "WITH RECURSIVE n(i) AS (SELECT {lo} UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {hi}), \
             t(id, ts) AS (VALUES {values}), \
             s AS (SELECT i, printf('u%d/s%07d', (i / {stride}) % 10, i) AS id, \
               CASE WHEN i % {stride} = 0 AND i / {stride} < {paused} \
                 THEN CASE WHEN (i / {stride} / 10) % 10 = 0 THEN 'tmpl/delete' ELSE 'tmpl/send' END \
                 ELSE 'tmpl/idle' END AS tmpl, \
               strftime('%Y-%m-%dT%H:%M:%S', {BASE} + i, 'unixepoch') AS t FROM n)"
        )
    } else {
        format!(
            "WITH t(id, ts) AS (VALUES {values}), \
             s AS (SELECT i, 'u' || ((i / {stride}) % 10) || '/s' || CASE WHEN i >= 10000000 THEN i::text ELSE lpad(i::text, 7, '0') END AS id, \
               CASE WHEN i % {stride} = 0 AND i / {stride} < {paused} \
                 THEN CASE WHEN (i / {stride} / 10) % 10 = 0 THEN 'tmpl/delete' ELSE 'tmpl/send' END \
                 ELSE 'tmpl/idle' END AS tmpl, \
               to_char(to_timestamp({BASE} + i) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') AS t \
               FROM generate_series({lo}::bigint, {hi}::bigint - 1) AS g(i))"
        )
    };
    let pg_stamp = format!("to_timestamp({BASE} + s.i)");
    let (stamp, run_state, body) = if sqlite {
        (
            "s.t || '.000000Z'",
            "replace(replace(x.run_state, t.ts, s.t || 'Z'), x.id, s.id)",
            "replace(r.body, t.ts, s.t || 'Z')",
        )
    } else {
        (
            pg_stamp.as_str(),
            "replace(replace(x.run_state::text, t.ts, s.t || 'Z'), x.id, s.id)::jsonb",
            "replace(r.body::text, t.ts, s.t || 'Z')::jsonb",
        )
    };
    format!(
        "BEGIN; \
         {series} INSERT INTO reins_sessions (id, version, next_seq, message_count, run_state, created_at, updated_at) \
           SELECT s.id, x.version, x.next_seq, x.message_count, {run_state}, {stamp}, {stamp} \
           FROM s JOIN reins_sessions x ON x.id = s.tmpl JOIN t ON t.id = s.tmpl; \
         {series} INSERT INTO reins_messages (session_id, seq, id, body) \
           SELECT s.id, m.seq, m.id, m.body FROM s JOIN reins_messages m ON m.session_id = s.tmpl; \
         {series} INSERT INTO reins_requirements (session_id, id, seq, is_open, body, open_order, tool) \
           SELECT s.id, r.id, r.seq, r.is_open, {body}, -({BASE} + s.i) * 1000000000, r.tool \
           FROM s JOIN reins_requirements r ON r.session_id = s.tmpl JOIN t ON t.id = s.tmpl \
           WHERE r.is_open; \
         COMMIT;"
    )
}

/// Raw SQL on the bench's store: for seeding and the query plans.
pub(crate) enum Raw {
    Sqlite(reins_memory::SqliteStore),
    Postgres(reins_memory::PostgresStore),
}

impl Raw {
    /// Runs a script of statements.
    pub async fn batch(&self, sql: &str) -> Result<(), String> {
        match self {
            Self::Sqlite(s) => {
                let sql = sql.to_owned();
                s.with_connection(move |c| c.execute_batch(&sql))
                    .await
                    .map_err(|e| format!("seeding: {e}"))
            }
            Self::Postgres(p) => sqlx::raw_sql(sql)
                .execute(p.pool())
                .await
                .map(|_| ())
                .map_err(|e| format!("seeding: {e}")),
        }
    }

    /// The store's size on disk in MiB (tables and indexes; SQLite: the database
    /// file after the checkpoint).
    pub async fn size_mib(&self) -> Result<f64, String> {
        let bytes: i64 = match self {
            Self::Sqlite(s) => s
                .with_connection(|c| {
                    c.query_row(
                        "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
                        [],
                        |r| r.get(0),
                    )
                })
                .await
                .map_err(|e| format!("size: {e}"))?,
            Self::Postgres(p) => {
                use sqlx::Row;
                sqlx::query(
                    "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c \
                     JOIN pg_namespace n ON n.oid = c.relnamespace \
                     WHERE n.nspname = current_schema() AND c.relkind = 'r'",
                )
                .fetch_one(p.pool())
                .await
                .and_then(|r| r.try_get(0))
                .map_err(|e| format!("size: {e}"))?
            }
        };
        Ok(bytes as f64 / (1024.0 * 1024.0))
    }

    /// The plan of a query: `EXPLAIN QUERY PLAN` (SQLite) or `EXPLAIN ANALYZE`
    /// (PostgreSQL), one line per row.
    pub async fn plan(&self, sql: &str) -> Result<Vec<String>, String> {
        match self {
            Self::Sqlite(s) => {
                let sql = format!("EXPLAIN QUERY PLAN {sql}");
                s.with_connection(move |c| {
                    let mut st = c.prepare(&sql)?;
                    let rows = st.query_map([], |r| r.get::<_, String>(3))?;
                    rows.collect::<Result<Vec<_>, _>>()
                })
                .await
                .map_err(|e| format!("plan: {e}"))
            }
            Self::Postgres(p) => {
                use sqlx::Row;
                let rows = sqlx::query(&format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {sql}"))
                    .fetch_all(p.pool())
                    .await
                    .map_err(|e| format!("plan: {e}"))?;
                Ok(rows
                    .iter()
                    .filter_map(|r| r.try_get::<String, _>(0).ok())
                    .collect())
            }
        }
    }
}
