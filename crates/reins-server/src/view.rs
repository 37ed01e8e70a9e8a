//! A stored session as the API shows it ([`SessionDetail`]): its status (idle,
//! running, paused) from the stored run state and whether a run of it executes here,
//! its pending requirements, its view token and, when asked for, its transcript. The
//! session resource, the session stream and the inbox all read sessions through it.

use reins_agent::{Agent, Requirement, RunState, ViewToken};
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
    let phase_paused;
    let phase_active;
    match state
        .run_state
        .clone()
        .and_then(|v| serde_json::from_value::<RunState>(v).ok())
    {
        Some(rs) => {
            use reins_agent::run::Phase;
            phase_paused = rs.phase() == Phase::Paused;
            phase_active = matches!(
                rs.phase(),
                Phase::Reasoning | Phase::Acting | Phase::Summarizing
            );
        }
        None => {
            phase_paused = false;
            phase_active = false;
        }
    }
    let paused = phase_paused && !running_here;
    let status = if running_here || phase_active {
        SessionStatus::Running
    } else if paused {
        SessionStatus::Paused
    } else {
        SessionStatus::Idle
    };
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
