//! What a run writes: whether anything changed since the last commit, and the store
//! [`Commit`] that writes it (the transcript's unsaved part, requirement operations,
//! audit records, the run state when it moved).

use std::sync::Arc;

use reins_memory::{Commit, RunStateData};

use super::{Flush, Run};
use crate::view::DecisionRecord;

impl Run {
    /// Takes what [`Flush`] asks for as one store [`Commit`] (the driver sets
    /// `expected_version`, on the run's first commit `acquire_lock` where it folds the
    /// lock in, and on its last `release_lock`); `None` when
    /// there is nothing to write.
    pub fn take_commit(&mut self, flush: Flush) -> Option<Commit> {
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
            notices: Vec::new(),
        };
        if self.state != *self.committed {
            // One copy, shared by the store (kept typed in memory, serialized straight
            // to text by the SQL stores) and by the next comparison.
            self.committed = Arc::new(self.state.clone());
            commit.run_state = Some(Some(RunStateData::typed(Arc::clone(&self.committed))));
        }
        commit
    }
}
