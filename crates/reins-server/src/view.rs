//! A stored session as the API shows it ([`SessionDetail`]): the port's view of the
//! stored session ([`Sessions::view`](reins_agent::port::Sessions::view), the one
//! computation of where a session's run is and what it waits for, whatever driver
//! runs it), with whether a run of it executes here, and, when asked for, its
//! transcript. The session resource, the session stream, the inbox and the protocols
//! all read sessions through it.

use reins_agent::port::Sessions;
use reins_agent::{Requirement, SessionView, ViewToken};
use reins_memory::SessionHead;
use reins_message::Msg;

use crate::error::Result;
use crate::types::{SessionDetail, SessionStatus};

/// The view of a session read without its transcript ([`SessionHead`]).
pub(crate) async fn of_head(
    sessions: &dyn Sessions,
    head: SessionHead,
    running_here: bool,
) -> Result<(SessionDetail, Vec<Requirement>)> {
    let updated_at = head.updated_at;
    let view = sessions.view_of_head(head).await?;
    Ok(detail(view, &[], updated_at, running_here))
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
    sessions: &dyn Sessions,
    id: &str,
    running_here: bool,
    with_messages: bool,
) -> Result<(SessionDetail, Vec<Requirement>)> {
    let record = sessions.read(id, with_messages).await?;
    Ok(detail(
        record.view,
        &record.messages,
        record.updated_at,
        running_here,
    ))
}

/// The API's view of a session whose port view is `view`, and the requirements it
/// shows (those pending, when the session is paused and no run of it executes here).
pub(crate) fn detail(
    view: SessionView,
    messages: &[Msg],
    updated_at: chrono::DateTime<chrono::Utc>,
    running_here: bool,
) -> (SessionDetail, Vec<Requirement>) {
    let messages = messages
        .iter()
        .filter_map(|m| serde_json::to_value(m).ok())
        .collect();
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
    (detail, shown)
}
