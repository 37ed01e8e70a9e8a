//! The steps of every SQL store, written once: what a commit, a load, a ledger claim
//! or a run lock does, in which order, with which checks. A backend supplies a
//! [`Dialect`] (the SQL of each step) and an [`Exec`] (how a statement runs on its
//! driver); the flows here are generic over both.
//!
//! The flows are `async` so that PostgreSQL (sqlx, one network round trip per
//! statement) awaits each statement. SQLite runs them on its connection thread, where
//! every statement completes at once: [`run_ready`] polls a flow to the end there.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reins_message::ToolResult;

use super::{
    decode_decision, decode_ledger, decode_message, decode_requirement, decode_run_state,
    decode_time, encode_json, encode_message, to_i64, to_u64,
};
use crate::commit::Commit;
use crate::error::{Error, Result};
use crate::store::{
    Claim, DecisionEntry, LedgerEntry, LedgerState, MAX_LEASE, SessionState, SessionSummary,
};

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
    /// parameters, then `(ids, bodies)` as arrays → the first new seq. It fails on a
    /// unique constraint when an id is taken. PostgreSQL has it (one round trip
    /// instead of four); SQLite gains nothing from it.
    pub append_commit: Option<&'static str>,
    /// `(session, id)` → seq.
    pub message_seq: &'static str,
    /// `(session)`.
    pub clear_requirements: &'static str,
    /// `(session, id)` → is_open, body (text).
    pub requirement: &'static str,
    /// `(session, id)`.
    pub delete_requirement: &'static str,
    /// `(session, id, is_open, body)`.
    pub insert_requirement: &'static str,
    /// `(session, id, body)`: marks it decided.
    pub decide_requirement: &'static str,
    /// `(session, requirement_id, at: Stamp, record)`.
    pub insert_decision: &'static str,
    /// `(session)` → requirement_id, at, record (text), ordered.
    pub decisions: &'static str,
    /// `()` → id, version, message_count, updated_at, has_open_requirements.
    pub list_sessions: &'static str,
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

async fn one<E: Exec>(e: &mut E, sql: &str, args: &[Arg<'_>]) -> Result<Option<Row>> {
    Ok(e.rows(sql, args).await?.into_iter().next())
}

/// Brings the schema up to `newest` with `migrations`; refuses a newer database.
pub(crate) async fn migrate<E: Exec>(
    e: &mut E,
    d: &Dialect,
    migrations: &[(i64, &str)],
    newest: i64,
) -> Result<()> {
    if let Some(lock) = d.migration_lock {
        e.rows(lock, &[]).await?;
    }
    e.run(d.create_version_table, &[]).await?;
    let current = schema_version(e, d).await?;
    if current > newest {
        return Err(Error::UnsupportedSchema {
            found: current,
            supported: newest,
        });
    }
    for &(version, sql) in migrations {
        if version > current {
            e.script(sql).await?;
            e.run(d.record_version, &[Arg::Int(version)]).await?;
        }
    }
    Ok(())
}

/// The schema version the database is at (0 when empty).
pub(crate) async fn schema_version<E: Exec>(e: &mut E, d: &Dialect) -> Result<i64> {
    Ok(match one(e, d.schema_version, &[]).await? {
        Some(row) => match row.first() {
            Some(Val::Int(n)) => *n,
            _ => 0,
        },
        None => 0,
    })
}

/// Loads a session (run inside one read transaction).
pub(crate) async fn load<E: Exec>(
    e: &mut E,
    d: &Dialect,
    id: &str,
) -> Result<Option<SessionState>> {
    let Some(row) = one(e, d.load_session, &[Arg::Text(id)]).await? else {
        return Ok(None);
    };
    let c = Cols::new(&row, id, "session row");
    let mut messages = Vec::new();
    for r in e.rows(d.load_messages, &[Arg::Text(id)]).await? {
        let m = Cols::new(&r, id, "message row");
        messages.push(decode_message(id, m.int(0)?, m.text(1)?, m.text(2)?)?);
    }
    let mut requirements = Vec::new();
    for r in e.rows(d.load_requirements, &[Arg::Text(id)]).await? {
        let q = Cols::new(&r, id, "requirement row");
        requirements.push(decode_requirement(id, q.text(0)?, q.text(1)?)?);
    }
    Ok(Some(SessionState {
        id: id.to_owned(),
        version: to_u64(c.int(0)?),
        messages,
        requirements,
        run_state: decode_run_state(id, c.opt_text(1)?)?,
        created_at: Cols::new(&row, id, "session row created_at").time(2)?,
        updated_at: Cols::new(&row, id, "session row updated_at").time(3)?,
    }))
}

/// Inserts an empty session unless it exists.
pub(crate) async fn create_session<E: Exec>(e: &mut E, d: &Dialect, id: &str) -> Result<()> {
    e.run(d.create_session, &[Arg::Text(id), Arg::Stamp(Utc::now())])
        .await?;
    Ok(())
}

/// The stored version, if the session exists.
pub(crate) async fn session_version<E: Exec>(
    e: &mut E,
    d: &Dialect,
    id: &str,
) -> Result<Option<u64>> {
    match one(e, d.session_version, &[Arg::Text(id)]).await? {
        Some(row) => Ok(Some(to_u64(Cols::new(&row, id, "session row").int(0)?))),
        None => Ok(None),
    }
}

/// What a commit did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Committed {
    /// Nothing was written (an empty commit, or one restating the stored run state).
    Unchanged(u64),
    /// The new version.
    Changed(u64),
}

/// Applies a commit inside a write transaction. The session row is updated first (one
/// statement: the version check, the counters, the run state, and for PostgreSQL the
/// change notice), then each part in [`Commit`]'s order; any error leaves the caller
/// to roll back.
pub(crate) async fn commit<E: Exec>(
    e: &mut E,
    d: &Dialect,
    id: &str,
    mut commit: Commit,
    channel: &str,
) -> Result<Committed> {
    let expected = commit.expected_version;
    if commit.is_empty() {
        return check_version(e, d, id, expected)
            .await
            .map(Committed::Unchanged);
    }
    let run_state = commit
        .run_state
        .take()
        .map(|rs| rs.map(|v| encode_json("run state", &v)).transpose())
        .transpose()?;
    // Only the run state: when it is what is stored, nothing is written (so a
    // `Durability::Full` SQLite commit costs no fsync).
    let only_run_state = commit.is_empty();
    let payload = notice_payload(id, false);
    let now = Utc::now();
    let rs = run_state.as_ref().map(|rs| rs.as_deref());
    let args = bump_args(id, &commit, rs, only_run_state, now, channel, &payload);
    let bumped = one(e, d.bump_session, &args).await?;
    let Some(row) = bumped else {
        return check_version(e, d, id, expected)
            .await
            .map(Committed::Unchanged);
    };
    let first_seq = Cols::new(&row, id, "session row").int(0)?;
    apply(e, d, id, commit, first_seq, now).await?;
    Ok(Committed::Changed(expected + 1))
}

/// The parameters of `bump_session` (see [`Dialect::bump_session`]).
fn bump_args<'a>(
    id: &'a str,
    commit: &Commit,
    run_state: Option<Option<&'a str>>,
    only_run_state: bool,
    now: DateTime<Utc>,
    channel: &'a str,
    payload: &'a str,
) -> Vec<Arg<'a>> {
    let appended = i64::try_from(commit.append.len()).unwrap_or(i64::MAX);
    let removed = i64::try_from(commit.remove.len()).unwrap_or(i64::MAX);
    vec![
        Arg::Text(id),
        Arg::Int(to_i64(commit.expected_version)),
        Arg::Int(appended),
        Arg::Int(appended - removed),
        Arg::Stamp(now),
        Arg::Bool(run_state.is_some()),
        Arg::OptText(run_state.flatten()),
        Arg::Bool(only_run_state),
        Arg::Text(channel),
        Arg::Text(payload),
    ]
}

/// Whether `commit` can go through [`commit_appending`]: the dialect has
/// [`Dialect::append_commit`] and the commit only appends messages and/or sets the
/// run state, as an agent's steps do.
pub(crate) fn appends_only(d: &Dialect, commit: &Commit) -> bool {
    d.append_commit.is_some()
        && (!commit.append.is_empty() || commit.run_state.is_some())
        && commit.remove.is_empty()
        && commit.replace.is_empty()
        && !commit.clear_requirements
        && commit.add_requirements.is_empty()
        && commit.decide.is_empty()
        && commit.decisions.is_empty()
}

/// A commit that [`appends_only`], as one statement outside any transaction: the
/// statement is atomic, so on any failure nothing changed. Without messages it is
/// `bump_session` alone.
pub(crate) async fn commit_appending<E: Exec>(
    e: &mut E,
    d: &Dialect,
    id: &str,
    mut commit: Commit,
    channel: &str,
) -> Result<Committed> {
    let Some(sql) = d.append_commit.filter(|_| appends_only(d, &commit)) else {
        return Err(Error::Database(
            "internal: commit_appending called for another kind of commit".to_owned(),
        ));
    };
    let expected = commit.expected_version;
    let mut seen = std::collections::HashSet::with_capacity(commit.append.len());
    let mut ids = Vec::with_capacity(commit.append.len());
    let mut bodies = Vec::with_capacity(commit.append.len());
    for m in &commit.append {
        if !seen.insert(m.id.as_str()) {
            return Err(Error::DuplicateMessage {
                session: id.to_owned(),
                id: m.id.clone(),
            });
        }
        ids.push(m.id.clone());
        bodies.push(encode_message(m)?);
    }
    let run_state = commit
        .run_state
        .take()
        .map(|rs| rs.map(|v| encode_json("run state", &v)).transpose())
        .transpose()?;
    let payload = notice_payload(id, false);
    let rs = run_state.as_ref().map(|rs| rs.as_deref());
    let only_run_state = ids.is_empty();
    let mut args = bump_args(
        id,
        &commit,
        rs,
        only_run_state,
        Utc::now(),
        channel,
        &payload,
    );
    // A statement keeps the parameter list it was first prepared with (sqlx caches
    // it): `bump_session` always gets its own ten.
    let sql = if only_run_state {
        d.bump_session
    } else {
        args.extend([Arg::Texts(&ids), Arg::Texts(&bodies)]);
        sql
    };
    match e.rows_or_duplicate(sql, &args).await? {
        Some(rows) if !rows.is_empty() => Ok(Committed::Changed(expected + 1)),
        Some(_) => check_version(e, d, id, expected)
            .await
            .map(Committed::Unchanged),
        None => {
            // Nothing was written; name an appended id the session already holds.
            for mid in &ids {
                let args = [Arg::Text(id), Arg::Text(mid)];
                if one(e, d.message_seq, &args).await?.is_some() {
                    return Err(Error::DuplicateMessage {
                        session: id.to_owned(),
                        id: mid.clone(),
                    });
                }
            }
            Err(Error::Corrupt {
                session: id.to_owned(),
                detail: "appending messages: a message position is already taken".to_owned(),
            })
        }
    }
}

/// The stored version when it is `expected`; otherwise why not.
async fn check_version<E: Exec>(e: &mut E, d: &Dialect, id: &str, expected: u64) -> Result<u64> {
    match session_version(e, d, id).await? {
        None => Err(Error::SessionNotFound { id: id.to_owned() }),
        Some(v) if v != expected => Err(Error::Conflict {
            session: id.to_owned(),
            expected,
            actual: v,
        }),
        Some(v) => Ok(v),
    }
}

/// The NOTIFY payload announcing a change to `session` (PostgreSQL): `c:<id>` for a
/// commit, `i:<id>` for an interrupt request; a payload over NOTIFY's 8000-byte limit
/// is announced as "something changed" (empty).
pub(crate) fn notice_payload(session: &str, interrupt: bool) -> String {
    if session.len() < 7900 {
        format!("{}{session}", if interrupt { "i:" } else { "c:" })
    } else {
        String::new()
    }
}

async fn apply<E: Exec>(
    e: &mut E,
    d: &Dialect,
    session: &str,
    commit: Commit,
    first_seq: i64,
    now: DateTime<Utc>,
) -> Result<()> {
    let s = Arg::Text(session);
    for id in &commit.remove {
        if e.run(d.remove_message, &[s.clone(), Arg::Text(id)]).await? == 0 {
            return Err(Error::MessageNotFound {
                session: session.to_owned(),
                id: id.clone(),
            });
        }
    }
    for m in &commit.replace {
        let body = encode_message(m)?;
        let args = [s.clone(), Arg::Text(&m.id), Arg::Text(&body)];
        if e.run(d.replace_message, &args).await? == 0 {
            return Err(Error::MessageNotFound {
                session: session.to_owned(),
                id: m.id.clone(),
            });
        }
    }
    append(e, d, session, &commit, first_seq).await?;
    if commit.clear_requirements {
        e.run(d.clear_requirements, std::slice::from_ref(&s))
            .await?;
    }
    for r in &commit.add_requirements {
        if let Some(row) = one(e, d.requirement, &[s.clone(), Arg::Text(&r.id)]).await? {
            if Cols::new(&row, session, "requirement row").bool(0)? {
                return Err(Error::DuplicateRequirement {
                    session: session.to_owned(),
                    id: r.id.clone(),
                });
            }
            e.run(d.delete_requirement, &[s.clone(), Arg::Text(&r.id)])
                .await?;
        }
        let body = encode_json("requirement", r)?;
        let args = [
            s.clone(),
            Arg::Text(&r.id),
            Arg::Bool(r.is_open()),
            Arg::Text(&body),
        ];
        e.run(d.insert_requirement, &args).await?;
    }
    for (id, decision) in &commit.decide {
        let Some(row) = one(e, d.requirement, &[s.clone(), Arg::Text(id)]).await? else {
            return Err(Error::RequirementNotFound {
                session: session.to_owned(),
                id: id.clone(),
            });
        };
        let body = Cols::new(&row, session, "requirement row").text(1)?;
        let mut r = decode_requirement(session, id, body)?;
        if !r.is_open() {
            return Err(Error::RequirementAlreadyDecided {
                session: session.to_owned(),
                id: id.clone(),
            });
        }
        r.decision = Some(decision.clone());
        r.decided_at = Some(now);
        let body = encode_json("requirement", &r)?;
        e.run(
            d.decide_requirement,
            &[s.clone(), Arg::Text(id), Arg::Text(&body)],
        )
        .await?;
    }
    insert_decisions(e, d, session, &commit.decisions, now).await
}

/// Appends the commit's messages in one statement, which skips rows whose id the
/// session already holds; the flow then names the duplicate (the caller rolls back).
async fn append<E: Exec>(
    e: &mut E,
    d: &Dialect,
    session: &str,
    commit: &Commit,
    first_seq: i64,
) -> Result<()> {
    if commit.append.is_empty() {
        return Ok(());
    }
    let mut seen = std::collections::HashSet::with_capacity(commit.append.len());
    for m in &commit.append {
        if !seen.insert(m.id.as_str()) {
            return Err(Error::DuplicateMessage {
                session: session.to_owned(),
                id: m.id.clone(),
            });
        }
    }
    let mut seqs = Vec::with_capacity(commit.append.len());
    let mut ids = Vec::with_capacity(commit.append.len());
    let mut bodies = Vec::with_capacity(commit.append.len());
    for (seq, m) in (first_seq..).zip(&commit.append) {
        seqs.push(seq);
        ids.push(m.id.clone());
        bodies.push(encode_message(m)?);
    }
    let inserted = match d.append_messages {
        MultiInsert::Values { head, row, tail } => {
            let mut sql =
                String::with_capacity(head.len() + (row.len() + 1) * ids.len() + tail.len());
            sql.push_str(head);
            let mut args = Vec::with_capacity(4 * ids.len());
            for (i, seq) in seqs.iter().enumerate() {
                if i > 0 {
                    sql.push(',');
                }
                sql.push_str(row);
                args.extend([
                    Arg::Text(session),
                    Arg::Int(*seq),
                    Arg::Text(&ids[i]),
                    Arg::Text(&bodies[i]),
                ]);
            }
            sql.push_str(tail);
            e.run(&sql, &args).await
        }
        MultiInsert::Arrays(sql) => {
            let args = [
                Arg::Text(session),
                Arg::Ints(&seqs),
                Arg::Texts(&ids),
                Arg::Texts(&bodies),
            ];
            e.run(sql, &args).await
        }
    };
    if usize::try_from(inserted?).ok() == Some(ids.len()) {
        return Ok(());
    }
    // Some row was skipped (`ON CONFLICT DO NOTHING`): name the first appended id that
    // is stored at another position.
    for (seq, id) in seqs.iter().zip(&ids) {
        let found = one(e, d.message_seq, &[Arg::Text(session), Arg::Text(id)]).await?;
        let stored = found
            .map(|r| Cols::new(&r, session, "message row").int(0))
            .transpose()?;
        if stored != Some(*seq) {
            return Err(Error::DuplicateMessage {
                session: session.to_owned(),
                id: id.clone(),
            });
        }
    }
    Err(Error::Corrupt {
        session: session.to_owned(),
        detail: "appending messages: a message position is already taken".to_owned(),
    })
}

/// Appends decision log rows (`at` is never later than `now`).
pub(crate) async fn insert_decisions<E: Exec>(
    e: &mut E,
    d: &Dialect,
    session: &str,
    entries: &[DecisionEntry],
    now: DateTime<Utc>,
) -> Result<()> {
    for entry in entries {
        let record = encode_json("decision record", &entry.record)?;
        let args = [
            Arg::Text(session),
            Arg::Text(&entry.requirement_id),
            Arg::Stamp(entry.at.min(now)),
            Arg::Text(&record),
        ];
        e.run(d.insert_decision, &args).await?;
    }
    Ok(())
}

/// Appends decision log rows to an existing session.
pub(crate) async fn append_decisions<E: Exec>(
    e: &mut E,
    d: &Dialect,
    session: &str,
    entries: &[DecisionEntry],
) -> Result<()> {
    if session_version(e, d, session).await?.is_none() {
        return Err(Error::SessionNotFound {
            id: session.to_owned(),
        });
    }
    insert_decisions(e, d, session, entries, Utc::now()).await
}

/// The session's decision log, oldest first.
pub(crate) async fn decisions<E: Exec>(
    e: &mut E,
    d: &Dialect,
    session: &str,
) -> Result<Vec<DecisionEntry>> {
    let rows = e.rows(d.decisions, &[Arg::Text(session)]).await?;
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let c = Cols::new(r, session, "decision row at");
            decode_decision(
                session,
                i + 1,
                c.text(0)?.to_owned(),
                c.time(1)?,
                c.text(2)?,
            )
        })
        .collect()
}

/// Every session, ordered by id.
pub(crate) async fn list_sessions<E: Exec>(e: &mut E, d: &Dialect) -> Result<Vec<SessionSummary>> {
    let rows = e.rows(d.list_sessions, &[]).await?;
    rows.iter()
        .map(|r| {
            let id = Cols::new(r, "", "session row").text(0)?;
            let c = Cols::new(r, id, "session row updated_at");
            Ok(SessionSummary {
                id: id.to_owned(),
                version: to_u64(c.int(1)?),
                message_count: to_u64(c.int(2)?),
                updated_at: c.time(3)?,
                has_open_requirements: c.bool(4)?,
            })
        })
        .collect()
}

/// Deletes a session and everything that hangs off it.
pub(crate) async fn delete_session<E: Exec>(e: &mut E, d: &Dialect, id: &str) -> Result<()> {
    for sql in d.delete_session {
        e.run(sql, &[Arg::Text(id)]).await?;
    }
    Ok(())
}

/// One attempt at a ledger claim, inside a write transaction; `None` when the entry
/// vanished between the insert and the read (try again in a new transaction).
pub(crate) async fn claim<E: Exec>(
    e: &mut E,
    d: &Dialect,
    session: &str,
    tool_use_id: &str,
    fingerprint: &str,
    lease: Duration,
    allow_takeover: bool,
) -> Result<Option<Claim>> {
    let now = Utc::now();
    let (s, t) = (Arg::Text(session), Arg::Text(tool_use_id));
    let insert = [
        s.clone(),
        t.clone(),
        Arg::Text(fingerprint),
        Arg::Instant(now),
        Arg::Lease(lease),
    ];
    if e.run(d.claim_insert, &insert).await? == 1 {
        return Ok(Some(Claim::Granted));
    }
    let select = [s.clone(), t.clone(), Arg::Instant(now)];
    let Some(row) = one(e, d.claim_select, &select).await? else {
        return Ok(None);
    };
    let c = Cols::new(&row, session, "ledger row lease_until");
    let recorded = c.text(0)?;
    if recorded != fingerprint {
        return Err(Error::FingerprintMismatch {
            session: session.to_owned(),
            tool_use_id: tool_use_id.to_owned(),
            recorded: recorded.to_owned(),
            found: fingerprint.to_owned(),
        });
    }
    let (state, result) = decode_ledger(session, tool_use_id, c.text(1)?, c.opt_text(3)?)?;
    if let (LedgerState::Finished, Some(r)) = (state, result) {
        return Ok(Some(Claim::Finished(r)));
    }
    if !c.bool(4)? {
        return Ok(Some(Claim::InFlight {
            lease_until: c.time(2)?,
        }));
    }
    if !allow_takeover {
        return Ok(Some(Claim::Expired));
    }
    let takeover = [s, t, Arg::Instant(now), Arg::Lease(lease)];
    e.run(d.claim_takeover, &takeover).await?;
    Ok(Some(Claim::Granted))
}

/// Records a claimed call's result (the first one wins).
pub(crate) async fn finish<E: Exec>(
    e: &mut E,
    d: &Dialect,
    session: &str,
    tool_use_id: &str,
    result: &ToolResult,
) -> Result<()> {
    let body = encode_json("tool result", result)?;
    let args = [Arg::Text(session), Arg::Text(tool_use_id), Arg::Text(&body)];
    if e.run(d.finish, &args).await? == 0
        && ledger_entry(e, d, session, tool_use_id).await?.is_none()
    {
        return Err(Error::LedgerEntryNotFound {
            session: session.to_owned(),
            tool_use_id: tool_use_id.to_owned(),
        });
    }
    Ok(())
}

/// A ledger entry, if the call was ever claimed.
pub(crate) async fn ledger_entry<E: Exec>(
    e: &mut E,
    d: &Dialect,
    session: &str,
    tool_use_id: &str,
) -> Result<Option<LedgerEntry>> {
    let args = [Arg::Text(session), Arg::Text(tool_use_id)];
    let Some(row) = one(e, d.ledger_entry, &args).await? else {
        return Ok(None);
    };
    let c = Cols::new(&row, session, "ledger row lease_until");
    let (state, result) = decode_ledger(session, tool_use_id, c.text(1)?, c.opt_text(3)?)?;
    Ok(Some(LedgerEntry {
        tool_use_id: tool_use_id.to_owned(),
        fingerprint: c.text(0)?.to_owned(),
        state,
        lease_until: c.time(2)?,
        result,
        attempts: u32::try_from(c.int(4)?).unwrap_or(0),
    }))
}

/// Takes or renews a run lock.
pub(crate) async fn try_lock<E: Exec>(
    e: &mut E,
    d: &Dialect,
    session: &str,
    owner: &str,
    lease: Duration,
) -> Result<bool> {
    let args = [
        Arg::Text(session),
        Arg::Text(owner),
        Arg::Instant(Utc::now()),
        Arg::Lease(lease),
    ];
    Ok(e.run(d.try_lock, &args).await? == 1)
}

/// Releases a run lock held by `owner`.
pub(crate) async fn unlock<E: Exec>(
    e: &mut E,
    d: &Dialect,
    session: &str,
    owner: &str,
) -> Result<()> {
    e.run(d.unlock, &[Arg::Text(session), Arg::Text(owner)])
        .await?;
    Ok(())
}

/// Flags a live run lock for interruption; whether one was flagged.
pub(crate) async fn request_interrupt<E: Exec>(
    e: &mut E,
    d: &Dialect,
    session: &str,
) -> Result<bool> {
    let args = [Arg::Text(session), Arg::Instant(Utc::now())];
    Ok(e.run(d.request_interrupt, &args).await? == 1)
}

/// The flagged sessions whose lock `owner` holds.
pub(crate) async fn interrupt_requests<E: Exec>(
    e: &mut E,
    d: &Dialect,
    owner: &str,
) -> Result<Vec<String>> {
    let rows = e.rows(d.interrupt_requests, &[Arg::Text(owner)]).await?;
    rows.iter()
        .map(|r| Ok(Cols::new(r, "", "lock row").text(0)?.to_owned()))
        .collect()
}
