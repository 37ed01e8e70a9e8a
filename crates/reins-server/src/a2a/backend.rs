//! A2A on a server that fronts a backend ([`Server::backend`](crate::Server::backend)):
//! a message that starts a task and a message that decides hand their input to the
//! backend (a Restate deployment) instead of starting a run here, and the answer
//! follows the task in the store, which the backend records in. The input goes in as
//! the A2A actor (the sender, `via: a2a`, the message id), keyed by the A2A message
//! id, so that a retry racing the first send gets the first answer from a backend that
//! keeps keys, and is recognised in the store (its message, its decisions) otherwise.

use std::time::{Duration, Instant};

use reins_agent::{AgentError, RunInput, SessionBackend, Submission, ViewToken};

use crate::auth::Principal;
use crate::sessions::backend::wait_for_change;
use crate::state::AppState;

/// How long the answer waits for the backend to store an input it accepted.
const STORED_WAIT: Duration = Duration::from_secs(30);

/// Hands `input` for `session` to `backend` as `who` (A2A message `message_id`), made
/// on `view`, and returns once the stored session has moved past where it stood (the
/// input is stored: a `GetTask` that follows finds it), or after [`STORED_WAIT`].
/// A refused input is the backend's error, the local driver's refusal.
pub(super) async fn submit(
    state: &AppState,
    backend: &dyn SessionBackend,
    who: &Principal,
    session: &str,
    input: RunInput,
    message_id: &str,
    view: Option<ViewToken>,
) -> Result<(), AgentError> {
    let before = stored_version(state, session).await?;
    let mut notices = state.hub.notices();
    state.hub.ensure_poller(&state.agent);
    let mut submission = Submission::new(input);
    submission.actor = Some(super::a2a_actor(who, Some(message_id)));
    submission.view = view;
    submission.idempotency_key = Some(format!("a2a {message_id}"));
    backend.submit(session, submission).await?;
    state.hub.notify(session);
    let deadline = Instant::now() + STORED_WAIT;
    while stored_version(state, session).await? <= before && Instant::now() < deadline {
        wait_for_change(&mut notices, session).await;
    }
    Ok(())
}

/// The stored session's version (0: none stored).
async fn stored_version(state: &AppState, session: &str) -> Result<u64, AgentError> {
    match state.agent.store().session_version(session).await {
        Ok(v) => Ok(v.unwrap_or(0)),
        Err(e) => Err(AgentError::Store(e)),
    }
}
