//! Context compression, the driver's half: a [`Step::Compress`](crate::run::Step)
//! asks the summarizer (chunk by chunk, each folding in the last) for a summary of
//! the oldest turns and feeds it back; a [`Reason`](crate::run::Reason) step's
//! [`ContextCheck`] is announced as events. Where to cut and what a request carries
//! are the run's (`compression::plan`, `run::request`); the policy and the
//! summarizer's prompt are [`crate::compression`]'s.

use chrono::Utc;
use reins_hook::{HookEvent, SummaryReason};

use super::Driver;
use crate::compression::{self, ContextSummary};
use crate::error::{AgentError, Result};
use crate::output::{RunEvent, RunStatus};
use crate::run::{Compress, ContextCheck, Event};
use crate::state::SessionCore;

impl Driver {
    /// Performs a [`Compress`] step. `Some(status)` when the run ended meanwhile
    /// (interrupted during the summarizer call: nothing is stored).
    pub(super) async fn compress(
        &self,
        core: &mut SessionCore,
        step: Compress,
    ) -> Result<Option<RunStatus>> {
        let Some(budget) = self.agent.compression() else {
            return Err(AgentError::Internal(
                "the run asked for a summary but the agent has no context policy".to_owned(),
            ));
        };
        let (policy, counter) = (&budget.policy, &*budget.counter);
        let Compress {
            iteration,
            earlier,
            messages,
            covered_tokens,
            ..
        } = step;
        let (Some(first), Some(last)) = (messages.first(), messages.last()) else {
            return Ok(None);
        };
        let (first, last) = (first.id.clone(), last.id.clone());
        let covered = messages.len();

        // One summarizer call per chunk it can read at once, each folding in the last.
        let model = policy
            .summarizer
            .as_ref()
            .unwrap_or(&self.agent.runtime.model);
        let mut text = earlier.as_ref().map(|e| e.text.clone());
        for chunk in compression::chunks(messages, counter, policy.chunk_tokens(counter)) {
            let request = compression::summary_request(policy, text.as_deref(), &chunk);
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
            core.run.apply(Event::Usage(done.usage))?;
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
            builds_on: earlier.map(|e| e.id),
            covered_tokens,
            summary_tokens: counter.count_text(&text),
            counter: counter.name().to_owned(),
            created_at: Utc::now(),
            text,
        };
        core.run.apply(Event::Summarized(summary))?;
        // Stored by the run loop before the model call.
        Ok(None)
    }

    /// Announces a request's context check: the summary made for it, and a request
    /// that stays over budget (sent anyway).
    pub(super) fn announce_context(&self, check: ContextCheck) {
        if let Some(c) = check.compressed {
            tracing::debug!(
                session = %self.session,
                covered = c.summary.messages,
                before = c.tokens_before,
                after = check.tokens,
                "context compressed"
            );
            self.emit(|| RunEvent::ContextCompressed {
                summary: c.summary,
                tokens_before: c.tokens_before,
                tokens_after: check.tokens,
            });
        }
        if check.over_budget {
            tracing::warn!(
                session = %self.session,
                tokens = check.tokens,
                budget = check.budget,
                "the request is over the context budget even after compression; sending it anyway"
            );
            self.emit(|| RunEvent::ContextOverBudget {
                tokens: check.tokens,
                budget: check.budget,
            });
        }
    }
}
