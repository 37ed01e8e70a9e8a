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
//! let out = session.send(Msg::user("delete temp.txt")).await?;
//! assert_eq!(out.status, RunStatus::Paused);
//! for r in &out.requirements {
//!     println!("{} wants to run {} with {}", agent.name(), r.tool_use.name, r.tool_use.input);
//! }
//! let out = session.resolve(vec![Decision::approve("call_1")]).await?;
//! assert_eq!(out.status, RunStatus::Completed);
//! # Ok(()) }
//! ```
//!
//! Implementing a trait needs nothing but this crate: `#[async_trait]` is in the
//! prelude, the model protocol (requests, chunks, streams) in [`model`], and `futures`
//! is re-exported.
//!
//! ```
//! use reins::prelude::*;
//! use reins::futures::stream;
//! use reins::model::{ChatChunk, ChatRequest, ChatStream, FinishReason, ModelError};
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
//! ## Evidence anyone can check
//!
//! [`evidence`] (always there: the agent signs with it) turns the audit trail into
//! evidence a third party checks without trusting the database: a hash chain per
//! session, Ed25519-signed receipts for each approval and each call that ran, a bundle
//! to export and an offline verifier (`docs/evidence.md` specifies the format).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use reins::evidence::{Keyring, Signer, verify};
//! use reins::model::{ScriptedModel, ScriptedResponse};
//! use reins::prelude::*;
//!
//! // The key comes from the configuration (a file, the environment), never the store.
//! let signer = Signer::from_seed("2026-01", [7; 32]);
//! let agent = Agent::builder()
//!     .model(ScriptedModel::new([ScriptedResponse::text("hello")]))
//!     .evidence_signer(signer, Keyring::new())
//!     .build()?;
//! agent.session("chat-1").await?.send(Msg::user("hi")).await?;
//!
//! let bundle = agent.evidence("chat-1").await?.to_jsonl()?;
//! let report = verify(&bundle)?;
//! println!("{} entries, head {}", report.entries, report.head.hash);
//! # Ok(()) }
//! ```
//!
//! ## Features
//!
//! | feature     | default | what it adds |
//! |-------------|---------|--------------|
//! | `sqlite`    | yes     | `SqliteStore`, the embedded store for sessions that survive restarts |
//! | `postgres`  | no      | `PostgresStore`, for many workers on many machines |
//! | `openai`    | no      | [`openai`]: OpenAI-compatible providers (OpenAI, DashScope, DeepSeek, Ollama, vLLM, llama.cpp) and the Responses API (OpenAI, Azure OpenAI) |
//! | `anthropic` | no      | [`anthropic`]: the Anthropic Messages API |
//! | `gemini`    | no      | [`gemini`]: the Google Gemini API and Vertex AI |
//! | `bedrock`   | no      | [`bedrock`]: Amazon Bedrock's Converse API (SigV4) |
//! | `testing`   | no      | `ScriptedModel`: a deterministic offline model for tests and demos |
//! | `mcp`       | no      | [`mcp`]: MCP servers' tools as reins tools (stdio, streamable HTTP); needs Rust 1.88 |
//! | `mcp-server` | no     | [`mcp_server`]: an agent as an MCP server, its pauses as the host's questions (stdio, streamable HTTP); needs Rust 1.88 |
//! | `acp`       | no      | [`acp`]: an agent as an Agent Client Protocol agent for editors, its pauses as the editor's permission requests (stdio) |
//! | `policy`    | no      | [`policy`]: Cedar policies for which calls run without asking, who decides them and who grants them |
//! | `tiktoken`  | yes     | exact token counts for OpenAI models in `ContextPolicy` (context compression) |

/// The attribute that makes `async fn`s in trait impls work (`ChatModel`, `Hook`,
/// `Tool`, `MemoryStore`): `#[reins::async_trait]`, or `#[async_trait]` after
/// `use reins::prelude::*`.
pub use async_trait::async_trait;
/// The `futures` crate reins is built on, for building and consuming streams
/// (`reins::futures::stream::iter(..)`, `StreamExt::next`) without matching its
/// version by hand.
pub use futures;
#[cfg(feature = "acp")]
pub use reins_acp as acp;
pub use reins_agent as agent;
#[cfg(feature = "anthropic")]
pub use reins_anthropic as anthropic;
#[cfg(feature = "bedrock")]
pub use reins_bedrock as bedrock;
/// Evidence anyone can check (the `reins-evidence` crate): the hash chain, signed
/// receipts, the export bundle and its offline verifier. See `docs/evidence.md`.
pub use reins_evidence as evidence;
#[cfg(feature = "gemini")]
pub use reins_gemini as gemini;
pub use reins_hook as hook;
#[cfg(feature = "mcp")]
pub use reins_mcp as mcp;
#[cfg(feature = "mcp-server")]
pub use reins_mcp_server as mcp_server;
pub use reins_memory as memory;
pub use reins_message as message;
pub use reins_model as model;
#[cfg(feature = "openai")]
pub use reins_openai as openai;
#[cfg(feature = "policy")]
pub use reins_policy as policy;
pub use reins_tool as tool;

/// What a first program needs, in one import: `use reins::prelude::*;`.
///
/// An agent and its sessions, the run's messages, outcomes and pauses, tools, the
/// stores, the providers the enabled features bring, and `#[async_trait]` for
/// implementing [`Tool`](prelude::Tool), [`ChatModel`](prelude::ChatModel) or
/// [`MemoryStore`](prelude::MemoryStore). Everything else is reached by module path:
/// views and snapshots in [`agent`], hooks in [`hook`], the model protocol (requests,
/// chunks, streams) in [`model`], content blocks and tool results in [`message`]. See
/// `CHANGELOG.md` for where names the prelude held in 0.1 live now.
pub mod prelude {
    pub use async_trait::async_trait;
    pub use reins_agent::{
        Agent, AgentError, Decision, Requirement, RequirementKind, RunEvent, RunHandle, RunOutput,
        RunStatus, Session,
    };
    #[cfg(feature = "anthropic")]
    pub use reins_anthropic::AnthropicChat;
    #[cfg(feature = "bedrock")]
    pub use reins_bedrock::BedrockChat;
    #[cfg(feature = "gemini")]
    pub use reins_gemini::GeminiChat;
    #[cfg(feature = "mcp")]
    pub use reins_mcp::{McpServer, McpToolset};
    #[cfg(feature = "postgres")]
    pub use reins_memory::PostgresStore;
    #[cfg(feature = "sqlite")]
    pub use reins_memory::SqliteStore;
    pub use reins_memory::{InMemoryStore, MemoryStore};
    pub use reins_message::Msg;
    pub use reins_model::ChatModel;
    #[cfg(feature = "testing")]
    pub use reins_model::{ScriptedModel, ScriptedResponse};
    #[cfg(feature = "openai")]
    pub use reins_openai::{OpenAiChat, OpenAiResponses};
    pub use reins_tool::{Tool, ToolContext, ToolError, ToolPolicy, Toolkit};
}
