//! Standing grants in SQL: one table, `reins_grants` (schema version 3), with the grant
//! as a JSON body and the columns the filters use. Grants are kept apart from sessions
//! and the commit path: creating, listing and revoking one are statements of their own.

use super::{Arg, Cols, Exec};
use crate::error::{Error, Result};
use crate::grant::{Grant, GrantFilter, sort_grants};
use crate::sql::encode_json;
use chrono::{DateTime, Utc};

/// The SQL of the grant steps in one dialect.
#[derive(Debug)]
pub(crate) struct GrantSql {
    /// `(id, tool, created_at: Stamp, body)`; fails on a unique constraint when the id
    /// is taken.
    pub insert: &'static str,
    /// `(tool or NULL, include_revoked)` → body (text).
    pub list: &'static str,
    /// `(id)` → body (text).
    pub get: &'static str,
    /// `(id, body)`: marks it revoked unless it is already; changes 0 rows then.
    pub revoke: &'static str,
}

fn decode(body: &str) -> Result<Grant> {
    serde_json::from_str(body).map_err(|e| Error::Corrupt {
        session: String::new(),
        detail: format!("grant row does not parse: {e}"),
    })
}

/// Stores a new grant.
pub(crate) async fn create_grant<E: Exec>(e: &mut E, d: &GrantSql, g: &Grant) -> Result<()> {
    g.validate()
        .map_err(|detail| Error::InvalidGrant { detail })?;
    let body = encode_json("grant", g)?;
    let inserted = e
        .rows_or_duplicate(
            d.insert,
            &[
                Arg::Text(&g.id),
                Arg::Text(&g.tool),
                Arg::Stamp(g.created_at),
                Arg::Text(&body),
            ],
        )
        .await?;
    match inserted {
        Some(_) => Ok(()),
        None => Err(Error::DuplicateGrant { id: g.id.clone() }),
    }
}

/// The grants `f` admits, oldest first.
pub(crate) async fn list_grants<E: Exec>(
    e: &mut E,
    d: &GrantSql,
    f: &GrantFilter,
) -> Result<Vec<Grant>> {
    let rows = e
        .rows(
            d.list,
            &[
                Arg::OptText(f.tool.as_deref()),
                Arg::Bool(f.include_revoked),
            ],
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let g = decode(Cols::new(r, "", "grant row").text(0)?)?;
        if f.admits(&g) {
            out.push(g);
        }
    }
    sort_grants(&mut out);
    Ok(out)
}

/// One grant by id.
pub(crate) async fn grant<E: Exec>(e: &mut E, d: &GrantSql, id: &str) -> Result<Option<Grant>> {
    let rows = e.rows(d.get, &[Arg::Text(id)]).await?;
    rows.first()
        .map(|r| decode(Cols::new(r, "", "grant row").text(0)?))
        .transpose()
}

/// Revokes a grant; the conditional update makes exactly one of racing revocations win.
pub(crate) async fn revoke_grant<E: Exec>(
    e: &mut E,
    d: &GrantSql,
    id: &str,
    by: Option<&str>,
    at: DateTime<Utc>,
) -> Result<Grant> {
    let Some(mut g) = grant(e, d, id).await? else {
        return Err(Error::GrantNotFound { id: id.to_owned() });
    };
    if let Some(when) = g.revoked_at {
        return Err(Error::GrantAlreadyRevoked {
            id: id.to_owned(),
            at: when,
            by: g.revoked_by,
        });
    }
    g.revoked_at = Some(at);
    g.revoked_by = by.map(str::to_owned);
    let body = encode_json("grant", &g)?;
    if e.run(d.revoke, &[Arg::Text(id), Arg::Text(&body)]).await? == 1 {
        return Ok(g);
    }
    // Someone else revoked it in between: report theirs.
    match grant(e, d, id).await? {
        Some(other) => Err(Error::GrantAlreadyRevoked {
            id: id.to_owned(),
            at: other.revoked_at.unwrap_or(at),
            by: other.revoked_by,
        }),
        None => Err(Error::GrantNotFound { id: id.to_owned() }),
    }
}
