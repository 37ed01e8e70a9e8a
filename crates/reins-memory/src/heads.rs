//! One page of sessions without their transcripts, most recently active first
//! ([`MemoryStore::session_heads_page`](crate::MemoryStore::session_heads_page)): what a
//! list of sessions shows, read at a cost that does not grow with the number of stored
//! sessions on the SQL stores (an index walk from the cursor on).

use chrono::{DateTime, Utc};

use crate::store::SessionHead;

/// Which sessions a page of [`session_heads_page`](crate::MemoryStore::session_heads_page)
/// holds. The order is `updated_at` descending, then id ascending (byte order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFilter {
    /// Only sessions whose id starts with this (a user's sessions).
    pub session_prefix: Option<String>,
    /// Only sessions with an open requirement of a call to this tool (read from the
    /// record's payload at `tool_use.name`).
    pub open_tool: Option<String>,
    /// Only sessions whose run state is in this phase: the text at `phase.phase` of
    /// the run state, as reins-agent writes it (`paused`, `idle`, `finished`, ...;
    /// `""` for a session without a run state or without that field). The SQL stores
    /// index it with the activity order, so a page of paused sessions is one index
    /// walk however few of the stored sessions are paused.
    pub phase: Option<String>,
    /// Only those after this `(updated_at, id)` (the last of the previous page).
    pub after: Option<(DateTime<Utc>, String)>,
    /// At most this many (0 is read as 1).
    pub limit: usize,
}

impl SessionFilter {
    /// The first page of up to `limit` sessions, unfiltered.
    pub fn first(limit: usize) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }

    /// Whether `head` passes the filter (its cursor included).
    pub fn admits(&self, head: &SessionHead) -> bool {
        self.session_prefix
            .as_deref()
            .is_none_or(|p| head.id.starts_with(p))
            && self.open_tool.as_deref().is_none_or(|t| {
                head.open_requirements
                    .iter()
                    .any(|r| crate::pending::tool_of(&r.payload) == Some(t))
            })
            && self
                .phase
                .as_deref()
                .is_none_or(|p| phase_of(head.run_state.as_ref()) == p)
            && self.after.as_ref().is_none_or(|(at, id)| {
                head.updated_at < *at || (head.updated_at == *at && head.id > *id)
            })
    }
}

/// The phase of a stored run state as [`SessionFilter::phase`] reads it: the text at
/// `phase.phase`, or `""`.
pub(crate) fn phase_of(run_state: Option<&serde_json::Value>) -> &str {
    run_state
        .and_then(|v| v.pointer("/phase/phase"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or("")
}

/// The page `filter` selects from `heads`: the provided method's answer (a scan).
pub(crate) fn page_of(heads: Vec<SessionHead>, filter: &SessionFilter) -> Vec<SessionHead> {
    let mut page: Vec<SessionHead> = heads.into_iter().filter(|h| filter.admits(h)).collect();
    page.sort_by(|a, b| {
        b.updated_at
            .cmp(&a.updated_at)
            .then_with(|| a.id.cmp(&b.id))
    });
    page.truncate(filter.limit.max(1));
    page
}
