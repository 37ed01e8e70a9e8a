//! Context compression, the runner's half: before a model call, when the request
//! would be over the agent's [`ContextPolicy`](crate::ContextPolicy) budget, ask the
//! summarizer for a summary of the oldest turns, store it, and announce it. The run's
//! half (where to cut, what a request carries) is `run::context`.

use chrono::Utc;
use reins_hook::{HookEvent, SummaryReason};
use reins_message::Msg;
use reins_model::ChatRequest;

use super::Driver;
use crate::context::{self, ContextSummary};
use crate::error::{AgentError, Result};
use crate::output::{RunEvent, RunStatus};
use crate::session::SessionCore;

impl Driver {
    /// Brings the next request within budget. `Some(status)` when the run ended
    /// meanwhile (interrupted during the summarizer call: nothing is stored).
    pub(super) async fn fit_context(
        &self,
        core: &mut SessionCore,
        summary_step: bool,
        iteration: u32,
    ) -> Result<Option<RunStatus>> {
        let inner = &self.agent.inner;
        let Some(policy) = &inner.context else {
            return Ok(None);
        };
        let counter = policy.counter_for(inner.model.model_name());

        // What the request carries besides the transcript.
        let mut skeleton = Vec::new();
        if let Some(p) = &inner.system_prompt {
            skeleton.push(Msg::system(p.clone()));
        }
        if summary_step {
            skeleton.push(Msg::system(inner.summary_prompt.clone()));
        }
        let mut skeleton = ChatRequest::new(skeleton).with_options(inner.options.clone());
        if !summary_step {
            skeleton.tools = inner.toolkit.specs();
        }
        let mut overhead = policy.overhead(&*counter, &skeleton);
        if let Some(out) = &core.run.state().output {
            overhead += policy.fixed_tokens(&*counter, &out.spec.schema.to_string()) + 64;
        }

        let plan = core.run.plan_context(&*counter, overhead, policy);
        let Some(cut) = plan.cut else {
            if plan.over_budget {
                self.over_budget(plan.tokens, policy.budget());
            }
            return Ok(None);
        };
        let input = core.run.summary_input(&*counter, &cut);
        let Some((first, last)) = input.messages.first().zip(input.messages.last()) else {
            return Ok(None);
        };
        let (first, last) = (first.id.clone(), last.id.clone());
        let covered = input.messages.len();

        // One summarizer call per chunk it can read at once, each folding in the last.
        let model = policy.summarizer.as_ref().unwrap_or(&inner.model);
        let mut text = input.earlier.as_ref().map(|e| e.text.clone());
        for chunk in context::chunks(input.messages, &*counter, policy.chunk_tokens(&*counter)) {
            let request = context::summary_request(policy, text.as_deref(), &chunk);
            let mut ev = HookEvent::PreSummary {
                request,
                reason: SummaryReason::Context,
            };
            self.hooks(&mut ev, iteration).await?;
            let HookEvent::PreSummary { request, .. } = ev else {
                return Err(AgentError::Internal(
                    "a hook replaced the summary request event".to_owned(),
                ));
            };
            if self.cancel.is_cancelled() {
                return self.interrupt(core, Vec::new()).await.map(Some);
            }
            let done = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => None,
                r = model.complete(request) => Some(r),
            };
            let Some(done) = done else {
                return self.interrupt(core, Vec::new()).await.map(Some);
            };
            let done = done?;
            core.run.add_usage(done.usage);
            let mut ev = HookEvent::PostSummary {
                message: done.message,
                reason: SummaryReason::Context,
            };
            self.hooks(&mut ev, iteration).await?;
            let HookEvent::PostSummary { message, .. } = ev else {
                return Err(AgentError::Internal(
                    "a hook replaced the summary event".to_owned(),
                ));
            };
            let t = message.text();
            if t.trim().is_empty() {
                return Err(AgentError::Summarization(format!(
                    "the summarizer ({}) returned no text for {} messages; nothing was \
                     stored and the request was not sent",
                    model.model_name(),
                    chunk.len()
                )));
            }
            text = Some(t);
        }
        let text = text.unwrap_or_default();
        let summary = ContextSummary {
            id: reins_message::new_id(),
            first,
            last,
            messages: covered,
            builds_on: input.earlier.map(|e| e.id),
            covered_tokens: input.covered_tokens,
            summary_tokens: counter.count_text(&text),
            counter: counter.name().to_owned(),
            created_at: Utc::now(),
            text,
        };
        core.run.add_summary(summary.to_msg());
        self.commit(core).await?;
        let after = core.run.plan_context(&*counter, overhead, policy);
        tracing::debug!(
            session = %self.session,
            covered,
            before = plan.tokens,
            after = after.tokens,
            mid_turn = cut.mid_turn,
            "context compressed"
        );
        self.emit(RunEvent::ContextCompressed {
            summary,
            tokens_before: plan.tokens,
            tokens_after: after.tokens,
        });
        if after.tokens > policy.budget() {
            self.over_budget(after.tokens, policy.budget());
        }
        Ok(None)
    }

    fn over_budget(&self, tokens: usize, budget: usize) {
        tracing::warn!(
            session = %self.session,
            tokens,
            budget,
            "the request is over the context budget even after compression; sending it anyway"
        );
        self.emit(RunEvent::ContextOverBudget { tokens, budget });
    }
}
