//! The model call of a [`Reason`](crate::run::Reason) step, written once: the request
//! shown to the `PreReasoning` hooks, the model's stream turned into one message
//! (events per chunk, the `ReasoningChunk` hooks, an interrupt checkpoint per chunk),
//! and the message shown to the `PostReasoning` hooks. A driver that journals its steps
//! journals what [`reason`] returns, as one step.

use futures::StreamExt;
use reins_hook::{HookEvent, HookEventKind};
use reins_message::{Msg, Usage};
use reins_model::{ChatChunk, ChatRequest, MessageAccumulator};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Witness, hooks};
use crate::agent::Agent;
use crate::error::Result;
use crate::output::RunEvent;
use crate::structured::{FINAL_ANSWER_TOOL, OutputMode};
use crate::telemetry;

/// What a model call came to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[allow(
    clippy::large_enum_variant,
    reason = "one value per model call, moved once: boxing would only add an allocation"
)]
pub enum Reasoning {
    /// The model's message, as the `PostReasoning` hooks left it.
    Reasoned {
        /// The message (named after the agent).
        message: Msg,
        /// The tokens the call used.
        usage: Usage,
        /// What the `PostReasoning` hooks decided (`stop`, `goto`).
        verdict: hooks::Verdict,
        /// What each of the message's tool uses' policy says, in order (the toolkit's
        /// gate, or external for a tool of the caller's).
        gates: Vec<reins_tool::GateDecision>,
    },
    /// An interrupt came first: nothing of the call is kept.
    Interrupted,
}

/// The model request to send, and how to read its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCall {
    /// The reasoning step (iteration) it is made for.
    pub iteration: u32,
    /// The request, as the run finished it.
    pub request: ChatRequest,
    /// The summary at the iteration limit (`PreSummary`/`PostSummary` hooks).
    pub summary: bool,
    /// How a structured answer is asked for, when one is: its JSON is reported as
    /// [`RunEvent::OutputDelta`] as it streams.
    pub output: Option<OutputMode>,
    /// The caller's own tools the request offers: their calls are external.
    pub external: Vec<String>,
}

impl From<crate::run::Reason> for ModelCall {
    fn from(step: crate::run::Reason) -> Self {
        Self {
            iteration: step.iteration,
            request: step.request,
            summary: step.summary,
            output: step.output,
            external: step.external,
        }
    }
}

/// Performs a model call: the `PreReasoning` hooks on the request, then (unless
/// `cancel` fired) [`RunEvent::ReasoningStarted`] and the model's stream, each chunk
/// reported ([`RunEvent::TextDelta`], [`RunEvent::OutputDelta`],
/// [`RunEvent::ThinkingDelta`], [`RunEvent::ToolCallStarted`]) and shown to the
/// `ReasoningChunk` hooks, then the `PostReasoning` hooks on the message and
/// [`RunEvent::ToolCallReady`] for each of its calls. An interrupt at any checkpoint
/// drops the partial message.
///
/// # Errors
/// The model's, a hook's.
pub async fn reason(
    agent: &Agent,
    session: &str,
    call: ModelCall,
    cancel: &CancellationToken,
    witness: &dyn Witness,
) -> Result<Reasoning> {
    let ModelCall {
        iteration,
        request,
        summary,
        output,
        external,
    } = call;
    let request = hooks::pre_reasoning(agent, session, iteration, request, summary).await?;
    // Checkpoint: before the model call.
    if cancel.is_cancelled() {
        return Ok(Reasoning::Interrupted);
    }
    witness.emit(|| RunEvent::ReasoningStarted { iteration });
    let id = telemetry::ModelId::of(agent.runtime.model.as_ref());
    let model = id.model;
    let span = telemetry::chat(id);
    if telemetry::capture_content() {
        span.record(
            "gen_ai.input.messages",
            serde_json::to_string(&request.messages).unwrap_or_default(),
        );
    }
    let started = std::time::Instant::now();
    let streamed = stream(agent, session, iteration, request, output, cancel, witness)
        .instrument(span.clone())
        .await;
    let elapsed = started.elapsed();
    let Some((message, usage)) = (match streamed {
        Ok(Some((message, usage, finish))) => {
            telemetry::chat_ended(&span, model, elapsed, Some(&usage), finish.as_ref());
            if telemetry::capture_content() {
                span.record(
                    "gen_ai.output.messages",
                    serde_json::to_string(&[&message]).unwrap_or_default(),
                );
            }
            Some((message, usage))
        }
        Ok(None) => {
            telemetry::chat_ended(&span, model, elapsed, None, None);
            None
        }
        Err(e) => {
            span.record("otel.status_code", "error");
            span.record("error.type", telemetry::error_type(&e));
            telemetry::chat_ended(&span, model, elapsed, None, None);
            return Err(e);
        }
    }) else {
        return Ok(Reasoning::Interrupted);
    };
    let (message, verdict) =
        hooks::post_reasoning(agent, session, iteration, message, summary).await?;
    for u in message.tool_uses() {
        witness.emit(|| RunEvent::ToolCallReady {
            tool_use: u.clone(),
        });
    }
    let toolkit = &agent.runtime.toolkit;
    let gates = message
        .tool_uses()
        .map(|u| {
            if external.contains(&u.name) {
                reins_tool::GateDecision::External
            } else {
                toolkit.gate(u)
            }
        })
        .collect();
    Ok(Reasoning::Reasoned {
        message,
        usage,
        verdict,
        gates,
    })
}

/// Streams the model into one message (`None`: interrupted).
async fn stream(
    agent: &Agent,
    session: &str,
    iteration: u32,
    request: ChatRequest,
    output: Option<OutputMode>,
    cancel: &CancellationToken,
    witness: &dyn Witness,
) -> Result<Option<(Msg, Usage, Option<reins_model::FinishReason>)>> {
    let model = &agent.runtime.model;
    let stream = tokio::select! {
        biased;
        _ = cancel.cancelled() => None,
        s = model.stream(request) => Some(s?),
    };
    let Some(mut stream) = stream else {
        return Ok(None);
    };
    let want_chunks = hooks::wants(agent, HookEventKind::ReasoningChunk);
    let mut answer_index: Option<usize> = None;
    let mut acc = MessageAccumulator::new();
    loop {
        // Checkpoint: on every streamed chunk.
        let next = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Ok(None),
            c = stream.next() => c,
        };
        let Some(chunk) = next else { break };
        let chunk = chunk?;
        if witness.wants_progress() {
            witness.progress().await;
        }
        acc.push(&chunk)?;
        report(&chunk, output, &mut answer_index, witness);
        if want_chunks {
            let mut ev = HookEvent::ReasoningChunk {
                chunk,
                accumulated_text: acc.text().to_owned(),
            };
            hooks::run(agent, session, iteration, &mut ev).await?;
        }
    }
    let done = acc.finish();
    let mut message = done.message;
    message.name = Some(agent.config.name.clone());
    Ok(Some((message, done.usage, done.finish_reason)))
}

/// The run events of one streamed chunk.
fn report(
    chunk: &ChatChunk,
    output: Option<OutputMode>,
    answer_index: &mut Option<usize>,
    witness: &dyn Witness,
) {
    match chunk {
        ChatChunk::TextDelta { text } => {
            if output == Some(OutputMode::NativeSchema) {
                witness.emit(|| RunEvent::OutputDelta { json: text.clone() });
            }
            witness.emit(|| RunEvent::TextDelta { text: text.clone() });
        }
        ChatChunk::ToolArgsDelta { index, fragment } if *answer_index == Some(*index) => {
            witness.emit(|| RunEvent::OutputDelta {
                json: fragment.clone(),
            });
        }
        ChatChunk::ThinkingDelta { text } => {
            witness.emit(|| RunEvent::ThinkingDelta { text: text.clone() });
        }
        ChatChunk::ToolCallStart { id, name, index } => {
            if output.is_some_and(|m| m != OutputMode::NativeSchema) && name == FINAL_ANSWER_TOOL {
                *answer_index = Some(*index);
            }
            witness.emit(|| RunEvent::ToolCallStarted {
                id: id.clone(),
                name: name.clone(),
            });
        }
        _ => {}
    }
}
