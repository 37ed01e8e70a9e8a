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
        self.has_changes_besides_state() || self.state != *self.committed
    }

    /// Whether anything but the run state must be written: messages, requirements,
    /// decisions. (A step that only moves the run state can wait for the next commit.)
    fn has_changes_besides_state(&self) -> bool {
        self.transcript.has_unsaved()
            || self.req_ops.clear
            || !self.req_ops.add.is_empty()
            || !self.req_ops.decide.is_empty()
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
            for (id, decision) in &commit.decide {
                commit
                    .notices
                    .push(self.decided_notice(id, decision, &ops.log));
            }
            if let Some(n) = self.ended_notice() {
                commit.notices.push(n);
            }
        }
        if self.state != *self.committed {
            // One copy, shared by the store (kept typed in memory, serialized straight
            // to text by the SQL stores) and by the next comparison.
            self.committed = Arc::new(self.state.clone());
            commit.run_state = Some(Some(RunStateData::typed(Arc::clone(&self.committed))));
        }
        commit
    }

    /// The notice of a decision this commit applies (with its audit record when there
    /// is one: the tool, who decided, how).
    fn decided_notice(&self, id: &str, decision: &Value, log: &[DecisionRecord]) -> Notice {
        let mut n = Notice::new(NoticeKind::RequirementDecided)
            .session(&self.call.session)
            .requirement(id);
        match log.iter().rev().find(|r| r.requirement_id == id) {
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
            None => n.payload = json!({ "record": decision }),
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
        if self.committed.phase == self.state.phase {
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
