//! # reins-model
//!
//! The [`ChatModel`] trait every provider implements, the [`ChatRequest`] it takes,
//! the [`ChatChunk`] stream it returns, and the [`ModelError`] it fails with — plus
//! the pieces providers and agents share: [`MessageAccumulator`] (chunks → final
//! message), [`RetryPolicy`] (backoff before the first chunk), the [`sse`] parser,
//! and, behind the `testing` feature, `ScriptedModel`, a deterministic in-process
//! model, and `testing`, the conformance kit provider crates test themselves with.
//!
//! ```
//! use futures::StreamExt;
//! use reins_message::Msg;
//! use reins_model::{ChatChunk, ChatModel, ChatRequest, ChatStream, FinishReason, MessageAccumulator};
//!
//! /// A model that always says "hi".
//! struct Hi;
//!
//! #[async_trait::async_trait]
//! impl ChatModel for Hi {
//!     fn model_name(&self) -> &str { "hi" }
//!     async fn stream(&self, _req: ChatRequest) -> reins_model::Result<ChatStream> {
//!         let chunks = [
//!             ChatChunk::TextDelta { text: "h".into() },
//!             ChatChunk::TextDelta { text: "i".into() },
//!             ChatChunk::Finish { reason: FinishReason::Stop },
//!         ];
//!         Ok(Box::pin(futures::stream::iter(chunks.map(Ok))))
//!     }
//! }
//!
//! # futures::executor::block_on(async {
//! // Stream it chunk by chunk ...
//! let mut stream = Hi.stream(ChatRequest::new(vec![Msg::user("hello")])).await?;
//! let mut acc = MessageAccumulator::new();
//! while let Some(chunk) = stream.next().await {
//!     acc.push(&chunk?)?;
//! }
//! assert_eq!(acc.finish().message.text(), "hi");
//! // ... or all at once.
//! let done = Hi.complete(ChatRequest::new(vec![Msg::user("hello")])).await?;
//! assert_eq!(done.finish_reason, Some(FinishReason::Stop));
//! # Ok::<(), reins_model::ModelError>(()) }).unwrap();
//! ```
//!
//! ## Features
//!
//! | feature   | default | what it adds |
//! |-----------|---------|--------------|
//! | `testing` | no      | `ScriptedModel` and `ScriptedResponse`: a scripted model for tests, benchmarks and demos; the `testing` module: the provider conformance kit (a loopback HTTP server with faults, event-stream bodies, the shared provider suite) |
//! | `http`    | no      | the `http` module: `HttpSettings` (base URL, key, retries, timeout, client) and the streamed HTTP exchange providers share |

mod accumulate;
mod chunk;
mod error;
#[cfg(feature = "http")]
pub mod http;
mod request;
mod retry;
#[cfg(feature = "testing")]
mod scripted;
mod specs;
pub mod sse;
#[cfg(feature = "testing")]
pub mod testing;

use std::pin::Pin;

use futures::{Stream, StreamExt};

pub use accumulate::{Accumulated, MessageAccumulator};
pub use chunk::{ChatChunk, FinishReason};
pub use error::{ModelError, Result, is_context_overflow, parse_retry_after};
pub use request::{ChatOptions, ChatRequest, ResponseFormat, ToolChoice};
pub use retry::RetryPolicy;
#[cfg(feature = "testing")]
pub use scripted::{ScriptedModel, ScriptedResponse};
pub use specs::ToolSpecs;

/// What a model (through its provider) supports, for features that have more than one
/// way to be asked for. Providers report what their API documents; a wrapper or a
/// custom model may say otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelCapabilities {
    /// The provider constrains the answer to a JSON Schema
    /// (`ResponseFormat::JsonSchema`, e.g. OpenAI's `response_format`).
    pub json_schema: bool,
    /// The provider honours `ToolChoice::Required` / `ToolChoice::Tool(..)` (a forced
    /// tool call).
    pub forced_tool_choice: bool,
}

impl Default for ModelCapabilities {
    /// No schema-constrained answers; forced tool calls (what most tool-calling APIs
    /// offer).
    fn default() -> Self {
        Self {
            json_schema: false,
            forced_tool_choice: true,
        }
    }
}

impl ModelCapabilities {
    /// These capabilities.
    pub fn new(json_schema: bool, forced_tool_choice: bool) -> Self {
        Self {
            json_schema,
            forced_tool_choice,
        }
    }
}

/// The stream of chunks a model returns.
pub type ChatStream = Pin<Box<dyn Stream<Item = Result<ChatChunk>> + Send>>;

/// A chat model: takes a [`ChatRequest`], streams back [`ChatChunk`]s.
#[async_trait::async_trait]
pub trait ChatModel: Send + Sync {
    /// The model's name, e.g. `qwen-plus`.
    fn model_name(&self) -> &str;

    /// The provider serving the model, as the OpenTelemetry GenAI conventions name it
    /// (`gen_ai.provider.name`: `openai`, `anthropic`, `gcp.gemini`, `aws.bedrock`, or
    /// a name of the implementation's own). `None` (the default): not known, and the
    /// spans carry none.
    fn provider_name(&self) -> Option<&str> {
        None
    }

    /// What the model supports (see [`ModelCapabilities`]); the default is no
    /// schema-constrained answers and forced tool calls.
    fn capabilities(&self) -> ModelCapabilities {
        ModelCapabilities::default()
    }

    /// Sends the request and returns the response as a stream of chunks. Errors that
    /// happen before the first chunk (auth, rate limits, ...) are returned here;
    /// errors after it arrive in the stream.
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream>;

    /// Streams the request to its end and returns the accumulated message, usage
    /// and finish reason.
    ///
    /// # Errors
    /// Any error of [`stream`](Self::stream), an error item of the stream, or a
    /// [`ModelError::MalformedStream`] from the accumulator.
    async fn complete(&self, request: ChatRequest) -> Result<Accumulated> {
        let mut stream = self.stream(request).await?;
        let mut acc = MessageAccumulator::new();
        while let Some(chunk) = stream.next().await {
            acc.push(&chunk?)?;
        }
        Ok(acc.finish())
    }
}

#[async_trait::async_trait]
impl<T: ChatModel + ?Sized> ChatModel for std::sync::Arc<T> {
    fn model_name(&self) -> &str {
        (**self).model_name()
    }
    fn provider_name(&self) -> Option<&str> {
        (**self).provider_name()
    }
    fn capabilities(&self) -> ModelCapabilities {
        (**self).capabilities()
    }
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream> {
        (**self).stream(request).await
    }
}

#[async_trait::async_trait]
impl<T: ChatModel + ?Sized> ChatModel for Box<T> {
    fn model_name(&self) -> &str {
        (**self).model_name()
    }
    fn provider_name(&self) -> Option<&str> {
        (**self).provider_name()
    }
    fn capabilities(&self) -> ModelCapabilities {
        (**self).capabilities()
    }
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream> {
        (**self).stream(request).await
    }
}
