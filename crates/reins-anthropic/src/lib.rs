//! # reins-anthropic
//!
//! A [`ChatModel`](reins_model::ChatModel) for the Anthropic Messages API (Claude),
//! thinking blocks and their signatures included. Swapping it for
//! `reins_openai::OpenAiChat` is a one-line change: both are `ChatModel`s.
//!
//! ```no_run
//! use reins_message::Msg;
//! use reins_model::{ChatModel, ChatOptions, ChatRequest};
//! use reins_anthropic::AnthropicChat;
//! use serde_json::json;
//!
//! # async fn demo() -> reins_model::Result<()> {
//! let model = AnthropicChat::new("claude-sonnet-4-5");        // ANTHROPIC_API_KEY
//! let mut options = ChatOptions { max_tokens: Some(8000), ..ChatOptions::default() };
//! options.extra.insert("thinking".into(), json!({ "type": "enabled", "budget_tokens": 2048 }));
//! let done = model
//!     .complete(ChatRequest::new(vec![Msg::system("Be brief."), Msg::user("Hi!")]).with_options(options))
//!     .await?;
//! println!("thought: {}\nsaid: {}", done.message.thinking(), done.message.text());
//! # Ok(()) }
//! ```
//!
//! ## What is supported on the wire
//!
//! - Streaming events: `message_start` (input and cache usage),
//!   `content_block_start` / `content_block_delta` / `content_block_stop` for `text`
//!   (`text_delta`), `tool_use` (`input_json_delta`) and `thinking`
//!   (`thinking_delta`, `signature_delta`), `message_delta` (`stop_reason`, output
//!   usage), `message_stop`, `ping`, `error`; unknown events are skipped.
//! - Requests: the system prompt in the top-level `system` field; `tools` with
//!   `input_schema`; `tool_choice` (`none`, `any`, a named tool; `auto`, the
//!   default, is not sent);
//!   `tool_use` and `tool_result` blocks (`is_error` for anything but success);
//!   signed thinking blocks sent back unchanged; consecutive tool and user messages
//!   merged into one user turn with the tool results first; images (base64 or URL);
//!   `max_tokens` (default [`DEFAULT_MAX_TOKENS`]), `temperature`, `stop_sequences`;
//!   [`ChatOptions::extra`](reins_model::ChatOptions) merged into the body (e.g.
//!   `thinking`); `anthropic-version`, `x-api-key`, optional `anthropic-beta`.
//! - JSON mode and JSON Schema response formats are asked for in the system prompt
//!   (the Messages API has no such switch); `seed` is not sent (no equivalent).
//! - HTTP and stream errors mapped to [`ModelError`](reins_model::ModelError)
//!   (401/403 auth, 429 with `Retry-After`, "prompt is too long" as context too
//!   long, 500/529 overloaded as server errors); retries only before the first chunk.
//!
//! Not supported: audio (refused with `InvalidRequest`), `redacted_thinking` blocks
//! (skipped), server-side tools' result blocks (skipped).
//!
//! ## Features
//!
//! This crate has no Cargo features.

mod client;
pub mod decode;
mod wire;

pub use client::{ANTHROPIC_VERSION, AnthropicChat, DEFAULT_MAX_TOKENS, DEFAULT_TIMEOUT};
