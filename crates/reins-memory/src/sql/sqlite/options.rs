//! What a [`SqliteStore`](super::SqliteStore) is opened with: its durability, waits,
//! connections and change polling.

use std::time::Duration;

#[cfg(doc)]
use super::SqliteStore;
#[cfg(doc)]
use crate::store::MemoryStore;

/// How hard a commit tries to survive a crash.
///
/// Both levels use SQLite's write-ahead log (WAL) and one transaction per commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = NORMAL`: a committed step survives the process crashing; after a
    /// power loss or OS crash the last commits before it may be lost (the database
    /// stays consistent). The fast default.
    #[default]
    Normal,
    /// `synchronous = FULL`: every commit is fsync'd before it returns, so it survives
    /// power loss too. One fsync per commit call.
    Full,
}

/// Options for [`SqliteStore::open_with`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// See [`Durability`].
    pub durability: Durability,
    /// How long a writer waits for another process's write lock before failing.
    pub busy_timeout: Duration,
    /// How many connection threads the store runs (readers run concurrently in WAL
    /// mode). Each holds a connection at the configured durability and, at
    /// [`Durability::Full`], one at `synchronous = OFF` for run locks.
    pub max_connections: u32,
    /// Create the database file when it does not exist.
    pub create_if_missing: bool,
    /// How often [`MemoryStore::changes`] polls `PRAGMA data_version` to notice other
    /// processes' writes (only while someone listens). Writes through this store are
    /// announced at once.
    pub change_poll_interval: Duration,
    /// Copy the write-ahead log into the database on a thread of the store's own
    /// (every 200 ms) rather than inside the commit that fills it (SQLite's default),
    /// which keeps that work out of commits' latency. Commits still checkpoint by
    /// themselves past 10,000 pages of WAL (about 40 MiB), a backstop for bursts.
    /// Durability is the same either way. Default: on.
    pub background_checkpoints: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            durability: Durability::Normal,
            busy_timeout: Duration::from_secs(10),
            max_connections: 4,
            create_if_missing: true,
            change_poll_interval: Duration::from_millis(100),
            background_checkpoints: true,
        }
    }
}

impl SqliteOptions {
    /// Sets the durability level.
    #[must_use]
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }

    /// Sets the busy timeout.
    #[must_use]
    pub fn busy_timeout(mut self, t: Duration) -> Self {
        self.busy_timeout = t;
        self
    }

    /// Sets the number of connection threads (at least 1).
    #[must_use]
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Whether the WAL is checkpointed on a thread of the store's own (see
    /// [`SqliteOptions::background_checkpoints`]).
    #[must_use]
    pub fn background_checkpoints(mut self, on: bool) -> Self {
        self.background_checkpoints = on;
        self
    }

    /// Sets how often other processes' writes are polled for (at least 5 ms).
    #[must_use]
    pub fn change_poll_interval(mut self, every: Duration) -> Self {
        self.change_poll_interval = every.max(Duration::from_millis(5));
        self
    }
}
