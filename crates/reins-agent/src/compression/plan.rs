//! Where to cut: what the next request costs against a [`ContextPolicy`]'s budget and,
//! when it is over, which oldest messages to summarize so that no tool use is cut
//! from its result. Pure functions over a [`Transcript`]; the run asks them before
//! each model call.

use std::collections::HashMap;

use reins_message::{Msg, Role};

use super::{ContextPolicy, ContextSummary, TokenCounter, is_summary};
use crate::transcript::Transcript;

/// Tokens of the line that introduces a summary in a request.
fn header_tokens(counter: &dyn TokenCounter) -> usize {
    counter.count_text(crate::compression::SUMMARY_HEADER) + 2
}

/// Tokens of message `i`, counted once per message id.
fn tokens_at(t: &mut Transcript, counter: &dyn TokenCounter, i: usize) -> usize {
    t.tokens_at(i, |m| counter.count_message(m))
}

/// The active summary of `t`: (its index, the index of the first message it does not
/// cover). The latest summary whose covered messages are still in the transcript.
pub(crate) fn active_summary(t: &Transcript) -> Option<(usize, usize)> {
    let messages = t.messages();
    for (pos, m) in messages.iter().enumerate().rev() {
        if !is_summary(m) {
            continue;
        }
        let Some(s) = ContextSummary::from_msg(m) else {
            continue;
        };
        if let Some(last) = messages[..pos].iter().rposition(|x| x.id == s.last) {
            return Some((pos, last + 1));
        }
    }
    None
}

/// What the next request costs and, when it is over budget, where to cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContextPlan {
    /// Tokens of the request as it stands.
    pub tokens: usize,
    /// Where to cut, when the request is over budget and a cut exists.
    pub cut: Option<Cut>,
    /// Even after the best cut (or with none possible) the request stays over budget.
    pub over_budget: bool,
}

/// A place to cut the transcript: `from..to` is summarized (summaries aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cut {
    /// The first index the new summary covers (where the active summary ends, or 0).
    pub from: usize,
    /// The first index it does not cover: requests start here.
    pub to: usize,
    /// Tokens of the messages the request keeps.
    pub kept_tokens: usize,
    /// Whether the cut falls inside a turn (before an assistant message) because no
    /// cut between turns was enough.
    pub mid_turn: bool,
}

/// What the summarizer is given for a cut.
#[derive(Debug, Clone)]
pub(crate) struct SummaryInput {
    /// The active summary, folded into the new one.
    pub(crate) earlier: Option<ContextSummary>,
    /// The messages to summarize, in order (summaries excluded).
    pub(crate) messages: Vec<Msg>,
    /// Tokens of those messages (and of the earlier summary).
    pub(crate) covered_tokens: usize,
}

/// What the next request costs (`overhead`: its system prompt, tools and format)
/// and, when over the policy's budget, the cut that keeps the most recent messages
/// while bringing it to the policy's target: between turns if possible, otherwise
/// between tool rounds, otherwise as far as a cut can go.
pub(crate) fn plan(
    t: &mut Transcript,
    history_turns: Option<u32>,
    counter: &dyn TokenCounter,
    overhead: usize,
    policy: &ContextPolicy,
) -> ContextPlan {
    let active = active_summary(t);
    let (summary_tokens, boundary) = match active {
        Some((pos, b)) => (tokens_at(t, counter, pos) + header_tokens(counter), b),
        None => (0, 0),
    };
    let start = boundary.max(t.window_start(history_turns));
    let mut counts: Vec<(usize, usize)> = Vec::new();
    let mut total = overhead + summary_tokens;
    for i in start..t.messages().len() {
        if is_summary(&t.messages()[i]) {
            continue;
        }
        let t = tokens_at(t, counter, i);
        counts.push((i, t));
        total += t;
    }
    if total <= policy.budget() {
        return ContextPlan {
            tokens: total,
            cut: None,
            over_budget: false,
        };
    }

    // Where each result is, so that a cut never separates a tool use from it.
    let mut result_at: HashMap<&str, usize> = HashMap::new();
    for &(i, _) in &counts {
        for r in t.messages()[i].tool_results_iter() {
            result_at.insert(r.id.as_str(), i);
        }
    }
    let mut suffix = vec![0usize; counts.len() + 1];
    for k in (0..counts.len()).rev() {
        suffix[k] = suffix[k + 1] + counts[k].1;
    }
    // Candidates: (index, kept tokens, between turns?).
    let mut candidates: Vec<(usize, usize, bool)> = Vec::new();
    let mut open_until: Option<usize> = None;
    for (k, &(i, _)) in counts.iter().enumerate() {
        let m = &t.messages()[i];
        let closed = open_until.is_none_or(|e| e < i);
        let holds_results = m.tool_results_iter().next().is_some();
        if k > 0 && closed && !holds_results {
            match m.role {
                Role::User => candidates.push((i, suffix[k], true)),
                Role::Assistant => candidates.push((i, suffix[k], false)),
                Role::System | Role::Tool => {}
            }
        }
        for u in m.tool_uses() {
            let end = result_at.get(u.id.as_str()).copied().unwrap_or(usize::MAX);
            open_until = Some(open_until.map_or(end, |e| e.max(end)));
        }
    }
    let fixed = overhead
        + policy.max_summary_tokens()
        + crate::compression::MESSAGE_OVERHEAD
        + header_tokens(counter);
    let target_tail = policy.target().saturating_sub(fixed);
    let chosen = candidates
        .iter()
        .find(|c| c.2 && c.1 <= target_tail)
        .or_else(|| candidates.iter().find(|c| !c.2 && c.1 <= target_tail))
        .or_else(|| candidates.last())
        .copied();
    let Some((to, kept_tokens, between_turns)) = chosen else {
        return ContextPlan {
            tokens: total,
            cut: None,
            over_budget: true,
        };
    };
    let covers_something = t.messages()[boundary..to].iter().any(|m| !is_summary(m));
    ContextPlan {
        tokens: total,
        over_budget: kept_tokens + fixed > policy.budget(),
        cut: covers_something.then_some(Cut {
            from: boundary,
            to,
            kept_tokens,
            mid_turn: !between_turns,
        }),
    }
}

/// What the summarizer reads for `cut`.
pub(crate) fn summary_input(
    t: &mut Transcript,
    counter: &dyn TokenCounter,
    cut: &Cut,
) -> SummaryInput {
    let earlier =
        active_summary(t).and_then(|(pos, _)| ContextSummary::from_msg(&t.messages()[pos]));
    let mut covered_tokens = earlier.as_ref().map_or(0, |e| e.summary_tokens);
    let mut messages = Vec::new();
    for i in cut.from..cut.to.min(t.messages().len()) {
        if is_summary(&t.messages()[i]) {
            continue;
        }
        covered_tokens += tokens_at(t, counter, i);
        messages.push(t.messages()[i].clone());
    }
    SummaryInput {
        earlier,
        messages,
        covered_tokens,
    }
}
