//! # reins-acp
//!
//! A reins agent as an [Agent Client Protocol](https://agentclientprotocol.com)
//! agent over stdio, so editors (Zed, JetBrains IDEs, Neovim and Emacs clients) can run
//! it, show its work as it streams, ask its approvals in the editor, cancel its runs
//! and lend it their files and terminals. The door holds the session port
//! ([`Sessions`]) and nothing else of the agent: the same door serves an agent run in
//! this process (an `Agent`, the local driver) and one run by a Restate deployment
//! (`reins_agent::port::Relayed` over reins-restate's `RestateClient`).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use reins_acp::AcpAgent;
//! use reins_agent::Agent;
//! use reins_model::{ScriptedModel, ScriptedResponse};
//!
//! let agent = Agent::builder()
//!     .name("ops")
//!     .model(ScriptedModel::new([ScriptedResponse::text("All clear.")]))
//!     .build()?;
//! let acp = AcpAgent::builder(agent).principal("ana").build();
//! assert_eq!(acp.principal(), "ana");
//! // acp.serve_stdio().await?;   // in the program an editor starts
//! # Ok(()) }
//! ```
//!
//! ## Protocol version and wire
//!
//! ACP protocol version 1 (`PROTOCOL_VERSION`), the version the TypeScript SDK
//! `@agentclientprotocol/sdk` 2.x speaks by default (its v2 entry points are marked
//! experimental); a client asking for another version is answered with 1. The
//! JSON-RPC is written here, on serde_json, rather than on the Rust crate
//! `agent-client-protocol`: the door needs a dozen methods, every message it sends is
//! checked against the protocol's JSON schema in the tests, and the crate brings its
//! own executor-neutral I/O stack (and a major version a quarter) beside tokio, for
//! types this crate would still translate to and from reins's own.
//!
//! ## What maps to what
//!
//! | ACP | reins |
//! |---|---|
//! | `initialize` | protocol version 1, `loadSession: true`, text and resource-link prompts, no auth methods |
//! | `session/new` | a new session `acp/<principal>/<uuid>` |
//! | `session/load` | any stored session: its conversation replayed as `session/update`s, then its pending approvals asked again |
//! | `session/prompt` | a user message; the run's events stream as `session/update` until the stop reason |
//! | text / thinking | `agent_message_chunk` / `agent_thought_chunk` |
//! | a tool call | `tool_call` (title, [`ToolKind`], locations, raw input), `tool_call_update` (`in_progress`, `completed` / `failed` with its output) |
//! | a confirmation requirement | `session/request_permission` with allow once / allow always / reject once / reject always |
//! | allow always | the approval, then a standing grant for the tool in this session (revocable in the inbox) |
//! | reject always | the rejection, then a standing deny rule for the tool in this session: later calls are rejected without asking (revocable in the inbox) and end `failed` like the first |
//! | a call settled without running (rejected, by a person or a rule; cut off before it started; a client tool) | `tool_call_update` `failed` (`completed` for a client tool that succeeded) with the result: every call shown ends, unless it still waits for a decision |
//! | a user-input requirement | an `elicitation/create` form, when the client declares `elicitation.form` |
//! | a cancelled permission request | nothing decided: the requirement stays pending (inbox, or the next `session/load`) |
//! | `session/cancel` | an interrupt (the turn is sanitized); stop reason `cancelled` |
//! | the client's `fs` / `terminal` capabilities | client tools `read_text_file`, `write_text_file`, `run_in_terminal`, executed by the editor and recorded in the ledger |
//! | the model's plan | the `update_plan` client tool, shown as a `plan` update |
//!
//! Every decision goes through the one decision path
//! ([`Sessions::decide`]), as from every other door:
//! it is made by the configured principal with `{"via": "acp"}` in the actor's metadata,
//! on the view the person was shown, so an answer that arrives after the requirement
//! was decided elsewhere (the inbox, another editor) is refused by the run
//! (`already_decided`, audited) and changes nothing; the turn ends saying so, with the
//! refusal under [`REFUSED_META`] in the message's `_meta`. The results of the client
//! tools go the same way, as `ExternalResult` decisions.
//!
//! Over a driver that runs the sessions elsewhere (`Relayed` over Restate) without a
//! live relay, each run's updates are made from what it stores, step by step: the
//! answer's text as one chunk, a tool call announced (`tool_call`) once its message is
//! stored, and ended with its result.
//!
//! ## Errors
//!
//! Malformed JSON, or a line that is not UTF-8, is `-32700` (and the connection goes
//! on with the next line), a message that is no JSON-RPC request `-32600`, an unknown
//! method `-32601`, parameters the method cannot take `-32602`, an unknown
//! session `-32002` (resource not found); a busy session is `-32600` with reins's
//! reason. Nothing is stored for a refused request.

mod client;
mod error;
mod permission;
mod rpc;
mod server;
mod turn;
mod update;

use std::collections::HashMap;
use std::sync::Arc;

pub use client::{PLAN_TOOL, READ_TOOL, RUN_TOOL, WRITE_TOOL};
pub use error::{Error, Result};
use reins_agent::port::Sessions;
pub use turn::REFUSED_META;
pub use update::ToolKind;

/// The ACP protocol version this crate speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// An agent served over ACP, through its session port. Cheap to clone.
#[derive(Clone)]
pub struct AcpAgent {
    inner: Arc<Config>,
}

pub(crate) struct Config {
    /// The session port: every read, run, decision, grant and interrupt goes through it.
    pub(crate) sessions: Arc<dyn Sessions>,
    pub(crate) principal: String,
    pub(crate) describe: update::Describe,
    pub(crate) plans: bool,
    pub(crate) client_tools: bool,
}

impl AcpAgent {
    /// Starts configuring the door over `sessions`: an `Arc<dyn Sessions>` (the
    /// session port of any driver: `reins_agent::port::Relayed` over a Restate
    /// deployment, say), or an `Agent` itself, which is the local driver.
    pub fn builder(sessions: impl Sessions + 'static) -> AcpAgentBuilder {
        AcpAgentBuilder {
            sessions: Arc::new(sessions),
            principal: "editor".to_owned(),
            kinds: HashMap::new(),
            plans: true,
            client_tools: true,
        }
    }

    /// Who decides: every decision made through this door is recorded as theirs.
    pub fn principal(&self) -> &str {
        &self.inner.principal
    }

    /// The session port the door runs the agent through.
    pub fn sessions(&self) -> &Arc<dyn Sessions> {
        &self.inner.sessions
    }

    /// Serves one client on this process's stdin and stdout until stdin closes.
    pub async fn serve_stdio(&self) -> Result<()> {
        self.serve(tokio::io::stdin(), tokio::io::stdout()).await
    }

    /// Serves one client on a reader and a writer (a child's pipes, a socket) until
    /// the reader ends. Turns still running then are interrupted.
    pub async fn serve<R, W>(&self, reader: R, writer: W) -> Result<()>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        server::serve(self.clone(), reader, writer).await
    }
}

/// Configures an [`AcpAgent`].
#[must_use]
pub struct AcpAgentBuilder {
    sessions: Arc<dyn Sessions>,
    principal: String,
    kinds: HashMap<String, ToolKind>,
    plans: bool,
    client_tools: bool,
}

impl AcpAgentBuilder {
    /// Who answers the permission requests (default `editor`): recorded as the actor
    /// of every decision and as the creator of every grant made through this door.
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = principal.into();
        self
    }

    /// The [`ToolKind`] the editor is told for `tool` (otherwise guessed from its name).
    pub fn tool_kind(mut self, tool: impl Into<String>, kind: ToolKind) -> Self {
        self.kinds.insert(tool.into(), kind);
        self
    }

    /// Whether the model is offered [`PLAN_TOOL`] to show its plan (default yes).
    pub fn plans(mut self, on: bool) -> Self {
        self.plans = on;
        self
    }

    /// Whether the client's file-system and terminal capabilities are offered to the
    /// model as client tools (default yes, for what the client declares).
    pub fn client_tools(mut self, on: bool) -> Self {
        self.client_tools = on;
        self
    }

    /// The door.
    pub fn build(self) -> AcpAgent {
        let principal = if self.principal.trim().is_empty() {
            "editor".to_owned()
        } else {
            self.principal
        };
        AcpAgent {
            inner: Arc::new(Config {
                sessions: self.sessions,
                principal,
                describe: update::Describe { kinds: self.kinds },
                plans: self.plans,
                client_tools: self.client_tools,
            }),
        }
    }
}
