//! The keyset listings: the pending requirements (one index walk per page, per tool
//! when the page is filtered by several tools, merged here) with the migration step
//! that fills the index columns of rows written before they existed, and the pages of
//! session heads.

use chrono::DateTime;

use super::super::{decode_requirement, decode_run_state, to_i64, to_u64};
use super::{Arg, Cols, Dialect, Exec};
use crate::error::Result;
use crate::heads::SessionFilter;
use crate::pending::{PendingFilter, PendingKey, PendingRequirement, order_of, tool_of};
use crate::store::SessionHead;

/// The schema version that added the index columns (`open_order`, `tool`).
pub(crate) const PENDING_INDEX_VERSION: i64 = 5;

/// One page of open requirements (see [`crate::MemoryStore::pending_requirements`]).
/// Run it in one read transaction when the filter names several tools.
pub(crate) async fn pending_requirements<E: Exec>(
    e: &mut E,
    d: &Dialect,
    filter: &PendingFilter,
) -> Result<Vec<PendingRequirement>> {
    let limit = filter.limit.max(1);
    // Before every real row: `order_of` never gives i64::MIN.
    let (order, session, id) = match &filter.after {
        Some(k) => (
            order_of(k.created_at),
            k.session_id.as_str(),
            k.requirement_id.as_str(),
        ),
        None => (i64::MIN, "", ""),
    };
    let head = [
        Arg::Int(order),
        Arg::Text(session),
        Arg::Text(id),
        Arg::OptText(filter.session_prefix.as_deref()),
        Arg::Int(to_i64(limit as u64)),
    ];
    let mut rows = Vec::new();
    match &filter.tools {
        None => rows = decode(e.rows(d.pending_requirements, &head).await?)?,
        Some(tools) => {
            let mut seen = std::collections::BTreeSet::new();
            for tool in tools.iter().filter(|t| seen.insert(t.as_str())) {
                let mut args = head.to_vec();
                args.push(Arg::Text(tool));
                rows.extend(decode(e.rows(d.pending_requirements_tool, &args).await?)?);
            }
            rows.sort_by(|a, b| a.key.cmp(&b.key));
            rows.truncate(limit);
        }
    }
    Ok(rows)
}

fn decode(rows: Vec<super::Row>) -> Result<Vec<PendingRequirement>> {
    rows.iter()
        .map(|r| {
            let session = Cols::new(r, "", "pending requirement row").text(0)?;
            let c = Cols::new(r, session, "pending requirement row");
            let order = c.int(3)?;
            Ok(PendingRequirement {
                key: PendingKey {
                    created_at: DateTime::from_timestamp_nanos(order.saturating_neg()),
                    session_id: session.to_owned(),
                    requirement_id: c.text(1)?.to_owned(),
                },
                tool: c.opt_text(2)?.map(str::to_owned),
            })
        })
        .collect()
}

/// Fills `open_order` and `tool` of the open requirements written before schema
/// version [`PENDING_INDEX_VERSION`] (in the migration's transaction). A row whose
/// body does not parse stays out of the index (its session cannot be loaded either);
/// the migration goes on and logs it.
pub(crate) async fn index_open_requirements<E: Exec>(e: &mut E, d: &Dialect) -> Result<()> {
    for r in e.rows(d.unindexed_requirements, &[]).await? {
        let session = Cols::new(&r, "", "requirement row").text(0)?;
        let c = Cols::new(&r, session, "requirement row");
        let id = c.text(1)?;
        let record = match decode_requirement(session, id, c.text(2)?) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(session, requirement = id, error = %e, "an open requirement that does not parse stays out of the pending index");
                continue;
            }
        };
        let args = [
            Arg::Text(session),
            Arg::Text(id),
            Arg::Int(order_of(record.created_at)),
            Arg::OptText(tool_of(&record.payload)),
        ];
        e.run(d.index_requirement, &args).await?;
    }
    Ok(())
}

/// One page of session heads (see [`crate::MemoryStore::session_heads_page`]): one
/// statement, the page's sessions joined with their open requirements.
pub(crate) async fn session_heads_page<E: Exec>(
    e: &mut E,
    d: &Dialect,
    filter: &SessionFilter,
) -> Result<Vec<SessionHead>> {
    let limit = filter.limit.max(1);
    // After every real row: the latest time the text and the database types hold.
    let last = DateTime::parse_from_rfc3339("9999-12-31T23:59:59.999999Z")
        .map(|t| t.with_timezone(&chrono::Utc))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
    let (at, id) = match &filter.after {
        Some((at, id)) => (*at, id.as_str()),
        None => (last, ""),
    };
    let mut args = vec![
        Arg::Stamp(at),
        Arg::Text(id),
        Arg::OptText(filter.session_prefix.as_deref()),
        Arg::OptText(filter.open_tool.as_deref()),
        Arg::Int(to_i64(limit as u64)),
    ];
    let sql = match filter.phase.as_deref() {
        None => d.session_heads_page,
        Some(phase) => {
            args.push(Arg::Text(phase));
            d.session_heads_page_phase
        }
    };
    heads_of(e.rows(sql, &args).await?)
}

/// The heads of the sessions named (see [`crate::MemoryStore::session_heads`]).
pub(crate) async fn session_heads<E: Exec>(
    e: &mut E,
    d: &Dialect,
    ids: &[String],
) -> Result<Vec<SessionHead>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let json;
    let arg = if d.ids_as_json {
        json = super::super::encode_json("session ids", &ids)?;
        Arg::Text(&json)
    } else {
        Arg::Texts(ids)
    };
    heads_of(e.rows(d.session_heads, &[arg]).await?)
}

/// Session heads from rows of a session's columns and one open requirement (or
/// NULLs), a session's rows next to each other.
fn heads_of(rows: Vec<super::Row>) -> Result<Vec<SessionHead>> {
    let mut heads: Vec<SessionHead> = Vec::new();
    for r in rows {
        let id = Cols::new(&r, "", "session row").text(0)?;
        if heads.last().is_none_or(|h| h.id != id) {
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
        let q = Cols::new(&r, id, "requirement row");
        if let (Some(rid), Some(body), Some(head)) =
            (q.opt_text(6)?, q.opt_text(7)?, heads.last_mut())
        {
            head.open_requirements
                .push(decode_requirement(id, rid, body)?);
        }
    }
    Ok(heads)
}
