//! # reins-mcp
//!
//! The tools of [Model Context Protocol](https://modelcontextprotocol.io) servers as
//! ordinary reins tools. [`McpToolset::connect`] starts a server (a child process over
//! stdio, or a URL over streamable HTTP), lists its tools and adds them to a
//! [`Toolkit`](reins_tool::Toolkit) as dynamic tools, so everything reins guarantees
//! for local tools — policies and pauses, the tool-call ledger, interrupts, honest
//! outcomes — holds for them unchanged. Built on the official Rust SDK, `rmcp`.
//!
//! ```no_run
//! use reins_mcp::{McpServer, McpToolset};
//! use reins_tool::{ToolPolicy, Toolkit};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let fs = McpToolset::connect(
//!     McpServer::stdio("fs", "npx", ["-y", "@modelcontextprotocol/server-filesystem", "/srv/sandbox"])
//!         // The user's word wins over the server's annotations.
//!         .tool_policy("write_file", ToolPolicy::confirm().reason("writes a file")),
//! )
//! .await?;
//! let mut toolkit = Toolkit::new();
//! fs.add_to(&mut toolkit)?; // fs__read_text_file, fs__write_file, ...
//! // Agent::builder().toolkit(toolkit) ... as with any tools.
//! # Ok(())
//! # }
//! ```
//!
//! ## Names
//!
//! A tool is named `<server>__<tool>` (or `<prefix><separator><tool>`, see
//! [`McpServer::prefix`] and [`McpServer::separator`]); characters model providers refuse
//! become `_`. Two tools that would get the same name are refused with
//! [`Error::NameCollision`], which names both.
//!
//! ## Policies
//!
//! The first rule that applies sets a tool's [`ToolPolicy`](reins_tool::ToolPolicy)
//! (reported as [`PolicySource`]):
//!
//! | Rule | Policy |
//! |---|---|
//! | [`McpServer::tool_policy`] names the tool | that policy |
//! | [`McpServer::default_policy`] is set | that policy |
//! | annotation `readOnlyHint: true` | auto, idempotent |
//! | annotation `destructiveHint: false` | auto (idempotent if `idempotentHint: true`) |
//! | other annotations (`destructiveHint` defaults to `true` in MCP) | confirm |
//! | no annotations, server not [`trusted`](McpServer::trusted) | confirm |
//! | no annotations, trusted server | auto |
//!
//! Annotations are hints from the server, which may be wrong or hostile, so the user's
//! choice always wins and an unannotated tool of an unknown server asks first.
//! [`McpServer::call_timeout`] applies to every tool whose policy sets no timeout.
//!
//! ## Calls
//!
//! - Arguments are checked against the tool's input schema before the call
//!   (reins-tool's validator: types, required, enums, bounds, combinators, local `$ref`s;
//!   `pattern` and `format` are left to the server); a mismatch is an error result the
//!   model can fix, and nothing is sent.
//! - Text, image, audio, embedded resources and resource links become content blocks;
//!   `structuredContent` is kept in the result's metadata (`structured_content`, and
//!   shown as text when the result has no content); `isError: true` is an error result.
//! - An interrupt (the call's cancellation token) sends `notifications/cancelled` for
//!   the request; the result is `Interrupted`. A call the executor abandons (timeout,
//!   grace period over) is cancelled on the server too.
//! - `notifications/progress` for the call become partial output
//!   ([`ToolContext::emit`](reins_tool::ToolContext::emit)), which the agent publishes as
//!   `ActingChunk` hook events and `ToolExecutionChunk` run events.
//!
//! ## Elicitation
//!
//! A server's `elicitation/create` (form mode) during a call becomes a question of
//! that call ([`reins_tool::ToolContext::ask`]): in an agent's run, the run pauses
//! with a user-input requirement (the server's message as its reason, the requested
//! schema as its fields) while the call stays in flight, and
//! `resolve(Decision::input(..))` answers it (a rejection declines). If the process
//! stops before the answer, or the answer reaches another worker, the call's outcome
//! is `Unknown`. A callback given to [`McpServer::on_elicitation`] answers instead,
//! without pausing; [`McpServer::no_elicitation`] does not declare the capability.
//!
//! ## Revisions: 2026-07-28 first, older servers too
//!
//! A connection opens with `server/discover` for revision 2026-07-28 and falls back to
//! `initialize` when the server is older (rmcp's `Auto` lifecycle, as the spec's
//! backward-compatibility rules say); the fallback announces 2025-11-25, the newest
//! revision that has `initialize`. [`McpServer::protocol_version`] pins one revision
//! instead. On a legacy server over streamable HTTP, a response stream that ends
//! before its answer is resumed (`GET` with `Last-Event-ID`, as 2025-11-25 asks), so
//! the request is not sent again. On 2026-07-28:
//!
//! - a `tools/call` answered `input_required` (multi round-trip requests): each
//!   `elicitation/create` in `inputRequests` becomes a question of the call's own run,
//!   as above, and the call is retried as a new request with the answers and the
//!   echoed `requestState` (at most 8 rounds); `roots/list` is answered with no roots;
//!   sampling is not offered (the call fails, naming it);
//! - a `tools/call` answered with a task (the Tasks extension, always declared): the
//!   call follows it with `tasks/get` at the server's poll interval; `input_required`
//!   asks its questions (each key once) and sends the answers with `tasks/update`; the
//!   task's result is the call's; an interrupt sends `tasks/cancel`; status messages
//!   become partial output;
//! - nothing relies on stream resumption: a lost `tools/call` follows the fault rules
//!   below, while a lost `tasks/get` is asked again on a new connection (it changes
//!   nothing), up to 3 times in a row.
//!
//! ## Faults
//!
//! | What happened | Outcome |
//! |---|---|
//! | the server cannot be started or reached before the call | `Error` (nothing was sent) |
//! | the connection (or the child process) is lost while the call runs | `Unknown`; if the tool is idempotent, one reconnect and retry first |
//! | the server never answers | the tool's timeout (an `Error`), with `notifications/cancelled` sent |
//! | a JSON-RPC error, or an answer that is not a tool result | `Error` naming the server and the code |
//! | lines that are not JSON-RPC | ignored by the transport (logged); the call ends by its answer or its timeout |
//! | the next call after a loss | reconnects (a stdio server is started again) |
//!
//! ## Features
//!
//! | Feature | Default | What it adds |
//! |---|---|---|
//! | `stdio` | yes | [`McpServer::stdio`]: servers started as child processes |
//! | `http` | yes | [`McpServer::http`]: streamable HTTP (reqwest, rustls on ring) |
//!
//! [`McpServer::stream`] (any byte stream) needs neither.

mod call;
mod config;
mod connection;
mod error;
#[cfg(feature = "http")]
mod http;
mod modern;
mod policy;
mod toolset;

pub use call::IDEMPOTENCY_KEY_META;
pub use config::{
    ByteStream, ByteStreamFuture, Elicitation, ElicitationAnswer, ElicitationFuture, McpServer,
};
pub use error::{Error, Result};
pub use policy::PolicySource;
pub use toolset::{McpTool, McpToolset, add_all};

/// The MCP SDK this crate is built on, for servers in tests and for custom transports.
pub use rmcp;
