//! Who may set a session's budget above the agent's default: only an admin, whether
//! the limit is set as a run starts ([`session_budget`]) or by extending a reached one
//! ([`check_extension`], which every door's input goes through in
//! [`backend::begin`](super::backend::begin)). Anyone else may set and extend a
//! session's limits up to the agent's default. An agent without a default budget has
//! no ceiling to go above.
//!
//! The rule is the server's, because roles are: the run (reins-agent) checks what any
//! extension must be (above what was spent, whole numbers, ...), on every driver.

use reins_agent::budget::Budget;
use reins_agent::{Agent, AgentError, Decision, RunInput, Submission};

use crate::auth::{AccessRole, Principal};
use crate::error::{Result, ServerError};
use crate::state::AppState;

fn invalid_budget(message: String) -> ServerError {
    ServerError::Invalid {
        code: "invalid_budget",
        message,
    }
}

/// The agent's default limit, when it has one.
fn default_limit(agent: &Agent) -> Option<Budget> {
    agent
        .budget()
        .map(|r| r.limit)
        .filter(|l| !l.is_unlimited())
}

/// The limits of `limit` above the agent's default `default`, worded for a person
/// ("tokens: 500 (the agent's default is 100)"); empty when there are none.
fn above_default(limit: &Budget, default: &Budget) -> Vec<String> {
    limit
        .exceeds(default)
        .into_iter()
        .map(|name| {
            let show = |b: &Budget| match name {
                "tokens" => b.tokens.map(|v| v.to_string()),
                "cost" => b.cost.map(|v| v.to_string()),
                "tool_calls" => b.tool_calls.map(|v| v.to_string()),
                _ => b.wall_secs.map(|v| v.to_string()),
            };
            format!(
                "{name}: {} (the agent's default is {})",
                show(limit).unwrap_or_else(|| "no limit".to_owned()),
                show(default).unwrap_or_default()
            )
        })
        .collect()
}

/// The session's own budget limit a run request asks for, checked before anything is
/// submitted: its form and values (422 `invalid_budget`), and — for a caller without
/// the admin role — that it is no higher than the agent's default (403). A limit left
/// out keeps the agent's default.
pub(super) fn session_budget(
    agent: &Agent,
    who: &Principal,
    raw: Option<serde_json::Value>,
) -> Result<Option<Budget>> {
    let Some(raw) = raw else { return Ok(None) };
    // An object, as the schema says: an array is not read as the fields in order.
    let limit: Budget = crate::strict::from_value(raw).map_err(|e| {
        invalid_budget(format!(
            "`budget` is not a budget ({e}); expected {{\"tokens\", \"cost\", \"tool_calls\", \"wall_secs\"}}, \
             whole numbers of at least 0 (cost any number of at least 0)"
        ))
    })?;
    if limit.is_unlimited() {
        return Err(invalid_budget(
            "`budget` sets no limit; give at least one of tokens, cost, tool_calls, wall_secs"
                .to_owned(),
        ));
    }
    // A limit left out keeps the agent's default.
    let rules = agent.budget();
    let default = rules.map(|r| r.limit).unwrap_or_default();
    let limit = Budget {
        tokens: limit.tokens.or(default.tokens),
        cost: limit.cost.or(default.cost),
        tool_calls: limit.tool_calls.or(default.tool_calls),
        wall_secs: limit.wall_secs.or(default.wall_secs),
    };
    limit
        .validate_for(rules.and_then(|r| r.price))
        .map_err(|e| invalid_budget(e.reason))?;
    if who.has(AccessRole::Admin) {
        return Ok(Some(limit));
    }
    let above = above_default(&limit, &default);
    if !above.is_empty() {
        return Err(ServerError::Forbidden(format!(
            "only an admin may set a session's budget above the agent's default; asked {}",
            above.join(", ")
        )));
    }
    Ok(Some(limit))
}

/// Refuses an extension of a reached budget above the agent's default by `who` without
/// the admin role, before the input reaches the backend (nothing changes): 403
/// `not_eligible`, naming each limit above the default. Reads the session's pending
/// requirements only when `submission` approves one that may be a budget requirement
/// (`budget-<n>`) and the agent has a default; a limit the run would refuse anyway (a
/// malformed one) is left for the run to refuse, as are decisions on requirements that
/// no longer wait. A sub-agent's budget requirement (`<call>/budget-<n>`) is measured
/// against its own agent's default, which this server does not hold: it is not checked
/// here.
pub(super) async fn check_extension(
    state: &AppState,
    who: &Principal,
    id: &str,
    submission: &Submission,
) -> std::result::Result<(), AgentError> {
    let RunInput::Decisions(decisions) = &submission.input else {
        return Ok(());
    };
    if who.has(AccessRole::Admin) {
        return Ok(());
    }
    let Some(default) = default_limit(&state.agent) else {
        return Ok(());
    };
    // The budget requirement's ids are `budget-<n>`; an end (a rejection) raises nothing.
    let extends = |d: &&Decision| {
        d.id().starts_with("budget-")
            && matches!(d, Decision::Approve { .. } | Decision::Input { .. })
    };
    if !decisions.iter().any(|d| extends(&d)) {
        return Ok(());
    }
    // What the session waits for, from its head (its run state, not its transcript).
    let store = state.agent.store();
    let Some(head) = store
        .session_heads(&[id.to_owned()])
        .await?
        .into_iter()
        .next()
    else {
        return Ok(());
    };
    let pending = reins_agent::stored_view(store, head.into_state())
        .await?
        .requirements;
    for d in decisions.iter().filter(extends) {
        let Some(req) = pending.iter().find(|r| r.id == d.id()) else {
            continue;
        };
        let Ok(Some(limit)) = reins_agent::run::requested_limit(req, d) else {
            continue;
        };
        let above = above_default(&limit, &default);
        if !above.is_empty() {
            return Err(AgentError::NotEligible {
                id: req.id.clone(),
                reason: format!(
                    "`{}` may not extend the session's budget above the agent's default: only \
                     an admin may; asked {}",
                    who.name,
                    above.join(", ")
                ),
            });
        }
    }
    Ok(())
}
