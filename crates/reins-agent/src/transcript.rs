//! A session's transcript as a run holds it: the messages, how many of them are in
//! the store, what the next commit must remove or rewrite, every tool use id seen
//! (a reused one is renamed), and the token count of each message (for context
//! compression). Pure data, no I/O; the run composes it.

use std::collections::{HashMap, HashSet};

use reins_message::{ContentBlock, Msg, Role};
use serde::{Deserialize, Serialize};

/// The messages of a session and what the next commit must write of them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Transcript {
    messages: Vec<Msg>,
    /// `messages[..saved]` are in the store, in order.
    saved: usize,
    /// Stored message ids to delete at the next commit.
    removed: Vec<String>,
    /// Stored messages rewritten in place at the next commit.
    replaced: Vec<Msg>,
    /// Every tool use id in the transcript (duplicates from a model are renamed).
    #[serde(skip)]
    tool_ids: HashSet<String>,
    /// Token counts by message id, for context compression.
    #[serde(skip)]
    token_counts: HashMap<String, usize>,
}

/// What a commit writes of the transcript.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Unsaved {
    /// Messages to append, in order.
    pub(crate) append: Vec<Msg>,
    /// Stored message ids to delete.
    pub(crate) remove: Vec<String>,
    /// Stored messages to rewrite in place.
    pub(crate) replace: Vec<Msg>,
}

impl Transcript {
    /// A transcript whose messages are all in the store.
    pub(crate) fn stored(messages: Vec<Msg>) -> Self {
        let tool_ids = messages
            .iter()
            .flat_map(|m| m.tool_uses().map(|u| u.id.clone()))
            .collect();
        Self {
            saved: messages.len(),
            messages,
            removed: Vec::new(),
            replaced: Vec::new(),
            tool_ids,
            token_counts: HashMap::new(),
        }
    }

    /// The messages, in order.
    pub(crate) fn messages(&self) -> &[Msg] {
        &self.messages
    }

    /// Appends a message (stored at the next commit).
    pub(crate) fn push(&mut self, msg: Msg) {
        for u in msg.tool_uses() {
            self.tool_ids.insert(u.id.clone());
        }
        self.messages.push(msg);
    }

    /// Appends a context summary message (the originals stay); token counts are
    /// recounted.
    pub(crate) fn push_summary(&mut self, summary: Msg) {
        self.token_counts.clear();
        self.push(summary);
    }

    /// A model may reuse an id (by mistake or on purpose); a reused id would make the
    /// transcript invalid and could pass for an earlier, approved call. Renames every
    /// tool use of `msg` whose id is empty, already in the transcript or repeated in
    /// `msg` to `<id>~<fresh id>`.
    pub(crate) fn rename_reused_ids(&self, msg: &mut Msg) {
        let mut local = HashSet::new();
        for block in &mut msg.content {
            if let ContentBlock::ToolUse(u) = block {
                if u.id.is_empty() || self.tool_ids.contains(&u.id) || !local.insert(u.id.clone()) {
                    let fresh = format!("{}~{}", u.id, reins_message::new_id());
                    local.insert(fresh.clone());
                    u.id = fresh;
                }
            }
        }
    }

    /// Whether the next commit has anything of the transcript to write.
    pub(crate) fn has_unsaved(&self) -> bool {
        self.saved < self.messages.len() || !self.removed.is_empty() || !self.replaced.is_empty()
    }

    /// Takes what the next commit writes; afterwards everything counts as stored.
    pub(crate) fn take_unsaved(&mut self) -> Unsaved {
        let append = self.messages[self.saved..].to_vec();
        self.saved = self.messages.len();
        Unsaved {
            append,
            remove: std::mem::take(&mut self.removed),
            replace: std::mem::take(&mut self.replaced),
        }
    }

    /// Replaces the messages with a repaired list, recording what must change in the
    /// store: removals and in-place rewrites when the stored prefix keeps its order,
    /// otherwise a rewrite of the tail after the common prefix.
    pub(crate) fn apply_repair(&mut self, repaired: Vec<Msg>) {
        self.token_counts.clear();
        let stored = &self.messages[..self.saved];
        let stored_ids: HashMap<&str, usize> = stored
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

    /// Tokens of message `i` as `count` counts them, counted once per message id.
    pub(crate) fn tokens_at(&mut self, i: usize, count: impl FnOnce(&Msg) -> usize) -> usize {
        let m = &self.messages[i];
        if let Some(n) = self.token_counts.get(&m.id) {
            return *n;
        }
        let n = count(m);
        self.token_counts.insert(m.id.clone(), n);
        n
    }

    /// Where a request window of the latest `turns` turns starts: at the user message
    /// that opens the oldest turn in it (so no tool use is cut from its result).
    /// `None`: the whole history.
    pub(crate) fn window_start(&self, turns: Option<u32>) -> usize {
        let Some(turns) = turns else {
            return 0;
        };
        let mut seen = 0u32;
        for (i, m) in self.messages.iter().enumerate().rev() {
            if m.role == Role::User {
                seen += 1;
                if seen >= turns.max(1) {
                    return i;
                }
            }
        }
        0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use reins_message::{ToolResult, ToolUse};
    use serde_json::json;

    fn call(id: &str) -> Msg {
        Msg::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse(ToolUse::new(id, "t", json!({})))],
        )
    }

    #[test]
    fn pushes_are_unsaved_until_taken() {
        let mut t = Transcript::stored(vec![Msg::user("a").with_id("1")]);
        assert!(!t.has_unsaved());
        t.push(Msg::assistant("b").with_id("2"));
        assert!(t.has_unsaved());
        let u = t.take_unsaved();
        assert_eq!(u.append.len(), 1);
        assert_eq!(u.append[0].id, "2");
        assert!(!t.has_unsaved());
        assert_eq!(t.take_unsaved(), Unsaved::default());
    }

    #[test]
    fn a_reused_or_repeated_id_is_renamed() {
        let mut t = Transcript::stored(vec![call("c1").with_id("m1")]);
        let mut msg = Msg::new(
            Role::Assistant,
            vec![
                ContentBlock::ToolUse(ToolUse::new("c1", "t", json!({}))),
                ContentBlock::ToolUse(ToolUse::new("c2", "t", json!({}))),
                ContentBlock::ToolUse(ToolUse::new("c2", "t", json!({}))),
                ContentBlock::ToolUse(ToolUse::new("", "t", json!({}))),
            ],
        );
        t.rename_reused_ids(&mut msg);
        let ids: Vec<String> = msg.tool_uses().map(|u| u.id.clone()).collect();
        assert!(ids[0].starts_with("c1~"), "{ids:?}");
        assert_eq!(ids[1], "c2");
        assert!(ids[2].starts_with("c2~"), "{ids:?}");
        assert!(ids[3].starts_with('~'), "{ids:?}");
        t.push(msg);
        // Ids seen in pushed messages count too.
        let mut again = call("c2");
        t.rename_reused_ids(&mut again);
        assert_ne!(again.tool_uses().next().unwrap().id, "c2");
    }

    #[test]
    fn a_repair_in_order_removes_and_rewrites_stored_messages() {
        let first = Msg::user("a").with_id("1");
        let mut t = Transcript::stored(vec![
            first.clone(),
            call("c").with_id("2"),
            Msg::assistant("x").with_id("3"),
        ]);
        let mut fixed = call("c").with_id("2");
        fixed.name = Some("edited".into());
        t.apply_repair(vec![first, fixed.clone()]);
        let u = t.take_unsaved();
        assert_eq!(u.remove, ["3"]);
        assert_eq!(u.replace, [fixed]);
        assert!(u.append.is_empty());
    }

    #[test]
    fn a_repair_out_of_order_rewrites_the_tail_after_the_common_prefix() {
        let a = Msg::user("a").with_id("1");
        let b = Msg::assistant("b").with_id("2");
        let c = Msg::tool_results([ToolResult::success("c", "t", "ok")]).with_id("3");
        let mut t = Transcript::stored(vec![a.clone(), b.clone(), c.clone()]);
        t.apply_repair(vec![a.clone(), c.clone(), b.clone()]);
        let u = t.take_unsaved();
        assert_eq!(u.remove, ["2", "3"]);
        assert!(u.replace.is_empty());
        assert_eq!(u.append, [c, b]);
    }

    #[test]
    fn the_window_starts_at_the_oldest_kept_turn() {
        let t = Transcript::stored(vec![
            Msg::user("1"),
            Msg::assistant("a"),
            Msg::user("2"),
            Msg::assistant("b"),
            Msg::user("3"),
        ]);
        assert_eq!(t.window_start(None), 0);
        assert_eq!(t.window_start(Some(1)), 4);
        assert_eq!(t.window_start(Some(2)), 2);
        assert_eq!(t.window_start(Some(0)), 4);
        assert_eq!(t.window_start(Some(9)), 0);
    }
}
