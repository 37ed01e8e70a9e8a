//! Decisions on a session's pending requirements: an API decision checked and turned
//! into a reins [`Decision`], and the caller's view token read.

use reins_agent::{Decision, Requirement, RequirementKind, ViewToken};

use crate::error::{Result, ServerError};
use crate::types::{Action, DecisionItem};

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
