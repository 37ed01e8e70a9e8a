//! The `run.failed` notice: a run that ends with an error commits nothing the outbox
//! notice could ride with, so the driver writes it alone (a commit that carries only
//! the notice, at the stored version: the session does not change).

use reins_memory::{Commit, MemoryStore, Notice, NoticeKind};
use serde_json::json;

/// Writes a `run.failed` notice for `session` with `error`, when the store records
/// notices. Its id is made from the session and the stored version, so a driver that
/// repeats this step after a crash writes it once. A store error is logged: the run's
/// own error is what the caller gets.
pub async fn run_failed(store: &dyn MemoryStore, session: &str, error: &str) {
    if !store.records_notices() {
        return;
    }
    let version = match store.load_session(session).await {
        Ok(s) => s.version,
        // Failed before anything was stored: no session to report on.
        Err(reins_memory::Error::SessionNotFound { .. }) => return,
        Err(e) => {
            tracing::warn!(session, error = %e, "could not write a run.failed notice");
            return;
        }
    };
    let mut notice = Notice::new(NoticeKind::RunFailed)
        .session(session)
        .payload(json!({ "error": error }));
    notice.id = format!("{session}/run.failed/{version}");
    if let Err(e) = store
        .commit(session, Commit::at(version).notify(notice))
        .await
    {
        tracing::warn!(session, error = %e, "could not write a run.failed notice");
    }
}
