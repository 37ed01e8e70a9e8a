//! Where the server meets the session-view API of reins-agent: reading a view of a
//! session, consent-safe decisions against a view token, the decision audit trail and
//! the stored interrupt request. Everything that depends on how reins-agent exposes
//! views lives in this one module.

use reins_agent::{
    Actor, Agent, AgentError, Decision, Requirement, RunHandle, RunState, Session, ViewToken,
};
use reins_memory::SessionState;
use serde_json::Value;

use crate::error::{Result, ServerError};
use crate::types::{SessionStatus, SessionView};

/// Maps the agent errors [`ServerError::from`] does not handle itself.
pub(crate) fn map_agent_error(e: AgentError) -> ServerError {
    let message = e.to_string();
    match e {
        AgentError::StaleView { pending, .. } => ServerError::StaleView {
            message: format!(
                "{message}; what the session waits for changed since your view: reload and decide again"
            ),
            pending: Value::Array(
                pending
                    .iter()
                    .filter_map(|r| serde_json::to_value(r).ok())
                    .collect(),
            ),
        },
        _ => ServerError::Internal(message),
    }
}

/// The pending requirements of a stored session.
pub(crate) fn pending(state: &SessionState) -> Vec<Requirement> {
    state
        .open_requirements()
        .filter_map(|r| serde_json::from_value::<Requirement>(r.payload.clone()).ok())
        .collect()
}

/// Reads the session as stored. `running_here`: a run of it is in flight on this
/// instance.
pub(crate) async fn load_view(
    agent: &Agent,
    id: &str,
    running_here: bool,
    with_messages: bool,
) -> Result<(SessionView, Vec<Requirement>)> {
    let state = agent.store().load_session(id).await?;
    Ok(view_of(state, running_here, with_messages))
}

pub(crate) fn view_of(
    state: SessionState,
    running_here: bool,
    with_messages: bool,
) -> (SessionView, Vec<Requirement>) {
    let phase_paused;
    let phase_active;
    match state
        .run_state
        .clone()
        .and_then(|v| serde_json::from_value::<RunState>(v).ok())
    {
        Some(rs) => {
            use reins_agent::run::Phase;
            phase_paused = rs.phase == Phase::Paused;
            phase_active = matches!(
                rs.phase,
                Phase::Reasoning | Phase::Acting | Phase::Summarizing
            );
        }
        None => {
            phase_paused = false;
            phase_active = false;
        }
    }
    let pending = pending(&state);
    let paused = phase_paused && !running_here;
    let status = if running_here || phase_active {
        SessionStatus::Running
    } else if paused {
        SessionStatus::Paused
    } else {
        SessionStatus::Idle
    };
    let shown: Vec<Requirement> = if paused { pending } else { Vec::new() };
    let view = SessionView {
        session_id: state.id.clone(),
        version: state.version,
        status,
        paused,
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
    (view, shown)
}

/// Starts the decisions as `actor`, refused (409) when `token` no longer matches what
/// is pending.
pub(crate) async fn start_decisions(
    session: &Session,
    token: Option<&str>,
    decisions: Vec<Decision>,
    actor: &str,
) -> Result<RunHandle> {
    let session = session.as_actor(Actor::new(actor));
    let handle = match token {
        Some(token) => {
            let view: ViewToken = token.parse().map_err(|_| {
                ServerError::BadRequest(format!(
                    "`{}` is not a view token (read it from GET /v1/sessions/{{id}})",
                    token.chars().take(60).collect::<String>()
                ))
            })?;
            session.start_resolve_at(&view, decisions).await?
        }
        None => session.start_resolve(decisions).await?,
    };
    Ok(handle)
}

/// The session's audit trail, oldest first (reins-agent's `DecisionRecord` JSON).
pub(crate) async fn decisions(agent: &Agent, id: &str) -> Result<Vec<Value>> {
    // 404 for unknown sessions (opening one would create it).
    agent.store().load_session(id).await?;
    let session = agent.session(id).await?;
    Ok(session
        .decisions()
        .await?
        .iter()
        .filter_map(|d| serde_json::to_value(d).ok())
        .collect())
}

/// Stores a cancel request for the session's run wherever it executes; whether a run
/// was in flight.
pub(crate) async fn request_interrupt(session: &Session) -> Result<bool> {
    Ok(session.request_interrupt().await?)
}
