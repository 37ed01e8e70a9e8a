//! The write-ahead log's checkpoints, off the commit path.
//!
//! SQLite copies the WAL back into the database file (a checkpoint) from inside the
//! commit that takes the WAL past `wal_autocheckpoint` pages (1,000 by default), on
//! the committing caller's thread: that commit writes the pages it copies and, at
//! `synchronous = NORMAL` or `FULL`, waits for an fsync of the database file. With a
//! large database those pages land all over the file, and the one commit in a few
//! hundred that pays for them is the tail of the store's latency (`cargo xtask bench
//! --scale`, 1,000,000 stored sessions: a decision's store work p99, see
//! docs/performance.md).
//!
//! [`Checkpointer`] runs them on a thread of its own instead: every
//! [`INTERVAL`] it asks for a `PASSIVE` checkpoint (which never blocks writers or
//! readers and does nothing when the WAL is already copied), and the store's
//! connections keep SQLite's own automatic checkpoint only as a backstop at
//! [`BACKSTOP_PAGES`], for a burst of writes faster than the thread keeps up with.
//! Nothing about durability changes: a commit is durable when it is in the WAL,
//! checkpointed or not.
//!
//! Written here rather than taken from a crate: it is one `PRAGMA` on a timer, and
//! rusqlite (0.32) has no WAL hook to trigger it by.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rusqlite::Connection;

use crate::error::Result;

/// How often the thread checkpoints.
pub(crate) const INTERVAL: Duration = Duration::from_millis(200);

/// The WAL size (pages) at which a commit checkpoints by itself anyway.
pub(crate) const BACKSTOP_PAGES: u32 = 10_000;

/// The checkpoint thread of one store (every clone shares it); stops when dropped.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    /// Opens a connection of its own to `path` (at `synchronous`, as the store's) and
    /// starts the thread.
    pub(crate) fn start(path: &Path, synchronous: &str, busy_timeout: Duration) -> Result<Self> {
        let conn = super::conn::open(path, false, synchronous, busy_timeout)?;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("reins-sqlite-checkpoint".to_owned())
            .spawn(move || run(&conn, &flag))
            .map_err(|e| {
                crate::error::Error::Database(format!(
                    "could not start the SQLite checkpoint thread: {e}"
                ))
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Tells the thread to stop (it checkpoints once more, then ends).
    fn signal(&self) {
        let (lock, wake) = &*self.stop;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
        wake.notify_all();
    }
}

impl Drop for Checkpointer {
    /// Does not wait for the thread (it is detached): a checkpoint in progress
    /// finishes on its own.
    fn drop(&mut self) {
        self.signal();
        drop(self.thread.take());
    }
}

/// The thread: a passive checkpoint every [`INTERVAL`] until told to stop, then one
/// last one.
fn run(conn: &Connection, stop: &(Mutex<bool>, Condvar)) {
    let (lock, wake) = stop;
    let mut stopped = lock.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let (guard, _) = wake
            .wait_timeout_while(stopped, INTERVAL, |s| !*s)
            .unwrap_or_else(|p| p.into_inner());
        stopped = guard;
        let last = *stopped;
        // Not holding the flag while SQLite works: dropping the store never waits.
        drop(stopped);
        if let Err(e) = passive(conn) {
            tracing::debug!(error = %e, "a background WAL checkpoint failed (the next one retries)");
        }
        if last {
            return;
        }
        stopped = lock.lock().unwrap_or_else(|p| p.into_inner());
    }
}

/// One `PASSIVE` checkpoint: copies what it can of the WAL without waiting for anyone.
/// Returns the WAL's size and how much of it is now in the database (pages).
pub(crate) fn passive(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The database file's size: what checkpoints have copied into it.
    fn db_len(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: not within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn the_thread_copies_the_wal_into_the_database_and_once_more_when_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let writer =
            super::super::conn::open(&path, true, "NORMAL", Duration::from_secs(1)).unwrap();
        writer
            .pragma_update(None, "wal_autocheckpoint", BACKSTOP_PAGES)
            .unwrap();
        writer
            .execute_batch("CREATE TABLE t (x BLOB); INSERT INTO t VALUES (zeroblob(200000));")
            .unwrap();
        // Below the backstop nothing is copied by the commits themselves.
        assert!(db_len(&path) < 100_000, "{}", db_len(&path));
        let mut cp = Checkpointer::start(&path, "NORMAL", Duration::from_secs(1)).unwrap();
        until("the periodic checkpoint", || db_len(&path) >= 200_000);
        // Written after the last tick: the checkpoint made on stopping copies it.
        writer
            .execute_batch("INSERT INTO t VALUES (zeroblob(400000));")
            .unwrap();
        cp.signal();
        cp.thread.take().unwrap().join().unwrap();
        assert!(db_len(&path) >= 600_000, "{}", db_len(&path));
    }

    #[test]
    fn a_passive_checkpoint_reports_what_it_copied() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        let c = super::super::conn::open(&path, true, "NORMAL", Duration::from_secs(1)).unwrap();
        c.pragma_update(None, "wal_autocheckpoint", BACKSTOP_PAGES)
            .unwrap();
        c.execute_batch("CREATE TABLE t (x BLOB); INSERT INTO t VALUES (zeroblob(100000));")
            .unwrap();
        let (wal, copied) = passive(&c).unwrap();
        assert!(wal > 20, "{wal}");
        assert_eq!(wal, copied);
    }
}
