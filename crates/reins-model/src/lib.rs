//! # reins-model
//!
//! The [`ChatModel`] trait every provider implements, the [`ChatRequest`] it takes,
//! the [`ChatChunk`] stream it returns, and the [`ModelError`] it fails with.

mod chunk;
mod error;
mod request;

use std::pin::Pin;

use futures::Stream;

pub use chunk::{ChatChunk, FinishReason};
pub use error::{ModelError, Result};
pub use request::{ChatOptions, ChatRequest, ResponseFormat, ToolChoice};

/// The stream of chunks a model returns.
pub type ChatStream = Pin<Box<dyn Stream<Item = Result<ChatChunk>> + Send>>;

/// A chat model: takes a [`ChatRequest`], streams back [`ChatChunk`]s.
#[async_trait::async_trait]
pub trait ChatModel: Send + Sync {
    /// The model's name, e.g. `qwen-plus`.
    fn model_name(&self) -> &str;

    /// Sends the request and returns the response as a stream of chunks. Errors that
    /// happen before the first chunk (auth, rate limits, ...) are returned here;
    /// errors after it arrive in the stream.
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream>;
}

#[async_trait::async_trait]
impl<T: ChatModel + ?Sized> ChatModel for std::sync::Arc<T> {
    fn model_name(&self) -> &str {
        (**self).model_name()
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
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream> {
        (**self).stream(request).await
    }
}
