//! # reins
//!
//! LLM agents that people can stop, approve, reject, interrupt and resume — in the
//! same process or another one, days later — without corrupting the conversation or
//! running a side-effecting tool twice.
//!
//! This crate is a facade: it re-exports the reins crates and a [`prelude`], and holds
//! no logic of its own.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use reins::prelude::*;
//! // The offline model (the `testing` feature).
//! use reins::model::{ScriptedModel, ScriptedResponse};
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct DeleteArgs {
//!     /// The file to delete.
//!     path: String,
//! }
//!
//! // A tool that needs a person's confirmation before it runs.
//! let mut tools = Toolkit::new();
//! tools.add(
//!     Toolkit::function("delete_file", "Delete a file", |a: DeleteArgs, _ctx| async move {
//!         Ok::<_, ToolError>(format!("deleted {}", a.path))
//!     })
//!     .policy(ToolPolicy::confirm()),
//! )?;
//!
//! // An offline model that asks for the tool, then answers.
//! let model = ScriptedModel::new([
//!     ScriptedResponse::tool_call_with_id("call_1", "delete_file", json!({"path": "temp.txt"})),
//!     ScriptedResponse::text("temp.txt is gone."),
//! ]);
//!
//! let agent = Agent::builder()
//!     .name("SafeAgent")
//!     .system_prompt("You are a careful assistant.")
//!     .model(model)
//!     .toolkit(tools)
//!     .build()?;
//! let session = agent.session("user-7/chat-1").await?;
//!
//! let out = session.call(Msg::user("delete temp.txt")).await?;
//! assert_eq!(out.status, RunStatus::Paused);
//! for r in &out.requirements {
//!     println!("{} wants to run {} with {}", agent.name(), r.tool_use.name, r.tool_use.input);
//! }
//! let out = session.resolve(vec![Decision::approve("call_1")]).await?;
//! assert_eq!(out.status, RunStatus::Completed);
//! # Ok(()) }
//! ```
//!
//! Implementing a trait needs nothing but this crate: `#[async_trait]` and the
//! stream types are in the prelude, and `futures` is re-exported.
//!
//! ```
//! use reins::prelude::*;
//! use reins::futures::stream;
//!
//! /// A model that always answers "hi".
//! struct Hi;
//!
//! #[async_trait]
//! impl ChatModel for Hi {
//!     fn model_name(&self) -> &str { "hi" }
//!     async fn stream(&self, _request: ChatRequest) -> Result<ChatStream, ModelError> {
//!         let chunks = [
//!             ChatChunk::TextDelta { text: "hi".into() },
//!             ChatChunk::Finish { reason: FinishReason::Stop },
//!         ];
//!         Ok(Box::pin(stream::iter(chunks.map(Ok))))
//!     }
//! }
//! # let _ = Agent::builder().model(Hi);
//! ```
//!
//! ## Features
//!
//! | feature     | default | what it adds |
//! |-------------|---------|--------------|
//! | `sqlite`    | yes     | `SqliteStore`, the embedded store for sessions that survive restarts |
//! | `postgres`  | no      | `PostgresStore`, for many workers on many machines |
//! | `openai`    | no      | [`openai`]: OpenAI-compatible providers (OpenAI, DashScope, DeepSeek, Ollama, vLLM, llama.cpp) |
//! | `anthropic` | no      | [`anthropic`]: the Anthropic Messages API |
//! | `testing`   | no      | `ScriptedModel`: a deterministic offline model for tests and demos |
//! | `mcp`       | no      | [`mcp`]: MCP servers' tools as reins tools (stdio, streamable HTTP); needs Rust 1.88 |
//! | `tiktoken`  | yes     | exact token counts for OpenAI models in `ContextPolicy` (context compression) |

/// The attribute that makes `async fn`s in trait impls work (`ChatModel`, `Hook`,
/// `Tool`, `MemoryStore`): `#[reins::async_trait]`, or `#[async_trait]` after
/// `use reins::prelude::*`.
pub use async_trait::async_trait;
/// The `futures` crate reins is built on, for building and consuming streams
/// (`reins::futures::stream::iter(..)`, `StreamExt::next`) without matching its
/// version by hand.
pub use futures;
pub use reins_agent as agent;
#[cfg(feature = "anthropic")]
pub use reins_anthropic as anthropic;
pub use reins_hook as hook;
#[cfg(feature = "mcp")]
pub use reins_mcp as mcp;
pub use reins_memory as memory;
pub use reins_message as message;
pub use reins_model as model;
#[cfg(feature = "openai")]
pub use reins_openai as openai;
pub use reins_tool as tool;

/// The names most programs need, in one import: `use reins::prelude::*;`.
pub mod prelude {
    pub use async_trait::async_trait;
    pub use reins_agent::{
        Actor, Agent, AgentError, ContextPolicy, ContextSummary, Decision, DecisionRecord,
        OutputMode, OutputSpec, Requirement, RequirementKind, RunEvent, RunHandle, RunOutput,
        RunStatus, Session, SessionSnapshot, SessionView, ViewToken,
    };
    #[cfg(feature = "anthropic")]
    pub use reins_anthropic::AnthropicChat;
    pub use reins_hook::{
        Control, Hook, HookContext, HookError, HookEvent, HookEventKind, SummaryReason,
        ToolConfirmationHook,
    };
    #[cfg(feature = "mcp")]
    pub use reins_mcp::{McpServer, McpToolset};
    #[cfg(feature = "postgres")]
    pub use reins_memory::PostgresStore;
    #[cfg(feature = "sqlite")]
    pub use reins_memory::{Durability, SqliteStore};
    pub use reins_memory::{InMemoryStore, MemoryStore};
    pub use reins_message::{
        ContentBlock, Msg, Role, ToolAnswer, ToolOutcome, ToolResult, ToolUse,
    };
    pub use reins_model::{
        ChatChunk, ChatModel, ChatRequest, ChatStream, FinishReason, ModelCapabilities, ModelError,
        ToolChoice,
    };
    #[cfg(feature = "testing")]
    pub use reins_model::{ScriptedModel, ScriptedResponse};
    #[cfg(feature = "openai")]
    pub use reins_openai::OpenAiChat;
    pub use reins_tool::{Concurrency, Tool, ToolContext, ToolError, ToolPolicy, Toolkit};
}
