//! `streamGenerateContent?alt=sse` decoding: one `GenerateContentResponse` per
//! event in, [`ChatChunk`]s out.

use std::collections::VecDeque;

use futures::Stream;
use reins_message::{Usage, new_id, signature};
use reins_model::http::preview;
use reins_model::sse::{SseChunkStream, SseDecoder, SseEvent};
use reins_model::{ChatChunk, FinishReason, ModelError, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The name sealed into the signatures this API's thought signatures are kept
/// under (see [`reins_message::signature`]).
pub const PROVIDER: &str = "gemini";

/// The prefix of the ids reins gives function calls that came without one (they
/// are not sent back as ids).
pub(crate) const LOCAL_ID_PREFIX: &str = "gemini_call_";

/// The thought signatures of one response, as they are kept in the transcript
/// (sealed in the signature of the message's thinking block): on which function
/// call (by its position in the message) and whether on the text.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct KeptSignatures {
    /// `(call index, signature)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<(usize, String)>,
    /// The signature on the (last) text part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// Decodes a Gemini `streamGenerateContent?alt=sse` stream: the first candidate's
/// parts (`text`, `thought` text as thinking, `functionCall` — whole, with its
/// `args` object — and each part's `thoughtSignature`), `finishReason`,
/// `usageMetadata`, `promptFeedback.blockReason` (a
/// [`ModelError::Blocked`]) and `error` objects.
///
/// The thought signatures of the response are kept as one signature, sealed for
/// [`PROVIDER`], sent with the finish when the stream ends.
#[derive(Debug, Default)]
pub struct GeminiDecoder {
    calls: usize,
    kept: KeptSignatures,
    finish: Option<String>,
    usage: Option<Usage>,
    seen_event: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    #[serde(default)]
    candidates: Vec<Candidate>,
    #[serde(default)]
    usage_metadata: Option<WireUsage>,
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    finish_message: Option<String>,
}

#[derive(Deserialize)]
struct Content {
    #[serde(default)]
    parts: Vec<Part>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default)]
    thought_signature: Option<String>,
    #[serde(default)]
    function_call: Option<FunctionCall>,
}

#[derive(Deserialize)]
struct FunctionCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
    #[serde(default)]
    block_reason_message: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    #[serde(default)]
    prompt_token_count: u64,
    #[serde(default)]
    candidates_token_count: u64,
    #[serde(default)]
    thoughts_token_count: u64,
    #[serde(default)]
    cached_content_token_count: u64,
}

impl GeminiDecoder {
    /// A decoder at the start of a response.
    pub fn new() -> Self {
        Self::default()
    }
}

impl SseDecoder for GeminiDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut VecDeque<ChatChunk>) -> Result<bool> {
        self.seen_event = true;
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(false);
        }
        let parsed: Response = serde_json::from_str(data).map_err(|e| {
            ModelError::MalformedStream(format!(
                "could not parse a GenerateContentResponse ({e}): {}",
                preview(data)
            ))
        })?;
        if let Some(error) = parsed.error {
            return Err(error_from_body(&error, None));
        }
        if let Some(u) = parsed.usage_metadata {
            let usage = Usage {
                input_tokens: u.prompt_token_count,
                output_tokens: u.candidates_token_count + u.thoughts_token_count,
                cache_read_tokens: u.cached_content_token_count,
                cache_write_tokens: 0,
                reasoning_tokens: u.thoughts_token_count,
            };
            self.usage = Some(usage);
            out.push_back(ChatChunk::Usage(usage));
        }
        let Some(candidate) = parsed.candidates.into_iter().next() else {
            if let Some(reason) = parsed.prompt_feedback.and_then(|f| {
                f.block_reason
                    .map(|r| (r, f.block_reason_message.unwrap_or_default()))
            }) {
                let (reason, message) = reason;
                let message = if message.is_empty() {
                    "the prompt was blocked and no answer was given".to_owned()
                } else {
                    message
                };
                return Err(ModelError::Blocked { reason, message });
            }
            return Ok(false);
        };
        for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
            if let Some(call) = part.function_call {
                let index = self.calls;
                self.calls += 1;
                let id = call
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| format!("{LOCAL_ID_PREFIX}{}", new_id()));
                out.push_back(ChatChunk::ToolCallStart {
                    index,
                    id,
                    name: call.name,
                });
                let fragment = match call.args {
                    None | Some(Value::Null) => "{}".to_owned(),
                    // Some gateways send the arguments as a JSON-encoded string.
                    Some(Value::String(s)) => s,
                    Some(v) => v.to_string(),
                };
                out.push_back(ChatChunk::ToolArgsDelta { index, fragment });
                if let Some(sig) = part.thought_signature.filter(|s| !s.is_empty()) {
                    self.kept.calls.push((index, sig));
                }
                continue;
            }
            let thought = part.thought == Some(true);
            if let Some(text) = part.text.filter(|t| !t.is_empty()) {
                if thought {
                    out.push_back(ChatChunk::ThinkingDelta { text });
                } else {
                    out.push_back(ChatChunk::TextDelta { text });
                }
            }
            if let Some(sig) = part.thought_signature.filter(|s| !s.is_empty()) {
                if !thought {
                    self.kept.text = Some(sig);
                }
            }
        }
        if let Some(reason) = candidate.finish_reason {
            if reason != "FINISH_REASON_UNSPECIFIED" {
                if reason == "MALFORMED_FUNCTION_CALL" || reason == "UNEXPECTED_TOOL_CALL" {
                    return Err(ModelError::MalformedStream(format!(
                        "the model ended with {reason}: {}",
                        candidate.finish_message.unwrap_or_default()
                    )));
                }
                self.finish = Some(reason);
            }
        }
        Ok(false)
    }

    fn end(&mut self, out: &mut VecDeque<ChatChunk>) -> Result<()> {
        let Some(reason) = self.finish.take() else {
            return Err(ModelError::MalformedStream(if self.seen_event {
                "the stream ended before the model finished (no finishReason)".into()
            } else {
                "the server answered with an empty body (no events, no finishReason)".into()
            }));
        };
        let kept = std::mem::take(&mut self.kept);
        if kept != KeptSignatures::default() {
            if let Ok(payload) = serde_json::to_string(&kept) {
                out.push_back(ChatChunk::ThinkingSignature {
                    signature: signature::seal(PROVIDER, &payload),
                });
            }
        }
        let reason = match reason.as_str() {
            "STOP" if self.calls > 0 => FinishReason::ToolUse,
            "STOP" => FinishReason::Stop,
            "MAX_TOKENS" => FinishReason::Length,
            "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII"
            | "IMAGE_SAFETY" => FinishReason::ContentFilter,
            _ => FinishReason::Other(reason),
        };
        out.push_back(ChatChunk::Finish { reason });
        Ok(())
    }
}

/// A Google API error object (`{"code": 429, "message": ..., "status":
/// "RESOURCE_EXHAUSTED"}`) as a [`ModelError`]; `status` is the HTTP status when
/// the error came as a response.
pub(crate) fn error_from_body(error: &Value, status: Option<u16>) -> ModelError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| preview(&error.to_string()));
    let code = error
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok());
    let named = match error.get("status").and_then(Value::as_str).unwrap_or("") {
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" => Some(400),
        "UNAUTHENTICATED" => Some(401),
        "PERMISSION_DENIED" => Some(403),
        "NOT_FOUND" => Some(404),
        "RESOURCE_EXHAUSTED" => Some(429),
        "DEADLINE_EXCEEDED" => Some(504),
        "UNAVAILABLE" => Some(503),
        "INTERNAL" => Some(500),
        _ => None,
    };
    let in_stream = status.is_none();
    let status = status.or(code).or(named).unwrap_or(500);
    match ModelError::from_http_status(status, message, None) {
        ModelError::Server { message, .. } if in_stream => {
            ModelError::Server { status: 0, message }
        }
        other => other,
    }
}

/// Decodes a `streamGenerateContent?alt=sse` body into a chunk stream (used by
/// [`GeminiChat`](crate::GeminiChat); public for replaying recorded streams and
/// for fuzzing).
pub fn chunk_stream<S, B>(body: S) -> SseChunkStream<S, GeminiDecoder>
where
    S: Stream<Item = Result<B>> + Unpin + Send,
    B: AsRef<[u8]>,
{
    SseChunkStream::new(body, GeminiDecoder::new())
}
