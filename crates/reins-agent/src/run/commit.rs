//! What a run writes: whether anything changed since the last commit, and the store
//! [`Commit`] that writes it (the transcript's unsaved part, requirement operations,
//! audit records, the run state when it moved).

use std::sync::Arc;

use reins_memory::{Commit, Notice, NoticeKind, RunStateData};
use serde_json::{Value, json};

use super::{Flush, Run};
use crate::view::DecisionRecord;

impl Run {
    /// Takes what [`Flush`] asks for as one store [`Commit`] (the driver sets
    /// `expected_version`, on the run's first commit `acquire_lock` where it folds the
    /// lock in, and on its last `release_lock`); `None` when
    /// there is nothing to write.
    pub(crate) fn take_commit(&mut self, flush: Flush) -> Option<Commit> {
        let due = match flush {
            Flush::All => self.has_changes(),
            Flush::Recorded => self.has_changes_besides_state(),
        };
        due.then(|| self.take_all())
    }

    /// Whether anything must be written.
    fn has_changes(&self) -> bool {
        self.has_changes_besides_state() || self.state != *self.committed()
    }

    /// Whether anything but the run state must be written: messages, requirements,
    /// decisions. (A step that only moves the run state can wait for the next commit.)
    fn has_changes_besides_state(&self) -> bool {
        self.transcript.has_unsaved()
            || self.req_ops.clear
            || !self.req_ops.add.is_empty()
            || !self.req_ops.decide.is_empty()
            || !self.req_ops.decided.is_empty()
            || !self.req_ops.log.is_empty()
    }

    /// Takes everything to write since the last commit as one store [`Commit`].
    /// The run state is included when it changed since the last commit.
    fn take_all(&mut self) -> Commit {
        let ops = std::mem::take(&mut self.req_ops);
        let unsaved = self.transcript.take_unsaved();
        let mut commit = Commit {
            expected_version: 0,
            append: unsaved.append,
            remove: unsaved.remove,
            replace: unsaved.replace,
            add_requirements: ops.add,
            decide: ops.decide,
            clear_requirements: ops.clear,
            run_state: None,
            decisions: ops.log.iter().map(DecisionRecord::to_entry).collect(),
            release_lock: None,
            acquire_lock: None,
            notices: ops.waiting,
        };
        if self.call.notices {
            // Every decision applied since the last commit, including those whose rows
            // were cleared before it (a rejection, an external result ending the turn).
            for (id, decision) in ops.decided.iter().chain(&commit.decide) {
                commit
                    .notices
                    .push(self.decided_notice(id, decision, &ops.log));
            }
            if let Some(n) = self.ended_notice() {
                commit.notices.push(n);
            }
        }
        if self.state != *self.committed() {
            // One copy, shared by the store (kept typed in memory, serialized straight
            // to text by the SQL stores) and by the next comparison.
            let committed = Arc::new(self.state.clone());
            commit.run_state = Some(Some(RunStateData::typed(Arc::clone(&committed))));
            self.committed = Some(committed);
        }
        commit
    }

    /// The notice of a decision this commit applies (with its audit record when there
    /// is one: the tool, who decided, how). Its payload's `decision` names the kind:
    /// `approve`, `reject`, `input`, `external_result` or `tool_result`.
    fn decided_notice(&self, id: &str, decision: &Value, log: &[DecisionRecord]) -> Notice {
        let mut n = Notice::new(NoticeKind::RequirementDecided)
            .session(&self.call.session)
            .requirement(id);
        let applied = log
            .iter()
            .rev()
            .find(|r| r.requirement_id == id && r.verdict == crate::view::Verdict::Applied);
        match applied {
            Some(record) => {
                n.tool = Some(record.tool_name.clone());
                n.principals
                    .extend(record.actor.as_ref().map(|a| a.principal.clone()));
                n.payload = json!({
                    "decision": record.decision,
                    "via": record.via,
                    "note": record.note,
                    "record": decision,
                });
            }
            // A sub-agent's requirement (its child session records it): the kind from
            // the decision itself (every record carries its `decision`).
            None => {
                n.payload = json!({
                    "decision": decision.get("decision").cloned().unwrap_or(Value::Null),
                    "record": decision,
                });
            }
        }
        n
    }

    /// The notice of a run that ends with this commit, if it does.
    fn ended_notice(&self) -> Option<Notice> {
        use crate::output::RunStatus;
        use crate::run::types::Phase;
        let Phase::Finished(status) = self.state.phase else {
            return None;
        };
        if self.committed().phase == self.state.phase {
            return None;
        }
        let word = match status {
            RunStatus::Completed => "completed",
            RunStatus::MaxIterations => "max_iterations",
            RunStatus::Paused | RunStatus::Cancelled => return None,
        };
        let text = self
            .call
            .last_assistant
            .as_ref()
            .map(reins_message::Msg::text)
            .unwrap_or_default();
        Some(
            Notice::new(NoticeKind::RunCompleted)
                .session(&self.call.session)
                .payload(json!({ "status": word, "text": text })),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use chrono::Utc;
    use reins_memory::NoticeKind;
    use reins_message::{ContentBlock, Msg, Role, ToolResult, ToolUse};
    use serde_json::json;

    use crate::requirement::Decision;
    use crate::run::{AfterReasoning, Event, Flush, GateDecision, Run, RunConfig};
    use crate::run::{RunInput, Step};

    /// A run paused on one call `c0` gated as `gate` (the pause committed).
    fn paused(gate: GateDecision) -> Run {
        let mut run = Run::new(RunConfig::default());
        run.begin(RunInput::Message(Msg::user("go")), Utc::now())
            .unwrap();
        let _ = run.next_core();
        let call = ToolUse::new("c0", "send", json!({}));
        run.on_model_message(
            Msg::new(Role::Assistant, vec![ContentBlock::ToolUse(call)]),
            vec![gate],
            AfterReasoning::default(),
            Default::default(),
            Utc::now(),
        );
        // Nothing decides it without a person.
        let mut step = run.next_core();
        if matches!(step, Step::Consult(_)) {
            run.apply(Event::DecidedWithoutAsking {
                decisions: Vec::new(),
                asked: Vec::new(),
                now: Utc::now(),
            })
            .unwrap();
            step = run.next_core();
        }
        // The pause's commit was handed out before it (and dropped here).
        assert!(matches!(step, Step::Pause(_)), "{step:?}");
        run
    }

    /// The `requirement.decided` notices of the commit after `input`, as (requirement,
    /// decision kind).
    fn decided_after(gate: GateDecision, input: RunInput) -> Vec<(String, String)> {
        let mut run = paused(gate);
        run.begin(input, Utc::now()).unwrap();
        let commit = run.take_commit(Flush::All).unwrap();
        commit
            .notices
            .iter()
            .filter(|n| n.kind == NoticeKind::RequirementDecided)
            .map(|n| {
                (
                    n.requirement.clone().unwrap_or_default(),
                    n.payload["decision"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn every_applied_decision_is_reported_in_the_commit_that_applies_it() {
        let one = |kind: &str| vec![("c0".to_owned(), kind.to_owned())];
        let confirm = || GateDecision::Confirm {
            reason: "sends".into(),
        };
        let decide = |d: Decision| RunInput::Decisions(vec![d]);
        assert_eq!(
            decided_after(confirm(), decide(Decision::approve("c0"))),
            one("approve")
        );
        assert_eq!(decided_after(confirm(), RunInput::Resume), one("approve"));
        let fields = json!({"type": "object", "properties": {"to": {"type": "string"}}});
        assert_eq!(
            decided_after(
                GateDecision::UserInput { fields },
                decide(Decision::input("c0", json!({"to": "bo"})))
            ),
            one("input")
        );
        // A rejection and an external result end the turn in the same step (the
        // requirement rows are cleared): reported all the same.
        assert_eq!(
            decided_after(confirm(), decide(Decision::reject("c0", "no"))),
            one("reject")
        );
        assert_eq!(
            decided_after(
                GateDecision::External,
                decide(Decision::external_result("c0", json!("done"), false))
            ),
            one("external_result")
        );
        assert_eq!(
            decided_after(
                GateDecision::External,
                RunInput::Message(Msg::tool_results(vec![ToolResult::success(
                    "c0",
                    "send",
                    "sent by the caller"
                )]))
            ),
            one("tool_result")
        );
    }
}
