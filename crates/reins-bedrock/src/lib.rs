//! # reins-bedrock
//!
//! A [`ChatModel`](reins_model::ChatModel) for Amazon Bedrock's Converse API,
//! streamed with ConverseStream and signed with AWS Signature Version 4.
//!
//! ```no_run
//! use reins_bedrock::BedrockChat;
//! use reins_message::Msg;
//! use reins_model::{ChatModel, ChatRequest};
//!
//! # async fn demo() -> reins_model::Result<()> {
//! // AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION
//! let model = BedrockChat::new("anthropic.claude-3-7-sonnet-20250219-v1:0");
//! let done = model
//!     .complete(ChatRequest::new(vec![Msg::system("Be brief."), Msg::user("Hi!")]))
//!     .await?;
//! println!("{}", done.message.text());
//! # Ok(()) }
//! ```
//!
//! ## What is supported on the wire
//!
//! - `messages` alternating `user` and `assistant`, starting with `user`; the system
//!   prompt as `system`; images as bytes (png, jpeg, gif, webp).
//! - Tool use: `toolConfig.tools[].toolSpec` with `inputSchema.json`; `toolChoice`
//!   (`auto` by default, `any`, a named tool; Converse has no `none`); `toolUse`
//!   blocks sent only with their answers, every `toolResult` (`success` / `error`)
//!   first in the very next user message.
//! - Reasoning: `reasoningContent` (`reasoningText` with its `signature`, or
//!   `redactedContent`) kept sealed for [`PROVIDER`] and sent back exactly; reasoning
//!   from other providers and unsigned (interrupted) reasoning is left out, logged.
//! - `inferenceConfig` (`maxTokens`, `temperature`, `stopSequences`);
//!   `additionalModelRequestFields` (e.g. a reasoning budget) through
//!   [`ChatOptions::extra`](reins_model::ChatOptions).
//! - Usage with cache reads and writes; stop reasons; exceptions in the stream and
//!   error statuses mapped to [`ModelError`](reins_model::ModelError) kinds
//!   (throttling → rate limited, validation → bad request, access denied → auth,
//!   model timeout → timeout, service unavailable / internal → server).
//!
//! ## Features
//!
//! This crate has no Cargo features.

mod client;
pub mod decode;
pub mod eventstream;
mod wire;

pub use client::{BedrockChat, endpoint_for};
pub use decode::PROVIDER;
pub use wire::CONTINUE_TEXT;
