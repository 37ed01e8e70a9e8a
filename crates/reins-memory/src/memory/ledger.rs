//! The in-memory ledger and decision log: a call's claim (granted, in flight, finished,
//! expired) and the numbering of decision entries, on the store's state under its one
//! lock.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Inner;
use crate::error::{Error, Result};
use crate::store::{Claim, DecisionEntry, LedgerEntry, LedgerState, lease_end};

/// A ledger claim on `inner`: the answer, and the lease's attempt number when granted.
pub(super) fn claim_in(
    inner: &mut Inner,
    session: &str,
    tool_use_id: &str,
    fingerprint: &str,
    lease: Duration,
    allow_takeover: bool,
    now: DateTime<Utc>,
) -> Result<(Claim, Option<u32>)> {
    let calls = match inner.ledger.get_mut(session) {
        Some(calls) => calls,
        None => inner.ledger.entry(session.to_owned()).or_default(),
    };
    let Some(entry) = calls.get_mut(tool_use_id) else {
        calls.insert(
            tool_use_id.to_owned(),
            LedgerEntry {
                tool_use_id: tool_use_id.to_owned(),
                fingerprint: fingerprint.to_owned(),
                state: LedgerState::Running,
                lease_until: lease_end(now, lease),
                result: None,
                attempts: 1,
            },
        );
        return Ok((Claim::Granted, Some(1)));
    };
    if entry.fingerprint != fingerprint {
        return Err(Error::FingerprintMismatch {
            session: session.to_owned(),
            tool_use_id: tool_use_id.to_owned(),
            recorded: entry.fingerprint.clone(),
            found: fingerprint.to_owned(),
        });
    }
    if let (LedgerState::Finished, Some(result)) = (entry.state, &entry.result) {
        return Ok((Claim::Finished(result.clone()), None));
    }
    if entry.lease_until > now {
        return Ok((
            Claim::InFlight {
                lease_until: entry.lease_until,
            },
            None,
        ));
    }
    if !allow_takeover {
        return Ok((Claim::Expired, None));
    }
    entry.lease_until = lease_end(now, lease);
    entry.attempts = entry.attempts.saturating_add(1);
    Ok((Claim::Granted, Some(entry.attempts)))
}

/// Appends to a session's decision log, numbering the entries.
pub(super) fn push_decisions(
    logs: &mut HashMap<String, Vec<DecisionEntry>>,
    session: &str,
    entries: Vec<DecisionEntry>,
    now: DateTime<Utc>,
) {
    if entries.is_empty() {
        return;
    }
    let log = logs.entry(session.to_owned()).or_default();
    for mut e in entries {
        e.seq = log.len() as u64 + 1;
        if e.at > now {
            e.at = now;
        }
        log.push(e);
    }
}
