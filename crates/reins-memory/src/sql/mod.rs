//! Shared pieces of the SQL backends: row decoding with errors that name the row.

#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

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
pub(crate) fn encode_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Whether `e` is a unique-constraint violation.
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

/// Where a store's change notices go: every notice to `all`, and those that may be
/// interrupt requests to `interrupts` too (so an agent waiting for interrupt requests
/// does not wake for every commit).
#[derive(Debug, Clone)]
pub(crate) struct Feeds {
    all: tokio::sync::broadcast::Sender<crate::store::StoreChange>,
    interrupts: tokio::sync::broadcast::Sender<crate::store::StoreChange>,
}

impl Feeds {
    fn new() -> Self {
        Self {
            all: tokio::sync::broadcast::channel(1024).0,
            interrupts: tokio::sync::broadcast::channel(64).0,
        }
    }

    /// Announces a change.
    pub(crate) fn send(&self, session: Option<&str>, maybe_interrupt: bool) {
        let change = || crate::store::StoreChange {
            session: session.map(str::to_owned),
            maybe_interrupt,
        };
        if self.all.receiver_count() > 0 {
            let _ = self.all.send(change());
        }
        if maybe_interrupt && self.interrupts.receiver_count() > 0 {
            let _ = self.interrupts.send(change());
        }
    }

    /// Whether anyone still listens.
    pub(crate) fn listened(&self) -> bool {
        self.all.receiver_count() + self.interrupts.receiver_count() > 0
    }
}

/// The change feeds of a SQL store: local writes are announced at once, and one
/// background listener per store (started by the first subscriber, ended when the last
/// one is gone) announces other processes' writes.
#[derive(Debug)]
pub(crate) struct ChangeHub {
    feeds: Feeds,
    listener: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl ChangeHub {
    pub(crate) fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            feeds: Feeds::new(),
            listener: tokio::sync::Mutex::new(None),
        })
    }

    /// Announces a change to `session` made through this store handle.
    pub(crate) fn notify(&self, session: Option<&str>, maybe_interrupt: bool) {
        self.feeds.send(session, maybe_interrupt);
    }

    /// Subscribes to every change (or, with `interrupts_only`, to those that may be
    /// interrupt requests), starting the background listener with `start` when none
    /// runs. `start` gets the feeds and returns the listener's task, or fails.
    pub(crate) async fn subscribe<F, Fut>(
        &self,
        interrupts_only: bool,
        start: F,
    ) -> Result<crate::store::ChangeFeed>
    where
        F: FnOnce(Feeds) -> Fut,
        Fut: std::future::Future<Output = Result<Option<tokio::task::JoinHandle<()>>>>,
    {
        let rx = if interrupts_only {
            self.feeds.interrupts.subscribe()
        } else {
            self.feeds.all.subscribe()
        };
        let mut listener = self.listener.lock().await;
        if listener
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            *listener = start(self.feeds.clone()).await?;
        }
        Ok(rx)
    }
}

impl Drop for ChangeHub {
    fn drop(&mut self) {
        if let Some(task) = self.listener.get_mut().take() {
            task.abort();
        }
    }
}
