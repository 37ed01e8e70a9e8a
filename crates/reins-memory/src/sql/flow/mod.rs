//! The steps of every SQL store, written once: what a commit, a load, a ledger claim
//! or a run lock does, in which order, with which checks. A backend supplies a
//! [`Dialect`] (the SQL of each step) and an [`Exec`] (how a statement runs on its
//! driver); the flows here are generic over both.
//!
//! The flows are `async` so that PostgreSQL (sqlx, one network round trip per
//! statement) awaits each statement. SQLite runs them on its connection thread, where
//! every statement completes at once: [`run_ready`] polls a flow to the end there.

mod evidence;
mod grants;
mod ledger;
mod outbox;
mod pending;
mod sessions;

pub(crate) use evidence::*;
pub(crate) use grants::*;
pub(crate) use ledger::*;
pub(crate) use outbox::*;
pub(crate) use pending::*;
pub(crate) use sessions::*;

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::decode_time;
use crate::error::{Error, Result};
use crate::store::MAX_LEASE;

/// A statement parameter. Each driver encodes the time-like ones its own way: a
/// [`Arg::Stamp`] is RFC 3339 text in SQLite and `TIMESTAMPTZ` in PostgreSQL; an
/// [`Arg::Instant`] (lease arithmetic) is microseconds in SQLite; a [`Arg::Lease`] is
/// microseconds in SQLite and seconds in PostgreSQL.
#[derive(Debug, Clone)]
pub(crate) enum Arg<'a> {
    Int(i64),
    Bool(bool),
    Text(&'a str),
    OptText(Option<&'a str>),
    Stamp(DateTime<Utc>),
    Instant(DateTime<Utc>),
    Lease(Duration),
    /// PostgreSQL arrays (`UNNEST`); SQLite dialects never use them.
    Ints(&'a [i64]),
    Texts(&'a [String]),
}

impl Arg<'_> {
    /// A lease clamped to [`MAX_LEASE`], in microseconds.
    pub(crate) fn lease_micros(d: Duration) -> i64 {
        i64::try_from(d.min(MAX_LEASE).as_micros()).unwrap_or(i64::MAX)
    }
}

/// A column value as read back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Val {
    Null,
    Int(i64),
    Bool(bool),
    Text(String),
    Time(DateTime<Utc>),
}

/// A result row.
pub(crate) type Row = Vec<Val>;

/// Reads columns of a row, naming the session and what was read when a value is not
/// of the expected kind (a corrupt or foreign database).
pub(crate) struct Cols<'a> {
    row: &'a [Val],
    session: &'a str,
    what: &'a str,
}

impl<'a> Cols<'a> {
    pub(crate) fn new(row: &'a [Val], session: &'a str, what: &'a str) -> Self {
        Self { row, session, what }
    }

    fn bad(&self, i: usize, want: &str) -> Error {
        Error::Corrupt {
            session: self.session.to_owned(),
            detail: format!("{}: column {i} is not {want}", self.what),
        }
    }

    pub(crate) fn int(&self, i: usize) -> Result<i64> {
        match self.row.get(i) {
            Some(Val::Int(n)) => Ok(*n),
            _ => Err(self.bad(i, "an integer")),
        }
    }

    pub(crate) fn bool(&self, i: usize) -> Result<bool> {
        match self.row.get(i) {
            Some(Val::Bool(b)) => Ok(*b),
            Some(Val::Int(n)) => Ok(*n != 0),
            _ => Err(self.bad(i, "a boolean")),
        }
    }

    pub(crate) fn text(&self, i: usize) -> Result<&'a str> {
        match self.row.get(i) {
            Some(Val::Text(s)) => Ok(s),
            _ => Err(self.bad(i, "text")),
        }
    }

    pub(crate) fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        match self.row.get(i) {
            Some(Val::Null) => Ok(None),
            _ => self.int(i).map(Some),
        }
    }

    pub(crate) fn opt_text(&self, i: usize) -> Result<Option<&'a str>> {
        match self.row.get(i) {
            Some(Val::Null) => Ok(None),
            _ => self.text(i).map(Some),
        }
    }

    /// A timestamp: native, RFC 3339 text, or microseconds since the epoch.
    pub(crate) fn time(&self, i: usize) -> Result<DateTime<Utc>> {
        match self.row.get(i) {
            Some(Val::Time(t)) => Ok(*t),
            Some(Val::Text(s)) => decode_time(self.session, self.what, s),
            Some(Val::Int(us)) => {
                DateTime::from_timestamp_micros(*us).ok_or_else(|| Error::Corrupt {
                    session: self.session.to_owned(),
                    detail: format!("{}: timestamp {us} out of range", self.what),
                })
            }
            _ => Err(self.bad(i, "a timestamp")),
        }
    }
}

/// Runs statements on one connection (inside a transaction when the caller opened
/// one).
pub(crate) trait Exec {
    /// Runs a statement; the number of rows it changed.
    fn run(&mut self, sql: &str, args: &[Arg<'_>]) -> impl Future<Output = Result<u64>>;
    /// Runs a query; its rows.
    fn rows(&mut self, sql: &str, args: &[Arg<'_>]) -> impl Future<Output = Result<Vec<Row>>>;
    /// Runs a query; `None` when it failed on a unique constraint (and so changed
    /// nothing).
    fn rows_or_duplicate(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<Option<Vec<Row>>>>;
    /// Runs a script of several statements without parameters (migrations).
    fn script(&mut self, sql: &str) -> impl Future<Output = Result<()>>;
}

/// How a dialect appends several message rows in one statement.
#[derive(Debug, Clone, Copy)]
pub(crate) enum MultiInsert {
    /// `INSERT ... VALUES (..), (..)`: one row of parameters per message after the
    /// statement's head (SQLite).
    Values {
        head: &'static str,
        row: &'static str,
        tail: &'static str,
    },
    /// One statement taking arrays: `(session, seqs, ids, bodies)` (PostgreSQL).
    Arrays(&'static str),
}

/// The SQL of every step, in one dialect. Parameters are numbered (`?N` / `$N`) and
/// every flow passes the same list to every dialect; a dialect may leave some unused
/// (PostgreSQL reads the database clock with `now()` where SQLite uses the `Instant`
/// the flow passes).
#[derive(Debug)]
pub(crate) struct Dialect {
    /// `(id)` → version, run_state (text), created_at, updated_at.
    pub load_session: &'static str,
    /// `(id)` → seq, id, body (text), ordered by seq.
    pub load_messages: &'static str,
    /// `(id)` → id, body (text), ordered.
    pub load_requirements: &'static str,
    /// `(id, now: Stamp)`: inserts an empty session unless it exists.
    pub create_session: &'static str,
    /// `(id)` → version.
    pub session_version: &'static str,
    /// `(id, expected, appended, count_delta, now: Stamp, set_run_state, run_state,
    /// only_run_state, channel, payload)` → the first new seq. Bumps the version when
    /// it is `expected` (and, when only the run state changes, when it differs from the
    /// stored one); may announce the change (PostgreSQL: `pg_notify`).
    pub bump_session: &'static str,
    /// `(session, id)`.
    pub remove_message: &'static str,
    /// `(session, id, body)`.
    pub replace_message: &'static str,
    pub append_messages: MultiInsert,
    /// Optional: a commit that only appends messages (and maybe sets the run state)
    /// as one statement, so it needs no explicit transaction: `bump_session`'s
    /// parameters, then `(ids, bodies)` as arrays, then the owner whose run lock to
    /// release when the session row was updated (or NULL), then the owner who takes
    /// the run lock when the session row was updated (or NULL) and its lease → the
    /// first new seq. It fails on a unique constraint when an id is taken, and with
    /// an error the backend recognizes (PostgreSQL: `postgres::LOCK_HELD`) when the lock to take is another owner's (so the
    /// whole statement is undone). PostgreSQL has it (one round
    /// trip instead of four); SQLite gains nothing from it.
    pub append_commit: Option<&'static str>,
    /// `(session, id)` → seq.
    pub message_seq: &'static str,
    /// `(session)`.
    pub clear_requirements: &'static str,
    /// `(session, id)` → is_open, body (text).
    pub requirement: &'static str,
    /// `(session, id)`.
    pub delete_requirement: &'static str,
    /// `(session, id, is_open, body, open_order, tool)`: `open_order` and `tool` are
    /// the [`pending_requirements`](Dialect::pending_requirements) index's columns.
    pub insert_requirement: &'static str,
    /// `(after_order, after_session, after_id, prefix or NULL, limit)` → session_id, id,
    /// tool, open_order of the open requirements after the key, in key order.
    pub pending_requirements: &'static str,
    /// The same with `(.., limit, tool)`: only those of one tool.
    pub pending_requirements_tool: &'static str,
    /// `(after_at: Stamp, after_id, prefix or NULL, tool or NULL, limit)` → id, version,
    /// message_count, created_at, updated_at, run_state (text), then one open
    /// requirement's id and body (text) or NULLs: a page of sessions after the key in
    /// `updated_at` descending, id ascending order, each with its open requirements
    /// (one row per requirement, by seq).
    pub session_heads_page: &'static str,
    /// `session_heads_page`'s parameters and a sixth, `phase` → the same page of the
    /// sessions whose run state is in that phase (see [`crate::SessionFilter::phase`]):
    /// one walk of the index on (phase, activity).
    pub session_heads_page_phase: &'static str,
    /// `(ids)` → the columns of `session_heads_page` for the sessions named; `ids` is
    /// a JSON array (SQLite) or a text array (PostgreSQL), see `ids_as_json`.
    pub session_heads: &'static str,
    /// Whether `session_heads` takes its ids as one JSON text.
    pub ids_as_json: bool,
    /// `()` → session_id, id, body (text) of the open requirements without an
    /// `open_order` (rows written before the index existed).
    pub unindexed_requirements: &'static str,
    /// `(session, id, open_order, tool)`: fills a row's index columns.
    pub index_requirement: &'static str,
    /// `(session, id, body)`: marks it decided.
    pub decide_requirement: &'static str,
    /// `(session, requirement_id, at: Stamp, record)`.
    pub insert_decision: &'static str,
    /// `(session)` → requirement_id, at, record (text), ordered.
    pub decisions: &'static str,
    /// `()` → id, version, message_count, updated_at, has_open_requirements.
    pub list_sessions: &'static str,
    /// `()` → id, version, message_count, created_at, updated_at, run_state (text),
    /// ordered by id.
    pub list_session_heads: &'static str,
    /// `()` → session_id, id, body (text) of every open requirement, ordered by seq
    /// within a session.
    pub open_requirements: &'static str,
    /// Each `(id)`, in order.
    pub delete_session: &'static [&'static str],
    /// `(session, tool_use_id, fingerprint, now: Instant, lease)`: inserts a running
    /// entry unless one exists.
    pub claim_insert: &'static str,
    /// `(session, tool_use_id, now: Instant)` → fingerprint, state, lease_until,
    /// result (text), expired; locks the row where the dialect can.
    pub claim_select: &'static str,
    /// `(session, tool_use_id, now: Instant, lease)`: re-leases an expired entry.
    pub claim_takeover: &'static str,
    /// `(session, tool_use_id, result)`.
    pub finish: &'static str,
    /// `(session, tool_use_id)` → fingerprint, state, lease_until, result, attempts.
    pub ledger_entry: &'static str,
    /// `(session, owner, now: Instant, lease)`.
    pub try_lock: &'static str,
    /// Optional: `try_lock` and `session_version` as one statement, same parameters →
    /// (1 when acquired else 0, version or NULL). Without it the two run in turn.
    pub try_lock_version: Option<&'static str>,
    /// `(session, owner)`.
    pub unlock: &'static str,
    /// `(session, now: Instant)`.
    pub request_interrupt: &'static str,
    /// `(owner)` → session_id, ordered.
    pub interrupt_requests: &'static str,
    /// Runs first in the migration transaction (PostgreSQL: an advisory lock).
    pub migration_lock: Option<&'static str>,
    /// Creates the version table if missing.
    pub create_version_table: &'static str,
    /// `()` → MAX(version).
    pub schema_version: &'static str,
    /// `(version)`.
    pub record_version: &'static str,
}

/// Polls a flow whose statements all complete at once (SQLite's, on its connection
/// thread) to its end.
pub(crate) fn run_ready<T>(flow: impl Future<Output = Result<T>>) -> Result<T> {
    let mut flow = std::pin::pin!(flow);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match flow.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(r) => r,
        std::task::Poll::Pending => Err(Error::Database(
            "internal: a SQLite statement did not complete synchronously".to_owned(),
        )),
    }
}

pub(crate) async fn one<E: Exec>(e: &mut E, sql: &str, args: &[Arg<'_>]) -> Result<Option<Row>> {
    Ok(e.rows(sql, args).await?.into_iter().next())
}
