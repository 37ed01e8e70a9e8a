//! A stored session as the API shows it ([`SessionDetail`]): its status (idle,
//! running, paused) from the stored run state and whether a run of it executes here,
//! its pending requirements, its view token and, when asked for, its transcript. The
//! session resource, the session stream and the inbox all read sessions through it.

use reins_agent::run::Phase;
use reins_agent::{Agent, Requirement, RunState, RunStatus, ViewToken};
use reins_memory::{RequirementRecord, SessionHead, SessionState};

use crate::error::Result;
use crate::types::{SessionDetail, SessionStatus};

/// The pending requirements of a stored session. A paused sub-agent call shows what its
/// child session waits for in the store (someone may have answered the child
/// directly), never the copy the parent took when the child paused; a requirement
/// under a quorum shows its approvals so far.
async fn pending(agent: &Agent, state: &SessionState) -> Result<Vec<Requirement>> {
    if reads_run_state(state.run_state.as_ref(), state.open_requirements()) {
        return Ok(reins_agent::pending_requirements(agent.store(), state.clone()).await?);
    }
    Ok(state
        .open_requirements()
        .filter_map(|r| serde_json::from_value::<Requirement>(r.payload.clone()).ok())
        .collect())
}

/// The view of a session read without its transcript ([`SessionHead`]), as [`of`]
/// gives it without messages. A session whose requirements come from its run state
/// (see [`reads_run_state`]) is loaded in full, since the run is rebuilt from the
/// whole stored session.
pub(crate) async fn of_head(
    agent: &Agent,
    head: SessionHead,
    running_here: bool,
) -> Result<(SessionDetail, Vec<Requirement>)> {
    if reads_run_state(head.run_state.as_ref(), head.open_requirements.iter()) {
        let state = match agent.store().load_session(&head.id).await {
            Ok(s) => s,
            // Deleted since it was listed: the head is all there is.
            Err(reins_memory::Error::SessionNotFound { .. }) => head.into_state(),
            Err(e) => return Err(e.into()),
        };
        return of(agent, state, running_here, false).await;
    }
    of(agent, head.into_state(), running_here, false).await
}

/// Whether the stored requirement records are not the whole truth about what a session
/// waits for: it waits on calls delegated to sub-agents (whose child sessions may have
/// been answered directly), or a requirement is under a quorum (its approvals so far
/// are counted in the run state, while the record shows it as raised).
fn reads_run_state<'a>(
    run_state: Option<&serde_json::Value>,
    mut open: impl Iterator<Item = &'a RequirementRecord>,
) -> bool {
    open.any(|r| r.payload.get("quorum").is_some())
        || run_state
            .cloned()
            .and_then(|v| serde_json::from_value::<RunState>(v).ok())
            .is_some_and(|rs| !rs.delegated_calls().is_empty())
}

/// Where a stored session's run is, from its stored run state (none: idle). The one
/// place the server reads it: the session's status ([`status_of`]) and the outcome
/// of a run that stopped ([`outcome_of`]) both come from it.
pub(crate) fn phase_of(run_state: Option<&serde_json::Value>) -> Phase {
    run_state
        .cloned()
        .and_then(|v| serde_json::from_value::<RunState>(v).ok())
        .map_or(Phase::Idle, |rs| rs.phase())
}

/// The status the API shows for a run at `phase`: running while the model or tools
/// are at work (here or anywhere: `running_here` says a run of it executes on this
/// instance), paused while it waits, idle otherwise.
pub(crate) fn status_of(phase: Phase, running_here: bool) -> SessionStatus {
    match phase {
        _ if running_here => SessionStatus::Running,
        Phase::Reasoning | Phase::Acting | Phase::Summarizing => SessionStatus::Running,
        Phase::Paused => SessionStatus::Paused,
        Phase::Idle | Phase::Finished(_) => SessionStatus::Idle,
    }
}

/// How the run of a session at `phase` stands once it no longer runs (`None` while it
/// does): paused, or how it finished (a session with no run in progress: completed).
pub(crate) fn outcome_of(phase: Phase) -> Option<RunStatus> {
    match phase {
        Phase::Reasoning | Phase::Acting | Phase::Summarizing => None,
        Phase::Paused => Some(RunStatus::Paused),
        Phase::Finished(status) => Some(status),
        Phase::Idle => Some(RunStatus::Completed),
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
    let pending = pending(agent, &state).await?;
    let phase = phase_of(state.run_state.as_ref());
    let status = status_of(phase, running_here);
    let paused = status == SessionStatus::Paused;
    let shown: Vec<Requirement> = if paused { pending } else { Vec::new() };
    let detail = SessionDetail {
        session_id: state.id.clone(),
        version: state.version,
        status,
        paused,
        // Each with the fingerprint of its arguments (part of a requirement's JSON).
        requirements: shown
            .iter()
            .filter_map(|r| serde_json::to_value(r).ok())
            .collect(),
        view_token: ViewToken::of(paused, &shown).to_string(),
        messages: if with_messages {
            state
                .messages
                .iter()
                .filter_map(|m| serde_json::to_value(m).ok())
                .collect()
        } else {
            Vec::new()
        },
        updated_at: state.updated_at,
    };
    Ok((detail, shown))
}
