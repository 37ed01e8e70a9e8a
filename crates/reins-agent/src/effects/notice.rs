//! The `run.failed` notice: a run that ends with an error commits nothing the outbox
//! notice could ride with, so the driver writes it alone (a commit that carries only
//! the notice, at the stored version: the session does not change).

use reins_memory::{Commit, MemoryStore, Notice, NoticeKind};
use serde_json::json;

/// Writes a `run.failed` notice for `session` with `error`, when the store records
/// notices. Its id ([`Notice::keyed`]: a UUIDv7 made from the session and the stored
/// version, timed at that version's write) is the same when a driver repeats this step
/// after a crash, so the outbox writes it once. A store error is logged: the run's own
/// error is what the caller gets.
pub async fn run_failed(store: &dyn MemoryStore, session: &str, error: &str) {
    if !store.records_notices() {
        return;
    }
    let (version, at) = match store.load_session(session).await {
        Ok(s) => (s.version, s.updated_at),
        // Failed before anything was stored: no session to report on.
        Err(reins_memory::Error::SessionNotFound { .. }) => return,
        Err(e) => {
            tracing::warn!(session, error = %e, "could not write a run.failed notice");
            return;
        }
    };
    let key = format!("{session}/run.failed/{version}");
    let notice = Notice::keyed(NoticeKind::RunFailed, &key, at)
        .session(session)
        .payload(json!({ "error": error }));
    if let Err(e) = store
        .commit(session, Commit::at(version).notify(notice))
        .await
    {
        tracing::warn!(session, error = %e, "could not write a run.failed notice");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use reins_memory::InMemoryStore;

    use super::*;

    #[tokio::test]
    async fn a_repeated_run_failed_notice_is_written_once_with_a_uuid_v7() {
        let store = InMemoryStore::new();
        store.record_notices(true);
        store.open_session("s").await.unwrap();
        // A driver that repeats the step after a crash writes it again.
        run_failed(&store, "s", "the model is down").await;
        run_failed(&store, "s", "the model is down").await;
        let notices = store.unrouted_notices(10).await.unwrap();
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert_eq!(notices[0].kind, NoticeKind::RunFailed);
        // A UUID of version 7: `xxxxxxxx-xxxx-7xxx-[89ab]xxx-xxxxxxxxxxxx`.
        let id = &notices[0].id;
        let groups: Vec<&str> = id.split('-').collect();
        let lengths: Vec<usize> = groups.iter().map(|g| g.len()).collect();
        assert_eq!(lengths, [8, 4, 4, 4, 12], "{id}");
        assert!(groups[2].starts_with('7'), "{id}");
        assert!(groups[3].starts_with(['8', '9', 'a', 'b']), "{id}");
    }
}
