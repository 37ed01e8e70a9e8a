//! Other connections' commits noticed by polling SQLite's `PRAGMA data_version`.

use std::time::Duration;

use super::super::feeds::Feeds;
use crate::error::Result;

pub(super) fn data_version(conn: &rusqlite::Connection) -> Result<i64> {
    Ok(conn.query_row("PRAGMA data_version", [], |r| r.get(0))?)
}

/// Notices other connections' commits: `PRAGMA data_version` on a connection of its
/// own changes whenever another connection (of this process or another) committed.
/// Ends when nobody listens any more. (The pragma reads shared memory: it does not
/// block, so it runs on the task.)
pub(super) async fn poll_data_version(
    conn: rusqlite::Connection,
    baseline: i64,
    every: Duration,
    feeds: Feeds,
) {
    let mut last = baseline;
    loop {
        tokio::time::sleep(every).await;
        if !feeds.listened() {
            break;
        }
        match data_version(&conn) {
            Ok(v) => {
                if v != last {
                    feeds.send(None, true);
                    last = v;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "polling SQLite for changes failed");
                feeds.send(None, true);
            }
        }
    }
}
