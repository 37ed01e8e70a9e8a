//! Messages API stream decoding: server-sent events in, [`ChatChunk`]s out.

use std::collections::VecDeque;

use futures::Stream;
use reins_message::Usage;
use reins_model::http::preview;
use reins_model::sse::{SseChunkStream, SseDecoder, SseEvent};
use reins_model::{ChatChunk, FinishReason, ModelError, Result};
use serde::Deserialize;
use serde_json::Value;

/// Decodes an Anthropic Messages API stream: `message_start` (usage),
/// `content_block_start` / `content_block_delta` / `content_block_stop` for `text`,
/// `thinking` (with `signature_delta`) and `tool_use` (with `input_json_delta`),
/// `message_delta` (stop reason and usage), `message_stop`, `ping`, and `error`.
/// Unknown events and block types are skipped, as the API asks.
#[derive(Debug, Default)]
pub struct AnthropicDecoder {
    /// What each content block index is.
    blocks: Vec<(usize, Block)>,
    tools: usize,
    usage: Usage,
    stopped: bool,
    /// Whether any event has arrived (an empty body gets its own message).
    seen_event: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Block {
    Text,
    Thinking,
    Tool(usize),
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: StartBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: Delta,
    },
    ContentBlockStop {},
    MessageDelta {
        #[serde(default)]
        delta: Option<MessageDeltaBody>,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop {},
    Ping {},
    Error {
        error: Value,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Delta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: String },
    #[serde(rename = "signature_delta")]
    Signature { signature: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl AnthropicDecoder {
    /// A decoder at the start of a response.
    pub fn new() -> Self {
        Self::default()
    }

    fn kind(&self, index: usize) -> Option<Block> {
        self.blocks
            .iter()
            .rev()
            .find(|(i, _)| *i == index)
            .map(|(_, b)| *b)
    }

    fn add_usage(&mut self, u: WireUsage, out: &mut VecDeque<ChatChunk>) {
        let set = |dst: &mut u64, src: Option<u64>| {
            if let Some(v) = src {
                *dst = v;
            }
        };
        set(&mut self.usage.input_tokens, u.input_tokens);
        set(&mut self.usage.output_tokens, u.output_tokens);
        set(
            &mut self.usage.cache_write_tokens,
            u.cache_creation_input_tokens,
        );
        set(&mut self.usage.cache_read_tokens, u.cache_read_input_tokens);
        out.push_back(ChatChunk::Usage(self.usage));
    }
}

impl SseDecoder for AnthropicDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut VecDeque<ChatChunk>) -> Result<bool> {
        self.seen_event = true;
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(false);
        }
        let parsed: Event = serde_json::from_str(data).map_err(|e| {
            ModelError::MalformedStream(format!(
                "could not parse a `{}` event ({e}): {}",
                event.event,
                preview(data)
            ))
        })?;
        match parsed {
            Event::MessageStart { message } => {
                if let Some(u) = message.usage {
                    self.add_usage(u, out);
                }
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => {
                let kind = match content_block {
                    StartBlock::Text { text } => {
                        if !text.is_empty() {
                            out.push_back(ChatChunk::TextDelta { text });
                        }
                        Block::Text
                    }
                    StartBlock::Thinking {
                        thinking,
                        signature,
                    } => {
                        // A new thinking block: an empty delta would be ignored by the
                        // accumulator, so start it with its first text, if any.
                        if !thinking.is_empty() {
                            out.push_back(ChatChunk::ThinkingDelta { text: thinking });
                        }
                        if let Some(signature) = signature.filter(|s| !s.is_empty()) {
                            out.push_back(ChatChunk::ThinkingSignature { signature });
                        }
                        Block::Thinking
                    }
                    StartBlock::ToolUse { id, name, input } => {
                        let n = self.tools;
                        self.tools += 1;
                        out.push_back(ChatChunk::ToolCallStart { index: n, id, name });
                        if matches!(&input, Value::Object(o) if !o.is_empty()) {
                            out.push_back(ChatChunk::ToolArgsDelta {
                                index: n,
                                fragment: input.to_string(),
                            });
                        }
                        Block::Tool(n)
                    }
                    StartBlock::Other => Block::Other,
                };
                self.blocks.push((index, kind));
            }
            Event::ContentBlockDelta { index, delta } => {
                let Some(kind) = self.kind(index) else {
                    return Err(ModelError::MalformedStream(format!(
                        "a delta for content block {index}, which never started"
                    )));
                };
                match (delta, kind) {
                    (Delta::Text { text }, Block::Text) => {
                        out.push_back(ChatChunk::TextDelta { text });
                    }
                    (Delta::Thinking { thinking }, Block::Thinking) => {
                        out.push_back(ChatChunk::ThinkingDelta { text: thinking });
                    }
                    (Delta::Signature { signature }, Block::Thinking) => {
                        out.push_back(ChatChunk::ThinkingSignature { signature });
                    }
                    (Delta::InputJson { partial_json }, Block::Tool(n)) => {
                        out.push_back(ChatChunk::ToolArgsDelta {
                            index: n,
                            fragment: partial_json,
                        });
                    }
                    (_, Block::Other) | (Delta::Other, _) => {}
                    (_, kind) => {
                        return Err(ModelError::MalformedStream(format!(
                            "a delta that does not fit content block {index} ({kind:?})"
                        )));
                    }
                }
            }
            Event::MessageDelta { delta, usage } => {
                if let Some(u) = usage {
                    self.add_usage(u, out);
                }
                if let Some(reason) = delta.and_then(|d| d.stop_reason) {
                    self.stopped = true;
                    out.push_back(ChatChunk::Finish {
                        reason: finish_reason(&reason),
                    });
                }
            }
            Event::MessageStop {} => {
                if !self.stopped {
                    return Err(ModelError::MalformedStream(
                        "message_stop arrived without a stop_reason".into(),
                    ));
                }
                return Ok(true);
            }
            Event::ContentBlockStop {} | Event::Ping {} | Event::Unknown => {}
            Event::Error { error } => return Err(error_from_body(&error, None)),
        }
        Ok(false)
    }

    fn end(&mut self, _out: &mut VecDeque<ChatChunk>) -> Result<()> {
        if self.stopped {
            Ok(())
        } else if !self.seen_event {
            Err(ModelError::MalformedStream(
                "the server answered with an empty body (no events, no message_stop)".into(),
            ))
        } else {
            Err(ModelError::MalformedStream(
                "the stream ended before the model finished (no stop_reason, no message_stop)"
                    .into(),
            ))
        }
    }
}

fn finish_reason(s: &str) -> FinishReason {
    match s {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolUse,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// Maps an Anthropic error object (`{"type": "overloaded_error", "message": ...}`) to
/// a [`ModelError`]; `status` is the HTTP status when the error came as a response.
pub(crate) fn error_from_body(error: &Value, status: Option<u16>) -> ModelError {
    let kind = error.get("type").and_then(Value::as_str).unwrap_or("");
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| preview(&error.to_string()));
    let in_stream = status.is_none();
    let status = status.unwrap_or(match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "timeout_error" => 408,
        _ => 500,
    });
    match ModelError::from_http_status(status, message, None) {
        // Errors inside a stream carry no HTTP status of their own.
        ModelError::Server { message, .. } if in_stream => {
            ModelError::Server { status: 0, message }
        }
        other => other,
    }
}

/// Decodes a Messages API SSE body into a chunk stream (used by
/// [`AnthropicChat`](crate::AnthropicChat); public for replaying recorded streams
/// and for benchmarks).
pub fn chunk_stream<S, B>(body: S) -> SseChunkStream<S, AnthropicDecoder>
where
    S: Stream<Item = Result<B>> + Unpin + Send,
    B: AsRef<[u8]>,
{
    SseChunkStream::new(body, AnthropicDecoder::new())
}
