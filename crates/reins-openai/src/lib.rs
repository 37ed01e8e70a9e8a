//! # reins-openai
//!
//! A [`ChatModel`](reins_model::ChatModel) for every server that speaks the OpenAI
//! Chat Completions API: OpenAI, Alibaba Cloud DashScope (compatible mode, `qwen-*`),
//! DeepSeek, Ollama, vLLM, llama.cpp's server and the like.
//!
//! ```no_run
//! use reins_message::Msg;
//! use reins_model::{ChatModel, ChatRequest};
//! use reins_openai::OpenAiChat;
//!
//! # async fn demo() -> reins_model::Result<()> {
//! let model = OpenAiChat::dashscope("qwen-plus");            // DASHSCOPE_API_KEY
//! // let model = OpenAiChat::compatible("http://127.0.0.1:8000/v1", "my-model");
//! let done = model
//!     .complete(ChatRequest::new(vec![Msg::system("Be brief."), Msg::user("Hi!")]))
//!     .await?;
//! println!("{} ({} tokens)", done.message.text(), done.usage.total_tokens());
//! # Ok(()) }
//! ```
//!
//! ## What is supported on the wire
//!
//! - Streaming with `stream_options.include_usage` (usage, cached and reasoning
//!   tokens; DeepSeek's `prompt_cache_hit_tokens`).
//! - Tool calls, parallel ones too: argument deltas by `index`; servers that reuse
//!   index 0 for a parallel batch are handled; `tool_choice` (`none`, `required`,
//!   a named function; `auto`, every server's default, is not sent).
//! - Nothing the caller did not set: optional fields are left out, as the official
//!   SDKs do (some compatible servers answer a spelled-out default differently).
//! - An assistant message that only calls tools carries `content: null` on the
//!   first-party presets (`openai`, `dashscope`, `deepseek`) and `content: ""` on
//!   `compatible` and `ollama` (several local servers reject `null`); see
//!   [`OpenAiChat::with_empty_string_tool_call_content`].
//! - `response_format`: JSON mode and JSON Schema; `temperature`, `max_tokens`,
//!   `stop`, `seed`; [`ChatOptions::extra`](reins_model::ChatOptions) merged into the
//!   body (e.g. `enable_thinking` for Qwen).
//! - `reasoning_content` (DeepSeek, Qwen) and `reasoning` deltas as thinking.
//! - Messages: the system prompt as a `system` message; tool results as `tool`
//!   messages with their `tool_call_id`; images as `image_url` parts (URL or
//!   base64 `data:` URL); base64 audio as `input_audio` parts.
//! - `data: [DONE]`, error events and HTTP error bodies mapped to
//!   [`ModelError`](reins_model::ModelError); retries (per
//!   [`RetryPolicy`](reins_model::RetryPolicy)) only before the first chunk.
//!
//! Not sent: thinking on earlier assistant turns (unless
//! [`OpenAiChat::with_reasoning_replay`]), message `name`s, images inside tool
//! results on servers that do not accept content arrays in `tool` messages.
//!
//! ## The Responses API
//!
//! [`OpenAiResponses`] speaks `POST /v1/responses` (OpenAI, Azure OpenAI):
//! function tools (each with an explicit `strict`, `true` only for a schema written
//! for strict mode: see [`responses::strict_compatible`]), typed streaming events, reasoning items kept with their
//! encrypted content and sent back on every later request (`store: false`, so
//! nothing depends on server-side state), structured output through
//! `text.format`, usage with reasoning tokens.
//!
//! ```no_run
//! use reins_openai::OpenAiResponses;
//! let model = OpenAiResponses::openai("gpt-5-mini");                       // OPENAI_API_KEY
//! let azure = OpenAiResponses::azure("https://my-resource.openai.azure.com", "my-deployment");
//! ```
//!
//! ## Features
//!
//! This crate has no Cargo features.

mod client;
pub mod decode;
pub mod responses;
mod wire;

pub use client::{DEFAULT_TIMEOUT, OpenAiChat};
pub use responses::OpenAiResponses;
