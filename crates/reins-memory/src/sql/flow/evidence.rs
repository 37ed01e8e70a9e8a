//! The evidence chain in SQL (schema version 7): `reins_evidence` (one row per chain
//! entry, its canonical text as written) and `reins_evidence_heads` (each session's
//! last entry). A writer first locks its session's head row (an upsert that changes
//! nothing), so writers of one session take turns and every entry links to the one
//! committed before it.

use super::{Arg, Cols, Exec, one};
use crate::error::{Error, Result};
use crate::evidence::{ChainEntry, ChainHead, Link, Seal, decode};
use crate::sql::to_i64;

/// The SQL of the chain steps in one dialect.
#[derive(Debug)]
pub(crate) struct EvidenceSql {
    /// `(session, genesis)` → seq, hash of the session's head, creating it (seq 0,
    /// genesis) when missing; locks the head row until the transaction ends.
    pub head: &'static str,
    /// `(session, seq, hash)`: moves the head.
    pub advance: &'static str,
    /// `(session, seq, hash, entry)`.
    pub insert: &'static str,
    /// `(session)` → entry (text), by seq.
    pub chain: &'static str,
}

async fn head<E: Exec>(e: &mut E, ev: &EvidenceSql, session: &str) -> Result<ChainHead> {
    let args = [Arg::Text(session), Arg::Text(reins_evidence::GENESIS)];
    let row = one(e, ev.head, &args)
        .await?
        .ok_or_else(|| Error::Corrupt {
            session: session.to_owned(),
            detail: "evidence head: the upsert returned no row".to_owned(),
        })?;
    let c = Cols::new(&row, session, "evidence head row");
    Ok(ChainHead {
        seq: u64::try_from(c.int(0)?).unwrap_or(0),
        hash: c.text(1)?.to_owned(),
    })
}

async fn write<E: Exec>(e: &mut E, ev: &EvidenceSql, entry: &ChainEntry) -> Result<()> {
    let text = entry.to_json().map_err(|err| Error::Encode {
        what: format!("an evidence entry of session `{}`", entry.session),
        detail: err.to_string(),
    })?;
    let seq = to_i64(entry.seq);
    let s = Arg::Text(&entry.session);
    e.run(
        ev.insert,
        &[
            s.clone(),
            Arg::Int(seq),
            Arg::Text(&entry.hash),
            Arg::Text(&text),
        ],
    )
    .await?;
    e.run(ev.advance, &[s, Arg::Int(seq), Arg::Text(&entry.hash)])
        .await?;
    Ok(())
}

/// Appends `links` to the session's chain (inside the caller's transaction).
pub(crate) async fn link<E: Exec>(
    e: &mut E,
    ev: &EvidenceSql,
    session: &str,
    links: Vec<Link>,
) -> Result<()> {
    if links.is_empty() {
        return Ok(());
    }
    let mut at = head(e, ev, session).await?;
    for l in links {
        let entry = l.seal(session, &at)?;
        write(e, ev, &entry).await?;
        at = entry.head();
    }
    Ok(())
}

/// Appends the entry `seal` builds (inside the caller's transaction).
pub(crate) async fn append_sealed<E: Exec>(
    e: &mut E,
    ev: &EvidenceSql,
    session: &str,
    seal: Seal,
) -> Result<ChainEntry> {
    let at = head(e, ev, session).await?;
    let entry = Link::sealed(session, &at, seal)?;
    write(e, ev, &entry).await?;
    Ok(entry)
}

/// The session's chain, oldest first.
pub(crate) async fn chain<E: Exec>(
    e: &mut E,
    ev: &EvidenceSql,
    session: &str,
) -> Result<Vec<ChainEntry>> {
    let rows = e.rows(ev.chain, &[Arg::Text(session)]).await?;
    rows.iter()
        .map(|r| decode(session, Cols::new(r, session, "evidence row").text(0)?))
        .collect()
}
