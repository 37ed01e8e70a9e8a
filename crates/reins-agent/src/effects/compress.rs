//! The summary of a [`Compress`] step, written once: the summarizer (the policy's, or
//! the agent's model) is asked chunk by chunk, each call folding in the last, each one
//! shown to the `PreSummary`/`PostSummary` hooks. A driver that journals its steps
//! journals what [`summarize`] returns, as one step, and stores the summary with the
//! run's next commit.

use chrono::Utc;
use reins_hook::{HookEvent, SummaryReason};
use reins_message::Usage;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::hooks;
use crate::agent::Agent;
use crate::compression::{self, ContextSummary};
use crate::error::{AgentError, Result};
use crate::run::{Compress, Event};

/// What a summary came to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Summarized {
    /// The summary, and the tokens each summarizer call used.
    Summary {
        /// The summary (apply as [`Event::Summarized`]).
        summary: Box<ContextSummary>,
        /// Per summarizer call (apply each as [`Event::Usage`]).
        usage: Vec<Usage>,
    },
    /// An interrupt came first: nothing is kept.
    Interrupted,
    /// The step had nothing to summarize.
    Nothing,
}

impl Summarized {
    /// The run events that feed it back to the run (none when interrupted).
    pub fn events(self) -> Vec<Event> {
        match self {
            Self::Summary { summary, usage } => usage
                .into_iter()
                .map(Event::Usage)
                .chain([Event::Summarized(*summary)])
                .collect(),
            Self::Interrupted | Self::Nothing => Vec::new(),
        }
    }
}

/// Makes the summary a [`Compress`] step asks for.
///
/// # Errors
/// [`AgentError::Summarization`] when the summarizer returns no text; the
/// summarizer's or a hook's error; [`AgentError::Internal`] when the agent has no
/// context policy.
pub async fn summarize(
    agent: &Agent,
    session: &str,
    step: Compress,
    cancel: &CancellationToken,
) -> Result<Summarized> {
    let Some(budget) = agent.compression() else {
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
        return Ok(Summarized::Nothing);
    };
    let (first, last) = (first.id.clone(), last.id.clone());
    let covered = messages.len();
    let model = policy.summarizer.as_ref().unwrap_or(&agent.runtime.model);
    let mut text = earlier.as_ref().map(|e| e.text.clone());
    let mut usage = Vec::new();
    for chunk in compression::chunks(messages, counter, policy.chunk_tokens(counter)) {
        let request = compression::summary_request(policy, text.as_deref(), &chunk);
        let mut ev = HookEvent::PreSummary {
            request,
            reason: SummaryReason::Context,
        };
        hooks::run(agent, session, iteration, &mut ev).await?;
        let HookEvent::PreSummary { request, .. } = ev else {
            return Err(AgentError::Internal(
                "a hook replaced the summary request event".to_owned(),
            ));
        };
        if cancel.is_cancelled() {
            return Ok(Summarized::Interrupted);
        }
        let done = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Ok(Summarized::Interrupted),
            r = model.complete(request) => r?,
        };
        usage.push(done.usage);
        let mut ev = HookEvent::PostSummary {
            message: done.message,
            reason: SummaryReason::Context,
        };
        hooks::run(agent, session, iteration, &mut ev).await?;
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
    Ok(Summarized::Summary {
        summary: Box::new(summary),
        usage,
    })
}
