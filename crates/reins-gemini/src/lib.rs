//! # reins-gemini
//!
//! A [`ChatModel`](reins_model::ChatModel) for Google's Gemini API
//! (`generativelanguage.googleapis.com`) and Vertex AI, streamed with
//! `streamGenerateContent?alt=sse`.
//!
//! ```no_run
//! use reins_gemini::GeminiChat;
//! use reins_message::Msg;
//! use reins_model::{ChatModel, ChatRequest};
//!
//! # async fn demo() -> reins_model::Result<()> {
//! let model = GeminiChat::new("gemini-2.5-flash"); // GEMINI_API_KEY
//! // let model = GeminiChat::vertex("my-project", "us-central1", "gemini-2.5-pro"); // VERTEX_ACCESS_TOKEN
//! let done = model
//!     .complete(ChatRequest::new(vec![Msg::system("Be brief."), Msg::user("Hi!")]))
//!     .await?;
//! println!("{}", done.message.text());
//! # Ok(()) }
//! ```
//!
//! ## What is supported on the wire
//!
//! - `contents` with `user` and `model` turns; the system prompt as
//!   `systemInstruction`; images and audio as `inlineData` (base64) or `fileData`
//!   (a URL).
//! - Function calling: `functionDeclarations` (parameters converted to the API's
//!   `Schema` subset), `functionCall` parts (whole, with their `id` when the API
//!   gives one) and `functionResponse` parts (`output`, or `error` for every
//!   outcome but success) in the turn right after the call; `toolConfig`
//!   (`NONE`, `ANY`, a named function; `AUTO`, the default, is not sent).
//! - Thought signatures kept on the parts they came with and sent back; calls that
//!   did not come from Gemini get the documented placeholder signature, so a
//!   transcript from another provider continues here without a 400.
//! - Thinking: `thought` parts (with `thinkingConfig.includeThoughts`, through
//!   [`ChatOptions::extra`](reins_model::ChatOptions)) stream as thinking.
//! - Structured output: `responseMimeType: application/json` with `responseSchema`;
//!   `temperature`, `maxOutputTokens`, `stopSequences`, `seed`.
//! - Usage with thought tokens and cached tokens; finish reasons (`SAFETY` and the
//!   other blocks → `ContentFilter`); a prompt blocked outright
//!   (`promptFeedback.blockReason`) → [`ModelError::Blocked`](reins_model::ModelError).
//!
//! ## Features
//!
//! This crate has no Cargo features.

mod client;
pub mod decode;
mod schema;
mod wire;

pub use client::{GEMINI_BASE_URL, GeminiChat};
pub use decode::PROVIDER;
pub use wire::PLACEHOLDER_SIGNATURE;
