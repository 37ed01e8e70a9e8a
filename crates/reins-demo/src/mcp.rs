//! The SafeAgent demo agent as an MCP server: `cargo xtask serve --mcp stdio|http`
//! (with `--restate`, its sessions run on Restate).
//!
//! The same agent, store and sandbox as `serve` (see [`crate::serve()`]), exposed as one
//! MCP tool (`SafeAgent`: `message`, optional `session`) with reins-mcp-server:
//!
//! - `--mcp http`: streamable HTTP at `/mcp` on the server's port, beside reins-server's
//!   API and approval inbox (one process, one store).
//! - `--mcp stdio`: MCP on stdin/stdout, for a host that starts the program (a desktop
//!   assistant, the MCP Inspector); the API and the inbox run on `--port` (a free port
//!   unless given) and everything the program prints goes to stderr.
//!
//! A client that can answer questions (`elicitation`) gets each approval as a form; one
//! that cannot (the MCP Inspector) gets a paused result that names the inbox URL where
//! a person decides, and calls again with the `session` to continue.
//!
//! The MCP endpoint takes no credentials: like stdio, it is for this machine only
//! (loopback listener, `Host` and `Origin` checked against DNS rebinding). Calls run
//! as the principal `local` (sessions `mcp/local/<uuid>`).

use std::sync::Arc;

use reins::agent::port::Sessions;
use reins::mcp_server::{HttpService, McpAgentServer};

/// How the agent is served over MCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum McpMode {
    /// Over this process's stdin/stdout.
    Stdio,
    /// Streamable HTTP at `/mcp` beside the API and the inbox.
    Http,
}

impl McpMode {
    /// Reads `stdio` or `http`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "stdio" => Ok(Self::Stdio),
            "http" => Ok(Self::Http),
            other => Err(format!(
                "--mcp: `{other}` is not a transport; use `stdio` (MCP on stdin/stdout) or `http` (MCP at /mcp)"
            )),
        }
    }
}

/// The MCP server over the demo agent's sessions (the agent itself, or `Relayed` over
/// a Restate deployment); paused calls name `inbox` as the place to decide.
pub fn server(sessions: Arc<dyn Sessions>, inbox: &str) -> Result<McpAgentServer, String> {
    // A fresh signing key per process: a `requestState` issued before a restart is
    // refused (the client calls again with the session and sees what is pending).
    let key = format!(
        "{}{}",
        reins_server::generate_token(),
        reins_server::generate_token()
    );
    McpAgentServer::builder(sessions)
        .signing_key(key.into_bytes())
        .inbox_url(inbox)
        .build()
        .map_err(|e| e.to_string())
}

/// The streamable HTTP endpoint for the loopback listener: loopback `Host` names and
/// browser origins only.
pub fn http_service(server: &McpAgentServer) -> HttpService {
    server.http_service()
}
