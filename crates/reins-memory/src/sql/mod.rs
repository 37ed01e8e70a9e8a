//! The SQL backends. Both run the steps written once in [`flow`], each in its own
//! [`flow::Dialect`] (the SQL of every step) through its own driver: sqlx for
//! PostgreSQL, rusqlite on connection threads of its own for SQLite (see
//! `sqlite`'s module doc for why). A new backend is a dialect and an
//! [`flow::Exec`], not a copy of a store. This module holds the row encoding and
//! decoding they share.

// With one backend compiled, the other's half of the shared pieces is unused.
#[cfg_attr(not(all(feature = "sqlite", feature = "postgres")), allow(dead_code))]
mod feeds;
#[cfg_attr(not(all(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) mod flow;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

pub(crate) use feeds::ChangeHub;

use chrono::{DateTime, Utc};
use reins_message::{Msg, ToolResult};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::store::{LedgerState, RequirementRecord};

/// Parses a stored message, naming the row when it is corrupt.
pub(crate) fn decode_message(session: &str, seq: i64, id: &str, body: &str) -> Result<Msg> {
    Msg::from_json(body).map_err(|e| Error::Corrupt {
        session: session.to_owned(),
        detail: format!("message row seq {seq} (id `{id}`) does not parse: {e}"),
    })
}

/// Encodes a message for storage.
pub(crate) fn encode_message(m: &Msg) -> Result<String> {
    m.to_json().map_err(|e| Error::Encode {
        what: format!("message `{}`", m.id),
        detail: e.to_string(),
    })
}

/// Parses a stored requirement, naming the row when it is corrupt.
pub(crate) fn decode_requirement(session: &str, id: &str, body: &str) -> Result<RequirementRecord> {
    serde_json::from_str(body).map_err(|e| Error::Corrupt {
        session: session.to_owned(),
        detail: format!("requirement row `{id}` does not parse: {e}"),
    })
}

/// Encodes any value as JSON text.
pub(crate) fn encode_json<T: serde::Serialize>(what: &str, v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::Encode {
        what: what.to_owned(),
        detail: e.to_string(),
    })
}

/// The run state as stored text: a typed state is serialized straight to text, with
/// no `serde_json::Value` in between.
pub(crate) fn encode_run_state(rs: &crate::RunStateData) -> Result<String> {
    rs.to_json().map_err(|e| Error::Encode {
        what: "run state".to_owned(),
        detail: e.to_string(),
    })
}

/// Parses the stored run state.
pub(crate) fn decode_run_state(session: &str, body: Option<&str>) -> Result<Option<Value>> {
    body.map(|b| {
        serde_json::from_str(b).map_err(|e| Error::Corrupt {
            session: session.to_owned(),
            detail: format!("session row `{session}`: run_state does not parse: {e}"),
        })
    })
    .transpose()
}

/// Parses a ledger row's state and result.
pub(crate) fn decode_ledger(
    session: &str,
    tool_use_id: &str,
    state: &str,
    result: Option<&str>,
) -> Result<(LedgerState, Option<ToolResult>)> {
    let corrupt = |detail: String| Error::Corrupt {
        session: session.to_owned(),
        detail: format!("ledger row `{tool_use_id}`: {detail}"),
    };
    let st =
        LedgerState::parse(state).ok_or_else(|| corrupt(format!("unknown state `{state}`")))?;
    let result = result
        .map(serde_json::from_str::<ToolResult>)
        .transpose()
        .map_err(|e| corrupt(format!("result does not parse: {e}")))?;
    if st == LedgerState::Finished && result.is_none() {
        return Err(corrupt("finished without a result".to_owned()));
    }
    Ok((st, result))
}

/// Parses an RFC 3339 timestamp column.
pub(crate) fn decode_time(session: &str, what: &str, s: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| Error::Corrupt {
            session: session.to_owned(),
            detail: format!("{what}: bad timestamp `{s}`: {e}"),
        })
}

/// Formats a timestamp for a text column (fixed width, so text order is time order).
#[cfg(feature = "sqlite")]
pub(crate) fn encode_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Whether `e` is a unique-constraint violation.
#[cfg(feature = "postgres")]
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|d| d.is_unique_violation())
}

/// A decision log row: `seq` is its 1-based position in the session's log.
pub(crate) fn decode_decision(
    session: &str,
    seq: usize,
    requirement_id: String,
    at: DateTime<Utc>,
    record: &str,
) -> Result<crate::store::DecisionEntry> {
    Ok(crate::store::DecisionEntry {
        seq: seq as u64,
        at,
        record: serde_json::from_str(record).map_err(|e| Error::Corrupt {
            session: session.to_owned(),
            detail: format!("decision row for `{requirement_id}` does not parse: {e}"),
        })?,
        requirement_id,
    })
}

/// Counts to and from the signed integers SQL stores.
pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// See [`to_i64`].
pub(crate) fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
