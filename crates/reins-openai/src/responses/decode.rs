//! Responses API stream decoding: typed server-sent events in, [`ChatChunk`]s out.

use std::collections::VecDeque;

use futures::Stream;
use reins_message::{Usage, signature};
use reins_model::http::preview;
use reins_model::sse::{SseChunkStream, SseDecoder, SseEvent};
use reins_model::{ChatChunk, FinishReason, ModelError, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::decode::stream_error;

/// The name sealed into the signatures this API's reasoning items are kept under
/// (see [`reins_message::signature`]).
pub const PROVIDER: &str = "openai-responses";

/// One reasoning item of a response, as it is kept in the transcript (sealed in
/// the signature of the message's thinking block) and sent back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct KeptReasoning {
    /// The item's id (`rs_…`).
    pub id: String,
    /// The summary parts, as the API gave them.
    #[serde(default)]
    pub summary: Vec<Value>,
    /// The encrypted reasoning (`include: ["reasoning.encrypted_content"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_content: Option<String>,
    /// How many function calls of the same response came before it (so it is sent
    /// back in its place: a reasoning item must be followed by the item after it).
    #[serde(default)]
    pub at: usize,
}

/// The payload of a Responses API thinking block's signature: every reasoning item
/// of one response, in order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct KeptResponse {
    pub items: Vec<KeptReasoning>,
}

/// Decodes a Responses API stream (`stream: true`): `response.output_item.added` /
/// `.done` for `reasoning`, `function_call` and `message` items,
/// `response.output_text.delta`, `response.refusal.delta`,
/// `response.function_call_arguments.delta`, `response.reasoning_summary_text.delta`
/// and `response.reasoning_text.delta` (as thinking), and the terminal
/// `response.completed`, `response.incomplete` and `response.failed`; `error`
/// events become typed errors. Other events are skipped.
///
/// The reasoning items of a response (with their encrypted content) are kept as one
/// signature, sealed for [`PROVIDER`], sent just before the finish.
#[derive(Debug, Default)]
pub struct ResponsesDecoder {
    /// `output_index` → the tool call index it started.
    calls: Vec<(u64, usize, bool)>,
    reasoning: KeptResponse,
    /// The last reasoning summary part seen: `(output_index, summary_index)`.
    last_summary: Option<(u64, u64)>,
    refused: bool,
    finished: bool,
    seen_event: bool,
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum Event {
    #[serde(rename = "response.output_item.added")]
    ItemAdded { output_index: u64, item: Item },
    #[serde(rename = "response.output_item.done")]
    ItemDone { output_index: u64, item: Item },
    #[serde(rename = "response.output_text.delta")]
    TextDelta { delta: String },
    #[serde(rename = "response.refusal.delta")]
    RefusalDelta { delta: String },
    #[serde(rename = "response.function_call_arguments.delta")]
    ArgsDelta { output_index: u64, delta: String },
    #[serde(rename = "response.reasoning_summary_text.delta")]
    SummaryDelta {
        output_index: u64,
        #[serde(default)]
        summary_index: u64,
        delta: String,
    },
    #[serde(rename = "response.reasoning_text.delta")]
    ReasoningDelta { delta: String },
    #[serde(rename = "response.completed")]
    Completed { response: Body },
    #[serde(rename = "response.incomplete")]
    Incomplete { response: Body },
    #[serde(rename = "response.failed")]
    Failed { response: Body },
    #[serde(rename = "error")]
    Error(Value),
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Item {
    FunctionCall {
        call_id: String,
        name: String,
        #[serde(default)]
        arguments: String,
    },
    Reasoning {
        id: String,
        #[serde(default)]
        summary: Vec<Value>,
        #[serde(default)]
        encrypted_content: Option<String>,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct Body {
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    incomplete_details: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<Details>,
    #[serde(default)]
    output_tokens_details: Option<Details>,
}

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: u64,
    #[serde(default)]
    reasoning_tokens: u64,
}

impl ResponsesDecoder {
    /// A decoder at the start of a response.
    pub fn new() -> Self {
        Self::default()
    }

    fn call(&self, output_index: u64) -> Option<(usize, bool)> {
        self.calls
            .iter()
            .find(|(o, _, _)| *o == output_index)
            .map(|(_, n, args)| (*n, *args))
    }

    fn finish(&mut self, body: Body, reason: FinishReason, out: &mut VecDeque<ChatChunk>) {
        if let Some(u) = body.usage {
            out.push_back(ChatChunk::Usage(Usage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                cache_read_tokens: u.input_tokens_details.map_or(0, |d| d.cached_tokens),
                cache_write_tokens: 0,
                reasoning_tokens: u.output_tokens_details.map_or(0, |d| d.reasoning_tokens),
            }));
        }
        if !self.reasoning.items.is_empty() {
            let kept = std::mem::take(&mut self.reasoning);
            if let Ok(payload) = serde_json::to_string(&kept) {
                out.push_back(ChatChunk::ThinkingSignature {
                    signature: signature::seal(PROVIDER, &payload),
                });
            }
        }
        self.finished = true;
        out.push_back(ChatChunk::Finish { reason });
    }
}

impl SseDecoder for ResponsesDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut VecDeque<ChatChunk>) -> Result<bool> {
        self.seen_event = true;
        let data = event.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(false);
        }
        let parsed: Event = serde_json::from_str(data).map_err(|e| {
            ModelError::MalformedStream(format!(
                "could not parse a Responses API event ({e}): {}",
                preview(data)
            ))
        })?;
        match parsed {
            Event::ItemAdded { output_index, item } => match item {
                Item::FunctionCall {
                    call_id,
                    name,
                    arguments,
                } => {
                    let n = self.calls.len();
                    out.push_back(ChatChunk::ToolCallStart {
                        index: n,
                        id: call_id,
                        name,
                    });
                    let has_args = !arguments.is_empty();
                    if has_args {
                        out.push_back(ChatChunk::ToolArgsDelta {
                            index: n,
                            fragment: arguments,
                        });
                    }
                    self.calls.push((output_index, n, has_args));
                }
                Item::Reasoning { .. } | Item::Other => {}
            },
            Event::ItemDone { output_index, item } => match item {
                Item::FunctionCall {
                    call_id,
                    name,
                    arguments,
                } => match self.call(output_index) {
                    // Arguments that never streamed as deltas arrive whole here.
                    Some((n, false)) if !arguments.is_empty() => {
                        out.push_back(ChatChunk::ToolArgsDelta {
                            index: n,
                            fragment: arguments,
                        });
                        if let Some(c) = self.calls.iter_mut().find(|c| c.0 == output_index) {
                            c.2 = true;
                        }
                    }
                    Some(_) => {}
                    None => {
                        let n = self.calls.len();
                        out.push_back(ChatChunk::ToolCallStart {
                            index: n,
                            id: call_id,
                            name,
                        });
                        if !arguments.is_empty() {
                            out.push_back(ChatChunk::ToolArgsDelta {
                                index: n,
                                fragment: arguments,
                            });
                        }
                        self.calls.push((output_index, n, true));
                    }
                },
                Item::Reasoning {
                    id,
                    summary,
                    encrypted_content,
                } => self.reasoning.items.push(KeptReasoning {
                    id,
                    summary,
                    encrypted_content,
                    at: self.calls.len(),
                }),
                Item::Other => {}
            },
            Event::TextDelta { delta } => out.push_back(ChatChunk::TextDelta { text: delta }),
            Event::RefusalDelta { delta } => {
                self.refused = true;
                out.push_back(ChatChunk::TextDelta { text: delta });
            }
            Event::ArgsDelta {
                output_index,
                delta,
            } => {
                let Some((n, _)) = self.call(output_index) else {
                    return Err(ModelError::MalformedStream(format!(
                        "function call arguments for output item {output_index}, which never started"
                    )));
                };
                if let Some(c) = self.calls.iter_mut().find(|c| c.0 == output_index) {
                    c.2 = true;
                }
                out.push_back(ChatChunk::ToolArgsDelta {
                    index: n,
                    fragment: delta,
                });
            }
            Event::SummaryDelta {
                output_index,
                summary_index,
                delta,
            } => {
                let part = (output_index, summary_index);
                if self.last_summary.is_some_and(|p| p != part) {
                    out.push_back(ChatChunk::ThinkingDelta {
                        text: "\n\n".into(),
                    });
                }
                self.last_summary = Some(part);
                out.push_back(ChatChunk::ThinkingDelta { text: delta });
            }
            Event::ReasoningDelta { delta } => {
                out.push_back(ChatChunk::ThinkingDelta { text: delta });
            }
            Event::Completed { response } => {
                let reason = if self.refused {
                    FinishReason::ContentFilter
                } else if self.calls.is_empty() {
                    FinishReason::Stop
                } else {
                    FinishReason::ToolUse
                };
                self.finish(response, reason, out);
                return Ok(true);
            }
            Event::Incomplete { response } => {
                let why = response
                    .incomplete_details
                    .as_ref()
                    .and_then(|d| d.get("reason"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let reason = match why.as_str() {
                    "max_output_tokens" => FinishReason::Length,
                    "content_filter" => FinishReason::ContentFilter,
                    other => FinishReason::Other(other.to_owned()),
                };
                self.finish(response, reason, out);
                return Ok(true);
            }
            Event::Failed { response } => {
                let error = response.error.unwrap_or(Value::Null);
                return Err(stream_error(&error));
            }
            Event::Error(error) => return Err(stream_error(&error)),
            Event::Other => {}
        }
        Ok(false)
    }

    fn end(&mut self, _out: &mut VecDeque<ChatChunk>) -> Result<()> {
        if self.finished {
            Ok(())
        } else if !self.seen_event {
            Err(ModelError::MalformedStream(
                "the server answered with an empty body (no events, no response.completed)".into(),
            ))
        } else {
            Err(ModelError::MalformedStream(
                "the stream ended before the model finished (no response.completed)".into(),
            ))
        }
    }
}

/// Decodes a Responses API SSE body into a chunk stream (used by
/// [`OpenAiResponses`](crate::OpenAiResponses); public for replaying recorded streams
/// and for fuzzing).
pub fn chunk_stream<S, B>(body: S) -> SseChunkStream<S, ResponsesDecoder>
where
    S: Stream<Item = Result<B>> + Unpin + Send,
    B: AsRef<[u8]>,
{
    SseChunkStream::new(body, ResponsesDecoder::new())
}
