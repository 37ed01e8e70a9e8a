//! How long a call may wait: the rules ([`Waiting`]) and their sweep are reins-notify's
//! ([`reins_notify::waiting`]), usable without a server; a server runs the sweep
//! ([`spawn`]) and rejects expired calls as every door decides, through the hub, which
//! follows the run the rejection continues.

use std::sync::Arc;

use async_trait::async_trait;
use axum::http::StatusCode;
use reins_agent::port::Decide;
use reins_notify::waiting::{Decisions, Refusal, Sweep, Sweeping};

pub use reins_notify::waiting::{Clock, ExpiryAction, SystemClock, WaitPolicy, Waiting};

use crate::state::AppState;

/// The rejections of expired calls, decided as a door decides.
struct HubDecisions(AppState);

#[async_trait]
impl Decisions for HubDecisions {
    async fn decide(&self, session: &str, decide: Decide) -> Result<(), Refusal> {
        match crate::sessions::decide::submit(&self.0, session, decide).await {
            Ok(()) => Ok(()),
            // Decided meanwhile (a person, or another instance's sweep), or its session
            // is busy; or refused by an agent whose own approval TTL passed first (422):
            // the next sweep looks again.
            Err(e)
                if matches!(
                    e.status(),
                    StatusCode::CONFLICT | StatusCode::UNPROCESSABLE_ENTITY
                ) =>
            {
                Err(Refusal::Skipped(e.to_string()))
            }
            Err(e) => Err(Refusal::Failed(e.to_string())),
        }
    }
}

/// Starts the sweep on the current runtime (`None` outside one, or without rules). The
/// state it is given must not hold the returned handle (it would never stop).
pub(crate) fn spawn(state: AppState, waiting: Waiting) -> Option<Sweeping> {
    let sessions = Arc::clone(&state.sessions);
    Sweep::new(sessions, waiting)
        .decisions(Arc::new(HubDecisions(state)))
        .spawn()
}
