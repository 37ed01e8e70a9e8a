//! The pending-requirements listing: one index walk per page (per tool when the page
//! is filtered by several tools, merged here), and the migration step that fills the
//! index columns of rows written before they existed.

use chrono::DateTime;

use super::super::{decode_requirement, to_i64};
use super::{Arg, Cols, Dialect, Exec};
use crate::error::Result;
use crate::pending::{PendingFilter, PendingKey, PendingRequirement, order_of, tool_of};

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
