//! The run's side of context compression, without I/O: where the active summary is,
//! what the next request costs, where to cut when it is over budget, and the messages
//! a request carries. The runner (`drive::fit`) does the summarizer call.

use std::collections::HashMap;

use reins_memory::RepairReport;
use reins_message::{Msg, Role};

use super::{Compress, Compressed, Compression, ContextCheck, Reason, Run, Step};
use crate::context::{ContextPolicy, ContextSummary, TokenCounter, is_summary};

/// Tokens of the line that introduces a summary in a request.
fn header_tokens(counter: &dyn TokenCounter) -> usize {
    counter.count_text(crate::context::SUMMARY_HEADER) + 2
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

impl Run {
    /// The messages to send to the model: the transcript, repaired to be
    /// provider-valid. A repair is applied to the transcript (and stored at the next
    /// commit) and reported. With `summaries` (the agent has a context policy), the
    /// active summary stands in for the messages it covers; stored summary messages
    /// are never sent as such.
    pub(crate) fn request_messages(&mut self, summaries: bool) -> (Vec<Msg>, RepairReport) {
        let active = if summaries {
            self.active_summary()
        } else {
            None
        };
        let summary = active.map(|(pos, _)| self.messages[pos].clone());
        let start = self.window_start().max(active.map_or(0, |(_, b)| b));
        let window = &self.messages[start..];
        let (mut out, report): (Vec<Msg>, RepairReport) =
            if reins_memory::repair::is_provider_valid(window) {
                let kept = window.iter().filter(|m| !crate::context::is_summary(m));
                (kept.cloned().collect(), RepairReport::default())
            } else {
                let (repaired, report) = reins_memory::sanitize_for_request(window);
                if !report.is_empty() {
                    let mut whole = self.messages[..start].to_vec();
                    whole.extend(repaired.iter().cloned());
                    self.apply_repair(whole);
                    self.call.repairs.merge(report.clone());
                }
                let mut repaired = repaired;
                repaired.retain(|m| !crate::context::is_summary(m));
                (repaired, report)
            };
        if let Some(s) = summary {
            out.insert(0, crate::context::summary_for_request(&s, out.first()));
        }
        (out, report)
    }

    /// Where the context window starts: at the user message that opens the oldest
    /// turn in the window (so no tool use is cut from its result).
    fn window_start(&self) -> usize {
        let Some(turns) = self.config.history_turns else {
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

    /// The active summary: (its index, the index of the first message it does not
    /// cover). The latest summary whose covered messages are still in the transcript.
    pub(crate) fn active_summary(&self) -> Option<(usize, usize)> {
        for (pos, m) in self.messages.iter().enumerate().rev() {
            if !is_summary(m) {
                continue;
            }
            let Some(s) = ContextSummary::from_msg(m) else {
                continue;
            };
            if let Some(last) = self.messages[..pos].iter().rposition(|x| x.id == s.last) {
                return Some((pos, last + 1));
            }
        }
        None
    }

    /// Tokens of message `i`, counted once per message id.
    fn tokens_at(&mut self, counter: &dyn TokenCounter, i: usize) -> usize {
        let m = &self.messages[i];
        if let Some(n) = self.token_counts.get(&m.id) {
            return *n;
        }
        let n = counter.count_message(m);
        self.token_counts.insert(m.id.clone(), n);
        n
    }

    /// What the next request costs (`overhead`: its system prompt, tools and format)
    /// and, when over the policy's budget, the cut that keeps the most recent messages
    /// while bringing it to the policy's target: between turns if possible, otherwise
    /// between tool rounds, otherwise as far as a cut can go.
    pub(crate) fn plan_context(
        &mut self,
        counter: &dyn TokenCounter,
        overhead: usize,
        policy: &ContextPolicy,
    ) -> ContextPlan {
        let active = self.active_summary();
        let (summary_tokens, boundary) = match active {
            Some((pos, b)) => (self.tokens_at(counter, pos) + header_tokens(counter), b),
            None => (0, 0),
        };
        let start = boundary.max(self.window_start());
        let mut counts: Vec<(usize, usize)> = Vec::new();
        let mut total = overhead + summary_tokens;
        for i in start..self.messages.len() {
            if is_summary(&self.messages[i]) {
                continue;
            }
            let t = self.tokens_at(counter, i);
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
            for r in self.messages[i].tool_results_iter() {
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
            let m = &self.messages[i];
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
            + crate::context::MESSAGE_OVERHEAD
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
        let covers_something = self.messages[boundary..to].iter().any(|m| !is_summary(m));
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
    pub(crate) fn summary_input(&mut self, counter: &dyn TokenCounter, cut: &Cut) -> SummaryInput {
        let earlier = self
            .active_summary()
            .and_then(|(pos, _)| ContextSummary::from_msg(&self.messages[pos]));
        let mut covered_tokens = earlier.as_ref().map_or(0, |e| e.summary_tokens);
        let mut messages = Vec::new();
        for i in cut.from..cut.to.min(self.messages.len()) {
            if is_summary(&self.messages[i]) {
                continue;
            }
            covered_tokens += self.tokens_at(counter, i);
            messages.push(self.messages[i].clone());
        }
        SummaryInput {
            earlier,
            messages,
            covered_tokens,
        }
    }

    /// Appends the summary made for a [`Step::Compress`](super::Step::Compress)
    /// (stored at the next commit; the originals stay).
    pub(crate) fn add_summary(&mut self, summary: ContextSummary) {
        self.token_counts.clear();
        self.push(summary.to_msg());
        if let Some(tokens_before) = self.call.compress_asked {
            self.call.compressed = Some(Compressed {
                summary,
                tokens_before,
            });
        }
    }

    /// The step for a model call: first, when the agent keeps a context budget and
    /// the request is over it, a [`Step::Compress`] (once per request); then the
    /// request's messages, the structured-output mode and the budget check.
    pub(super) fn reason_step(&mut self, summary: bool) -> Step {
        let iteration = self.state.iteration + 1;
        let context = match self.call.compression.take() {
            Some(c) => {
                let checked = self.check_context(&c, summary, iteration);
                self.call.compression = Some(c);
                match checked {
                    Ok(check) => Some(check),
                    Err(compress) => return Step::Compress(compress),
                }
            }
            None => None,
        };
        let (messages, repairs) = self.request_messages(self.call.compression.is_some());
        let output = self.prepare_output(self.call.model);
        Step::Reason(Reason {
            iteration,
            summary,
            messages,
            repairs,
            output,
            context,
        })
    }

    /// The next request against the budget: `Err` with what to summarize when it is
    /// over budget and no summary was made for it yet.
    #[allow(clippy::result_large_err)] // the step itself, handed out once
    fn check_context(
        &mut self,
        c: &Compression,
        summary: bool,
        iteration: u32,
    ) -> Result<ContextCheck, Compress> {
        let counter = &*c.counter;
        let mut overhead = if summary {
            c.summary_overhead
        } else {
            c.overhead
        };
        if let Some(out) = &self.state.output {
            overhead += c.policy.fixed_tokens(counter, &out.spec.schema.to_string()) + 64;
        }
        let budget = c.policy.budget();
        let plan = self.plan_context(counter, overhead, &c.policy);
        if self.call.compress_asked.take().is_some() {
            // The summary for this request is in: what it costs now.
            return Ok(ContextCheck {
                tokens: plan.tokens,
                budget,
                over_budget: plan.tokens > budget,
                compressed: self.call.compressed.take(),
            });
        }
        let over_budget = match plan.cut {
            Some(cut) => {
                let input = self.summary_input(counter, &cut);
                if !input.messages.is_empty() {
                    self.call.compress_asked = Some(plan.tokens);
                    return Err(Compress {
                        iteration,
                        earlier: input.earlier,
                        messages: input.messages,
                        covered_tokens: input.covered_tokens,
                        tokens_before: plan.tokens,
                        mid_turn: cut.mid_turn,
                    });
                }
                false
            }
            None => plan.over_budget,
        };
        Ok(ContextCheck {
            tokens: plan.tokens,
            budget,
            over_budget,
            compressed: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{EstimateCounter, SUMMARY_HEADER};
    use crate::run::RunConfig;
    use chrono::Utc;
    use proptest::prelude::*;
    use reins_memory::repair::violations;
    use reins_message::{ToolResult, ToolUse};
    use serde_json::json;

    /// One turn: a user message of `user` chars, tool rounds (each: the sizes of its
    /// results), and a final answer of `answer` chars (none: the turn is in progress,
    /// as when the model is about to be called after tool results).
    #[derive(Debug, Clone)]
    struct Turn {
        user: usize,
        rounds: Vec<Vec<usize>>,
        answer: Option<usize>,
    }

    fn turn() -> impl Strategy<Value = Turn> {
        (
            1usize..600,
            proptest::collection::vec(proptest::collection::vec(1usize..1_500, 1..4), 0..4),
            proptest::option::weighted(0.9, 1usize..800),
        )
            .prop_map(|(user, rounds, answer)| Turn {
                user,
                rounds,
                answer,
            })
    }

    fn transcript(turns: &[Turn]) -> Vec<Msg> {
        let mut out = Vec::new();
        let mut n = 0;
        for (t, turn) in turns.iter().enumerate() {
            out.push(Msg::user(format!("t{t} {}", "u".repeat(turn.user))));
            for round in &turn.rounds {
                let uses: Vec<ToolUse> = round
                    .iter()
                    .map(|_| {
                        n += 1;
                        ToolUse::new(format!("call_{n}"), "search", json!({ "q": n }))
                    })
                    .collect();
                let mut a = Msg::assistant("");
                a.content = uses
                    .iter()
                    .cloned()
                    .map(reins_message::ContentBlock::ToolUse)
                    .collect();
                out.push(a);
                out.push(Msg::tool_results(uses.iter().zip(round).map(
                    |(u, size)| ToolResult::success(u.id.clone(), "search", "r".repeat(*size)),
                )));
            }
            // Only the last turn may be in progress.
            match turn.answer {
                Some(a) => out.push(Msg::assistant("a".repeat(a))),
                None if t + 1 < turns.len() => out.push(Msg::assistant("done")),
                None => {}
            }
        }
        out
    }

    fn summary_msg(run: &mut Run, cut: &Cut, policy: &ContextPolicy) -> ContextSummary {
        let counter = EstimateCounter;
        let input = run.summary_input(&counter, cut);
        let text = "s".repeat(policy.max_summary_tokens() * 4);
        ContextSummary {
            id: reins_message::new_id(),
            first: input
                .messages
                .first()
                .map(|m| m.id.clone())
                .unwrap_or_default(),
            last: input
                .messages
                .last()
                .map(|m| m.id.clone())
                .unwrap_or_default(),
            messages: input.messages.len(),
            builds_on: input.earlier.map(|e| e.id),
            covered_tokens: input.covered_tokens,
            summary_tokens: counter.count_text(&text),
            counter: "estimate".into(),
            created_at: Utc::now(),
            text,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// For any history, budget and fixed overhead: after compressing as the runner
        /// does, the request is provider-valid, never separates a tool use from its
        /// result, respects the budget unless the plan said it cannot, and the
        /// transcript still holds every original message in order.
        #[test]
        fn compressed_requests_are_valid_within_budget_and_lose_nothing(
            turns in proptest::collection::vec(turn(), 1..25),
            budget in 300usize..4_000,
            target_pct in 30usize..90,
            overhead in 0usize..120,
        ) {
            let messages = transcript(&turns);
            let ids: Vec<String> = messages.iter().map(|m| m.id.clone()).collect();
            let mut run = Run::restore(RunConfig::default(), messages, None);
            let policy = ContextPolicy::new(budget).compress_to(budget * target_pct / 100);
            prop_assume!(policy.validate().is_ok());
            let counter = EstimateCounter;
            let mut plan = run.plan_context(&counter, overhead, &policy);
            let mut compressions = 0;
            while let Some(cut) = plan.cut {
                // Nothing in the covered range is a tool use whose result is kept.
                let covered = &run.messages()[cut.from..cut.to];
                let kept = &run.messages()[cut.to..];
                for u in covered.iter().flat_map(Msg::tool_uses) {
                    prop_assert!(!kept.iter().any(|m| m.tool_results_iter().any(|r| r.id == u.id)));
                }
                let msg = summary_msg(&mut run, &cut, &policy);
                run.add_summary(msg);
                compressions += 1;
                prop_assert!(compressions <= 40, "compression does not converge");
                plan = run.plan_context(&counter, overhead, &policy);
            }
            let (request, report) = run.request_messages(true);
            prop_assert!(report.is_empty());
            prop_assert!(violations(&request).is_empty(), "{:?}", violations(&request));
            let first = request.iter().find(|m| m.role != Role::System);
            prop_assert!(
                first.is_none_or(|m| m.role == Role::User),
                "starts with {:?}",
                first.map(|m| m.role)
            );
            if compressions > 0 {
                prop_assert!(request[0].text().starts_with(SUMMARY_HEADER));
            }
            let tokens: usize = request.iter().map(|m| counter.count_message(m)).sum();
            if !plan.over_budget {
                prop_assert!(tokens + overhead <= budget, "{} + {} > {}", tokens, overhead, budget);
            }
            // The latest user message is sent, unless a cut inside its turn was needed.
            let last_user = run
                .messages()
                .iter()
                .rev()
                .find(|m| m.role == Role::User)
                .map(|m| m.id.clone());
            if let Some(id) = last_user {
                let in_request = request.iter().any(|m| m.id == id);
                let mid_turn_cut = request
                    .first()
                    .is_some_and(|m| m.role == Role::User && m.text().starts_with(SUMMARY_HEADER));
                prop_assert!(in_request || mid_turn_cut);
            }
            // Append-only: the originals, in order, with the summaries added.
            let now: Vec<&str> = run
                .messages()
                .iter()
                .filter(|m| !crate::context::is_summary(m))
                .map(|m| m.id.as_str())
                .collect();
            prop_assert_eq!(now, ids.iter().map(String::as_str).collect::<Vec<_>>());
            prop_assert_eq!(
                run.messages().iter().filter(|m| crate::context::is_summary(m)).count(),
                compressions
            );
        }
    }

    #[test]
    fn within_budget_there_is_nothing_to_do() {
        let mut run = Run::restore(
            RunConfig::default(),
            vec![Msg::user("hi"), Msg::assistant("hello")],
            None,
        );
        let plan = run.plan_context(&EstimateCounter, 10, &ContextPolicy::new(1_000));
        assert_eq!(plan.cut, None);
        assert!(!plan.over_budget);
        assert_eq!(plan.tokens, 10 + 1 + 4 + 2 + 4);
    }

    #[test]
    fn a_single_message_over_budget_is_reported_not_cut() {
        let mut run = Run::restore(
            RunConfig::default(),
            vec![Msg::user("x".repeat(8_000))],
            None,
        );
        let plan = run.plan_context(&EstimateCounter, 0, &ContextPolicy::new(1_000));
        assert_eq!(plan.cut, None);
        assert!(plan.over_budget);
    }
}
