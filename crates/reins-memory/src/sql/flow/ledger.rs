//! The tool-call ledger and the session run locks.

use std::time::Duration;

use chrono::Utc;
use reins_message::ToolResult;

use super::super::{decode_ledger, encode_json};
use super::{Arg, Cols, Dialect, Exec, one, session_version};
use crate::error::{Error, Result};
use crate::evidence::Link;
use crate::store::{Claim, LedgerEntry, LedgerState, SessionLock};

/// One attempt at a ledger claim, inside a write transaction; `None` when the entry
/// vanished between the insert and the read (try again in a new transaction).
// The trait method's five arguments, plus the connection, the dialect and the chain.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn claim<E: Exec>(
    e: &mut E,
    d: &Dialect,
    session: &str,
    tool_use_id: &str,
    fingerprint: &str,
    lease: Duration,
    allow_takeover: bool,
    evidence: Option<&super::EvidenceSql>,
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
        if let Some(ev) = evidence {
            let link = Link::claim(tool_use_id, fingerprint, 1);
            super::link(e, ev, session, vec![link]).await?;
        }
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
    if let Some(ev) = evidence {
        let attempt = match ledger_entry(e, d, session, tool_use_id).await? {
            Some(entry) => entry.attempts,
            None => return Ok(None),
        };
        let link = Link::claim(tool_use_id, fingerprint, attempt);
        super::link(e, ev, session, vec![link]).await?;
    }
    Ok(Some(Claim::Granted))
}

/// Records a claimed call's result (the first one wins).
pub(crate) async fn finish<E: Exec>(
    e: &mut E,
    d: &Dialect,
    session: &str,
    tool_use_id: &str,
    result: &ToolResult,
    evidence: Option<&super::EvidenceSql>,
) -> Result<()> {
    let body = encode_json("tool result", result)?;
    let args = [Arg::Text(session), Arg::Text(tool_use_id), Arg::Text(&body)];
    let finished = e.run(d.finish, &args).await?;
    if finished == 0 && ledger_entry(e, d, session, tool_use_id).await?.is_none() {
        return Err(Error::LedgerEntryNotFound {
            session: session.to_owned(),
            tool_use_id: tool_use_id.to_owned(),
        });
    }
    if let (Some(ev), true) = (evidence, finished > 0) {
        let link = Link::finish(session, tool_use_id, result)?;
        super::link(e, ev, session, vec![link]).await?;
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

/// Takes or renews a run lock and, when acquired, reads the session's version (one
/// statement where the dialect has [`Dialect::try_lock_version`]).
pub(crate) async fn try_lock_reading_version<E: Exec>(
    e: &mut E,
    d: &Dialect,
    session: &str,
    owner: &str,
    lease: Duration,
) -> Result<SessionLock> {
    let Some(sql) = d.try_lock_version else {
        if !try_lock(e, d, session, owner, lease).await? {
            return Ok(SessionLock::Busy);
        }
        return Ok(SessionLock::Acquired {
            version: session_version(e, d, session).await?,
        });
    };
    let args = [
        Arg::Text(session),
        Arg::Text(owner),
        Arg::Instant(Utc::now()),
        Arg::Lease(lease),
    ];
    let row = one(e, sql, &args).await?.unwrap_or_default();
    let c = Cols::new(&row, session, "lock row");
    if c.int(0)? == 0 {
        return Ok(SessionLock::Busy);
    }
    Ok(SessionLock::Acquired {
        version: c.opt_int(1)?.map(|v| u64::try_from(v).unwrap_or(0)),
    })
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
