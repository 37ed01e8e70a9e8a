//! [`ScriptedModel`]: a deterministic in-process [`ChatModel`] for tests, benchmarks
//! and demos (feature `testing`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use reins_message::Usage;
use serde_json::Value;

use crate::{ChatChunk, ChatModel, ChatRequest, ChatStream, FinishReason, ModelError, Result};

type Rule = Arc<dyn Fn(&ChatRequest) -> Option<ScriptedResponse> + Send + Sync>;

/// A model that plays a script of [`ScriptedResponse`]s, streamed in chunks.
///
/// Rules added with [`with_rule`](Self::with_rule) are asked first, in the order they
/// were added; the first `Some` is played. Otherwise the next scripted response is
/// played; when none is left the call fails with [`ModelError::InvalidRequest`].
/// Clones share the script, the counters and the recorded requests.
///
/// ```
/// use reins_model::{ChatModel, ChatRequest, ScriptedModel, ScriptedResponse};
/// use reins_message::Msg;
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> reins_model::Result<()> {
/// let model = ScriptedModel::new([
///     ScriptedResponse::tool_call("delete_file", json!({ "path": "temp.txt" })),
///     ScriptedResponse::text("Deleted."),
/// ]);
/// let first = model.complete(ChatRequest::new(vec![Msg::user("delete temp.txt")])).await?;
/// assert_eq!(first.message.tool_uses().next().unwrap().id, "call_1");
/// let second = model.complete(ChatRequest::new(vec![Msg::user("and?")])).await?;
/// assert_eq!(second.message.text(), "Deleted.");
/// assert_eq!(model.calls(), 2);
/// assert!(model.complete(ChatRequest::default()).await.is_err()); // script exhausted
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ScriptedModel {
    name: Arc<str>,
    rules: Arc<Vec<Rule>>,
    latency: Duration,
    chunk_size: usize,
    record: bool,
    caps: crate::ModelCapabilities,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    script: Mutex<VecDeque<ScriptedResponse>>,
    requests: Mutex<Vec<ChatRequest>>,
    calls: AtomicUsize,
    played: AtomicUsize,
    next_call_id: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("name", &self.name)
            .field("rules", &self.rules.len())
            .field("left", &lock(&self.state.script).len())
            .field("calls", &self.calls())
            .finish()
    }
}

impl ScriptedModel {
    /// A model that plays `responses` in order.
    pub fn new(responses: impl IntoIterator<Item = ScriptedResponse>) -> Self {
        Self {
            name: Arc::from("scripted"),
            rules: Arc::new(Vec::new()),
            latency: Duration::ZERO,
            chunk_size: 16,
            caps: crate::ModelCapabilities::default(),
            record: true,
            state: Arc::new(State {
                script: Mutex::new(responses.into_iter().collect()),
                ..State::default()
            }),
        }
    }

    /// A model that answers every request with `f(request)`.
    pub fn from_fn(f: impl Fn(&ChatRequest) -> ScriptedResponse + Send + Sync + 'static) -> Self {
        Self::new([]).with_rule(move |r| Some(f(r)))
    }

    /// Adds a rule, asked before the script: the first rule that returns `Some`
    /// decides the response.
    #[must_use]
    pub fn with_rule(
        mut self,
        f: impl Fn(&ChatRequest) -> Option<ScriptedResponse> + Send + Sync + 'static,
    ) -> Self {
        Arc::make_mut(&mut self.rules).push(Arc::new(f));
        self
    }

    /// Sets the name [`ChatModel::model_name`] reports (default `scripted`).
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Arc::from(name.into());
        self
    }

    /// Waits this long before each response's first chunk (a response's own latency
    /// wins).
    #[must_use]
    pub fn with_latency(mut self, d: Duration) -> Self {
        self.latency = d;
        self
    }

    /// Splits text, thinking and arguments into chunks of this many characters
    /// (default 16; 0 is treated as 1).
    #[must_use]
    pub fn with_chunk_size(mut self, chars: usize) -> Self {
        self.chunk_size = chars.max(1);
        self
    }

    /// Whether to keep every request for [`requests`](Self::requests) (default
    /// true). Benchmarks that run long conversations may turn it off.
    #[must_use]
    pub fn with_recording(mut self, record: bool) -> Self {
        self.record = record;
        self
    }

    /// Reports these capabilities (default: [`ModelCapabilities::default`](crate::ModelCapabilities)),
    /// to exercise what a caller does with each kind of provider.
    #[must_use]
    pub fn with_capabilities(mut self, caps: crate::ModelCapabilities) -> Self {
        self.caps = caps;
        self
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<ChatRequest> {
        lock(&self.state.requests).clone()
    }

    /// The most recent request, if any.
    pub fn last_request(&self) -> Option<ChatRequest> {
        lock(&self.state.requests).last().cloned()
    }

    /// How many times [`ChatModel::stream`] was called.
    pub fn calls(&self) -> usize {
        self.state.calls.load(Ordering::Relaxed)
    }

    /// How many scripted responses are left (rules not counted).
    pub fn remaining(&self) -> usize {
        lock(&self.state.script).len()
    }

    fn next_response(&self, request: &ChatRequest) -> Result<ScriptedResponse> {
        let chosen = self
            .rules
            .iter()
            .find_map(|rule| rule(request))
            .or_else(|| lock(&self.state.script).pop_front());
        match chosen {
            Some(r) => {
                self.state.played.fetch_add(1, Ordering::Relaxed);
                Ok(r)
            }
            None => Err(ModelError::InvalidRequest(format!(
                "scripted model has no response left ({} played)",
                self.state.played.load(Ordering::Relaxed)
            ))),
        }
    }

    fn chunks(&self, resp: ScriptedResponse) -> Vec<Result<ChatChunk>> {
        let mut out = Vec::with_capacity(resp.chunk_estimate(self.chunk_size));
        let mut tool_index = 0;
        let mut produced_chars = 0usize;
        for part in resp.parts {
            match part {
                Part::Text(t) => {
                    produced_chars += t.len();
                    split(&t, self.chunk_size, |s| {
                        out.push(Ok(ChatChunk::TextDelta { text: s.to_owned() }));
                    });
                }
                Part::Thinking { text, signature } => {
                    produced_chars += text.len();
                    split(&text, self.chunk_size, |s| {
                        out.push(Ok(ChatChunk::ThinkingDelta { text: s.to_owned() }));
                    });
                    if let Some(signature) = signature {
                        out.push(Ok(ChatChunk::ThinkingSignature { signature }));
                    }
                }
                Part::ToolCall { id, name, args } => {
                    produced_chars += args.len();
                    let id = id.unwrap_or_else(|| {
                        let n = self.state.next_call_id.fetch_add(1, Ordering::Relaxed) + 1;
                        format!("call_{n}")
                    });
                    out.push(Ok(ChatChunk::ToolCallStart {
                        index: tool_index,
                        id,
                        name,
                    }));
                    split(&args, self.chunk_size, |s| {
                        out.push(Ok(ChatChunk::ToolArgsDelta {
                            index: tool_index,
                            fragment: s.to_owned(),
                        }));
                    });
                    tool_index += 1;
                }
            }
        }
        let usage = resp.usage.unwrap_or(Usage {
            output_tokens: produced_chars.div_ceil(4) as u64,
            ..Usage::default()
        });
        out.push(Ok(ChatChunk::Usage(usage)));
        out.push(Ok(ChatChunk::Finish {
            reason: if tool_index > 0 {
                FinishReason::ToolUse
            } else {
                FinishReason::Stop
            },
        }));
        if let Some((n, e)) = resp.fail_after {
            out.truncate(n);
            out.push(Err(e));
        }
        out
    }
}

/// Calls `f` with consecutive pieces of `s`, each `n` characters long (the last may
/// be shorter); nothing for an empty string.
fn split(s: &str, n: usize, mut f: impl FnMut(&str)) {
    let mut start = 0;
    let mut count = 0;
    for (i, _) in s.char_indices() {
        if count == n {
            f(&s[start..i]);
            start = i;
            count = 0;
        }
        count += 1;
    }
    if start < s.len() {
        f(&s[start..]);
    }
}

#[async_trait::async_trait]
impl ChatModel for ScriptedModel {
    fn model_name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> crate::ModelCapabilities {
        self.caps
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream> {
        self.state.calls.fetch_add(1, Ordering::Relaxed);
        let chosen = self.next_response(&request);
        if self.record {
            lock(&self.state.requests).push(request);
        }
        let mut resp = chosen?;
        let latency = resp.latency.unwrap_or(self.latency);
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if let Some(e) = resp.error.take() {
            return Err(e);
        }
        Ok(Box::pin(futures::stream::iter(self.chunks(resp))))
    }
}

#[derive(Debug, Clone)]
enum Part {
    Text(String),
    Thinking {
        text: String,
        signature: Option<String>,
    },
    ToolCall {
        id: Option<String>,
        name: String,
        args: String,
    },
}

/// One response of a [`ScriptedModel`]: text, thinking and tool calls (played in the
/// order they were added), or an error.
#[derive(Debug, Clone, Default)]
pub struct ScriptedResponse {
    parts: Vec<Part>,
    latency: Option<Duration>,
    usage: Option<Usage>,
    error: Option<ModelError>,
    fail_after: Option<(usize, ModelError)>,
}

impl ScriptedResponse {
    /// A text answer.
    pub fn text(t: impl Into<String>) -> Self {
        Self::default().then_text(t)
    }

    /// An empty answer: no text, no tool call, then `Finish { Stop }` (what some
    /// servers send; see [`Accumulated::is_empty_answer`](crate::Accumulated::is_empty_answer)).
    pub fn empty() -> Self {
        Self::default()
    }

    /// One tool call; its id is `call_<n>`, unique per model.
    pub fn tool_call(name: impl Into<String>, args: Value) -> Self {
        Self::default().then_tool_call(name, args)
    }

    /// One tool call with the given id.
    pub fn tool_call_with_id(id: impl Into<String>, name: impl Into<String>, args: Value) -> Self {
        let mut r = Self::default();
        r.parts.push(Part::ToolCall {
            id: Some(id.into()),
            name: name.into(),
            args: to_json(&args),
        });
        r
    }

    /// One tool call whose arguments are streamed exactly as given (use it for
    /// arguments that are not valid JSON on purpose).
    pub fn raw_tool_call(name: impl Into<String>, raw_args: &str) -> Self {
        let mut r = Self::default();
        r.parts.push(Part::ToolCall {
            id: None,
            name: name.into(),
            args: raw_args.to_owned(),
        });
        r
    }

    /// A response that fails before its first chunk.
    pub fn error(e: ModelError) -> Self {
        Self {
            error: Some(e),
            ..Self::default()
        }
    }

    /// Adds text.
    #[must_use]
    pub fn then_text(mut self, t: impl Into<String>) -> Self {
        self.parts.push(Part::Text(t.into()));
        self
    }

    /// Adds a tool call (id `call_<n>`, unique per model).
    #[must_use]
    pub fn then_tool_call(mut self, name: impl Into<String>, args: Value) -> Self {
        self.parts.push(Part::ToolCall {
            id: None,
            name: name.into(),
            args: to_json(&args),
        });
        self
    }

    /// Adds a thinking block, optionally signed.
    #[must_use]
    pub fn thinking(mut self, t: impl Into<String>, signature: Option<String>) -> Self {
        self.parts.push(Part::Thinking {
            text: t.into(),
            signature,
        });
        self
    }

    /// Waits this long before the first chunk (instead of the model's latency).
    #[must_use]
    pub fn with_latency(mut self, d: Duration) -> Self {
        self.latency = Some(d);
        self
    }

    /// Reports these token counts (default: an estimate of one output token per 4
    /// bytes produced, no input tokens).
    #[must_use]
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Breaks the stream with `e` after `n` chunks (the usage and finish chunks
    /// count; they come last).
    #[must_use]
    pub fn fail_after_chunks(mut self, n: usize, e: ModelError) -> Self {
        self.fail_after = Some((n, e));
        self
    }

    fn chunk_estimate(&self, size: usize) -> usize {
        let per = |len: usize| len / size + 1;
        self.parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => per(t.len()),
                Part::Thinking { text, .. } => per(text.len()) + 1,
                Part::ToolCall { args, .. } => per(args.len()) + 1,
            })
            .sum::<usize>()
            + 3
    }
}

fn to_json(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_respects_char_boundaries() {
        let mut parts = Vec::new();
        split("héllo wörld", 3, |s| parts.push(s.to_owned()));
        assert_eq!(parts, ["hél", "lo ", "wör", "ld"]);
        let mut n = 0;
        split("", 3, |_| n += 1);
        assert_eq!(n, 0);
    }

    #[test]
    fn an_empty_response_is_an_empty_answer_that_stops() {
        let model = ScriptedModel::new([ScriptedResponse::empty()]);
        let done = futures::executor::block_on(model.complete(ChatRequest::new(vec![]))).unwrap();
        assert!(done.is_empty_answer());
        assert_eq!(done.finish_reason, Some(FinishReason::Stop));
    }
}
