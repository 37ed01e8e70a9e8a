//! Decisions from the API: each item turned into a reins [`Decision`] (the door's own
//! encoding), then handed, as their actor, to the one decision path
//! ([`super::backend::decide`]): the run checks what is pending, what was decided
//! already (a late decision is refused `already_decided` and audited, whatever the
//! timing), kind, expiry, fingerprint, quorum, the actor's tool scope and the
//! eligibility policy — once, on every driver. The native API and the approval
//! channels (email links, Slack buttons, [`decide_as`]) decide this way; so do AG-UI,
//! A2A, MCP and ACP.

use reins_agent::port::Decide;
use reins_agent::{Actor, Decision, ViewToken};

use crate::auth::Principal;
use crate::error::{Result, ServerError};
use crate::hub::HubEvent;
use crate::state::AppState;
use crate::types::{Action, DecisionItem};

/// The reins decisions of the API's items (nothing is read: the run checks them).
pub(crate) fn decisions(items: &[DecisionItem]) -> Result<Vec<Decision>> {
    items.iter().map(to_decision).collect()
}

/// Decides as `who`, recorded under `actor` (the door names itself in the actor's
/// metadata: `via`), through the one decision path. Returns once the run took the
/// decisions, or with its refusal (the typed error, e.g. `already_decided` naming who
/// decided first); the run goes on.
#[cfg_attr(not(any(feature = "email", feature = "slack")), allow(dead_code))]
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
    submit(state, id, Decide::new(actor, decisions(items)?)).await
}

/// Hands `decide` to the one decision path and follows the run it continues, as
/// [`decide_as`] does (the escalation sweep's rejections of expired calls come here).
pub(crate) async fn submit(state: &AppState, id: &str, decide: Decide) -> Result<()> {
    // The run checks the decisions once it holds the session: it says `run_started`
    // when it took them, or ends with the refusal (another decision applied first,
    // say). Subscribed before it starts, to hear either.
    let mut sub = state.hub.channel(id).subscribe(None);
    let run = super::backend::decide(state, id, decide).await?;
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
pub(crate) fn to_decision(item: &DecisionItem) -> Result<Decision> {
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
    let decision = to_reins(item, id)?;
    Ok(match &item.shown_fingerprint {
        Some(fp) => decision.shown(fp.clone()),
        None => decision,
    })
}

fn to_reins(item: &DecisionItem, id: String) -> Result<Decision> {
    Ok(match item.action {
        Action::Approve => match &item.edited_args {
            None => Decision::approve(id),
            Some(args) => {
                if !args.is_object() {
                    return Err(ServerError::invalid(format!(
                        "`edited_args` for `{id}` must be a JSON object (the tool's arguments)"
                    )));
                }
                // Approving the arguments as shown is a plain approval: the run
                // treats it as one.
                Decision::approve_with(id, args.clone())
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
