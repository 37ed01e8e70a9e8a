//! Sub-agent calls, written once. A [`Step::Delegate`](crate::run::Step::Delegate)
//! is three parts: [`Work::Dispatch`](super::Work::Dispatch) claims each call in the
//! parent's ledger (a call the ledger finished gives its result and runs no child);
//! the driver runs each child session's turn where child sessions run (in this
//! process, or in their own virtual objects), each through [`serve_child`]; and
//! [`Work::Conclude`](super::Work::Conclude) makes the children's answers the calls'
//! outcomes — the answers routed to a child audited at the parent, a finished call's
//! result in the parent's ledger, the `PostActing` hooks.
//!
//! A child session is an ordinary session whose id is the parent's and the call's
//! ([`child_session_id`](crate::child_session_id)). [`serve_child`] decides, from what
//! the child holds ([`child_state`]), what one dispatch does: start it with the
//! call's task, hand it the answers routed from the parent, resume it after a crash,
//! or read its answer; the child's turn runs until it pauses or ends. The rules are
//! the same on every driver: the same requirement ids and paths, the same audit
//! records, the same tool results.

use reins_message::{Msg, Role, ToolResult, ToolUse};
use serde_json::{Value, json};

use super::act::{Acted, collect, post_acting};
use super::{Done, Ports};
use crate::agent::Agent;
pub use crate::delegate::{ChildAnswer, ChildCall, ChildState, ChildTurns, Routed};
use crate::error::{AgentError, Result};
use crate::output::{RunEvent, RunOutput, RunStatus};
use crate::requirement::{Decision, Requirement};
use crate::run::{Batch, ChildInput, ExecOutcome, Phase, RunInput};
use crate::view::{Actor, DecisionRecord, Verdict, ViewToken};

/// Serves one dispatch of a sub-agent call on its child session: starts the child
/// with the call's task, hands it the answers routed from the parent (recorded as
/// taken or refused: a child whose state moved on refuses them, and the dispatch goes
/// by what it holds), resumes it after a crash cut its run short, or reads where it
/// is; the child's turn runs until it pauses or ends.
///
/// # Errors
/// The store's, the child run's.
pub async fn serve_child(turns: &mut dyn ChildTurns, call: ChildCall) -> Result<ChildAnswer> {
    let mut routed = call.routed;
    let mut note: Option<Routed> = None;
    loop {
        let state = turns.state().await?;
        let input = match routed.take() {
            Some(ChildInput::Decisions { decisions }) => {
                note = Some(Routed {
                    decisions: decisions.clone(),
                    shown: state.waiting.clone(),
                    refused: None,
                });
                Some(RunInput::Decisions(decisions))
            }
            Some(ChildInput::Resume)
                if state.phase == Phase::Paused && state.waiting.is_empty() =>
            {
                Some(RunInput::Resume)
            }
            // Otherwise go by what the child session holds (the answers were delivered
            // before a crash, or never were needed).
            _ => match state.phase {
                Phase::Idle if state.empty => match task(&call.tool_use) {
                    Ok(task) => Some(RunInput::Message(task)),
                    Err(invalid) => {
                        return Ok(ChildAnswer {
                            invalid: Some(invalid),
                            ..answer_at(state, note)
                        });
                    }
                },
                Phase::Reasoning | Phase::Acting | Phase::Summarizing => Some(RunInput::Resume),
                _ => None,
            },
        };
        let Some(input) = input else {
            return Ok(answer_at(state, note));
        };
        match turns.turn(input, state.token).await {
            Ok(out) => return Ok(answer_of(out, note)),
            // The child did not take the routed answers (its state moved on): recorded
            // as refused at the parent; the child goes by its state.
            Err(e) if refused_by_child(&e) => match &mut note {
                Some(n) if n.refused.is_none() => {
                    n.refused = Some((reason(&e).to_owned(), e.to_string()))
                }
                _ => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
}

/// The answer of a child where it is.
fn answer_at(state: ChildState, routed: Option<Routed>) -> ChildAnswer {
    ChildAnswer {
        phase: state.phase,
        waiting: state.waiting,
        last: state.last,
        invalid: None,
        routed,
    }
}

/// The child session's first user message: the call's `task`, or the error result
/// the call ends with when the model gave none.
#[allow(
    clippy::result_large_err,
    reason = "one call per sub-agent call; the error is the tool result handed back as is"
)]
fn task(tool_use: &ToolUse) -> std::result::Result<Msg, ToolResult> {
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

/// The answer of a child turn that ran until it paused or ended.
fn answer_of(out: RunOutput, routed: Option<Routed>) -> ChildAnswer {
    let phase = match out.status {
        RunStatus::Paused => Phase::Paused,
        status => Phase::Finished(status),
    };
    ChildAnswer {
        phase,
        waiting: out.requirements,
        last: Some(out.message),
        invalid: None,
        routed,
    }
}

/// Whether the child refused routed answers because its state moved on (rather than
/// failing): they are then recorded as refused at the parent.
fn refused_by_child(e: &AgentError) -> bool {
    matches!(
        e,
        AgentError::StaleView { .. }
            | AgentError::AlreadyDecided { .. }
            | AgentError::UnknownRequirement { .. }
            | AgentError::NothingToResume { .. }
            | AgentError::RequirementExpired { .. }
            | AgentError::ShownArgumentsChanged { .. }
            | AgentError::WrongDecision { .. }
    )
}

/// The audit reason of a child's refusal.
fn reason(e: &AgentError) -> &'static str {
    match e {
        AgentError::StaleView { .. } => "stale_view",
        AgentError::RequirementExpired { .. } => "expired",
        AgentError::ShownArgumentsChanged { .. } => "fingerprint_mismatch",
        _ => "already_decided",
    }
}

/// The child session `session` of `agent` (the sub-agent) as stored: where its run
/// is, what it waits for (its own children followed), its last answer.
///
/// # Errors
/// The store's; a run state that does not read.
pub async fn child_state(agent: &Agent, session: &str) -> Result<ChildState> {
    let stored = match agent.store().load_session(session).await {
        Ok(s) => s,
        Err(reins_memory::Error::SessionNotFound { .. }) => {
            return Ok(ChildState {
                phase: Phase::Idle,
                waiting: Vec::new(),
                last: None,
                empty: true,
                token: ViewToken::new(false, Vec::<String>::new()),
            });
        }
        Err(e) => return Err(e.into()),
    };
    let last = stored
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)
        .cloned();
    let empty = stored.messages.is_empty();
    let config = agent.run_config();
    let mut core = crate::state::SessionCore::from_state(stored, config)?;
    crate::follow::follow_children(agent.store(), config, session, &mut core.run).await?;
    let view = core.view_of(session);
    Ok(ChildState {
        phase: view.phase,
        waiting: view.requirements,
        last,
        empty,
        token: view.token,
    })
}

/// The first part of a [`Step::Delegate`](crate::run::Step::Delegate): each call
/// claimed in the parent's ledger (the claim is taken over on every dispatch: the
/// child's own ledger and session keep its tools at most once; the parent's records
/// the call as running from its first dispatch until its result, so a crash in
/// between reads as `Unknown`, never as "not run"). Per call, its recorded result
/// when the ledger finished it.
///
/// # Errors
/// The store's.
pub(super) async fn dispatch(ports: &Ports<'_>, batch: Batch) -> Result<Vec<Option<ToolResult>>> {
    let Ports { agent, session, .. } = *ports;
    let mut out = Vec::with_capacity(batch.calls.len());
    for e in &batch.calls {
        let tool_use = e.effective_use();
        let fingerprint = reins_memory::fingerprint(&tool_use.input);
        let claim = agent
            .store()
            .claim(
                session,
                &tool_use.id,
                &fingerprint,
                agent.tool_lease(),
                true,
            )
            .await?;
        out.push(match claim {
            reins_memory::Claim::Finished(r) => Some(r),
            _ => {
                ports.witness.emit(|| RunEvent::ToolExecutionStarted {
                    id: tool_use.id.clone(),
                    name: tool_use.name.clone(),
                });
                None
            }
        });
    }
    Ok(out)
}

/// What one dispatched sub-agent call came to before [`Work::Conclude`](super::Work::Conclude).
#[allow(
    clippy::large_enum_variant,
    reason = "one value per sub-agent call, moved once: boxing would only add an allocation"
)]
#[derive(Debug, Clone, PartialEq)]
pub enum Child {
    /// The parent's ledger had finished it: its recorded result (no child ran).
    Settled(ToolResult),
    /// Its child session's answer.
    Answered(ChildAnswer),
}

/// The child calls of a dispatched [`Batch`]: those the parent's ledger did not
/// settle (`dispatched`: per call, the result it found).
pub fn child_calls(
    parent: &str,
    batch: &Batch,
    dispatched: &[Option<ToolResult>],
) -> Vec<ChildCall> {
    batch
        .calls
        .iter()
        .zip(dispatched)
        .filter(|(_, d)| d.is_none())
        .map(|(e, _)| ChildCall {
            parent: parent.to_owned(),
            tool_use: (*e.effective_use()).clone(),
            routed: e.routed.clone(),
        })
        .collect()
}

/// The last part of a [`Step::Delegate`](crate::run::Step::Delegate): per call, the
/// answers routed to its child audited at the parent, its outcome from the child's
/// answer (or the result [`dispatch`] found), a finished call's result in the
/// parent's ledger, then the `PostActing` hooks.
///
/// # Errors
/// The store's, a hook's.
pub(super) async fn conclude(
    ports: &Ports<'_>,
    batch: Batch,
    children: Vec<Child>,
) -> Result<Done> {
    let Ports { agent, session, .. } = *ports;
    let mut ran = Vec::with_capacity(batch.calls.len());
    for (e, child) in batch.calls.iter().zip(children) {
        let tool_use = (*e.effective_use()).clone();
        let answer = match child {
            Child::Answered(answer) => answer,
            Child::Settled(r) => {
                ran.push(Ok(Acted::done(r, false)));
                continue;
            }
        };
        if let Some(routed) = &answer.routed {
            let records = routed_records(
                &tool_use,
                &routed.decisions,
                &with_trail(agent, session, &tool_use, routed).await,
                routed.refused.as_ref(),
            );
            crate::follow::record_refusal(agent.store(), session, records).await;
        }
        let agent_name = agent
            .runtime
            .subagents
            .get(&tool_use.name)
            .map(|s| s.agent_name().to_owned());
        let outcome = match answer.invalid {
            Some(r) => ExecOutcome::Done(r),
            None => outcome_of(
                session,
                &tool_use,
                agent_name.as_deref(),
                answer.phase,
                answer.waiting,
                answer.last.as_ref(),
            ),
        };
        let acted = match outcome {
            ExecOutcome::Done(r) => {
                agent.store().finish(session, &r.id, &r).await?;
                let mut a = post_acting(ports, batch.iteration, tool_use, r).await?;
                a.recorded = false;
                a
            }
            other => Acted {
                outcome: other,
                stop: false,
                recorded: false,
                ran: true,
            },
        };
        if let ExecOutcome::Done(r) = &acted.outcome {
            ports
                .witness
                .emit(|| RunEvent::ToolExecutionFinished { result: r.clone() });
        }
        ran.push(Ok(acted));
    }
    collect(ran)
}

/// What the child showed of the requirements routed answers name: the child's
/// requirements when they arrived, and — for an answer the child no longer waited
/// for (someone answered it directly) — what its audit trail recorded of it.
async fn with_trail(
    agent: &Agent,
    parent: &str,
    tool_use: &ToolUse,
    routed: &Routed,
) -> Vec<Requirement> {
    let mut shown = routed.shown.clone();
    let missing = routed
        .decisions
        .iter()
        .any(|d| !shown.iter().any(|r| r.id == d.id()));
    if !missing {
        return shown;
    }
    let child = crate::follow::child_session_id(parent, &tool_use.id);
    let trail = agent.store().decisions(&child).await.unwrap_or_default();
    for entry in trail {
        let Ok(r) = DecisionRecord::from_entry(&child, entry) else {
            continue;
        };
        if shown.iter().any(|s| s.id == r.requirement_id) {
            continue;
        }
        shown.push(Requirement {
            id: r.requirement_id.clone(),
            tool_use: ToolUse::new(r.requirement_id.clone(), r.tool_name.clone(), r.shown_input),
            kind: crate::requirement::RequirementKind::Confirmation,
            reason: String::new(),
            created_at: r.at,
            expires_at: None,
            path: Vec::new(),
            agent: None,
            quorum: None,
        });
    }
    shown
}

/// The parent's outcome of call `tool_use` whose child session (of `parent`) is in
/// `phase`: paused → the call is delegated with the child's requirements (`waiting`,
/// qualified by the call's id); finished → its answer (`last`) or, cancelled, an
/// interrupted result.
pub(crate) fn outcome_of(
    parent: &str,
    tool_use: &ToolUse,
    agent: Option<&str>,
    phase: Phase,
    waiting: Vec<Requirement>,
    last: Option<&Msg>,
) -> ExecOutcome {
    let child_id = crate::follow::child_session_id(parent, &tool_use.id);
    match phase {
        Phase::Paused => ExecOutcome::Delegated {
            id: tool_use.id.clone(),
            requirements: crate::run::qualify(&tool_use.id, &tool_use.name, agent, waiting),
        },
        Phase::Finished(RunStatus::Cancelled) => {
            ExecOutcome::Done(interrupted(&tool_use.name, tool_use, &child_id))
        }
        phase => {
            let answer = last.map(Msg::text).unwrap_or_default();
            let mut r = ToolResult::success(&tool_use.id, &tool_use.name, answer)
                .with_metadata("child_session", Value::String(child_id));
            if let Phase::Finished(status @ (RunStatus::Completed | RunStatus::MaxIterations)) =
                phase
            {
                r.metadata.insert("child_status".to_owned(), json!(status));
            }
            ExecOutcome::Done(r)
        }
    }
}

/// The result of a sub-agent call whose child was stopped before it finished.
pub(crate) fn interrupted(tool: &str, tool_use: &ToolUse, child_id: &str) -> ToolResult {
    ToolResult::interrupted(
        &tool_use.id,
        &tool_use.name,
        format!(
            "interrupted: sub-agent `{tool}` was stopped before it finished; \
             what it did is kept in session `{child_id}`"
        ),
    )
    .with_metadata("child_session", Value::String(child_id.to_owned()))
}

/// The parent's audit records of answers routed to the child of call `tool_use`:
/// applied (`refused: None`) or refused with that (reason, detail). `shown`: the
/// child's requirements, for what each was about.
pub(crate) fn routed_records(
    tool_use: &ToolUse,
    decisions: &[Decision],
    shown: &[Requirement],
    refused: Option<&(String, String)>,
) -> Vec<DecisionRecord> {
    let now = chrono::Utc::now();
    decisions
        .iter()
        .map(|d| {
            let req = shown.iter().find(|r| r.id == d.id());
            let shown_input = req.map_or(Value::Null, |r| r.tool_use.input.clone());
            let (executed, note) = match d {
                Decision::Approve { edited_input, .. } => {
                    (edited_input.clone().filter(|e| *e != shown_input), None)
                }
                Decision::Input { values, .. } => {
                    let mut merged = shown_input.as_object().cloned().unwrap_or_default();
                    if let Value::Object(v) = values {
                        merged.extend(v.clone());
                    }
                    (Some(Value::Object(merged)), None)
                }
                Decision::Reject { note, .. } => (None, note.clone()),
                Decision::ExternalResult { is_error, .. } => (
                    None,
                    Some(if *is_error { "failed" } else { "succeeded" }.to_owned()),
                ),
            };
            let verdict = match refused {
                None => Verdict::Applied,
                Some((reason, detail)) => Verdict::Refused {
                    reason: reason.clone(),
                    detail: format!("the sub-agent's child session did not take it: {detail}"),
                },
            };
            DecisionRecord {
                seq: 0,
                at: now,
                requirement_id: format!("{}/{}", tool_use.id, d.id()),
                tool_name: req.map(|r| r.tool_use.name.clone()).unwrap_or_default(),
                kind: req.map(|r| r.kind.label().to_owned()).unwrap_or_default(),
                decision: d.label().to_owned(),
                via: "routed".to_owned(),
                verdict,
                actor: d.decided_by().map(Actor::new),
                shown_fingerprint: req.map(Requirement::fingerprint),
                executed_fingerprint: executed.as_ref().map(reins_memory::fingerprint),
                grant_id: None,
                policy_hash: None,
                quorum: None,
                shown_input,
                executed_input: executed,
                note,
                view: None,
            }
        })
        .collect()
}
