//! # reins-mcp-server
//!
//! A reins agent as a [Model Context Protocol](https://modelcontextprotocol.io)
//! server, so MCP hosts (IDEs, desktop assistants, other agents) can use an agent with
//! approvals. The agent is one tool (`message`, optional `session`); its run's pauses
//! become the client's questions and the client's answers become reins decisions.
//!
//! The server holds the session port ([`Sessions`](reins_agent::port::Sessions)) and
//! nothing else of the agent, so it serves either driver the same way: an `Agent` (the
//! local driver, runs in this process, as below) or
//! [`Relayed`](reins_agent::port::Relayed) over reins-restate's `RestateClient` (the
//! sessions run in a Restate deployment's processes; the server follows each run
//! through the store they share and interrupts it there).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use reins_agent::Agent;
//! use reins_mcp_server::McpAgentServer;
//! use reins_model::{ScriptedModel, ScriptedResponse};
//!
//! let agent = Agent::builder()
//!     .name("ops")
//!     .model(ScriptedModel::new([ScriptedResponse::text("All clear.")]))
//!     .build()?;
//! let server = McpAgentServer::builder(agent)
//!     .signing_key(*b"0123456789abcdef0123456789abcdef") // 32+ secret bytes in real use
//!     .build()?;
//! assert_eq!(server.tool_name(), "ops");
//! // server.serve_stdio().await?;   // for a desktop host that starts this program
//! // server.serve_http(tokio::net::TcpListener::bind("127.0.0.1:8080").await?).await?;
//! # Ok(()) }
//! ```
//!
//! ## Protocol revisions
//!
//! Built on rmcp, which speaks every revision from 2024-11-05 to 2026-07-28 and picks
//! per request (2026-07-28: per-request `_meta`, `server/discover`) or per session
//! (older: `initialize`). What this crate adds on top:
//!
//! | | 2026-07-28 | 2025-11-25 and older |
//! |---|---|---|
//! | a run pauses | `resultType: "input_required"`: one `elicitation/create` form per requirement in `inputRequests`, and a sealed `requestState` | `elicitation/create` sent to the client while the call waits |
//! | the answer | the retried `tools/call` with `inputResponses` + `requestState` | the `ElicitResult` |
//! | a long run | a task (`resultType: "task"`) when the client declares `io.modelcontextprotocol/tasks`: `tasks/get`, `tasks/update`, `tasks/cancel` | the call waits |
//! | cancel | `tasks/cancel`, closing the HTTP response, or `notifications/cancelled` (stdio) interrupts the run | `notifications/cancelled` interrupts the run |
//!
//! A client that cannot be asked (no `elicitation` capability, as the MCP Inspector)
//! gets a paused result (`isError: true`) naming what waits and where a person decides:
//! the session's link in reins-server's inbox when
//! [`inbox_url`](McpAgentServerBuilder::inbox_url) is set (also as
//! `structuredContent.decide_at`); it calls again with the `session` to continue.
//!
//! ## Errors
//!
//! Arguments the tool cannot take (no `message`, a `session` that is not a string,
//! unknown fields, another principal's session) are a tool result with `isError: true`
//! saying what to fix, and nothing runs: the spec's tools page classes input validation
//! errors as tool execution errors. An unknown tool and a refused `requestState` are
//! JSON-RPC `-32602`. A decision the run refuses is `-32602` (`-32600` for a busy
//! session) with `data.code` (reins-server's codes); a late answer — the requirement
//! was decided elsewhere first, or by a replay of the same answer — is `already_decided`
//! with `data.decided` (`{decision, by, at, via}` of the decision that took effect).
//!
//! ## HTTP and DNS rebinding
//!
//! [`http_service`](McpAgentServer::http_service) accepts loopback `Host` names, and a
//! request that carries `Origin` only from a loopback origin or one of
//! [`allowed_origins`](McpAgentServerBuilder::allowed_origins); any other origin gets
//! 403 before anything runs (the streamable HTTP transport's security rule). Requests
//! without `Origin` (programs, not browser pages) pass.
//!
//! ## Questions and decisions
//!
//! Each requirement becomes a form whose message names the tool, its arguments and the
//! reason, and whose `_meta` carries them under [`REQUIREMENT_META`]:
//!
//! | requirement | form | answer → decision |
//! |---|---|---|
//! | confirmation | `decision`: approve / reject, `note` | `Decision::approve` / `Decision::reject(note)` |
//! | user input | the requirement's own schema | `Decision::input(values)` (checked against the schema) |
//! | external | `output`, `is_error` | `Decision::external_result` |
//! | any, declined | — | `Decision::reject` |
//!
//! Every decision is made `by` the caller's principal (stdio: [`principal`](McpAgentServerBuilder::principal);
//! HTTP: what [`authenticate`](McpAgentServerBuilder::authenticate) returns).
//!
//! ## `requestState`
//!
//! Sealed with HMAC-SHA256 ([`signing_key`](McpAgentServerBuilder::signing_key)); it names
//! the session and the exact requirements shown, expires after
//! [`state_ttl`](McpAgentServerBuilder::state_ttl), and is bound (as associated data) to
//! the principal, the tool and a digest of the call's arguments. A forged, tampered,
//! foreign or expired state is refused with `-32602` before anything runs. The state
//! also carries what each requirement asked, and the answers go to the one decision
//! path ([`Sessions::decide`](reins_agent::port::Sessions::decide)) on the view it names:
//! a replay is refused there (`already_decided`, audited) and nothing runs.
//!
//! ## Sessions and tasks
//!
//! Each call without `session` starts a session `mcp/<principal>/<uuid>`; the result's
//! `structuredContent.session` continues it. A task's id is its session id, and its
//! status is read through the port on every `tasks/get`, so approvals made in
//! reins-server's inbox continue the same task, and every server instance on the same
//! store (or the same Restate deployment) answers for it. A caller only sees sessions
//! under its own principal.
//!
//! ## Tool annotations
//!
//! `destructiveHint` is true unless every tool of the agent is idempotent;
//! `idempotentHint` is true when every tool is; `readOnlyHint` is false (a call writes
//! a session); override with [`destructive`](McpAgentServerBuilder::destructive) /
//! [`idempotent`](McpAgentServerBuilder::idempotent).
//!
//! ## Features
//!
//! | Feature | Default | What it adds |
//! |---|---|---|
//! | `stdio` | yes | [`McpAgentServer::serve_stdio`] |
//! | `http` | yes | [`McpAgentServer::http_service`], [`router`](McpAgentServer::router), [`serve_http`](McpAgentServer::serve_http) (axum) |

mod config;
mod error;
mod handler;
mod question;
mod result;
mod state;
mod task;
mod transport;

#[cfg(feature = "http")]
pub use config::Authenticate;
pub use config::{McpAgentServer, McpAgentServerBuilder};
pub use error::{Error, Result};
pub use question::REQUIREMENT_META;
#[cfg(feature = "http")]
pub use transport::HttpService;

/// The MCP SDK this crate is built on.
pub use rmcp;
