//! The model call, the driver's half of a [`Reason`] step: the request is finished
//! (system prompt, tools, structured output) and shown to the `PreReasoning` hooks,
//! the model's stream is read with an interrupt checkpoint per chunk and published as
//! events, and the answer goes through the `PostReasoning` hooks and the tool gates
//! before it is fed back to the run.

use chrono::Utc;
use futures::StreamExt;
use reins_hook::{HookEvent, HookEventKind, SummaryReason};
use reins_message::Msg;
use reins_model::{ChatChunk, MessageAccumulator};

use super::Driver;
use crate::error::{AgentError, Result};
use crate::output::{RunEvent, RunStatus};
use crate::run::{AfterReasoning, Event, Reason};
use crate::state::SessionCore;
use crate::structured::{FINAL_ANSWER_TOOL, OutputMode};

impl Driver {
    /// Performs a [`Reason`] step: the request (with its hooks), the model's stream
    /// (events, the reasoning-chunk hook, interrupt checkpoints), the answer's hooks and
    /// gates, fed back to the run. `Some(status)` when the run ended meanwhile.
    pub(super) async fn reason(
        &self,
        core: &mut SessionCore,
        mut step: Reason,
    ) -> Result<Option<RunStatus>> {
        let (cfg, rt) = (&*self.agent.config, &*self.agent.runtime);
        let (iteration, summary) = (step.iteration, step.summary);
        let output_mode = step.output.as_ref().map(|(mode, _)| *mode);
        if let Some(check) = step.context.take() {
            self.announce_context(check);
        }
        let repairs = std::mem::take(&mut step.repairs);
        if !repairs.is_empty() {
            tracing::warn!(session = %self.session, report = ?repairs, "transcript repaired before the model request");
            self.emit(|| RunEvent::Repaired { report: repairs });
        }
        let request = crate::effects::request(&self.agent, step, &self.client_tools);
        let mut event = if summary {
            HookEvent::PreSummary {
                request,
                reason: SummaryReason::IterationLimit,
            }
        } else {
            HookEvent::PreReasoning { request }
        };
        self.hooks(&mut event, iteration).await?;
        let request = match event {
            HookEvent::PreSummary { request, .. } | HookEvent::PreReasoning { request } => request,
            _ => {
                return Err(AgentError::Internal(
                    "a hook replaced the request event".to_owned(),
                ));
            }
        };

        // Checkpoint: before the model call.
        if self.cancel.is_cancelled() {
            return self.interrupt(core, Vec::new()).await.map(Some);
        }
        self.emit(|| RunEvent::ReasoningStarted { iteration });
        let want_chunks = rt.hooks.wants(HookEventKind::ReasoningChunk);
        let mut answer_index: Option<usize> = None;
        let mut acc = MessageAccumulator::new();
        let stream = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => None,
            s = rt.model.stream(request) => Some(s?),
        };
        let Some(mut stream) = stream else {
            return self.interrupt(core, Vec::new()).await.map(Some);
        };
        loop {
            // Checkpoint: on every streamed chunk.
            let next = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => None,
                c = stream.next() => Some(c),
            };
            let Some(next) = next else {
                // The partially streamed message is dropped (never stored).
                drop(stream);
                return self.interrupt(core, Vec::new()).await.map(Some);
            };
            let Some(chunk) = next else { break };
            let chunk = chunk?;
            self.lock.renew_if_due().await;
            acc.push(&chunk)?;
            match &chunk {
                ChatChunk::TextDelta { text } => {
                    if output_mode == Some(OutputMode::NativeSchema) {
                        self.emit(|| RunEvent::OutputDelta { json: text.clone() });
                    }
                    self.emit(|| RunEvent::TextDelta { text: text.clone() });
                }
                ChatChunk::ToolArgsDelta { index, fragment } if answer_index == Some(*index) => {
                    self.emit(|| RunEvent::OutputDelta {
                        json: fragment.clone(),
                    });
                }
                ChatChunk::ThinkingDelta { text } => {
                    self.emit(|| RunEvent::ThinkingDelta { text: text.clone() });
                }
                ChatChunk::ToolCallStart { id, name, index } => {
                    if output_mode.is_some_and(|m| m != OutputMode::NativeSchema)
                        && name == FINAL_ANSWER_TOOL
                    {
                        answer_index = Some(*index);
                    }
                    self.emit(|| RunEvent::ToolCallStarted {
                        id: id.clone(),
                        name: name.clone(),
                    });
                }
                _ => {}
            }
            if want_chunks {
                let mut ev = HookEvent::ReasoningChunk {
                    chunk,
                    accumulated_text: acc.text().to_owned(),
                };
                self.hooks(&mut ev, iteration).await?;
            }
        }
        let done = acc.finish();
        let mut message = done.message;
        message.name = Some(cfg.name.clone());

        let mut event = if summary {
            HookEvent::PostSummary {
                message,
                reason: SummaryReason::IterationLimit,
            }
        } else {
            HookEvent::PostReasoning { message }
        };
        let control = self.hooks(&mut event, iteration).await?;
        let message = match event {
            HookEvent::PostSummary { message, .. } | HookEvent::PostReasoning { message } => {
                message
            }
            _ => {
                return Err(AgentError::Internal(
                    "a hook replaced the message event".to_owned(),
                ));
            }
        };
        for u in message.tool_uses() {
            self.emit(|| RunEvent::ToolCallReady {
                tool_use: u.clone(),
            });
        }
        let gates: Vec<crate::run::GateDecision> =
            message.tool_uses().map(|u| self.gate(u)).collect();
        let after = AfterReasoning {
            stop: control.is_stopped(),
            goto: control.goto().map(<[Msg]>::to_vec).unwrap_or_default(),
        };
        core.run.apply(Event::Reasoned {
            message,
            gates,
            after,
            usage: done.usage,
            now: Utc::now(),
        })?;
        // Committed by the run loop, before the next step (with the lock's release when
        // the run ends here).
        Ok(None)
    }
}
