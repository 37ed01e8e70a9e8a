//! # reins-memory
//!
//! Where reins sessions live, and the pure rules that keep a conversation valid.
//!
//! - [`repair`]: transcript repair and pending-tool detection, as pure functions:
//!   [`sanitize_for_request`] (before every model request),
//!   [`sanitize_after_interrupt`] (after ESC / `interrupt()`), [`pending_tool_uses`].
//!   Each repair returns a [`RepairReport`], so nothing changes silently.
//! - [`MemoryStore`]: the one persistence trait. Sessions carry a version for
//!   optimistic concurrency ([`Commit`] applies in one transaction; a stale writer gets
//!   [`Error::Conflict`]), requirements (pauses waiting for a person), the agent's run
//!   state, the **tool-call ledger** ([`MemoryStore::claim`] / [`MemoryStore::finish`]:
//!   at-most-once side effects) and a cross-process run lock, taken together with a
//!   version read ([`MemoryStore::try_lock_session_reading_version`]) and released by
//!   the run's last commit ([`Commit::release_lock`]).
//! - An **outbox** of [`Notice`]s written with the changes they report, and their
//!   [`Delivery`]s with leases and an attempt log (see [`notice`]).
//! - An **evidence chain** per session (see [`evidence`]): a hash chain over the
//!   decision log and the ledger's outcomes, written in the same transaction, with
//!   signed receipts appended by the agent ([`MemoryStore::append_evidence`]).
//! - Backends: [`InMemoryStore`] (always), `SqliteStore` (feature `sqlite`),
//!   `PostgresStore` (feature `postgres`). All pass one conformance suite.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::time::Duration;
//! use reins_memory::{Claim, Commit, InMemoryStore, MemoryStore, fingerprint};
//! use reins_message::{ContentBlock, Msg, ToolResult, ToolUse};
//! use serde_json::json;
//!
//! let store = InMemoryStore::new();
//! let session = store.open_session("user-7/chat-1").await?;
//!
//! let call = ToolUse::new("call_1", "delete_file", json!({ "path": "temp.txt" }));
//! let step = Commit::at(session.version)
//!     .append(Msg::user("delete temp.txt"))
//!     .append(Msg::assistant("").with_block(ContentBlock::ToolUse(call.clone())));
//! let version = store.commit("user-7/chat-1", step).await?;
//!
//! // Before running the tool, claim it in the ledger ...
//! let fp = fingerprint(&call.input);
//! let lease = Duration::from_secs(60);
//! assert_eq!(store.claim("user-7/chat-1", &call.id, &fp, lease, false).await?, Claim::Granted);
//! let result = ToolResult::success(&call.id, &call.name, "deleted");
//! store.finish("user-7/chat-1", &call.id, &result).await?;
//!
//! // ... so a second resume reuses the recorded result instead of running it again.
//! let again = store.claim("user-7/chat-1", &call.id, &fp, lease, false).await?;
//! assert_eq!(again, Claim::Finished(result.clone()));
//!
//! store.commit("user-7/chat-1", Commit::at(version).append(Msg::tool_results([result]))).await?;
//! # Ok::<(), reins_memory::Error>(()) }).unwrap();
//! ```
//!
//! ## Features
//!
//! | feature    | default | what it adds |
//! |------------|---------|--------------|
//! | `sqlite`   | yes     | `SqliteStore`: the embedded store (bundled SQLite through rusqlite, WAL, one transaction per commit) |
//! | `postgres` | no      | `PostgresStore` (through sqlx): many workers on many machines, race-free claims and version checks |
//!
//! Without features the crate has the pure functions and [`InMemoryStore`] only, and
//! compiles neither SQLite nor sqlx.

mod commit;
mod error;
pub mod evidence;
pub mod grant;
mod heads;
mod memory;
mod memory_outbox;
pub mod notice;
pub mod pending;
mod recorded;
mod records;
pub mod repair;
mod run_state;
mod store;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;

pub use commit::{Commit, LockRequest};
pub use error::{Error, Result};
pub use grant::{ArgCondition, ArgOp, Grant, GrantEffect, GrantFilter};
pub use heads::SessionFilter;
pub use memory::InMemoryStore;
pub use notice::{
    AttemptOutcome, Delivery, DeliveryAttempt, DeliveryFilter, DeliveryState, Notice, NoticeKind,
    Subscription,
};
pub use pending::{PendingFilter, PendingKey, PendingRequirement};
pub use recorded::{Recorded, StoreCall};
pub use reins_message::fingerprint;
pub use repair::{
    PARTIAL_KEY, RemovalReason, RemovedResult, RepairReport, current_turn_start, pending_tool_uses,
    sanitize_after_interrupt, sanitize_for_request,
};
pub use run_state::RunStateData;
pub use store::{
    ChangeFeed, Claim, DecisionEntry, LedgerEntry, LedgerState, MemoryStore, RequirementRecord,
    SessionHead, SessionLock, SessionState, SessionSummary, StoreChange,
};

#[cfg(feature = "postgres")]
pub use sql::postgres::{POSTGRES_SCHEMA_VERSION, PostgresOptions, PostgresStore};
#[cfg(feature = "sqlite")]
pub use sql::sqlite::{Durability, SQLITE_SCHEMA_VERSION, SqliteOptions, SqliteStore};
