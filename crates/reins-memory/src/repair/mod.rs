//! Transcript repair and pending-tool detection: pure functions, no I/O.
//!
//! A transcript is *provider-valid* when every tool use of an assistant message has
//! exactly one tool result after it and before the next assistant message or person's
//! message, and no tool result lacks its tool use. (Every provider wants the results
//! directly after the tool uses they answer, so a person's message closes the window
//! too.) Tool results are read from non-assistant messages; a result inside an
//! assistant message is misplaced and removed.
//!
//! Two repairs keep transcripts that way, each returning a [`RepairReport`]:
//! - [`sanitize_for_request`], before every model request, over the whole transcript;
//! - [`sanitize_after_interrupt`], after an interrupt, over the current turn only.
//!
//! ```
//! use reins_memory::repair::{pending_tool_uses, sanitize_after_interrupt};
//! use reins_message::{ContentBlock, Msg, ToolUse};
//! use serde_json::json;
//!
//! let call = ToolUse::new("call_1", "delete_file", json!({ "path": "temp.txt" }));
//! let transcript = vec![
//!     Msg::user("delete temp.txt"),
//!     Msg::assistant("Deleting.").with_block(ContentBlock::ToolUse(call)),
//! ];
//! assert_eq!(pending_tool_uses(&transcript).len(), 1);
//!
//! // ESC before the tool ran: the tool use gets an honest result.
//! let (repaired, report) = sanitize_after_interrupt(&transcript);
//! assert_eq!(report.synthesized, vec!["call_1"]);
//! assert!(pending_tool_uses(&repaired).is_empty());
//! assert_eq!(repaired[2].tool_results_iter().next().unwrap().text(), "not run: interrupted");
//! ```

mod report;

use std::collections::{HashMap, HashSet};

use reins_message::{ContentBlock, Msg, Role, ToolOutcome, ToolResult, ToolUse};
use serde_json::Value;

pub use reins_message::fingerprint;
pub use report::{RemovalReason, RemovedResult, RepairReport};

/// Metadata key marking a message as partially streamed (`"reins.partial": true`);
/// [`sanitize_after_interrupt`] drops such messages.
pub const PARTIAL_KEY: &str = "reins.partial";

/// Metadata key set on the messages a repair adds; its value names the repair
/// (`"sanitize_for_request"` or `"sanitize_after_interrupt"`).
pub const REPAIR_KEY: &str = "reins.repair";

/// The text of results synthesized by [`sanitize_for_request`].
pub const NO_RESULT_REASON: &str = "not run: no result was recorded";

/// The text of results synthesized by [`sanitize_after_interrupt`].
pub const INTERRUPTED_REASON: &str = "not run: interrupted";

/// The index of the last [`Role::User`] message (a person's message; tool results
/// are [`Role::Tool`]), or 0 when there is none. The current turn runs from there to
/// the end.
pub fn current_turn_start(messages: &[Msg]) -> usize {
    messages
        .iter()
        .rposition(|m| m.role == Role::User)
        .unwrap_or(0)
}

/// The tool uses of the current turn (assistant messages after the last person's
/// message) that have no matching tool result after them, in order.
pub fn pending_tool_uses(messages: &[Msg]) -> Vec<&ToolUse> {
    let start = current_turn_start(messages);
    let turn = messages.get(start..).unwrap_or_default();
    let mut last_result: HashMap<&str, usize> = HashMap::new();
    for (i, m) in turn.iter().enumerate() {
        if m.role != Role::Assistant {
            for r in m.tool_results_iter() {
                last_result.insert(r.id.as_str(), i);
            }
        }
    }
    let mut pending = Vec::new();
    for (i, m) in turn.iter().enumerate() {
        if m.role != Role::Assistant {
            continue;
        }
        for u in m.tool_uses() {
            if !matches!(last_result.get(u.id.as_str()), Some(&j) if j > i) {
                pending.push(u);
            }
        }
    }
    pending
}

/// Whether a message is marked partially streamed (`"reins.partial": true`).
pub fn is_partial(message: &Msg) -> bool {
    message.metadata.get(PARTIAL_KEY) == Some(&Value::Bool(true))
}

/// Makes the whole transcript provider-valid (see the [module docs](self)): orphan,
/// duplicate and misplaced results are dropped (of duplicates, the first result of a
/// tool that actually ran is kept, else the first); a tool use with no result gets a
/// [`ToolOutcome::Cancelled`] result ([`NO_RESULT_REASON`]) in a new tool message
/// placed right after the assistant message's existing results. A transcript that is
/// already valid comes back unchanged with an empty report.
pub fn sanitize_for_request(messages: &[Msg]) -> (Vec<Msg>, RepairReport) {
    repair(messages, 0, false, NO_RESULT_REASON, "sanitize_for_request")
}

/// Repairs the current turn after an interrupt; messages before
/// [`current_turn_start`] are never touched. Partially streamed messages (see
/// [`PARTIAL_KEY`]; a person's message is never dropped) are dropped, orphan and
/// duplicate results are dropped, completed assistant + result pairs are kept, and a
/// tool use that never ran gets `ToolResult::cancelled(id, name, "not run: interrupted")`.
pub fn sanitize_after_interrupt(messages: &[Msg]) -> (Vec<Msg>, RepairReport) {
    repair(
        messages,
        current_turn_start(messages),
        true,
        INTERRUPTED_REASON,
        "sanitize_after_interrupt",
    )
}

/// Why a transcript is not provider-valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A tool use has no result in its window.
    MissingResult {
        /// The tool use id.
        tool_use_id: String,
    },
    /// A tool use has more than one result in its window.
    DuplicateResult {
        /// The tool use id.
        tool_use_id: String,
    },
    /// A result answers no tool use of the assistant message before it.
    OrphanResult {
        /// The message holding it.
        message_id: String,
        /// The id it claims to answer.
        tool_use_id: String,
    },
    /// A result sits inside an assistant message.
    MisplacedResult {
        /// The message holding it.
        message_id: String,
        /// The id it claims to answer.
        tool_use_id: String,
    },
}

/// Every way `messages` breaks provider validity (empty when it is valid).
pub fn violations(messages: &[Msg]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut window: Option<(Vec<&str>, HashMap<&str, usize>)> = None;
    let close = |w: Option<(Vec<&str>, HashMap<&str, usize>)>, out: &mut Vec<Violation>| {
        if let Some((uses, counts)) = w {
            for id in uses {
                match counts.get(id).copied().unwrap_or(0) {
                    0 => out.push(Violation::MissingResult {
                        tool_use_id: id.to_owned(),
                    }),
                    1 => {}
                    _ => out.push(Violation::DuplicateResult {
                        tool_use_id: id.to_owned(),
                    }),
                }
            }
        }
    };
    for m in messages {
        match m.role {
            Role::Assistant => {
                close(window.take(), &mut out);
                for r in m.tool_results_iter() {
                    out.push(Violation::MisplacedResult {
                        message_id: m.id.clone(),
                        tool_use_id: r.id.clone(),
                    });
                }
                let mut uses: Vec<&str> = m.tool_uses().map(|u| u.id.as_str()).collect();
                let mut seen = HashSet::new();
                uses.retain(|id| seen.insert(*id));
                window = Some((uses, HashMap::new()));
                continue;
            }
            Role::User => close(window.take(), &mut out),
            Role::System | Role::Tool => {}
        }
        for r in m.tool_results_iter() {
            match window.as_mut() {
                Some((uses, counts)) if uses.contains(&r.id.as_str()) => {
                    *counts.entry(r.id.as_str()).or_insert(0) += 1;
                }
                _ => out.push(Violation::OrphanResult {
                    message_id: m.id.clone(),
                    tool_use_id: r.id.clone(),
                }),
            }
        }
    }
    close(window, &mut out);
    out
}

/// Whether `messages` is provider-valid (see the [module docs](self)).
pub fn is_provider_valid(messages: &[Msg]) -> bool {
    violations(messages).is_empty()
}

/// Whether a result reports a tool that ran (or may have run), as opposed to one that
/// never started.
fn ran(r: &ToolResult) -> bool {
    !matches!(
        r.outcome,
        ToolOutcome::Cancelled | ToolOutcome::Rejected { .. }
    )
}

/// One assistant message's window while repairing.
struct Window<'a> {
    /// Position (in `kept`) of the assistant message.
    pos: usize,
    /// Its distinct tool uses, in order.
    uses: Vec<&'a ToolUse>,
    /// The chosen result per tool use id: (position, block index, ran).
    chosen: HashMap<&'a str, (usize, usize, bool)>,
}

fn repair(
    messages: &[Msg],
    start: usize,
    drop_partial: bool,
    reason: &str,
    label: &str,
) -> (Vec<Msg>, RepairReport) {
    let start = start.min(messages.len());
    let mut report = RepairReport::default();

    // 1. Drop partially streamed messages (never a person's).
    let kept: Vec<&Msg> = messages[start..]
        .iter()
        .filter(|m| {
            let drop = drop_partial && m.role != Role::User && is_partial(m);
            if drop {
                report.removed_messages.push(m.id.clone());
            }
            !drop
        })
        .collect();

    // 2. Split into windows and choose one result per tool use.
    let mut windows: Vec<Window<'_>> = Vec::new();
    let mut window_of: Vec<Option<usize>> = Vec::with_capacity(kept.len());
    let mut open: Option<usize> = None;
    for (pos, m) in kept.iter().enumerate() {
        match m.role {
            Role::Assistant => {
                let mut seen = HashSet::new();
                let uses = m.tool_uses().filter(|u| seen.insert(&u.id)).collect();
                windows.push(Window {
                    pos,
                    uses,
                    chosen: HashMap::new(),
                });
                open = Some(windows.len() - 1);
                window_of.push(None);
                continue;
            }
            Role::User => open = None,
            Role::System | Role::Tool => {}
        }
        window_of.push(open);
        let Some(w) = open.and_then(|i| windows.get_mut(i)) else {
            continue;
        };
        for (b, block) in m.content.iter().enumerate() {
            let ContentBlock::ToolResult(r) = block else {
                continue;
            };
            let Some(u) = w.uses.iter().find(|u| u.id == r.id) else {
                continue;
            };
            let did_run = ran(r);
            match w.chosen.get(u.id.as_str()) {
                None => {
                    w.chosen.insert(u.id.as_str(), (pos, b, did_run));
                }
                Some(&(_, _, false)) if did_run => {
                    w.chosen.insert(u.id.as_str(), (pos, b, did_run));
                }
                Some(_) => {}
            }
        }
    }

    // 3. Decide which result blocks go.
    let mut drops: HashMap<usize, Vec<(usize, RemovalReason)>> = HashMap::new();
    for (pos, m) in kept.iter().enumerate() {
        for (b, block) in m.content.iter().enumerate() {
            let ContentBlock::ToolResult(r) = block else {
                continue;
            };
            let why = if m.role == Role::Assistant {
                Some(RemovalReason::Misplaced)
            } else {
                match window_of[pos].and_then(|i| windows.get(i)) {
                    Some(w) => match w.chosen.get(r.id.as_str()) {
                        Some(&(p, bb, _)) if p == pos && bb == b => None,
                        Some(_) => Some(RemovalReason::Duplicate),
                        None => Some(RemovalReason::Orphan),
                    },
                    None => Some(RemovalReason::Orphan),
                }
            };
            if let Some(why) = why {
                drops.entry(pos).or_default().push((b, why));
            }
        }
    }

    // 4. Where synthesized results go: after the window's last chosen result, or
    //    right after the assistant message.
    let mut inserts: HashMap<usize, (usize, Vec<&ToolUse>)> = HashMap::new();
    for (wi, w) in windows.iter().enumerate() {
        let missing: Vec<&ToolUse> = w
            .uses
            .iter()
            .copied()
            .filter(|u| !w.chosen.contains_key(u.id.as_str()))
            .collect();
        if missing.is_empty() {
            continue;
        }
        let after = w.chosen.values().map(|&(p, _, _)| p).max().unwrap_or(w.pos);
        inserts.insert(after, (wi, missing));
    }

    if report.removed_messages.is_empty() && drops.is_empty() && inserts.is_empty() {
        return (messages.to_vec(), report);
    }

    // 5. Build the output.
    let mut taken_ids: Option<HashSet<&str>> = None;
    let mut out: Vec<Msg> = Vec::with_capacity(messages.len() + inserts.len());
    out.extend_from_slice(&messages[..start]);
    for (pos, m) in kept.iter().enumerate() {
        match drops.get(&pos) {
            None => out.push((*m).clone()),
            Some(gone) => {
                let mut msg = (*m).clone();
                let mut content = Vec::with_capacity(msg.content.len());
                for (b, block) in msg.content.into_iter().enumerate() {
                    match gone.iter().find(|(gb, _)| *gb == b) {
                        Some(&(_, reason)) => {
                            if let ContentBlock::ToolResult(r) = &block {
                                report.removed_results.push(RemovedResult {
                                    message_id: m.id.clone(),
                                    tool_use_id: r.id.clone(),
                                    reason,
                                });
                            }
                        }
                        None => content.push(block),
                    }
                }
                msg.content = content.into();
                if msg.content.is_empty() {
                    report.removed_messages.push(msg.id.clone());
                } else {
                    report.rewritten_messages.push(msg.id.clone());
                    out.push(msg);
                }
            }
        }
        if let Some((wi, missing)) = inserts.get(&pos) {
            let ids =
                taken_ids.get_or_insert_with(|| messages.iter().map(|m| m.id.as_str()).collect());
            let assistant = windows.get(*wi).and_then(|w| kept.get(w.pos));
            let base = assistant.map_or_else(|| m.id.clone(), |a| a.id.clone());
            let mut id = format!("{base}.repair");
            let mut n = 1;
            while ids.contains(id.as_str()) {
                n += 1;
                id = format!("{base}.repair{n}");
            }
            let results: Vec<ToolResult> = missing
                .iter()
                .map(|u| {
                    report.synthesized.push(u.id.clone());
                    ToolResult::cancelled(u.id.clone(), u.name.clone(), reason)
                })
                .collect();
            let mut synth = Msg::tool_results(results)
                .with_id(id.clone())
                .with_metadata(REPAIR_KEY, Value::String(label.to_owned()));
            synth.created_at = m.created_at;
            report.added_messages.push(id);
            out.push(synth);
        }
    }
    (out, report)
}

#[cfg(test)]
mod tests;
