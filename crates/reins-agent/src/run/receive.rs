//! What a run does with what comes back: the model's message (its tool uses gated,
//! answered, or turned into requirements) and the tools' results (each slot settled,
//! the next reasoning or the turn's end decided).

use chrono::{DateTime, Utc};
use reins_message::{ContentBlock, Msg, Role, ToolResult, ToolUse, Usage};

use super::answer::Answer;
use super::{AfterReasoning, ExecOutcome, GateDecision, Phase, Run, SlotStatus, ToolSlot};
use crate::output::RunStatus;
use crate::requirement::{Requirement, RequirementKind};

impl Run {
    /// Feeds the model's final message (after the `PostReasoning` hooks), with each
    /// tool use's gate in order and the hooks' verdict.
    pub(crate) fn on_model_message(
        &mut self,
        mut msg: Msg,
        gates: Vec<GateDecision>,
        after: AfterReasoning,
        usage: Usage,
        now: DateTime<Utc>,
    ) {
        self.call.usage += usage;
        self.call.iterations += 1;
        self.budget_usage(&usage);
        self.budget_tick(now);
        msg.role = Role::Assistant;
        if self.state.phase == Phase::Summarizing {
            // The summary call is made without tools; drop any tool use it made anyway.
            msg.content
                .retain(|b| !matches!(b, ContentBlock::ToolUse(_)));
            if !msg.content.is_empty() {
                self.push(msg.clone());
            }
            self.call.last_assistant = Some(msg);
            self.finish(RunStatus::MaxIterations);
            return;
        }
        self.state.iteration += 1;
        self.transcript.rename_reused_ids(&mut msg);
        let mut gates: Vec<GateDecision> = gates;
        let refused_finals = match self.take_structured_answer(&mut msg, &mut gates, &after) {
            Answer::Done => return,
            Answer::NotApplicable => Vec::new(),
            Answer::Mixed(results) => results,
        };
        let uses: Vec<ToolUse> = msg
            .tool_uses()
            .filter(|u| !refused_finals.iter().any(|r| r.id == u.id))
            .cloned()
            .collect();
        if !msg.content.is_empty() {
            self.push(msg.clone());
        }
        if !refused_finals.is_empty() {
            self.push(Msg::tool_results(refused_finals));
        }
        self.call.empty_answer = uses.is_empty() && msg.text().trim().is_empty();
        self.call.last_assistant = Some(msg);
        if uses.is_empty() {
            if after.goto.is_empty() {
                self.finish(RunStatus::Completed);
            } else {
                for m in after.goto {
                    self.push(m);
                }
                self.state.phase = Phase::Reasoning;
            }
            return;
        }
        if !after.goto.is_empty() {
            let results: Vec<ToolResult> = uses
                .iter()
                .map(|u| {
                    ToolResult::cancelled(
                        &u.id,
                        &u.name,
                        "not run: a hook asked the agent to reason again",
                    )
                })
                .collect();
            self.push(Msg::tool_results(results));
            for m in after.goto {
                self.push(m);
            }
            self.state.slots.clear();
            self.state.phase = Phase::Reasoning;
            return;
        }
        let ttls = std::sync::Arc::clone(&self.call.approval_ttls);
        let quorums = std::sync::Arc::clone(&self.call.quorums);
        let default_ttl = self.config.requirement_ttl_secs;
        let expires_for = |tool: &str| {
            ttls.get(tool)
                .copied()
                .or(default_ttl)
                .and_then(|s| i64::try_from(s).ok())
                .map(|s| now + chrono::Duration::seconds(s))
        };
        let mut gates = gates.into_iter();
        let mut served = self.serve_from_record(&uses, after.stop, now).into_iter();
        let mut consult = Vec::new();
        self.state.slots = uses
            .into_iter()
            .map(|u| {
                let gate = gates.next().unwrap_or(GateDecision::Run);
                if let Some(result) = served.next().flatten() {
                    return ToolSlot {
                        tool_use: u.into(),
                        status: SlotStatus::Done {
                            outcome: result.outcome,
                        },
                    };
                }
                let waiting = |kind: RequirementKind, reason: String| SlotStatus::Waiting {
                    requirement: Requirement {
                        id: u.id.clone(),
                        tool_use: u.clone(),
                        quorum: matches!(kind, RequirementKind::Confirmation)
                            .then(|| quorums.get(&u.name))
                            .flatten()
                            .map(crate::requirement::QuorumState::new),
                        kind,
                        reason,
                        created_at: now,
                        expires_at: expires_for(&u.name),
                        path: Vec::new(),
                        agent: None,
                    },
                };
                let status = if after.stop {
                    waiting(
                        RequirementKind::Confirmation,
                        format!("`{}` paused after reasoning by a hook (stop_agent)", u.name),
                    )
                } else {
                    match gate {
                        GateDecision::Run => SlotStatus::Ready {
                            input: u.input.clone(),
                            edited: false,
                            approved_by: None,
                            dispatched: false,
                        },
                        GateDecision::Confirm { reason } => {
                            // Put to the policy and the grants before anyone is asked.
                            consult.push(u.id.clone());
                            waiting(RequirementKind::Confirmation, reason)
                        }
                        GateDecision::UserInput { fields } => waiting(
                            RequirementKind::UserInput { fields },
                            format!("`{}` needs input from a person", u.name),
                        ),
                        GateDecision::External => waiting(
                            RequirementKind::External,
                            format!("`{}` is executed by the caller", u.name),
                        ),
                    }
                };
                ToolSlot {
                    tool_use: u.into(),
                    status,
                }
            })
            .collect();
        self.call.consult.extend(consult);
        self.state.phase = Phase::Acting;
    }

    /// Feeds the outcomes of an [`Step::Execute`] batch (in any order), and whether a
    /// `PostActing` hook asked to stop.
    pub(crate) fn on_tool_results(
        &mut self,
        outcomes: Vec<ExecOutcome>,
        stop: bool,
        now: DateTime<Utc>,
    ) {
        self.budget_tick(now);
        let mut results = Vec::new();
        for o in outcomes {
            match o {
                ExecOutcome::Done(r) => {
                    let Some(slot) = self.state.slots.get_mut(&r.id) else {
                        continue;
                    };
                    if matches!(slot.status, SlotStatus::Done { .. }) {
                        continue;
                    }
                    slot.status = SlotStatus::Done {
                        outcome: r.outcome.clone(),
                    };
                    results.push(r);
                }
                ExecOutcome::Delegated { id, requirements } => {
                    let Some(slot) = self.state.slots.get_mut(&id) else {
                        continue;
                    };
                    if matches!(slot.status, SlotStatus::Done { .. }) {
                        continue;
                    }
                    slot.status = SlotStatus::Delegated {
                        requirements,
                        routed: None,
                        dispatched: false,
                    };
                }
                ExecOutcome::Asking { id, requirement } => {
                    let Some(slot) = self.state.slots.get_mut(&id) else {
                        continue;
                    };
                    if matches!(slot.status, SlotStatus::Done { .. }) {
                        continue;
                    }
                    slot.status = SlotStatus::Asking {
                        requirement,
                        answer: None,
                        dispatched: false,
                    };
                }
                ExecOutcome::Suspended { id, reason } => {
                    let Some(slot) = self.state.slots.get_mut(&id) else {
                        continue;
                    };
                    let ttl = self
                        .call
                        .approval_ttls
                        .get(&slot.tool_use.name)
                        .copied()
                        .or(self.config.requirement_ttl_secs);
                    let expires_at = ttl
                        .and_then(|s| i64::try_from(s).ok())
                        .map(|s| now + chrono::Duration::seconds(s));
                    slot.status = SlotStatus::Waiting {
                        requirement: Requirement {
                            id: slot.tool_use.id.clone(),
                            tool_use: (*slot.tool_use).clone(),
                            kind: RequirementKind::External,
                            reason: format!("`{}` suspended itself: {reason}", slot.tool_use.name),
                            created_at: now,
                            expires_at,
                            path: Vec::new(),
                            agent: None,
                            quorum: None,
                        },
                    };
                }
            }
        }
        if !results.is_empty() {
            self.push(Msg::tool_results(results));
        }
        if stop {
            self.state.stop_after_acting = true;
        }
    }
}
