//! Starting a call: how the caller's input (a message, `resume()`, decisions, tool
//! results) is validated and applied to the run. Validation comes first: a refused
//! input changes nothing.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use reins_message::{Msg, Role, ToolResult};
use serde_json::Value;

use super::{
    Attempt, Call, CallTally, ChildInput, NOT_RUN_INTERRUPTED, Phase, Refusal, Run, RunInput,
    SlotStatus, clip,
};
use crate::error::{AgentError, Result};
use crate::requirement::{Decision, RequirementKind};
use crate::view::{Actor, ViewToken};

/// How [`Run::close_turn`] closes the calls of a turn that never ran.
#[derive(Debug, Clone, Copy)]
pub(super) enum Closing<'a> {
    /// Someone moved on (a new message, the parent session): waiting calls are
    /// rejected with this note; calls cleared but not yet run were interrupted.
    Rejected(&'a str),
    /// The run was ended before they ran (at its budget): every call that did not start
    /// gets this text, `Cancelled` (no one rejected it; it never started).
    NotRun(&'a str),
}

impl Run {
    // ----- starting a call -------------------------------------------------------

    /// Starts a call ([`Event::Begin`](super::Event::Begin)). Validates everything
    /// first: on error nothing changes, and stale or expired decisions come back with
    /// their audit records.
    pub(super) fn begin_call(&mut self, call: Call) -> std::result::Result<(), Refusal> {
        let Call {
            session,
            input,
            actor,
            view,
            output,
            model,
            compression,
            approval_ttls,
            quorums,
            eligibility,
            budget,
            session_budget,
            notices,
            prompts,
            tools,
            client_tools,
            listening,
            concurrency,
            defer_results,
            traceparent,
            trace_parent: _,
            now,
        } = call;
        // What the input attempts, for the audit trail should it be refused.
        let (attempted, via) = attempts(&input);
        let resuming = matches!(input, RunInput::Resume);
        let refuse =
            |run: &Self, error: AgentError, actor: Option<&Actor>, view: Option<&ViewToken>| {
                let audit = match error {
                    AgentError::StaleView { .. }
                    | AgentError::RequirementExpired { .. }
                    | AgentError::ShownArgumentsChanged { .. }
                    | AgentError::AlreadyApproved { .. }
                    | AgentError::NotEligible { .. } => {
                        let resumed;
                        let attempted = if resuming {
                            resumed = resume_attempts(view);
                            &resumed
                        } else {
                            &attempted
                        };
                        run.refusal_records(attempted, via, &error, actor, view, now)
                    }
                    _ => Vec::new(),
                };
                Refusal { error, audit }
            };
        if let Some(v) = &view {
            if let Err(e) = self.check_view(v) {
                return Err(refuse(self, e, actor.as_ref(), Some(v)));
            }
        }
        if let Some(Err(e)) = session_budget
            .as_ref()
            .map(|l| l.validate_for(budget.as_deref().and_then(|r| r.price)))
        {
            return Err(refuse(self, e.into(), actor.as_ref(), view.as_ref()));
        }
        let starts_run = matches!(&input, RunInput::Message(m) if m.role != Role::Tool);
        if let Some(problem) = output
            .as_ref()
            .filter(|_| starts_run)
            .and_then(|o| o.check().err())
        {
            return Err(refuse(
                self,
                AgentError::InvalidInput(problem),
                actor.as_ref(),
                view.as_ref(),
            ));
        }
        if starts_run {
            self.next_output = output;
        }
        self.call = CallTally {
            session,
            model,
            compression,
            approval_ttls,
            quorums,
            eligibility,
            budget,
            actor,
            view,
            notices,
            prompts,
            tools,
            client_tools,
            listening,
            concurrency,
            defer_results,
            traceparent,
            ..CallTally::default()
        };
        let begun = match input {
            RunInput::Message(msg) => self.begin_message(msg, now),
            RunInput::Resume => self.begin_resume(now),
            RunInput::Decisions(ds) => self.begin_decisions(ds, now, true),
        };
        begun.map_err(|e| refuse(self, e, self.call.actor.as_ref(), self.call.view.as_ref()))?;
        self.budget_begin(session_budget, now);
        Ok(())
    }

    fn begin_message(&mut self, msg: Msg, now: DateTime<Utc>) -> Result<()> {
        match msg.role {
            Role::Assistant => {
                return Err(AgentError::InvalidInput(
                    "only user, system and tool messages can be sent to a session; \
                     assistant messages come from the model"
                        .to_owned(),
                ));
            }
            Role::Tool => return self.begin_tool_results(msg, now),
            Role::User | Role::System => {}
        }
        if msg.has_tool_results() || msg.has_tool_uses() {
            return Err(AgentError::InvalidInput(
                "a user message cannot carry tool uses or tool results; send tool results \
                 with Msg::tool_results(..)"
                    .to_owned(),
            ));
        }
        // New intent: every call still waiting (or cleared but not run) is closed.
        let note = format!(
            "the user sent a new message instead: {}",
            clip(&msg.text(), 200)
        );
        // The child sessions of paused sub-agent calls and the calls waiting on a
        // question are closed by a `Step::Close` once the message is stored.
        let (children, asking) = self.close_turn(Closing::Rejected(&note), "message", None, now);
        if !children.is_empty() || !asking.is_empty() {
            self.pending.close = Some(super::Close {
                children,
                asking,
                note: format!("a new message was sent instead: {}", clip(&msg.text(), 200)),
                actor: self.call.actor.clone(),
            });
        }
        self.push(msg);
        self.state.phase = Phase::Reasoning;
        self.state.iteration = 0;
        self.state.stop_after_acting = false;
        self.state.principal = self.call.actor.as_ref().map(|a| a.principal.clone());
        self.state.output = self.next_output.take().map(|spec| super::OutputState {
            spec,
            attempts: 0,
            asked: None,
        });
        Ok(())
    }

    /// Closes every call of the turn that has no result, as `closing` says: waiting
    /// ones (and paused sub-agent calls) `Rejected` with the note or `Cancelled` with
    /// the text, cleared ones not yet run `Cancelled` (as interrupted, or with the
    /// text), calls in flight on a question `Interrupted` (they started); each pending
    /// requirement gets a `reject` record (via `via`, by `by`, with the note or text)
    /// in the audit trail. Ends the turn's calls. Returns the sub-agent calls whose
    /// child sessions still wait (to be closed in turn), and the results given to
    /// calls that were waiting on a question.
    pub(super) fn close_turn(
        &mut self,
        closing: Closing<'_>,
        via: &str,
        by: Option<&str>,
        now: DateTime<Utc>,
    ) -> (Vec<reins_message::ToolUse>, Vec<ToolResult>) {
        let note = match closing {
            Closing::Rejected(note) | Closing::NotRun(note) => note,
        };
        let mut results = Vec::new();
        let mut children = Vec::new();
        let mut asking = Vec::new();
        let waiting = self.requirements();
        for req in &waiting {
            self.log_decision(req, "reject", via, by, None, Some(note.to_owned()), now);
        }
        if let Some(b) = self.state.budget.as_mut() {
            b.asked = None;
        }
        for slot in &mut self.state.slots {
            match &slot.status {
                SlotStatus::Done { .. } => {}
                SlotStatus::Waiting { .. } | SlotStatus::Delegated { routed: None, .. } => {
                    if matches!(slot.status, SlotStatus::Delegated { .. }) {
                        children.push((*slot.tool_use).clone());
                    }
                    let (id, name) = (&slot.tool_use.id, &slot.tool_use.name);
                    let r = match closing {
                        Closing::Rejected(note) => {
                            ToolResult::rejected(id, name, Some(note.to_owned()))
                        }
                        Closing::NotRun(text) => ToolResult::cancelled(id, name, text),
                    };
                    slot.status = SlotStatus::Done {
                        outcome: r.outcome.clone(),
                    };
                    results.push(r);
                }
                // In flight, waiting for an answer: the runner stops it.
                SlotStatus::Asking { .. } => {
                    let r = ToolResult::interrupted(
                        &slot.tool_use.id,
                        &slot.tool_use.name,
                        super::ASKING_INTERRUPTED,
                    );
                    slot.status = SlotStatus::Done {
                        outcome: r.outcome.clone(),
                    };
                    asking.push(r.clone());
                    results.push(r);
                }
                SlotStatus::Ready { .. } | SlotStatus::Delegated { .. } => {
                    let text = match closing {
                        Closing::Rejected(_) => NOT_RUN_INTERRUPTED,
                        Closing::NotRun(text) => text,
                    };
                    let r = ToolResult::cancelled(&slot.tool_use.id, &slot.tool_use.name, text);
                    slot.status = SlotStatus::Done {
                        outcome: r.outcome.clone(),
                    };
                    results.push(r);
                }
            }
        }
        if !results.is_empty() {
            self.push(Msg::tool_results(results));
        }
        self.end_turn_slots();
        (children, asking)
    }

    /// Closes a paused run whose parent moved on (a sub-agent's child session whose
    /// call the parent closed): every pending call is rejected with `note`, recorded
    /// in the audit trail via `parent` by `by`, and the run ends `Cancelled` without
    /// asking the model anything. Returns the sub-agent calls whose own child sessions
    /// must be closed in turn; `None` when the run was not paused (nothing to close).
    pub(crate) fn close_for_parent(
        &mut self,
        note: &str,
        by: Option<&str>,
        now: DateTime<Utc>,
    ) -> Option<Vec<reins_message::ToolUse>> {
        if !self.is_paused() {
            return None;
        }
        let (children, _) = self.close_turn(Closing::Rejected(note), "parent", by, now);
        self.state.phase = Phase::Finished(crate::output::RunStatus::Cancelled);
        self.state.stop_after_acting = false;
        Some(children)
    }

    fn begin_tool_results(&mut self, msg: Msg, now: DateTime<Utc>) -> Result<()> {
        if msg.has_tool_uses() || msg.content.iter().any(|b| b.as_tool_result().is_none()) {
            return Err(AgentError::InvalidInput(
                "a tool message may hold only tool results".to_owned(),
            ));
        }
        let pending = self.state.slots.pending_ids();
        let mut seen = HashSet::new();
        for r in msg.tool_results_iter() {
            if !seen.insert(r.id.as_str()) {
                return Err(AgentError::DuplicateDecision { id: r.id.clone() });
            }
            let waiting = self.state.slots.iter().any(|s| {
                s.tool_use.id == r.id
                    && matches!(
                        s.status,
                        SlotStatus::Waiting { .. } | SlotStatus::Delegated { routed: None, .. }
                    )
            });
            if !waiting {
                return Err(AgentError::UnknownRequirement {
                    id: r.id.clone(),
                    pending,
                });
            }
        }
        if seen.is_empty() {
            return Err(AgentError::InvalidInput(
                "the tool message holds no tool results".to_owned(),
            ));
        }
        // Apply: the caller's results answer the pending calls (cancel or external).
        let mut results = Vec::new();
        for r in msg.tool_results_iter() {
            let mut r = r.clone();
            if let Some(req) = self.state.slots.requirement(&r.id).cloned() {
                let by = r
                    .metadata
                    .get("decided_by")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                self.log_decision(
                    &req,
                    "tool_result",
                    "tool_results",
                    by.as_deref(),
                    None,
                    Some(format!("outcome: {}", r.outcome.label())),
                    now,
                );
            }
            if let Some(slot) = self.state.slots.get_mut(&r.id) {
                r.name.clone_from(&slot.tool_use.name);
                slot.status = SlotStatus::Done {
                    outcome: r.outcome.clone(),
                };
            }
            self.req_ops.decide.push((
                r.id.clone(),
                serde_json::json!({"decision": "tool_result", "outcome": r.outcome.label()}),
            ));
            results.push(r);
        }
        let mut m = Msg::tool_results(results).with_id(msg.id);
        m.metadata = msg.metadata;
        self.push(m);
        self.after_answers();
        Ok(())
    }

    fn begin_resume(&mut self, now: DateTime<Utc>) -> Result<()> {
        match self.state.phase {
            Phase::Paused => {}
            // A run cut short by a crash: go on from where it was.
            Phase::Reasoning | Phase::Acting | Phase::Summarizing => return Ok(()),
            Phase::Idle | Phase::Finished(_) => {
                return Err(AgentError::NothingToResume {
                    session: self.call.session.clone(),
                });
            }
        }
        if let Some(b) = self.budget_requirement() {
            return Err(AgentError::InvalidInput(format!(
                "resume() does not extend a budget: answer `{}` with resolve(), approving it \
                 with a new limit or rejecting it to end the run",
                b.id
            )));
        }
        let waiting = self.requirements();
        let confirmations = waiting
            .iter()
            .filter(|r| r.kind == RequirementKind::Confirmation)
            .count();
        if !waiting.is_empty() && confirmations == 0 {
            let ids: Vec<String> = waiting.iter().map(|r| r.id.clone()).collect();
            return Err(AgentError::InvalidInput(format!(
                "resume() approves confirmations only; {} need input or an external result: \
                 answer them with resolve()",
                ids.join(", ")
            )));
        }
        if let Some(q) = waiting.iter().find(|r| r.quorum.is_some()) {
            return Err(AgentError::InvalidInput(format!(
                "resume() cannot approve `{}`: it needs approvals from {} distinct approvers; \
                 each approves it with resolve() naming who they are",
                q.id,
                q.quorum.as_ref().map_or(0, |s| s.needed)
            )));
        }
        let approved: Vec<_> = waiting
            .into_iter()
            .filter(|r| r.kind == RequirementKind::Confirmation)
            .collect();
        let by = self.call.actor.as_ref().map(|a| a.principal.clone());
        // A sub-agent's requirement is recorded when its child session takes the
        // approval (the child may have moved on meanwhile): see the `subagent` module.
        for req in approved.iter().filter(|r| !r.is_nested()) {
            self.log_decision(req, "approve", "resume", by.as_deref(), None, None, now);
        }
        for req in approved.iter().filter(|r| r.is_nested()) {
            self.req_ops.decide.push((
                req.id.clone(),
                serde_json::json!({"decision": "approve", "via": "resume"}),
            ));
        }
        for slot in &mut self.state.slots {
            if let SlotStatus::Delegated {
                requirements,
                routed: routed @ None,
                ..
            } = &mut slot.status
            {
                let approvals: Vec<Decision> = requirements
                    .iter()
                    .filter(|r| r.kind == RequirementKind::Confirmation)
                    .map(|r| {
                        let d = Decision::approve(child_id(&r.path, &r.id));
                        match &by {
                            Some(p) => d.by(p.clone()),
                            None => d,
                        }
                    })
                    .collect();
                if requirements.is_empty() {
                    *routed = Some(ChildInput::Resume);
                } else if !approvals.is_empty() {
                    *routed = Some(ChildInput::Decisions {
                        decisions: approvals,
                    });
                }
                continue;
            }
            if let SlotStatus::Waiting { requirement } = &slot.status {
                if requirement.kind == RequirementKind::Confirmation {
                    self.req_ops.decide.push((
                        slot.tool_use.id.clone(),
                        serde_json::json!({"decision": "approve", "via": "resume"}),
                    ));
                    slot.status = SlotStatus::Ready {
                        input: slot.tool_use.input.clone(),
                        edited: false,
                        approved_by: by.clone(),
                        dispatched: false,
                    };
                }
            }
        }
        self.state.stop_after_acting = false;
        self.after_answers();
        Ok(())
    }

    /// After answers: run what is cleared, or reason when nothing waits.
    pub(super) fn after_answers(&mut self) {
        if self.budget_requirement().is_some() {
            self.state.phase = Phase::Paused;
            return;
        }
        let any_ready = self.state.slots.iter().any(|s| {
            matches!(
                s.status,
                SlotStatus::Ready { .. }
                    | SlotStatus::Delegated {
                        routed: Some(_),
                        ..
                    }
                    | SlotStatus::Asking {
                        answer: Some(_),
                        ..
                    }
            )
        });
        let any_waiting = self.state.slots.has_waiting();
        self.state.phase = if any_ready {
            Phase::Acting
        } else if any_waiting {
            Phase::Paused
        } else {
            self.end_turn_slots();
            Phase::Reasoning
        };
    }
}

/// The id a nested requirement has in the child session one level down: its path
/// without the parent's hop, joined with `/` (the child's own id when the child raised
/// it itself).
/// What an input attempts, for the audit trail of a refusal: one entry per decision
/// (requirement id, decision label, by), and the verb it came through. A `resume()`'s
/// entries come from its view ([`resume_attempts`]).
fn attempts(input: &RunInput) -> (Vec<Attempt>, &'static str) {
    match input {
        RunInput::Decisions(ds) => (
            ds.iter()
                .map(|d| {
                    (
                        d.id().to_owned(),
                        d.label().to_owned(),
                        d.decided_by().map(str::to_owned),
                    )
                })
                .collect(),
            "resolve",
        ),
        RunInput::Message(m) => (
            m.tool_results_iter()
                .map(|r| (r.id.clone(), "tool_result".to_owned(), None))
                .collect(),
            "tool_results",
        ),
        // What a bare `resume()` approves is read from its view, when it is refused.
        RunInput::Resume => (Vec::new(), "resume"),
    }
}

/// What a refused `resume()` attempted: an approval of each requirement its view
/// showed.
fn resume_attempts(view: Option<&ViewToken>) -> Vec<Attempt> {
    view.map(|v| {
        v.requirement_ids()
            .iter()
            .map(|id| (id.clone(), "approve".to_owned(), None))
            .collect()
    })
    .unwrap_or_default()
}

pub(crate) fn child_id(path: &[String], id: &str) -> String {
    match path.split_first() {
        Some((_, rest)) if !rest.is_empty() => rest.join("/"),
        _ => id.to_owned(),
    }
}

impl Run {
    /// The sub-agent call waiting for requirement `id`, while its answers are still
    /// being collected.
    /// The index of the slot whose pending question has the requirement id `id`.
    pub(super) fn asking_slot(&self, id: &str) -> Option<usize> {
        self.state.slots.iter().position(|s| {
            matches!(&s.status, SlotStatus::Asking { requirement, answer: None, .. } if requirement.id == id)
        })
    }
}
