//! Who may set a session's budget above the agent's default: only an admin, whether
//! the limit is set as a run starts ([`session_budget`], checked here before the run
//! starts) or by extending a reached one (checked by the run, on every driver and for
//! every door, from the roles the decision's actor carries: see
//! `reins_agent::budget`). Anyone else may set and extend a session's limits up to the
//! agent's default. An agent without a default budget has no ceiling to go above.

use reins_agent::AgentCard;
use reins_agent::budget::Budget;

use crate::auth::{AccessRole, Principal};
use crate::error::{Result, ServerError};

fn invalid_budget(message: String) -> ServerError {
    ServerError::Invalid {
        code: "invalid_budget",
        message,
    }
}

/// The session's own budget limit a run request asks for, checked before anything is
/// submitted: its form and values (422 `invalid_budget`), and — for a caller without
/// the admin role — that it is no higher than the agent's default (403). A limit left
/// out keeps the agent's default.
pub(super) fn session_budget(
    card: &AgentCard,
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
    let rules = card.budget.as_ref();
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
    let above = limit.above(&default);
    if !above.is_empty() {
        return Err(ServerError::Forbidden(format!(
            "only an admin may set a session's budget above the agent's default; asked {}",
            above.join(", ")
        )));
    }
    Ok(Some(limit))
}
