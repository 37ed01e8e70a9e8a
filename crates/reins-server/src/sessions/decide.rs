//! Decisions on a session's pending requirements: an API decision checked and turned
//! into a reins [`Decision`], and the decisions started as their actor against the
//! caller's view token.
//!
//! Every door that decides goes through [`checked`] (who may decide on which tool, what
//! is pending, the conversion) and then the run, which applies reins-agent's consent
//! rules (view, expiry, fingerprint, quorum): the native API, and the approval
//! channels (email links, Slack buttons) through [`decide_as`].

use reins_agent::{Actor, Decision, Requirement, RequirementKind, Session, Submission, ViewToken};

use crate::auth::Principal;
use crate::error::{Result, ServerError};
use crate::hub::HubEvent;
use crate::state::AppState;
use crate::types::{Action, DecisionItem};
use crate::view;

use super::backend::Begun;

/// The checks every door makes before a decision reaches the run: `who` may decide on
/// each requirement's tool, and each names a requirement that is pending (or that
/// someone decided already: handed to the run all the same, which refuses it with the
/// same answer whatever the timing and records the late decision in the audit trail).
/// Returns the reins decisions. It reads the session's head (its run state, not its
/// transcript) once; the session's audit trail only for an item that is not pending.
pub(crate) async fn checked(
    state: &AppState,
    who: &Principal,
    id: &str,
    items: &[DecisionItem],
) -> Result<Vec<Decision>> {
    let head = state
        .agent
        .store()
        .session_heads(&[id.to_owned()])
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| {
            ServerError::from(reins_memory::Error::SessionNotFound { id: id.to_owned() })
        })?;
    let (_, pending) = view::of_head(&state.agent, head, false).await?;
    // Opened only to look a decision up in the audit trail (a sub-agent's child session
    // is opened by the sub-agent).
    let mut session: Option<Session> = None;
    let mut decisions = Vec::with_capacity(items.len());
    for item in items {
        let req = pending.iter().find(|r| r.id == item.requirement_id);
        match req {
            Some(req) if !who.may_decide(&req.tool_use.name) => {
                return Err(ServerError::Forbidden(format!(
                    "`{}` may not decide on `{}` calls",
                    who.name, req.tool_use.name
                )));
            }
            Some(_) => {}
            None if decided(state, &mut session, id, &item.requirement_id).await? => {}
            None => {
                return Err(ServerError::UnknownRequirement(format!(
                    "`{}` is not pending on session `{id}`; pending: {}",
                    item.requirement_id,
                    if pending.is_empty() {
                        "none".to_owned()
                    } else {
                        pending
                            .iter()
                            .map(|r| r.id.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                )));
            }
        }
        decisions.push(to_decision(item, req)?);
    }
    Ok(decisions)
}

/// Whether someone decided `requirement` on session `id` already (its audit trail),
/// opening the session on first use.
async fn decided(
    state: &AppState,
    session: &mut Option<Session>,
    id: &str,
    requirement: &str,
) -> Result<bool> {
    if session.is_none() {
        *session = Some(state.agent.owner_of(id).await?.session(id).await?);
    }
    match session {
        Some(s) => Ok(s.decided(requirement).await?.is_some()),
        None => Ok(false),
    }
}

/// Decides as `who`, recorded under `actor` (the door names itself in the actor's
/// metadata: `via`), through the same checks as the native API ([`checked`]) and the
/// run's consent rules. Returns once the run took the decisions, or with its refusal
/// (the typed error, e.g. `already_decided` naming who decided first); the run goes
/// on.
pub(crate) async fn decide_as(
    state: &AppState,
    who: &Principal,
    actor: Actor,
    id: &str,
    items: &[DecisionItem],
) -> Result<()> {
    who.require_decider("decide")?;
    if items.is_empty() {
        return Err(ServerError::invalid("no decisions given"));
    }
    let decisions = checked(state, who, id, items).await?;
    let mut submission = Submission::new(reins_agent::RunInput::Decisions(decisions));
    submission.actor = Some(actor);
    // The run checks the decisions once it holds the session: it says `run_started`
    // when it took them, or ends with the refusal (another decision applied first,
    // say). Subscribed before it starts, to hear either.
    let mut sub = state.hub.channel(id).subscribe(None);
    let run = match super::backend::begin(state, who, id, submission).await? {
        // Executing elsewhere: the backend took the decisions; its run applies them.
        Begun::Relayed(_) => return Ok(()),
        Begun::Here(run) => run,
    };
    loop {
        match sub.rx.recv().await {
            Ok(env) if env.run_id.as_deref() == Some(run.run_id.as_str()) => {
                return match &env.event {
                    HubEvent::Error(e) => Err(e.clone()),
                    // Refused: the run's end carries the typed error.
                    ev if ev.is_failure() => run.wait().await.map(|_| ()),
                    // `run_started`, or anything after it: the decisions were taken.
                    _ => Ok(()),
                };
            }
            Ok(_) => {}
            // Fell behind or closed: the run's end says it.
            Err(_) => return run.wait().await.map(|_| ()),
        }
    }
}

/// Turns an API decision into a reins decision, refusing fields that do not belong.
/// `req`: the pending requirement it answers (`None` when it is not pending: the run
/// refuses the decision then).
pub(crate) fn to_decision(item: &DecisionItem, req: Option<&Requirement>) -> Result<Decision> {
    let id = item.requirement_id.clone();
    let stray = |field: &str, what: &str| {
        ServerError::invalid(format!(
            "`{field}` does not apply to `{what}` (requirement `{id}`)",
            id = item.requirement_id
        ))
    };
    let what = match item.action {
        Action::Approve => "approve",
        Action::Reject => "reject",
        Action::Input => "input",
        Action::ExternalResult => "external_result",
    };
    if item.action != Action::Approve && item.edited_args.is_some() {
        return Err(stray("edited_args", what));
    }
    if item.action != Action::Reject && item.note.is_some() {
        return Err(stray("note", what));
    }
    if item.action != Action::Input && item.values.is_some() {
        return Err(stray("values", what));
    }
    if item.action != Action::ExternalResult && (item.output.is_some() || item.is_error.is_some()) {
        return Err(stray("output/is_error", what));
    }
    if !matches!(item.action, Action::Approve | Action::Input) && item.shown_fingerprint.is_some() {
        return Err(stray("shown_fingerprint", what));
    }
    let decision = to_reins(item, req, id)?;
    Ok(match &item.shown_fingerprint {
        Some(fp) => decision.shown(fp.clone()),
        None => decision,
    })
}

fn to_reins(item: &DecisionItem, req: Option<&Requirement>, id: String) -> Result<Decision> {
    Ok(match item.action {
        Action::Approve => match &item.edited_args {
            None => Decision::approve(id),
            Some(args) => {
                if !args.is_object() {
                    return Err(ServerError::invalid(format!(
                        "`edited_args` for `{id}` must be a JSON object (the tool's arguments)"
                    )));
                }
                // Approving the arguments as shown is a plain approval.
                if req.is_some_and(|r| {
                    matches!(r.kind, RequirementKind::Confirmation) && *args == r.tool_use.input
                }) {
                    Decision::approve(id)
                } else {
                    Decision::approve_with(id, args.clone())
                }
            }
        },
        Action::Reject => Decision::reject(id, item.note.clone().unwrap_or_default()),
        Action::Input => {
            let values = item.values.clone().ok_or_else(|| {
                ServerError::invalid(format!("`input` for `{id}` needs `values` (a JSON object)"))
            })?;
            Decision::input(id, values)
        }
        Action::ExternalResult => {
            let output = item.output.clone().ok_or_else(|| {
                ServerError::invalid(format!("`external_result` for `{id}` needs `output`"))
            })?;
            Decision::external_result(id, output, item.is_error.unwrap_or(false))
        }
    })
}

/// A view token from the API (400 when it is not one).
pub(crate) fn parse_view(token: &str) -> Result<ViewToken> {
    token.parse().map_err(|_| {
        ServerError::BadRequest(format!(
            "`{}` is not a view token (read it from GET /v1/sessions/{{id}})",
            token.chars().take(60).collect::<String>()
        ))
    })
}
