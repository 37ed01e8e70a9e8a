//! The open requirements across sessions, one page at a time
//! ([`MemoryStore::pending_requirements`](crate::MemoryStore::pending_requirements)):
//! what an inbox lists, read at a cost that does not grow with the number of stored
//! sessions on the SQL stores (an index walk from the cursor on).
//!
//! The order is newest first, then by session id, then by requirement id (both byte
//! order); a page starts after a [`PendingKey`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::store::{RequirementRecord, SessionHead};

/// Where an open requirement sorts in [`pending_requirements`](crate::MemoryStore::pending_requirements):
/// newest first (`created_at` descending), then `session_id`, then `requirement_id`
/// (ascending, byte order). A page starts strictly after the key it is given.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PendingKey {
    /// When the requirement was raised.
    pub created_at: DateTime<Utc>,
    /// Its session.
    pub session_id: String,
    /// Its id.
    pub requirement_id: String,
}

impl PendingKey {
    /// The sort tuple: time descending (as a negated nanosecond count, so that the
    /// whole key sorts ascending), then the two ids.
    fn order(&self) -> (i64, &str, &str) {
        (
            order_of(self.created_at),
            &self.session_id,
            &self.requirement_id,
        )
    }
}

impl PartialOrd for PendingKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PendingKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.order().cmp(&other.order())
    }
}

/// Which open requirements a page holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingFilter {
    /// Only sessions whose id starts with this (a user's sessions).
    pub session_prefix: Option<String>,
    /// Only requirements of a tool call to one of these tools (the tool name is read
    /// from the record's payload at `tool_use.name`, as reins-agent writes it). An
    /// empty list admits nothing.
    pub tools: Option<Vec<String>>,
    /// Only those after this key (the last of the previous page).
    pub after: Option<PendingKey>,
    /// At most this many (0 is read as 1).
    pub limit: usize,
}

impl PendingFilter {
    /// The first page of up to `limit` open requirements, unfiltered.
    pub fn first(limit: usize) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }

    /// Whether `row` passes the filter (its cursor included).
    pub fn admits(&self, row: &PendingRequirement) -> bool {
        self.session_prefix
            .as_deref()
            .is_none_or(|p| row.key.session_id.starts_with(p))
            && self.tools.as_ref().is_none_or(|t| {
                row.tool
                    .as_deref()
                    .is_some_and(|name| t.iter().any(|x| x == name))
            })
            && self.after.as_ref().is_none_or(|a| row.key > *a)
    }
}

/// One open requirement as [`pending_requirements`](crate::MemoryStore::pending_requirements)
/// lists it: where it sorts and the tool it waits on (the record itself is read with
/// the session).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRequirement {
    /// Its session, id and time.
    pub key: PendingKey,
    /// The tool call's tool name (`payload.tool_use.name`), when the payload has one.
    pub tool: Option<String>,
}

impl PendingRequirement {
    /// The row of an open record of `session`.
    pub fn of(session: &str, r: &RequirementRecord) -> Self {
        Self {
            key: PendingKey {
                created_at: r.created_at,
                session_id: session.to_owned(),
                requirement_id: r.id.clone(),
            },
            tool: tool_of(&r.payload).map(str::to_owned),
        }
    }
}

/// The tool name of a requirement's payload (`tool_use.name`), as the SQL stores
/// index it.
pub(crate) fn tool_of(payload: &serde_json::Value) -> Option<&str> {
    payload.get("tool_use")?.get("name")?.as_str()
}

/// The stored sort column of a requirement raised at `at`: its nanoseconds since the
/// epoch, negated, so that an ascending index walk is newest first. Times beyond the
/// nanosecond range (year 2262) sort as the oldest and newest representable.
pub(crate) fn order_of(at: DateTime<Utc>) -> i64 {
    match at.timestamp_nanos_opt() {
        Some(ns) => ns.saturating_neg(),
        None if at.timestamp() < 0 => i64::MAX,
        None => i64::MIN + 1,
    }
}

/// The page `filter` selects from every open requirement of `heads`: the provided
/// method's and the in-memory store's answer (a scan).
pub(crate) fn page_of_heads<'a>(
    heads: impl IntoIterator<Item = (&'a str, &'a [RequirementRecord])>,
    filter: &PendingFilter,
) -> Vec<PendingRequirement> {
    let mut rows: Vec<PendingRequirement> = heads
        .into_iter()
        .flat_map(|(session, reqs)| {
            reqs.iter()
                .filter(|r| r.is_open())
                .map(move |r| PendingRequirement::of(session, r))
        })
        .filter(|row| filter.admits(row))
        .collect();
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    rows.truncate(filter.limit.max(1));
    rows
}

/// [`page_of_heads`] over loaded heads.
pub(crate) fn page_of(heads: &[SessionHead], filter: &PendingFilter) -> Vec<PendingRequirement> {
    page_of_heads(
        heads
            .iter()
            .map(|h| (h.id.as_str(), h.open_requirements.as_slice())),
        filter,
    )
}
