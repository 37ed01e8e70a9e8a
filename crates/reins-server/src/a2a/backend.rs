//! An A2A message's input handed to the session port (the local driver, or a Restate
//! deployment behind `Relayed`), through the native API's door
//! ([`begin`](crate::sessions::backend::begin), [`decide`](crate::sessions::backend::decide)). The input goes in as the A2A actor
//! (the sender, `via: a2a`, the message id), keyed by the A2A message id, so that a
//! retry racing the first send gets the first answer from a backend that keeps keys,
//! and is recognised in the store (its message, its decisions) otherwise. The answer
//! follows the run once its input is stored: a `GetTask` that follows finds it.

use std::sync::Arc;

use reins_agent::port::Decide;
use reins_agent::{AgentError, RunInput, Submission, ViewToken};

use super::RpcError;
use crate::auth::Principal;
use crate::error::ServerError;
use crate::hub::{LocalRun, Subscription};
use crate::state::AppState;

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

/// Hands `input` for `session` to the session port as `who` (A2A message
/// `message_id`), made on `view` — decisions through the one decision path — and
/// returns once the input is stored: the run followed here with the subscription that
/// follows it, once its first event says it began.
pub(super) async fn start(
    state: &AppState,
    who: &Principal,
    session: &str,
    input: RunInput,
    message_id: &str,
    view: Option<ViewToken>,
) -> Result<(Arc<LocalRun>, Subscription), NotStarted> {
    let actor = super::a2a_actor(who, Some(message_id));
    let key = format!("a2a {message_id}");
    let mut sub = state.hub.channel(session).subscribe(None);
    let begun = match input {
        RunInput::Decisions(decisions) => {
            let mut decide = Decide::new(actor, decisions).key(key);
            decide.view = view;
            crate::sessions::backend::decide(state, session, decide).await
        }
        input => {
            let mut submission = Submission::new(input);
            submission.actor = Some(actor);
            submission.view = view;
            submission.idempotency_key = Some(key);
            crate::sessions::backend::begin(state, session, submission).await
        }
    };
    let run = begun.map_err(NotStarted::Refused)?;
    loop {
        match sub.rx.recv().await {
            Ok(env) if env.run_id.as_deref() == Some(run.run_id.as_str()) => {
                if env.event.is_failure() {
                    run.wait().await.map_err(NotStarted::Failed)?;
                }
                return Ok((run, sub));
            }
            Ok(_) => {}
            // Behind or closed: the run's own outcome tells.
            Err(_) => return Ok((run, sub)),
        }
    }
}
