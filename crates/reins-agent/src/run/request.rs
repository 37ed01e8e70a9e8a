//! The next model request, without I/O: the messages it carries (the request window,
//! repaired to be provider-valid, with the active context summary standing in for
//! what it covers), how to ask for the structured answer, and the check against the
//! context budget that may first ask for a summary (`compression::plan` decides where
//! to cut; the driver's `drive::compress` calls the summarizer).

use reins_memory::RepairReport;
use reins_message::{Msg, ToolSpec};
use reins_model::{ChatRequest, ToolChoice};

use super::agenda::Core;
use super::{Compress, Compressed, Compression, ContextCheck, Reason, Run};
use crate::compression::plan::{self, ContextPlan, Cut, SummaryInput};
use crate::compression::{ContextPolicy, ContextSummary, TokenCounter};
use crate::structured::{OutputMode, OutputSpec};

impl Run {
    /// The messages to send to the model: the transcript, repaired to be
    /// provider-valid. A repair is applied to the transcript (and stored at the next
    /// commit) and reported. With `summaries` (the agent has a context policy), the
    /// active summary stands in for the messages it covers; stored summary messages
    /// are never sent as such.
    pub(crate) fn request_messages(&mut self, summaries: bool) -> (Vec<Msg>, RepairReport) {
        let t = &self.transcript;
        let active = if summaries {
            plan::active_summary(t)
        } else {
            None
        };
        let summary = active.map(|(pos, _)| t.messages()[pos].clone());
        let start = t
            .window_start(self.config.history_turns)
            .max(active.map_or(0, |(_, b)| b));
        let window = &t.messages()[start..];
        let (mut out, report): (Vec<Msg>, RepairReport) =
            if reins_memory::repair::is_provider_valid(window) {
                let kept = window.iter().filter(|m| !crate::compression::is_summary(m));
                (kept.cloned().collect(), RepairReport::default())
            } else {
                let (repaired, report) = reins_memory::sanitize_for_request(window);
                if !report.is_empty() {
                    let mut whole = t.messages()[..start].to_vec();
                    whole.extend(repaired.iter().cloned());
                    self.transcript.apply_repair(whole);
                    self.call.repairs.merge(report.clone());
                }
                let mut repaired = repaired;
                repaired.retain(|m| !crate::compression::is_summary(m));
                (repaired, report)
            };
        if let Some(s) = summary {
            out.insert(0, crate::compression::summary_for_request(&s, out.first()));
        }
        (out, report)
    }

    /// What the next request costs against the policy, and where to cut.
    pub(crate) fn plan_context(
        &mut self,
        counter: &dyn TokenCounter,
        overhead: usize,
        policy: &ContextPolicy,
    ) -> ContextPlan {
        plan::plan(
            &mut self.transcript,
            self.config.history_turns,
            counter,
            overhead,
            policy,
        )
    }

    /// What the summarizer reads for `cut`.
    pub(crate) fn summary_input(&mut self, counter: &dyn TokenCounter, cut: &Cut) -> SummaryInput {
        plan::summary_input(&mut self.transcript, counter, cut)
    }

    /// Appends the summary made for a [`Step::Compress`](super::Step::Compress)
    /// (stored at the next commit; the originals stay).
    pub(crate) fn add_summary(&mut self, summary: ContextSummary) {
        self.transcript.push_summary(summary.to_msg());
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
    pub(super) fn reason_step(&mut self, summary: bool) -> Core {
        let iteration = self.state.iteration + 1;
        let context = match self.call.compression.take() {
            Some(c) => {
                let checked = self.check_context(&c, summary, iteration);
                self.call.compression = Some(c);
                match checked {
                    Ok(check) => Some(check),
                    Err(compress) => return Core::Compress(compress),
                }
            }
            None => None,
        };
        let (messages, repairs) = self.request_messages(self.call.compression.is_some());
        let output = self.prepare_output(self.call.model);
        let (request, external) = self.finish_request(messages, summary, output.as_ref());
        Core::Reason(
            Reason {
                iteration,
                summary,
                request,
                output: output.map(|(mode, _)| mode),
                external,
                unsaved: false,
            },
            context,
            repairs,
        )
    }

    /// The model request around the transcript `messages`, as every driver sends it:
    /// the agent's system prompt first and its options; for the summary at the
    /// iteration limit, the summary prompt last and no tools; otherwise the agent's
    /// tools, then the caller's own (a toolkit tool of the same name wins: those
    /// offered are returned, their calls are external), and the structured answer the
    /// run asks for (the `final_answer` tool, or the provider's JSON Schema format).
    fn finish_request(
        &self,
        messages: Vec<Msg>,
        summary: bool,
        output: Option<&(OutputMode, OutputSpec)>,
    ) -> (ChatRequest, Vec<String>) {
        let prompts = &*self.call.prompts;
        let mut all = Vec::with_capacity(messages.len() + 2);
        if let Some(p) = &prompts.system {
            all.push(p.clone());
        }
        all.extend(messages);
        let mut request = ChatRequest::new(all).with_options(prompts.options.clone());
        if summary {
            request.messages.push(prompts.summary.clone());
            request.tool_choice = ToolChoice::None;
            return (request, Vec::new());
        }
        let tools = &self.call.tools.0;
        request.tools = tools.specs();
        let mut external = Vec::new();
        // Only when there are some: changing the specs copies them.
        if !self.call.client_tools.is_empty() {
            let offered: Vec<ToolSpec> = self
                .call
                .client_tools
                .iter()
                .filter(|t| !tools.contains(&t.name))
                .cloned()
                .collect();
            external = offered.iter().map(|t| t.name.clone()).collect();
            request.tools.extend(offered);
        }
        if let Some((mode, spec)) = output {
            crate::structured::ask_for_output(&mut request, *mode, spec);
        }
        (request, external)
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
    use crate::compression::{EstimateCounter, SUMMARY_HEADER};
    use crate::run::RunConfig;
    use chrono::Utc;
    use proptest::prelude::*;
    use reins_memory::repair::violations;
    use reins_message::Role;
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
                .filter(|m| !crate::compression::is_summary(m))
                .map(|m| m.id.as_str())
                .collect();
            prop_assert_eq!(now, ids.iter().map(String::as_str).collect::<Vec<_>>());
            prop_assert_eq!(
                run.messages().iter().filter(|m| crate::compression::is_summary(m)).count(),
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
