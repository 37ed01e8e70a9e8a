//! ConverseStream decoding: event-stream frames in (see [`crate::eventstream`]),
//! [`ChatChunk`]s out.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use reins_message::{Usage, signature};
use reins_model::http::{BodyStream, preview};
use reins_model::sse::{SseChunkStream, SseDecoder, SseEvent};
use reins_model::{ChatChunk, FinishReason, ModelError, Result};
use serde::Deserialize;
use serde_json::Value;

use crate::eventstream::{FrameDecoder, Message};

/// The name sealed into the signatures Bedrock's reasoning blocks are kept under
/// (see [`reins_message::signature`]).
pub const PROVIDER: &str = "bedrock";

/// The sealed payload of a redacted reasoning block starts with this (its
/// `redactedContent`, base64, follows); a reasoning text's signature is kept as it
/// came.
pub(crate) const REDACTED: &str = "redacted:";

/// Decodes ConverseStream events (each frame handed over as a server-sent event
/// named after its `:event-type`, or `exception:<type>` / `error:<code>`):
/// text, `toolUse` blocks (arguments streamed as JSON text), `reasoningContent`
/// (text as thinking; its signature, or the redacted content, kept sealed for
/// [`PROVIDER`] on the thinking block it closes), `messageStop`'s `stopReason`,
/// `metadata.usage` and the modelled exceptions.
#[derive(Debug, Default)]
pub struct BedrockDecoder {
    /// Block index → tool-call index, for `toolUse` blocks.
    tools: HashMap<u64, usize>,
    /// Tool calls whose block has not stopped.
    open_tools: Vec<u64>,
    /// Block index → the signature (or redacted content) streamed so far.
    reasoning: HashMap<u64, String>,
    stop: Option<String>,
    seen_event: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStart {
    #[serde(default)]
    content_block_index: u64,
    #[serde(default)]
    start: Option<StartKind>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartKind {
    #[serde(default)]
    tool_use: Option<ToolStart>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolStart {
    tool_use_id: String,
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockDelta {
    #[serde(default)]
    content_block_index: u64,
    delta: Delta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Delta {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_use: Option<ToolDelta>,
    #[serde(default)]
    reasoning_content: Option<ReasoningDelta>,
}

#[derive(Deserialize)]
struct ToolDelta {
    #[serde(default)]
    input: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReasoningDelta {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    redacted_content: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStop {
    #[serde(default)]
    content_block_index: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageStop {
    stop_reason: String,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: u64,
    #[serde(default)]
    cache_write_input_tokens: u64,
}

fn parse<T: serde::de::DeserializeOwned>(event: &SseEvent) -> Result<T> {
    serde_json::from_str(event.data.trim()).map_err(|e| {
        ModelError::MalformedStream(format!(
            "could not parse a `{}` event ({e}): {}",
            event.event,
            preview(&event.data)
        ))
    })
}

impl BedrockDecoder {
    /// A decoder at the start of a response.
    pub fn new() -> Self {
        Self::default()
    }

    fn close_reasoning(&mut self, block: u64, out: &mut VecDeque<ChatChunk>) {
        if let Some(sig) = self.reasoning.remove(&block) {
            if !sig.is_empty() {
                out.push_back(ChatChunk::ThinkingSignature {
                    signature: signature::seal(PROVIDER, &sig),
                });
            }
        }
    }
}

impl SseDecoder for BedrockDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut VecDeque<ChatChunk>) -> Result<bool> {
        self.seen_event = true;
        let name = event.event.as_str();
        if let Some(kind) = name
            .strip_prefix("exception:")
            .or_else(|| name.strip_prefix("error:"))
        {
            let message = serde_json::from_str::<Value>(event.data.trim())
                .ok()
                .and_then(|v| {
                    v.get("message")
                        .or_else(|| v.get("Message"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .unwrap_or_else(|| preview(event.data.trim()));
            return Err(exception(kind, message, true));
        }
        match name {
            "messageStart" => {}
            "contentBlockStart" => {
                let start: BlockStart = parse(event)?;
                if let Some(tool) = start.start.and_then(|s| s.tool_use) {
                    let index = self.tools.len();
                    self.tools.insert(start.content_block_index, index);
                    self.open_tools.push(start.content_block_index);
                    out.push_back(ChatChunk::ToolCallStart {
                        index,
                        id: tool.tool_use_id,
                        name: tool.name,
                    });
                }
            }
            "contentBlockDelta" => {
                let d: BlockDelta = parse(event)?;
                let block = d.content_block_index;
                if let Some(text) = d.delta.text.filter(|t| !t.is_empty()) {
                    out.push_back(ChatChunk::TextDelta { text });
                }
                if let Some(tool) = d.delta.tool_use {
                    let Some(&index) = self.tools.get(&block) else {
                        return Err(ModelError::MalformedStream(format!(
                            "tool input for content block {block}, which began no tool call"
                        )));
                    };
                    out.push_back(ChatChunk::ToolArgsDelta {
                        index,
                        fragment: tool.input,
                    });
                }
                if let Some(r) = d.delta.reasoning_content {
                    if let Some(text) = r.text.filter(|t| !t.is_empty()) {
                        out.push_back(ChatChunk::ThinkingDelta { text });
                    }
                    if let Some(sig) = r.signature {
                        self.reasoning.entry(block).or_default().push_str(&sig);
                    }
                    if let Some(data) = r.redacted_content {
                        let kept = self.reasoning.entry(block).or_default();
                        if kept.is_empty() {
                            kept.push_str(REDACTED);
                        }
                        kept.push_str(&data);
                    }
                }
            }
            "contentBlockStop" => {
                let stop: BlockStop = parse(event)?;
                self.open_tools.retain(|b| *b != stop.content_block_index);
                self.close_reasoning(stop.content_block_index, out);
            }
            "messageStop" => {
                let stop: MessageStop = parse(event)?;
                self.stop = Some(stop.stop_reason);
            }
            "metadata" => {
                let m: Metadata = parse(event)?;
                if let Some(u) = m.usage {
                    out.push_back(ChatChunk::Usage(Usage {
                        input_tokens: u.input_tokens,
                        output_tokens: u.output_tokens,
                        cache_read_tokens: u.cache_read_input_tokens,
                        cache_write_tokens: u.cache_write_input_tokens,
                        reasoning_tokens: 0,
                    }));
                }
            }
            other => {
                return Err(ModelError::MalformedStream(format!(
                    "unknown ConverseStream event `{other}`: {}",
                    preview(&event.data)
                )));
            }
        }
        Ok(false)
    }

    fn end(&mut self, out: &mut VecDeque<ChatChunk>) -> Result<()> {
        if !self.open_tools.is_empty() && self.stop.is_none() {
            return Err(ModelError::MalformedStream(
                "the stream ended before the tool call finished (no contentBlockStop)".into(),
            ));
        }
        let Some(reason) = self.stop.take() else {
            return Err(ModelError::MalformedStream(if self.seen_event {
                "the stream ended before the model finished (no messageStop)".into()
            } else {
                "the server answered with an empty body (no events, no messageStop)".into()
            }));
        };
        let mut blocks: Vec<u64> = self.reasoning.keys().copied().collect();
        blocks.sort_unstable();
        for b in blocks {
            self.close_reasoning(b, out);
        }
        let reason = match reason.as_str() {
            "end_turn" | "stop_sequence" => FinishReason::Stop,
            "tool_use" => FinishReason::ToolUse,
            "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
            "guardrail_intervened" | "content_filtered" => FinishReason::ContentFilter,
            _ => FinishReason::Other(reason),
        };
        out.push_back(ChatChunk::Finish { reason });
        Ok(())
    }
}

/// A Bedrock exception (`throttlingException`, `ThrottlingException`, …) as a
/// [`ModelError`]; `in_stream` when it came inside a 200 response.
pub(crate) fn exception(kind: &str, message: String, in_stream: bool) -> ModelError {
    let k = kind.to_ascii_lowercase();
    let status = match k.trim_end_matches("exception") {
        "throttling" | "servicequotaexceeded" => 429,
        "validation" => 400,
        "accessdenied" | "unrecognizedclient" | "expiredtoken" => 403,
        "resourcenotfound" => 404,
        "modeltimeout" => 408,
        "serviceunavailable" | "modelnotready" => 503,
        "internalserver" => 500,
        "modelerror" => 424,
        _ => 0,
    };
    match ModelError::from_http_status(status, message, None) {
        ModelError::Server { message, .. } if in_stream => {
            ModelError::Server { status: 0, message }
        }
        ModelError::BadRequest { status: 0, message } => ModelError::Server { status: 0, message },
        other => other,
    }
}

/// Turns an `application/vnd.amazon.eventstream` body into the server-sent events
/// [`BedrockDecoder`] reads: one event per frame, named after its `:event-type`
/// (`exception:<type>` and `error:<code>` for the other message types), its JSON
/// payload as the data. A frame that fails its CRC checks, or whose payload is not
/// UTF-8, ends the stream with [`ModelError::MalformedStream`].
pub fn frames_as_events(body: BodyStream) -> BodyStream {
    let mut frames = FrameDecoder::new();
    let mut failed = false;
    body.filter_map(move |item| {
        let result = if failed {
            None
        } else {
            Some(match item {
                Ok(bytes) => {
                    let mut out = VecDeque::new();
                    match frames.push(&bytes, &mut out) {
                        Ok(()) => as_events(out),
                        Err(e) => Err(ModelError::MalformedStream(e.0)),
                    }
                }
                Err(e) => Err(e),
            })
        };
        if matches!(result, Some(Err(_))) {
            failed = true;
        }
        futures::future::ready(result)
    })
    .boxed()
}

fn as_events(messages: VecDeque<Message>) -> Result<Bytes> {
    let mut text = String::new();
    for m in messages {
        let name = match m.header_str(":message-type").unwrap_or("event") {
            "exception" => format!(
                "exception:{}",
                m.header_str(":exception-type").unwrap_or("unknown")
            ),
            "error" => {
                let code = m.header_str(":error-code").unwrap_or("unknown").to_owned();
                let message = m.header_str(":error-message").unwrap_or("").to_owned();
                text.push_str(&format!(
                    "event: error:{code}\ndata: {}\n\n",
                    serde_json::json!({ "message": message })
                ));
                continue;
            }
            _ => m.header_str(":event-type").unwrap_or("unknown").to_owned(),
        };
        let payload = std::str::from_utf8(&m.payload).map_err(|_| {
            ModelError::MalformedStream(format!("the payload of a `{name}` frame is not UTF-8"))
        })?;
        // JSON holds raw line breaks only as whitespace: flattening them keeps the
        // payload one `data:` line.
        let payload = payload.replace(['\r', '\n'], " ");
        let name = name.replace(['\r', '\n'], " ");
        text.push_str(&format!("event: {name}\ndata: {payload}\n\n"));
    }
    Ok(Bytes::from(text))
}

/// Decodes a ConverseStream body (binary event stream) into a chunk stream (public
/// for replaying recorded streams and for fuzzing).
pub fn chunk_stream<S>(body: S) -> SseChunkStream<BodyStream, BedrockDecoder>
where
    S: Stream<Item = Result<Bytes>> + Send + 'static,
{
    SseChunkStream::new(frames_as_events(body.boxed()), BedrockDecoder::new())
}
