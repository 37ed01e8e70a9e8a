//! Sub-agent calls and calls that ask a question, for a driver that runs them itself
//! (reins-restate runs each child session as a virtual object of its own, and keeps
//! an asking call's question in its journal). The rules are the local driver's:
//! the same requirement ids and paths, the same parent audit records of answers
//! routed to a child, the same tool results. The local driver serves these calls in
//! `crate::subagent` and its asking-call module, with the same functions underneath.
//!
//! | what | here |
//! |---|---|
//! | is this call a sub-agent's? | [`subagent_of`] |
//! | the child's first input | [`SubAgentTool::task`] |
//! | the child's state as the parent's outcome | [`SubAgentTool::outcome_of`] |
//! | the parent's audit records of routed answers | [`record_routed`] |
//! | a paused parent following its children in the store | [`to_follow`], [`follow`], [`Followed::apply`] |
//! | closing the children a new message closes | [`closed_by`], [`close_children`] |
//! | an asking call's question as a requirement | [`question_requirement`] |

use std::sync::Arc;

use chrono::{DateTime, Utc};
use reins_memory::MemoryStore;
use reins_message::{Msg, Role, ToolResult, ToolUse};
use reins_tool::ToolQuestion;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::Agent;
use crate::error::{AgentError, Result};
use crate::output::RunStatus;
use crate::requirement::{Decision, Requirement, RequirementKind};
use crate::run::{Call, ExecOutcome, Phase, Run, RunInput};
use crate::subagent::SubAgentTool;

/// The sub-agent tool `tool` of `agent`, when calls of `tool` run a child session.
pub fn subagent_of<'a>(agent: &'a Agent, tool: &str) -> Option<&'a SubAgentTool> {
    agent
        .runtime
        .subagents
        .get(tool)
        .and_then(|s| s.as_any().downcast_ref::<SubAgentTool>())
}

impl SubAgentTool {
    /// The child session's first user message: the call's `task`, or the error result
    /// the call ends with when the model gave none.
    ///
    /// # Errors
    /// The tool result to record when `task` is missing or not a string.
    #[allow(
        clippy::result_large_err,
        reason = "one call per sub-agent call; the error is the tool result handed back as is"
    )]
    pub fn task(&self, tool_use: &ToolUse) -> std::result::Result<Msg, ToolResult> {
        match tool_use.input.get("task").and_then(Value::as_str) {
            Some(task) => Ok(Msg::user(task)),
            None => Err(ToolResult::error(
                &tool_use.id,
                &tool_use.name,
                format!(
                    "invalid arguments for `{}`: `task` (a string) is required",
                    tool_use.name
                ),
            )),
        }
    }

    /// The parent's outcome of call `tool_use` whose child session (in `parent`) is
    /// now in `phase`: paused → the call is delegated with the child's requirements
    /// (`waiting`, qualified by the call's id); finished → its answer (`messages`: the
    /// child's transcript) or, cancelled, an interrupted result.
    pub fn outcome_of(
        &self,
        parent: &str,
        tool_use: &ToolUse,
        phase: Phase,
        waiting: Vec<Requirement>,
        messages: &[Msg],
    ) -> ExecOutcome {
        let child_id = crate::follow::child_session_id(parent, &tool_use.id);
        match phase {
            Phase::Paused => crate::subagent::delegated(self, tool_use, waiting),
            Phase::Finished(status @ (RunStatus::Completed | RunStatus::MaxIterations)) => {
                let mut r =
                    crate::subagent::finished_result(self, tool_use, &child_id, phase, messages);
                r.metadata
                    .insert("child_status".to_owned(), serde_json::json!(status));
                ExecOutcome::Done(r)
            }
            _ => ExecOutcome::Done(crate::subagent::finished_result(
                self, tool_use, &child_id, phase, messages,
            )),
        }
    }
}

/// Appends to `parent`'s audit trail what became of `decisions` routed to the child
/// session of call `tool_use`: applied (`refused: None`) or refused with that error
/// (recorded `already_decided`, `expired`, ..), as the local driver records them.
/// `shown`: the child's requirements the decisions answer. A failure to record is
/// logged; the child's own trail holds what happened either way.
pub async fn record_routed(
    store: &Arc<dyn MemoryStore>,
    parent: &str,
    tool_use: &ToolUse,
    decisions: &[Decision],
    shown: &[Requirement],
    refused: Option<&AgentError>,
) {
    let records = crate::subagent::routed_records(tool_use, decisions, shown, refused);
    crate::subagent::record(store, parent, records).await;
}

/// What the child sessions of a paused run's sub-agent calls wait for in the store
/// (someone may have answered a child directly): computed by [`follow`], applied to
/// the run by [`Followed::apply`]. Serializable, so a driver can journal it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Followed {
    /// Per delegated call id: what its child waits for now (its own ids).
    pub children: Vec<(String, Vec<Requirement>)>,
}

/// The sub-agent calls of `run` whose child sessions [`follow`] reads: those of a
/// paused run whose answers are not routed yet (none when the run is not paused).
pub fn to_follow(run: &Run) -> Vec<ToolUse> {
    if run.is_paused() {
        run.state().delegated_calls()
    } else {
        Vec::new()
    }
}

/// Reads what the child sessions of the paused sub-agent calls `calls` (see
/// [`to_follow`]) of `session` wait for, in `agent`'s store (recursively), as the
/// local driver does before it validates an input or shows the session.
///
/// # Errors
/// A store failure, or a child session whose run state does not read.
pub async fn follow(agent: &Agent, session: &str, calls: Vec<ToolUse>) -> Result<Followed> {
    let mut children = Vec::new();
    let config = agent.run_config();
    for call in calls {
        let child = crate::follow::child_session_id(session, &call.id);
        if let Some(waiting) =
            crate::follow::child_waits_for(agent.store(), config, &child, 0).await?
        {
            children.push((call.id, waiting));
        }
    }
    Ok(Followed { children })
}

impl Followed {
    /// Brings `run`'s copies of its children's requirements up to date. Returns
    /// whether anything changed.
    pub fn apply(self, run: &mut Run) -> bool {
        let mut changed = false;
        for (id, waiting) in self.children {
            changed |= run.follow_child(&id, waiting);
        }
        changed
    }
}

/// The user-input requirement call `tool_use` raises when it asks `question` at
/// `now` (its id is the call's id, `~ask-` and a fresh id; it expires after the
/// agent's `requirement_ttl`), as the local driver raises it.
pub fn question_requirement(
    agent: &Agent,
    tool_use: &ToolUse,
    question: &ToolQuestion,
    now: DateTime<Utc>,
) -> Requirement {
    let expires_at = agent
        .config
        .run
        .requirement_ttl_secs
        .and_then(|s| i64::try_from(s).ok())
        .map(|s| now + chrono::Duration::seconds(s));
    Requirement {
        id: format!("{}~ask-{}", tool_use.id, reins_message::new_id()),
        tool_use: tool_use.clone(),
        kind: RequirementKind::UserInput {
            fields: question.schema.clone(),
        },
        reason: question.message.clone(),
        created_at: now,
        expires_at,
        path: Vec::new(),
        agent: None,
        quorum: None,
    }
}

/// The paused sub-agent calls of `run` that `input` closes: a new user message (not
/// tool results) closes them all. Read before the input is applied.
pub fn closed_by(run: &Run, input: &RunInput) -> Vec<ToolUse> {
    match input {
        RunInput::Message(m) if m.role != Role::Tool => run.state().delegated_calls(),
        _ => Vec::new(),
    }
}

/// Closes the child sessions of `children` (see [`closed_by`]) of `session` once
/// `call`, which closed them, is stored: whatever a child waits for is rejected with
/// a note naming the new message, so nothing stays approvable there. A failure is
/// logged: the parent's own turn is already stored.
pub async fn close_children(agent: &Agent, session: &str, children: &[ToolUse], call: &Call) {
    if children.is_empty() {
        return;
    }
    let note = match call.input() {
        RunInput::Message(m) => format!(
            "a new message was sent instead: {}",
            crate::error::clip(&m.text(), 200)
        ),
        _ => "the call was closed".to_owned(),
    };
    for child in children {
        let Some(sub) = agent.runtime.subagents.get(&child.name) else {
            continue;
        };
        if let Err(e) = sub
            .close(session, child, &note, call.actor().cloned())
            .await
        {
            tracing::warn!(session = %session, call = %child.id, error = %e, "could not close a sub-agent's child session");
        }
    }
}
