//! Other processes' changes, heard through PostgreSQL's LISTEN/NOTIFY: the channel
//! of a schema, and the task that forwards its notices to the change feed.

use std::time::Duration;

use super::super::feeds::Feeds;

/// The LISTEN/NOTIFY channel of a schema: `reins_changes_<schema>`, or, when that would
/// pass PostgreSQL's 63-byte identifier limit, the schema's SHA-256 prefix instead.
pub(super) fn change_channel(schema: Option<&str>) -> String {
    use sha2::Digest;
    match schema {
        None => "reins_changes".to_owned(),
        Some(s) if s.len() <= 63 - "reins_changes_".len() => format!("reins_changes_{s}"),
        Some(s) => {
            let digest = sha2::Sha256::digest(s.as_bytes());
            let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
            format!("reins_changes_{hex}")
        }
    }
}

/// Forwards NOTIFYs to the change feed until nobody listens. A lost connection is
/// re-established by the listener; since notices may have been missed meanwhile,
/// listeners are told that anything may have changed.
pub(super) async fn listen_for_changes(mut listener: sqlx::postgres::PgListener, feeds: Feeds) {
    loop {
        if !feeds.listened() {
            break;
        }
        let next = tokio::time::timeout(Duration::from_secs(1), listener.recv()).await;
        match next {
            Err(_) => {}
            Ok(Ok(n)) => match n.payload().split_at_checked(2) {
                Some(("c:", session)) => feeds.send(Some(session), false),
                Some(("i:", session)) => feeds.send(Some(session), true),
                _ => feeds.send(None, true),
            },
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "listening for PostgreSQL changes failed; reconnecting");
                feeds.send(None, true);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
