//! Chat Completions stream decoding: server-sent `chat.completion.chunk` events in,
//! [`ChatChunk`]s out.

use std::collections::VecDeque;

use futures::Stream;
use reins_message::Usage;
use reins_model::http::preview;
use reins_model::sse::{SseChunkStream, SseDecoder, SseEvent};
use reins_model::{ChatChunk, FinishReason, ModelError, Result};
use serde::Deserialize;
use serde_json::Value;

/// Decodes an OpenAI-compatible Chat Completions stream.
///
/// Understands `choices[0].delta` (`content`; `reasoning_content` or `reasoning` as
/// thinking; `tool_calls` by index), `finish_reason`, a trailing `usage` chunk
/// (`stream_options.include_usage`), `data: [DONE]`, and `{"error": ...}` events.
/// Tool calls keep the order in which they first appear. A server that reuses index 0
/// for every call of a parallel batch (some local servers do) is recognized by the
/// new id and name after complete arguments.
#[derive(Debug, Default)]
pub struct OpenAiDecoder {
    slots: Vec<Slot>,
    finished: bool,
    /// Whether any event has arrived (an empty body gets its own message).
    seen_event: bool,
}

#[derive(Debug)]
struct Slot {
    wire_index: usize,
    out_index: usize,
    id: String,
    name: String,
    started: bool,
    /// Arguments that arrived before the name (emitted once the call starts).
    buffered: String,
    /// Whether any argument text has been seen (for the index-reuse check).
    args: String,
}

#[derive(Deserialize)]
struct WireChunk {
    #[serde(default)]
    choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    delta: Option<WireDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<CachedDetails>,
    #[serde(default)]
    completion_tokens_details: Option<ReasoningDetails>,
    /// DeepSeek's name for cached prompt tokens.
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CachedDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ReasoningDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl OpenAiDecoder {
    /// A decoder at the start of a response.
    pub fn new() -> Self {
        Self::default()
    }

    fn tool_delta(&mut self, pos: usize, call: WireToolCall, out: &mut VecDeque<ChatChunk>) {
        let wire_index = call.index.unwrap_or(pos);
        let id = call.id.filter(|s| !s.is_empty());
        let (name, args) = match call.function {
            Some(f) => (
                f.name.filter(|s| !s.is_empty()),
                f.arguments.unwrap_or_default(),
            ),
            None => (None, String::new()),
        };
        let current = self.slots.iter().rposition(|s| s.wire_index == wire_index);
        let reuse = current.is_some_and(|i| {
            let s = &self.slots[i];
            matches!(&id, Some(id) if *id != s.id)
                && name.is_some()
                && s.started
                && serde_json::from_str::<serde::de::IgnoredAny>(&s.args).is_ok()
        });
        let i = match current {
            Some(i) if !reuse => i,
            _ => {
                let out_index = self.slots.len();
                self.slots.push(Slot {
                    wire_index,
                    out_index,
                    id: String::new(),
                    name: String::new(),
                    started: false,
                    buffered: String::new(),
                    args: String::new(),
                });
                out_index
            }
        };
        let slot = &mut self.slots[i];
        if !slot.started {
            if let Some(id) = id {
                slot.id = id;
            }
            if let Some(name) = name {
                slot.name = name;
            }
            slot.buffered.push_str(&args);
            if !slot.name.is_empty() {
                start(slot, out);
            }
        } else if !args.is_empty() {
            slot.args.push_str(&args);
            out.push_back(ChatChunk::ToolArgsDelta {
                index: slot.out_index,
                fragment: args,
            });
        }
    }

    fn flush_unstarted(&mut self, out: &mut VecDeque<ChatChunk>) {
        for slot in &mut self.slots {
            if !slot.started {
                start(slot, out);
            }
        }
    }
}

fn start(slot: &mut Slot, out: &mut VecDeque<ChatChunk>) {
    slot.started = true;
    if slot.id.is_empty() {
        slot.id = format!("call_{}", slot.out_index);
    }
    out.push_back(ChatChunk::ToolCallStart {
        index: slot.out_index,
        id: slot.id.clone(),
        name: slot.name.clone(),
    });
    if !slot.buffered.is_empty() {
        let fragment = std::mem::take(&mut slot.buffered);
        slot.args.push_str(&fragment);
        out.push_back(ChatChunk::ToolArgsDelta {
            index: slot.out_index,
            fragment,
        });
    }
}

impl SseDecoder for OpenAiDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut VecDeque<ChatChunk>) -> Result<bool> {
        self.seen_event = true;
        let data = event.data.trim();
        if data == "[DONE]" {
            self.flush_unstarted(out);
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: WireChunk = serde_json::from_str(data).map_err(|e| {
            ModelError::MalformedStream(format!(
                "could not parse a stream event ({e}): {}",
                preview(data)
            ))
        })?;
        if let Some(err) = chunk.error {
            return Err(stream_error(&err));
        }
        for choice in chunk.choices.unwrap_or_default() {
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                if let Some(t) = delta.reasoning_content.or(delta.reasoning) {
                    if !t.is_empty() {
                        out.push_back(ChatChunk::ThinkingDelta { text: t });
                    }
                }
                if let Some(t) = delta.content {
                    if !t.is_empty() {
                        out.push_back(ChatChunk::TextDelta { text: t });
                    }
                }
                for (pos, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
                    self.tool_delta(pos, call, out);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.flush_unstarted(out);
                self.finished = true;
                out.push_back(ChatChunk::Finish {
                    reason: finish_reason(&reason),
                });
            }
        }
        if let Some(u) = chunk.usage {
            out.push_back(ChatChunk::Usage(Usage {
                input_tokens: u.prompt_tokens.unwrap_or(0),
                output_tokens: u.completion_tokens.unwrap_or(0),
                cache_read_tokens: u
                    .prompt_tokens_details
                    .and_then(|d| d.cached_tokens)
                    .or(u.prompt_cache_hit_tokens)
                    .unwrap_or(0),
                cache_write_tokens: 0,
                reasoning_tokens: u
                    .completion_tokens_details
                    .and_then(|d| d.reasoning_tokens)
                    .unwrap_or(0),
            }));
        }
        Ok(false)
    }

    fn end(&mut self, out: &mut VecDeque<ChatChunk>) -> Result<()> {
        if self.finished {
            self.flush_unstarted(out);
            Ok(())
        } else if !self.seen_event {
            Err(ModelError::MalformedStream(
                "the server answered with an empty body (no events, no finish_reason, no \
                 [DONE]); some compatible servers do this for a request option they do not \
                 support"
                    .into(),
            ))
        } else {
            Err(ModelError::MalformedStream(
                "the stream ended before the model finished (no finish_reason and no [DONE])"
                    .into(),
            ))
        }
    }
}

fn finish_reason(s: &str) -> FinishReason {
    match s {
        "stop" | "eos" | "end_turn" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolUse,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// The message, type and code of an OpenAI-style error object (`{"message", "type",
/// "code"}`), or of a bare string.
pub(crate) fn error_parts(err: &Value) -> (String, String, String) {
    let text = |v: Option<&Value>| match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    match err {
        Value::String(s) => (s.clone(), String::new(), String::new()),
        Value::Object(o) => (
            text(o.get("message")),
            text(o.get("type")),
            text(o.get("code")),
        ),
        other => (other.to_string(), String::new(), String::new()),
    }
}

/// Maps an error event inside a stream to a [`ModelError`].
pub(crate) fn stream_error(err: &Value) -> ModelError {
    let (message, kind, code) = error_parts(err);
    let message = if message.is_empty() {
        preview(&err.to_string())
    } else {
        message
    };
    if code.contains("context_length") || reins_model::is_context_overflow(&message) {
        ModelError::ContextTooLong { message }
    } else if kind.contains("rate_limit") || code.contains("rate_limit") {
        ModelError::RateLimited {
            retry_after: None,
            message,
        }
    } else if kind == "invalid_request_error" {
        ModelError::BadRequest {
            status: 400,
            message,
        }
    } else {
        ModelError::Server { status: 0, message }
    }
}

/// Decodes a Chat Completions SSE body into a chunk stream (used by
/// [`OpenAiChat`](crate::OpenAiChat); public for replaying recorded streams and for
/// benchmarks).
pub fn chunk_stream<S, B>(body: S) -> SseChunkStream<S, OpenAiDecoder>
where
    S: Stream<Item = Result<B>> + Unpin + Send,
    B: AsRef<[u8]>,
{
    SseChunkStream::new(body, OpenAiDecoder::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(events: &[&str]) -> (Vec<ChatChunk>, Result<()>) {
        let mut d = OpenAiDecoder::new();
        let mut out = VecDeque::new();
        for e in events {
            let ev = SseEvent {
                data: (*e).to_owned(),
                ..SseEvent::default()
            };
            match d.decode(&ev, &mut out) {
                Err(e) => return (out.into(), Err(e)),
                Ok(true) => return (out.into(), Ok(())),
                Ok(false) => {}
            }
        }
        let end = d.end(&mut out);
        (out.into(), end)
    }

    #[test]
    fn index_reuse_with_new_id_opens_a_new_call() {
        let (chunks, end) = decode(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"x","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"y","arguments":"{\"k\":1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
        ]);
        end.unwrap();
        let starts: Vec<_> = chunks
            .iter()
            .filter_map(|c| match c {
                ChatChunk::ToolCallStart { index, id, .. } => Some((*index, id.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(starts, [(0, "a"), (1, "b")]);
    }

    #[test]
    fn arguments_before_the_name_are_held_back() {
        let (chunks, end) = decode(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":":1}"}}]}}]}"#,
            "[DONE]",
        ]);
        end.unwrap();
        assert_eq!(
            chunks,
            vec![
                ChatChunk::ToolCallStart {
                    index: 0,
                    id: "c".into(),
                    name: "f".into()
                },
                ChatChunk::ToolArgsDelta {
                    index: 0,
                    fragment: "{\"a\":1}".into()
                },
            ]
        );
    }

    #[test]
    fn error_events_map_by_code() {
        let (_, r) =
            decode(&[r#"{"error":{"message":"too long","code":"context_length_exceeded"}}"#]);
        assert!(matches!(r, Err(ModelError::ContextTooLong { .. })));
        let (_, r) = decode(&[r#"{"error":"boom"}"#]);
        assert_eq!(
            r,
            Err(ModelError::Server {
                status: 0,
                message: "boom".into()
            })
        );
    }
}
