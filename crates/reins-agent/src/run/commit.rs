//! What a run writes: whether anything changed since the last commit, the store
//! [`Commit`] that writes it, and how a repaired transcript becomes removals and
//! rewrites of stored messages.

use std::collections::HashSet;

use reins_memory::Commit;
use reins_message::Msg;

use super::{Flush, Run};
use crate::view::DecisionRecord;

impl Run {
    /// Takes what [`Flush`] asks for as one store [`Commit`] (the driver sets
    /// `expected_version` and, on the run's last commit, `release_lock`); `None` when
    /// there is nothing to write.
    pub fn take_commit(&mut self, flush: Flush) -> Option<Commit> {
        let due = match flush {
            Flush::All => self.has_changes(),
            Flush::Recorded => self.has_changes_besides_state(),
        };
        due.then(|| self.take_all())
    }

    /// Whether anything must be written.
    pub(crate) fn has_changes(&self) -> bool {
        self.has_changes_besides_state() || self.state != self.committed
    }

    /// Whether anything but the run state must be written: messages, requirements,
    /// decisions. (A step that only moves the run state can wait for the next commit.)
    pub(crate) fn has_changes_besides_state(&self) -> bool {
        self.saved < self.messages.len()
            || !self.removed.is_empty()
            || !self.replaced.is_empty()
            || self.req_ops.clear
            || !self.req_ops.add.is_empty()
            || !self.req_ops.decide.is_empty()
            || !self.req_ops.log.is_empty()
    }

    /// Takes everything to write since the last commit as one store [`Commit`].
    /// The run state is included when it changed since the last commit.
    fn take_all(&mut self) -> Commit {
        let ops = std::mem::take(&mut self.req_ops);
        let commit = Commit {
            expected_version: 0,
            append: self.messages[self.saved..].to_vec(),
            remove: std::mem::take(&mut self.removed),
            replace: std::mem::take(&mut self.replaced),
            add_requirements: ops.add,
            decide: ops.decide,
            clear_requirements: ops.clear,
            run_state: (self.state != self.committed)
                .then(|| serde_json::to_value(&self.state).ok()),
            decisions: ops.log.iter().map(DecisionRecord::to_entry).collect(),
            release_lock: None,
        };
        self.committed.clone_from(&self.state);
        self.saved = self.messages.len();
        commit
    }

    /// Replaces the transcript with a repaired one, recording what must change in the
    /// store: removals and in-place rewrites when the stored prefix keeps its order,
    /// otherwise a rewrite of the tail after the common prefix.
    pub(super) fn apply_repair(&mut self, repaired: Vec<Msg>) {
        self.token_counts.clear();
        let stored = &self.messages[..self.saved];
        let stored_ids: std::collections::HashMap<&str, usize> = stored
            .iter()
            .enumerate()
            .map(|(i, m)| (m.id.as_str(), i))
            .collect();
        // The repaired list must be: surviving stored messages in their order, then
        // only new ones.
        let mut kept = 0usize;
        let mut last_pos: Option<usize> = None;
        let mut in_order = true;
        let mut seen_new = false;
        for m in &repaired {
            match stored_ids.get(m.id.as_str()) {
                Some(&pos) => {
                    if seen_new || last_pos.is_some_and(|p| pos <= p) {
                        in_order = false;
                        break;
                    }
                    last_pos = Some(pos);
                    kept += 1;
                }
                None => seen_new = true,
            }
        }
        if in_order {
            let keep_ids: HashSet<&str> = repaired[..kept].iter().map(|m| m.id.as_str()).collect();
            for m in stored {
                if !keep_ids.contains(m.id.as_str()) {
                    self.removed.push(m.id.clone());
                }
            }
            for m in &repaired[..kept] {
                if let Some(&pos) = stored_ids.get(m.id.as_str()) {
                    if stored[pos] != *m {
                        self.replaced.retain(|r| r.id != m.id);
                        self.replaced.push(m.clone());
                    }
                }
            }
            self.saved = kept;
        } else {
            // Rewrite the smallest tail: keep the common prefix, remove the rest of
            // what is stored, and append the repaired tail.
            let common = stored
                .iter()
                .zip(&repaired)
                .take_while(|(a, b)| a == b)
                .count();
            self.removed
                .extend(stored[common..].iter().map(|m| m.id.clone()));
            self.replaced.clear();
            self.saved = common;
        }
        self.messages = repaired;
    }
}
