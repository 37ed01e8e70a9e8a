//! Where the server meets the session-view API of reins-agent: reading a view of a
//! session, consent-safe decisions against a view token, the decision audit trail and
//! the stored interrupt request. Everything that depends on how reins-agent exposes
//! views lives in this one module.

use reins_agent::{Agent, AgentError, Decision, Requirement, RunHandle, RunState, Session};
use reins_memory::SessionState;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Result, ServerError};
use crate::types::{DecisionRecord, SessionStatus, SessionView};

/// Maps the agent errors [`ServerError::from`] does not handle itself.
pub(crate) fn map_agent_error(e: AgentError) -> ServerError {
    ServerError::Internal(e.to_string())
}

/// The pending requirements of a stored session.
pub(crate) fn pending(state: &SessionState) -> Vec<Requirement> {
    state
        .open_requirements()
        .filter_map(|r| serde_json::from_value::<Requirement>(r.payload.clone()).ok())
        .collect()
}

/// The view token of a set of pending requirements at a version: the version, and a
/// fingerprint of the pending ids (what the decision is allowed to answer).
fn token_for(version: u64, pending: &[Requirement]) -> String {
    let mut ids: Vec<&str> = pending.iter().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    let mut h = Sha256::new();
    for id in ids {
        h.update(id.as_bytes());
        h.update([0]);
    }
    let digest = h.finalize();
    let fp: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{version}.{fp}")
}

fn fingerprint_of(token: &str) -> Option<&str> {
    let (v, fp) = token.split_once('.')?;
    (v.parse::<u64>().is_ok() && fp.len() == 16 && fp.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some(fp)
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
        view_token: token_for(state.version, &shown),
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

/// Starts the decisions as `actor`, refusing them when `token` no longer matches
/// what is pending.
pub(crate) async fn start_decisions(
    session: &Session,
    token: Option<&str>,
    decisions: Vec<Decision>,
    actor: &str,
) -> Result<RunHandle> {
    if let Some(token) = token {
        let fp = fingerprint_of(token).ok_or_else(|| {
            ServerError::BadRequest(format!(
                "`{token}` is not a view token (read it from GET /v1/sessions/{{id}})"
            ))
        })?;
        let state = session.agent().store().load_session(session.id()).await?;
        let (view, now) = view_of(state, false, false);
        if fingerprint_of(&view.view_token) != Some(fp) {
            return Err(ServerError::StaleView {
                message: format!(
                    "what session `{}` waits for changed since your view; pending now: {}. \
                     Reload and decide again",
                    session.id(),
                    if now.is_empty() {
                        "nothing".to_owned()
                    } else {
                        now.iter()
                            .map(|r| r.id.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
                pending: Value::Array(view.requirements),
            });
        }
    }
    let decisions = decisions
        .into_iter()
        .map(|d| match d.decided_by() {
            Some(_) => d,
            None => d.by(actor),
        })
        .collect();
    Ok(session.start_resolve(decisions).await?)
}

/// The session's decisions, oldest first.
pub(crate) async fn decisions(agent: &Agent, id: &str) -> Result<Vec<DecisionRecord>> {
    let state = agent.store().load_session(id).await?;
    let mut out: Vec<DecisionRecord> = state
        .requirements
        .iter()
        .filter_map(|r| {
            let detail = r.decision.clone()?;
            let req = serde_json::from_value::<Requirement>(r.payload.clone()).ok();
            Some(DecisionRecord {
                requirement_id: r.id.clone(),
                tool: req
                    .as_ref()
                    .map(|q| q.tool_use.name.clone())
                    .unwrap_or_default(),
                shown_args: req.map(|q| q.tool_use.input).unwrap_or(Value::Null),
                decision: detail
                    .get("decision")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown")
                    .to_owned(),
                actor: detail.get("by").and_then(Value::as_str).map(str::to_owned),
                detail,
                decided_at: r.decided_at,
            })
        })
        .collect();
    out.sort_by_key(|d| d.decided_at);
    Ok(out)
}

/// Stores a cancel request for a run executing on another instance. `Ok(false)`
/// when the agent cannot deliver one.
pub(crate) async fn request_interrupt(_session: &Session) -> Result<bool> {
    Ok(false)
}
