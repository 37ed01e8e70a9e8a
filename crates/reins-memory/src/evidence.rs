//! The evidence chain as the stores write it (see [`reins_evidence`] and
//! docs/evidence.md): the entry each audit-trail row and each ledger outcome adds to its
//! session's chain, built the same way by every store, in the transaction of the change
//! it records. Turned on per store handle with
//! [`MemoryStore::record_evidence`](crate::MemoryStore::record_evidence); read back with
//! [`MemoryStore::evidence`](crate::MemoryStore::evidence).
//!
//! In the SQL stores (schema version 7) the chain starts at the migration: what a
//! session recorded before it is not in its chain.

pub use reins_evidence::{ChainEntry, ChainHead, EntryKind};
/// Builds an entry's body once the store knows the chain's head and the entry's time
/// (RFC 3339): how a receipt binds the chain head it was signed at. Called once,
/// inside the store's transaction; the key it signs with stays with the caller.
pub type Seal = Box<
    dyn FnOnce(&ChainHead, &str) -> reins_evidence::Result<(EntryKind, serde_json::Value)>
        + Send
        + 'static,
>;

use chrono::{DateTime, SecondsFormat, Utc};
use reins_message::ToolResult;

use crate::error::{Error, Result};
use crate::store::DecisionEntry;

/// A time as chain entries write it: RFC 3339, UTC, microseconds, `Z`.
pub(crate) fn stamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn encode(session: &str, e: reins_evidence::Error) -> Error {
    Error::Encode {
        what: format!("an evidence entry of session `{session}`"),
        detail: e.to_string(),
    }
}

/// What one chain entry records, before it is linked.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    pub kind: EntryKind,
    pub at: String,
    pub body: serde_json::Value,
}

impl Link {
    /// An audit-trail entry (its time as the log stores it: never after `now`).
    pub(crate) fn decision(entry: &DecisionEntry, now: DateTime<Utc>) -> Self {
        Self {
            kind: EntryKind::Decision,
            at: stamp(entry.at.min(now)),
            body: reins_evidence::decision_body(&entry.requirement_id, &entry.record),
        }
    }

    /// A ledger claim granted (`attempt` 1, or more for a takeover).
    pub(crate) fn claim(tool_use_id: &str, fingerprint: &str, attempt: u32) -> Self {
        Self {
            kind: EntryKind::Claim,
            at: stamp(Utc::now()),
            body: reins_evidence::claim_body(tool_use_id, fingerprint, attempt),
        }
    }

    /// A ledger result recorded.
    pub(crate) fn finish(session: &str, tool_use_id: &str, result: &ToolResult) -> Result<Self> {
        let digest =
            reins_evidence::digest(result, "a tool result").map_err(|e| encode(session, e))?;
        Ok(Self {
            kind: EntryKind::Finish,
            at: stamp(Utc::now()),
            body: reins_evidence::finish_body(tool_use_id, result.outcome.label(), &digest),
        })
    }

    /// The entry `seal` builds after `head`.
    pub(crate) fn sealed(session: &str, head: &ChainHead, seal: Seal) -> Result<ChainEntry> {
        let at = stamp(Utc::now());
        let (kind, body) = seal(head, &at).map_err(|e| encode(session, e))?;
        Self { kind, at, body }.seal(session, head)
    }

    /// The entry that follows `head`.
    pub(crate) fn seal(self, session: &str, head: &ChainHead) -> Result<ChainEntry> {
        ChainEntry::next(session, head, self.kind, self.at, self.body)
            .map_err(|e| encode(session, e))
    }
}

/// Reads a stored entry back (the SQL stores keep entries as JSON text).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn decode(session: &str, text: &str) -> Result<ChainEntry> {
    serde_json::from_str(text).map_err(|e| Error::Corrupt {
        session: session.to_owned(),
        detail: format!("evidence entry does not parse: {e}"),
    })
}

/// The provided answer of stores without a chain.
pub(crate) fn unsupported() -> Error {
    Error::Unsupported {
        what: "the evidence chain".to_owned(),
    }
}
