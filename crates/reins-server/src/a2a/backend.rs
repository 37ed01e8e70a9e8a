//! An A2A message's input handed to whatever runs the sessions (the local driver, or a
//! backend such as a Restate deployment), through the native API's door
//! ([`begin`](crate::sessions::backend::begin)). The input goes in as the A2A actor
//! (the sender, `via: a2a`, the message id), keyed by the A2A message id, so that a
//! retry racing the first send gets the first answer from a backend that keeps keys,
//! and is recognised in the store (its message, its decisions) otherwise. The answer
//! follows the run once its input is stored: a `GetTask` that follows finds it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reins_agent::{AgentError, RunInput, Submission, ViewToken};

use super::RpcError;
use crate::auth::Principal;
use crate::error::ServerError;
use crate::hub::{LocalRun, Subscription};
use crate::sessions::backend::{Begun, begin, wait_for_change};
use crate::state::AppState;

/// How long the answer waits for a backend to store an input it accepted.
const STORED_WAIT: Duration = Duration::from_secs(30);

/// Why an input did not start a run.
pub(super) enum NotStarted {
    /// Refused before anything ran: the backend's typed error (the local driver's
    /// refusal, whatever the backend).
    Refused(AgentError),
    /// The run began and ended at once with this error (nothing was stored).
    Failed(ServerError),
}

impl From<NotStarted> for RpcError {
    fn from(e: NotStarted) -> Self {
        match e {
            NotStarted::Refused(e) => e.into(),
            NotStarted::Failed(e) => e.into(),
        }
    }
}

/// Hands `input` for `session` to the backend as `who` (A2A message `message_id`),
/// made on `view`, and returns once the input is stored: a run executing here with the
/// subscription that follows it, once its first event says it began; `None` for a run
/// in the backend's processes, once the stored session has moved past where it stood
/// (or after [`STORED_WAIT`]).
pub(super) async fn start(
    state: &AppState,
    who: &Principal,
    session: &str,
    input: RunInput,
    message_id: &str,
    view: Option<ViewToken>,
) -> Result<Option<(Arc<LocalRun>, Subscription)>, NotStarted> {
    let mut submission = Submission::new(input);
    submission.actor = Some(super::a2a_actor(who, Some(message_id)));
    submission.view = view;
    submission.idempotency_key = Some(format!("a2a {message_id}"));
    let mut notices = state.hub.notices();
    let mut sub = state.hub.channel(session).subscribe(None);
    match begin(state, who, session, submission)
        .await
        .map_err(NotStarted::Refused)?
    {
        Begun::Here(run) => loop {
            match sub.rx.recv().await {
                Ok(env) if env.run_id.as_deref() == Some(run.run_id.as_str()) => {
                    if env.event.is_failure() {
                        run.wait().await.map_err(NotStarted::Failed)?;
                    }
                    return Ok(Some((run, sub)));
                }
                Ok(_) => {}
                // Behind or closed: the run's own outcome tells.
                Err(_) => return Ok(Some((run, sub))),
            }
        },
        Begun::Relayed(mark) => {
            state.hub.ensure_poller(&state.agent);
            let deadline = Instant::now() + STORED_WAIT;
            while stored_version(state, session).await? <= mark.version && Instant::now() < deadline
            {
                wait_for_change(&mut notices, session).await;
            }
            Ok(None)
        }
    }
}

/// The stored session's version (0: none stored).
async fn stored_version(state: &AppState, session: &str) -> Result<u64, NotStarted> {
    match state.agent.store().session_version(session).await {
        Ok(v) => Ok(v.unwrap_or(0)),
        Err(e) => Err(NotStarted::Refused(AgentError::Store(e))),
    }
}
