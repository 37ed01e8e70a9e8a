//! The budget check of the run (see [`crate::budget`]): what a session spends is
//! counted in the stored state, the limit is checked before a model call or a tool
//! starts, and a person's answer to the `budget` requirement extends the limit or
//! ends the run. All of it here, sans-IO, so every driver runs with it.

use chrono::{DateTime, Utc};
use reins_message::{Msg, ToolUse, Usage};
use serde_json::Value;

use super::{Phase, Run};
use serde::{Deserialize, Serialize};

use crate::budget::{BUDGET_TOOL, Budget, BudgetAsk, Spend, ended_message};
use crate::error::{AgentError, Result};
use crate::output::RunStatus;
use crate::requirement::{Decision, Requirement, RequirementKind};

/// A session's budget as its run state stores it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct BudgetState {
    /// What was spent.
    #[serde(default)]
    pub(crate) spent: Spend,
    /// The session's own limit (set by an extension or the caller), over the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) limit: Option<Budget>,
    /// The budget requirement the run waits for, and the phase it goes back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) asked: Option<Asked>,
    /// Budget requirements raised so far (their ids are `budget-<n>`).
    #[serde(default)]
    pub(crate) asks: u32,
    /// The last moment the run was seen active (active time counts from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) active_since: Option<DateTime<Utc>>,
    /// The last moment an outcome or a call was seen (when a requirement is raised).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) seen: Option<DateTime<Utc>>,
}

/// A pending budget requirement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Asked {
    pub(crate) requirement: Requirement,
    pub(crate) resume: Phase,
}

impl BudgetState {
    /// Counts active time up to `now`.
    pub(crate) fn tick(&mut self, now: DateTime<Utc>) {
        self.seen = Some(now);
        if let Some(since) = self.active_since {
            let ms = (now - since).num_milliseconds().max(0);
            self.spent.wall_ms = self
                .spent
                .wall_ms
                .saturating_add(u64::try_from(ms).unwrap_or(0));
            self.active_since = Some(now.max(since));
        }
    }
}

/// The metadata key the final message of a run ended at its budget carries
/// (`{"reins_budget": "ended"}`), so a reader can tell it from a model's answer.
pub const BUDGET_ENDED_MARK: &str = "reins_budget";

impl Run {
    /// The limit in force: the session's own, else the agent's (`None`: none).
    pub fn budget_limit(&self) -> Option<Budget> {
        self.state
            .budget
            .as_ref()
            .and_then(|b| b.limit)
            .or_else(|| self.call.budget.as_ref().map(|r| r.limit))
            .filter(|l| !l.is_unlimited())
    }

    /// What the session spent while a budget was in force.
    pub fn budget_spent(&self) -> Spend {
        self.state
            .budget
            .as_ref()
            .map(|b| b.spent)
            .unwrap_or_default()
    }

    /// The budget state to count in, when a budget is in force.
    fn budget_state(&mut self) -> Option<&mut BudgetState> {
        if self.state.budget.is_none() && self.budget_limit().is_some() {
            self.state.budget = Some(BudgetState::default());
        }
        self.state.budget.as_mut()
    }

    /// At the start of a call with `now`: a session's own limit from the caller, and
    /// active time counts from now (time spent paused is not counted).
    pub(super) fn budget_begin(&mut self, limit: Option<Budget>, now: DateTime<Utc>) {
        if let Some(l) = limit {
            self.state
                .budget
                .get_or_insert_with(BudgetState::default)
                .limit = Some(l);
        }
        let active = self.is_active();
        if let Some(b) = self.budget_state() {
            b.active_since = active.then_some(now);
            b.seen = Some(now);
        }
    }

    /// Counts active time up to `now` (an outcome came back).
    pub(super) fn budget_tick(&mut self, now: DateTime<Utc>) {
        if let Some(b) = self.budget_state() {
            b.tick(now);
        }
    }

    /// Counts a model call's (or a summary's) usage.
    pub(super) fn budget_usage(&mut self, usage: &Usage) {
        let price = self.call.budget.as_ref().and_then(|r| r.price);
        if let Some(b) = self.budget_state() {
            b.spent.add_usage(usage, price.as_ref());
        }
    }

    /// Counts tool calls started.
    pub(super) fn budget_started(&mut self, calls: u64) {
        if calls == 0 {
            return;
        }
        if let Some(b) = self.budget_state() {
            b.spent.tool_calls = b.spent.tool_calls.saturating_add(calls);
        }
    }

    /// Tool calls that may start now: `Some(0)` when any limit is reached.
    pub(super) fn budget_calls_left(&self) -> Option<u64> {
        let limit = self.budget_limit()?;
        let spent = self.budget_spent();
        if !limit.reached(&spent, false).is_empty() {
            return Some(0);
        }
        limit.calls_left(&spent)
    }

    /// The budget requirement the run waits for.
    pub(super) fn budget_requirement(&self) -> Option<&Requirement> {
        self.state
            .budget
            .as_ref()
            .and_then(|b| b.asked.as_ref())
            .map(|a| &a.requirement)
    }

    /// Before a model call (`before_tool`: before a tool starts): when a limit is
    /// reached, raises the budget requirement, pauses the run and says so. The phase
    /// the run was in is where an extension goes back to.
    pub(super) fn budget_pause(&mut self, before_tool: bool) -> bool {
        let Some(limit) = self.budget_limit() else {
            return false;
        };
        let spent = self.budget_spent();
        let reached = limit.reached(&spent, before_tool);
        if reached.is_empty() {
            return false;
        }
        let resume = self.state.phase;
        let Some(b) = self.budget_state() else {
            return false;
        };
        let now = b.seen.unwrap_or(chrono::DateTime::UNIX_EPOCH);
        b.asks += 1;
        let id = format!("budget-{}", b.asks);
        let ask = BudgetAsk {
            spent,
            limit,
            reached: reached.iter().map(|r| (*r).to_owned()).collect(),
            suggested: limit.suggested(&spent, &reached),
            before: if before_tool {
                "tool_call"
            } else {
                "model_call"
            }
            .to_owned(),
        };
        let shown = reached
            .iter()
            .map(|r| {
                format!(
                    "{r}: {} of {}",
                    spent.of(r),
                    crate::budget::limit_of(&limit, r)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let requirement = Requirement {
            id: id.clone(),
            tool_use: ToolUse::new(
                id,
                BUDGET_TOOL,
                serde_json::to_value(&ask).unwrap_or(Value::Null),
            ),
            reason: format!(
                "the session's budget is reached ({shown}) before a {}; extend it with a new \
                 limit or end the run",
                if before_tool {
                    "tool call"
                } else {
                    "model call"
                }
            ),
            kind: RequirementKind::Budget {
                budget: Box::new(ask),
            },
            created_at: now,
            expires_at: None,
            path: Vec::new(),
            agent: None,
            quorum: None,
        };
        b.asked = Some(Asked {
            requirement,
            resume,
        });
        self.state.phase = Phase::Paused;
        true
    }

    /// Validates a decision on the pending budget requirement (nothing changes):
    /// the new limit it extends to, or `None` for an end.
    pub(super) fn check_budget_decision(&self, d: &Decision) -> Result<Option<Budget>> {
        let Some(req) = self.budget_requirement() else {
            return Ok(None);
        };
        let RequirementKind::Budget { budget: ask } = &req.kind else {
            return Ok(None);
        };
        let limit = match requested(req, d)? {
            None => return Ok(None),
            Some((suggested, true)) => suggested,
            Some((limit, false)) => {
                limit.check_extension(&ask.limit, &self.budget_spent(), &ask.reached)?;
                limit
            }
        };
        self.check_budget_authority(req, &limit)?;
        Ok(Some(limit))
    }

    /// Only an admin extends a session's budget above the agent's default, as only an
    /// admin starts a session above it: checked here, for every door and driver, when
    /// the call's actor carries the roles a door vouches for (its metadata's `roles`;
    /// an application deciding in its own code, with no roles, is not limited).
    fn check_budget_authority(&self, req: &Requirement, limit: &Budget) -> Result<()> {
        let Some(actor) = &self.call.actor else {
            return Ok(());
        };
        let Some(roles) = actor
            .metadata
            .as_ref()
            .and_then(|m| m.get("roles"))
            .and_then(Value::as_array)
        else {
            return Ok(());
        };
        if roles.iter().any(|r| r == "admin") {
            return Ok(());
        }
        let Some(default) = self
            .call
            .budget
            .as_ref()
            .map(|r| r.limit)
            .filter(|l| !l.is_unlimited())
        else {
            return Ok(());
        };
        let above = limit.above(&default);
        if above.is_empty() {
            return Ok(());
        }
        Err(AgentError::NotEligible {
            id: req.id.clone(),
            reason: format!(
                "`{}` may not extend the session's budget above the agent's default: only \
                 an admin may; asked {}",
                actor.principal,
                above.join(", ")
            ),
        })
    }

    /// Applies a checked decision on the budget requirement: the new limit and the
    /// run goes back to where it paused, or the run ends with a final message saying
    /// the budget ended it. The decision is in the audit trail as any other.
    pub(super) fn apply_budget_decision(
        &mut self,
        d: &Decision,
        extend: Option<Budget>,
        now: DateTime<Utc>,
    ) {
        let Some(asked) = self.state.budget.as_mut().and_then(|b| b.asked.take()) else {
            return;
        };
        let req = asked.requirement;
        let record = serde_json::to_value(d).unwrap_or(Value::Null);
        self.req_ops.decide.push((req.id.clone(), record));
        match extend {
            Some(limit) => {
                let executed = serde_json::to_value(limit).ok();
                self.log_decision(
                    &req,
                    d.label(),
                    "resolve",
                    d.decided_by(),
                    executed,
                    None,
                    now,
                );
                if let Some(b) = self.state.budget.as_mut() {
                    b.limit = Some(limit);
                    b.active_since = Some(now);
                }
                self.state.phase = asked.resume;
            }
            None => {
                let note = match d {
                    Decision::Reject { note, .. } => note.clone(),
                    _ => None,
                };
                self.log_decision(
                    &req,
                    "reject",
                    "resolve",
                    d.decided_by(),
                    None,
                    note.clone(),
                    now,
                );
                let RequirementKind::Budget { budget: ask } = &req.kind else {
                    return;
                };
                let text = ended_message(ask, note.as_deref());
                // Calls of the turn that did not run get an honest result first.
                self.close_turn(
                    super::input::Closing::NotRun(super::NOT_RUN_BUDGET_ENDED),
                    "budget",
                    d.decided_by(),
                    now,
                );
                let mut msg = Msg::assistant(text);
                msg.metadata.insert(
                    BUDGET_ENDED_MARK.to_owned(),
                    Value::String("ended".to_owned()),
                );
                self.push(msg.clone());
                self.call.last_assistant = Some(msg);
                self.finish(RunStatus::Completed);
            }
        }
    }
}

/// The limit a decision on the budget requirement `req` asks for, as the run reads it:
/// `Ok(None)` for an end (a rejection) or when `req` is no budget requirement; the
/// suggested limit for a plain approval (or one showing the requirement's own facts);
/// otherwise the limit in force with the decision's new limits over it (`edited_input`
/// or `values`, their `limit` object or themselves). A malformed limit is
/// `InvalidBudget`, an external result `WrongDecision`. Whether the run accepts it (above
/// what was spent) is the run's to say; a door uses this to check who may ask for it.
pub fn requested_limit(req: &Requirement, d: &Decision) -> Result<Option<Budget>> {
    Ok(requested(req, d)?.map(|(limit, _)| limit))
}

/// [`requested_limit`], and whether it is the requirement's suggestion.
fn requested(req: &Requirement, d: &Decision) -> Result<Option<(Budget, bool)>> {
    let RequirementKind::Budget { budget: ask } = &req.kind else {
        return Ok(None);
    };
    let change = match d {
        Decision::Reject { .. } => return Ok(None),
        Decision::Approve {
            edited_input: None, ..
        } => return Ok(Some((ask.suggested, true))),
        // An edited input showing the requirement's own facts is the suggestion.
        Decision::Approve {
            edited_input: Some(v),
            ..
        } if *v == req.tool_use.input => return Ok(Some((ask.suggested, true))),
        Decision::Approve {
            edited_input: Some(v),
            ..
        } => v.get("limit").unwrap_or(v),
        Decision::Input { values, .. } => values.get("limit").unwrap_or(values),
        Decision::ExternalResult { .. } => {
            return Err(AgentError::WrongDecision {
                id: req.id.clone(),
                decision: d.label(),
                kind: req.kind.label(),
            });
        }
    };
    Ok(Some((ask.limit.merged(change)?, false)))
}
