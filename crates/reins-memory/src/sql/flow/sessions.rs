//! The session steps: migrations, loading, commits, the decision log.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::super::{
    decode_decision, decode_message, decode_requirement, decode_run_state, encode_json,
    encode_message, encode_run_state, to_i64, to_u64,
};
use super::{Arg, Cols, Dialect, Exec, MultiInsert, Val, one};
use crate::commit::Commit;
use crate::error::{Error, Result};
use crate::evidence::Link;
use crate::pending::{order_of, tool_of};
use crate::store::{DecisionEntry, SessionHead, SessionState, SessionSummary};

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
            if version == super::PENDING_INDEX_VERSION {
                super::index_open_requirements(e, d).await?;
            }
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
    outbox: &super::OutboxSql,
    evidence: Option<&super::EvidenceSql>,
) -> Result<Committed> {
    let release = commit.release_lock.take();
    let acquire = commit.acquire_lock.take();
    let notices = std::mem::take(&mut commit.notices);
    let done = commit_parts(e, d, id, commit, channel, evidence).await?;
    // In the commit's transaction: a notice is written exactly when its change is.
    super::insert_notices(e, outbox, &notices).await?;
    // After the version check (a stale commit is a conflict whoever holds the lock),
    // before the release (taking and releasing in one commit leaves it free).
    if let Some(req) = acquire {
        if !super::try_lock(e, d, id, &req.owner, req.lease).await? {
            return Err(Error::SessionLocked {
                session: id.to_owned(),
            });
        }
    }
    if let Some(owner) = release {
        super::unlock(e, d, id, &owner).await?;
    }
    Ok(done)
}

/// [`commit`] without the lock release.
async fn commit_parts<E: Exec>(
    e: &mut E,
    d: &Dialect,
    id: &str,
    mut commit: Commit,
    channel: &str,
    evidence: Option<&super::EvidenceSql>,
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
        .map(|rs| rs.map(|v| encode_run_state(&v)).transpose())
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
    apply(e, d, id, commit, first_seq, now, evidence).await?;
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
///
/// A commit taking the run lock goes this way only when it appends messages (so the
/// statement either writes or fails its version check) and does not also release it.
pub(crate) fn appends_only(d: &Dialect, commit: &Commit) -> bool {
    d.append_commit.is_some()
        && (!commit.append.is_empty() || commit.run_state.is_some())
        && (commit.acquire_lock.is_none()
            || (!commit.append.is_empty() && commit.release_lock.is_none()))
        && commit.remove.is_empty()
        && commit.replace.is_empty()
        && !commit.clear_requirements
        && commit.add_requirements.is_empty()
        && commit.decide.is_empty()
        && commit.decisions.is_empty()
        && commit.notices.is_empty()
}

/// A commit that [`appends_only`], as one statement outside any transaction: the
/// statement is atomic, so on any failure nothing changed. Without messages (and
/// without a lock to release) it is `bump_session` alone. A lock release rides in the
/// statement when the session row changes; when nothing was written it is one more
/// statement.
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
    let release = commit.release_lock.take();
    let acquire = commit.acquire_lock.take();
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
        .map(|rs| rs.map(|v| encode_run_state(&v)).transpose())
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
    let sql = if only_run_state && release.is_none() && acquire.is_none() {
        d.bump_session
    } else {
        args.extend([
            Arg::Texts(&ids),
            Arg::Texts(&bodies),
            Arg::OptText(release.as_deref()),
            Arg::OptText(acquire.as_ref().map(|r| r.owner.as_str())),
            Arg::Lease(acquire.as_ref().map_or(Duration::ZERO, |r| r.lease)),
        ]);
        sql
    };
    match e.rows_or_duplicate(sql, &args).await? {
        Some(rows) if !rows.is_empty() => Ok(Committed::Changed(expected + 1)),
        Some(_) => {
            let v = check_version(e, d, id, expected).await?;
            if acquire.is_some() {
                // An appending commit at the stored version always writes.
                return Err(Error::Database(format!(
                    "internal: a commit to `{id}` at its stored version {v} wrote nothing"
                )));
            }
            if let Some(owner) = &release {
                super::unlock(e, d, id, owner).await?;
            }
            Ok(Committed::Unchanged(v))
        }
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
    evidence: Option<&super::EvidenceSql>,
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
            Arg::Int(order_of(r.created_at)),
            Arg::OptText(tool_of(&r.payload)),
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
    insert_decisions(e, d, session, &commit.decisions, now, evidence).await
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
    evidence: Option<&super::EvidenceSql>,
) -> Result<()> {
    if let Some(ev) = evidence {
        let links = entries.iter().map(|d| Link::decision(d, now)).collect();
        super::link(e, ev, session, links).await?;
    }
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
    evidence: Option<&super::EvidenceSql>,
) -> Result<()> {
    if session_version(e, d, session).await?.is_none() {
        return Err(Error::SessionNotFound {
            id: session.to_owned(),
        });
    }
    insert_decisions(e, d, session, entries, Utc::now(), evidence).await
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

/// Every session without its messages, in the order of `list_session_heads`: two
/// queries (the sessions, then every open requirement), whatever the number of
/// sessions. Run it in one read
/// transaction so that both see the same state.
pub(crate) async fn list_session_heads<E: Exec>(
    e: &mut E,
    d: &Dialect,
) -> Result<Vec<SessionHead>> {
    let mut heads = Vec::new();
    for r in e.rows(d.list_session_heads, &[]).await? {
        let id = Cols::new(&r, "", "session row").text(0)?;
        let c = Cols::new(&r, id, "session row");
        heads.push(SessionHead {
            id: id.to_owned(),
            version: to_u64(c.int(1)?),
            message_count: to_u64(c.int(2)?),
            created_at: Cols::new(&r, id, "session row created_at").time(3)?,
            updated_at: Cols::new(&r, id, "session row updated_at").time(4)?,
            run_state: decode_run_state(id, c.opt_text(5)?)?,
            open_requirements: Vec::new(),
        });
    }
    let index: std::collections::HashMap<String, usize> = heads
        .iter()
        .enumerate()
        .map(|(i, h)| (h.id.clone(), i))
        .collect();
    for r in e.rows(d.open_requirements, &[]).await? {
        let session = Cols::new(&r, "", "requirement row").text(0)?;
        let q = Cols::new(&r, session, "requirement row");
        let record = decode_requirement(session, q.text(1)?, q.text(2)?)?;
        // Rows of a session created after the first query are left out.
        if let Some(&at) = index.get(session) {
            heads[at].open_requirements.push(record);
        }
    }
    Ok(heads)
}

/// Deletes a session and everything that hangs off it.
pub(crate) async fn delete_session<E: Exec>(e: &mut E, d: &Dialect, id: &str) -> Result<()> {
    for sql in d.delete_session {
        e.run(sql, &[Arg::Text(id)]).await?;
    }
    Ok(())
}
