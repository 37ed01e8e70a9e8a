//! A stored session as the API shows it ([`SessionDetail`]): reins-agent's view of the
//! stored session ([`reins_agent::stored_view`], the one computation of where a
//! session's run is and what it waits for, which the local driver and the Restate
//! session object use too), with whether a run of it executes here, and, when asked
//! for, its transcript. The session resource, the session stream, the inbox and the
//! protocols all read sessions through it.

use reins_agent::{Agent, Requirement, SessionView, ViewToken};
use reins_memory::{SessionHead, SessionState};

use crate::error::Result;
use crate::types::{SessionDetail, SessionStatus};

/// The view of a session read without its transcript ([`SessionHead`]), as [`of`]
/// gives it without messages: the view reads only the stored run state.
pub(crate) async fn of_head(
    agent: &Agent,
    head: SessionHead,
    running_here: bool,
) -> Result<(SessionDetail, Vec<Requirement>)> {
    of(agent, head.into_state(), running_here, false).await
}

/// The status the API shows for a session with this view: running while the model or
/// tools are at work (here or anywhere: `running_here` says a run of it executes on
/// this instance), paused while it waits, idle otherwise.
pub(crate) fn status_of(view: &SessionView, running_here: bool) -> SessionStatus {
    if running_here || view.is_running() {
        SessionStatus::Running
    } else if view.paused {
        SessionStatus::Paused
    } else {
        SessionStatus::Idle
    }
}

/// Reads the session as stored. `running_here`: a run of it is in flight on this
/// instance.
pub(crate) async fn load(
    agent: &Agent,
    id: &str,
    running_here: bool,
    with_messages: bool,
) -> Result<(SessionDetail, Vec<Requirement>)> {
    let state = agent.store().load_session(id).await?;
    of(agent, state, running_here, with_messages).await
}

/// The view of a stored session, and the requirements it shows (those pending, when
/// the session is paused and no run of it executes here).
pub(crate) async fn of(
    agent: &Agent,
    state: SessionState,
    running_here: bool,
    with_messages: bool,
) -> Result<(SessionDetail, Vec<Requirement>)> {
    let messages = if with_messages {
        state
            .messages
            .iter()
            .filter_map(|m| serde_json::to_value(m).ok())
            .collect()
    } else {
        Vec::new()
    };
    let updated_at = state.updated_at;
    let view = reins_agent::stored_view(agent.store(), state).await?;
    let status = status_of(&view, running_here);
    let paused = status == SessionStatus::Paused;
    let shown: Vec<Requirement> = if paused {
        view.requirements
    } else {
        Vec::new()
    };
    let detail = SessionDetail {
        session_id: view.session_id,
        version: view.version,
        status,
        paused,
        // Each with the fingerprint of its arguments (part of a requirement's JSON).
        requirements: shown
            .iter()
            .filter_map(|r| serde_json::to_value(r).ok())
            .collect(),
        view_token: ViewToken::of(paused, &shown).to_string(),
        messages,
        updated_at,
    };
    Ok((detail, shown))
}
