//! One connection: reads the client's lines, answers `initialize`, `session/new`,
//! `session/load`, `session/prompt` and `session/cancel`, and keeps what the
//! connection knows (the client's capabilities, the sessions it opened).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use reins_agent::port::Sessions;
use reins_agent::{Actor, AgentError, Interrupter};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use crate::rpc::{self, Incoming, Peer, RpcError, code};
use crate::{AcpAgent, PROTOCOL_VERSION, turn};

/// What the client declared at `initialize`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ClientCaps {
    pub(crate) initialized: bool,
    pub(crate) read: bool,
    pub(crate) write: bool,
    pub(crate) terminal: bool,
    /// `elicitation.form`: user input can be asked as a form.
    pub(crate) forms: bool,
}

/// A session opened on this connection (`session/new` or `session/load`).
pub(crate) struct Live {
    pub(crate) id: String,
    pub(crate) cwd: PathBuf,
    /// `session/cancel` arrived for the turn in progress.
    pub(crate) cancelled: AtomicBool,
    /// A turn (a prompt, or the questions of a load) is in progress.
    pub(crate) busy: AtomicBool,
    /// Stops the run in flight.
    pub(crate) running: Mutex<Option<Interrupter>>,
}

impl Live {
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    pub(crate) fn running(&self) -> MutexGuard<'_, Option<Interrupter>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks a turn in progress; `None` when one already is.
    pub(crate) fn begin(self: &Arc<Self>) -> Option<Busy> {
        if self.busy.swap(true, Ordering::SeqCst) {
            return None;
        }
        self.cancelled.store(false, Ordering::SeqCst);
        Some(Busy(self.clone()))
    }
}

/// Ends the turn mark when dropped.
pub(crate) struct Busy(Arc<Live>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::SeqCst);
    }
}

/// The state of one connection.
pub(crate) struct Conn {
    pub(crate) acp: AcpAgent,
    pub(crate) peer: Peer,
    caps: Mutex<ClientCaps>,
    sessions: Mutex<HashMap<String, Arc<Live>>>,
}

impl Conn {
    pub(crate) fn caps(&self) -> ClientCaps {
        *self.caps.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<String, Arc<Live>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Who decides through this door, with the door named.
    pub(crate) fn actor(&self) -> Actor {
        Actor::new(self.acp.inner.principal.clone()).with_metadata(json!({ "via": "acp" }))
    }

    /// The session port.
    pub(crate) fn port(&self) -> &dyn Sessions {
        self.acp.inner.sessions.as_ref()
    }

    /// Sends a `session/update`.
    pub(crate) fn update(&self, live: &Live, update: Value) {
        self.peer.notify(
            "session/update",
            json!({ "sessionId": live.id, "update": update }),
        );
    }

    /// A session opened on this connection, or `-32002`.
    fn live(&self, params: &Value) -> Result<Arc<Live>, RpcError> {
        let id = session_id(params)?;
        self.sessions().get(id).cloned().ok_or_else(|| {
            RpcError::not_found(format!(
                "unknown session `{}`: open it on this connection first (session/new, or session/load for a stored one)",
                clip(id)
            ))
        })
    }
}

/// Serves one client until its input ends.
pub(crate) async fn serve<R, W>(acp: AcpAgent, reader: R, mut writer: W) -> crate::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (peer, mut lines_out) = Peer::new();
    let writing = tokio::spawn(async move {
        while let Some(line) = lines_out.recv().await {
            writer.write_all(line.as_bytes()).await?;
            writer.write_all(b"\n").await?;
            writer.flush().await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let conn = Arc::new(Conn {
        acp,
        peer: peer.clone(),
        caps: Mutex::default(),
        sessions: Mutex::default(),
    });
    let mut reader = BufReader::new(reader);
    let mut bytes = Vec::new();
    let read = loop {
        bytes.clear();
        match reader.read_until(b'\n', &mut bytes).await {
            Ok(0) => break Ok(()),
            Ok(_) => {}
            Err(e) => break Err(e),
        }
        // A line that is not UTF-8 is no JSON: a parse error (its id cannot be read),
        // and the connection goes on.
        let line = match rpc::line(&bytes) {
            Ok(l) => l,
            Err(e) => {
                peer.respond(Value::Null, Err(e));
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        match rpc::parse(line) {
            Err((id, e)) => peer.respond(id, Err(e)),
            Ok(Incoming::Response { id, result }) => peer.complete(&id, result),
            Ok(Incoming::Notification { method, params }) => notification(&conn, &method, &params),
            Ok(Incoming::Request { id, method, params }) => {
                // Quick methods are answered in order, before the next line is read
                // (a `session/prompt` right after `initialize` sees it done).
                if let Some(result) = quick(&conn, &method, &params) {
                    peer.respond(id, result);
                    continue;
                }
                let conn = conn.clone();
                tokio::spawn(async move {
                    let result = request(&conn, &method, params).await;
                    conn.peer.respond(id, result);
                });
            }
        }
    };
    // The client is gone: stop what runs for it (each turn ends sanitized), fail the
    // questions it will never answer, and let the last lines drain.
    for live in conn.sessions().values() {
        live.cancelled.store(true, Ordering::SeqCst);
        if let Some(stop) = live.running().as_ref() {
            stop.interrupt();
        }
    }
    peer.close();
    drop(peer);
    drop(conn);
    let _ = tokio::time::timeout(Duration::from_secs(2), writing).await;
    read.map_err(crate::Error::Io)
}

fn notification(conn: &Arc<Conn>, method: &str, params: &Value) {
    match method {
        "session/cancel" => match conn.live(params) {
            Ok(live) => {
                live.cancelled.store(true, Ordering::SeqCst);
                if let Some(stop) = live.running().as_ref() {
                    stop.interrupt();
                }
            }
            Err(e) => tracing::debug!(error = %e.message, "session/cancel for no open session"),
        },
        // `$/cancel_request` for a request of the client's: the only long ones
        // (prompt, load) are cancelled through `session/cancel`.
        other => tracing::debug!(method = %other, "notification ignored"),
    }
}

/// The answer to a request that needs no waiting, or `None` for the others.
fn quick(conn: &Conn, method: &str, params: &Value) -> Option<Result<Value, RpcError>> {
    if method == "initialize" {
        return Some(initialize(conn, params));
    }
    if !conn.caps().initialized && method.starts_with("session/") {
        return Some(Err(RpcError::new(
            code::INVALID_REQUEST,
            format!("`{method}` before `initialize`: initialize the connection first"),
        )));
    }
    match method {
        "authenticate" => Some(Ok(json!({}))),
        "session/new" => Some(new_session(conn, params)),
        _ => None,
    }
}

async fn request(conn: &Arc<Conn>, method: &str, params: Value) -> Result<Value, RpcError> {
    match method {
        "session/load" => load_session(conn, &params).await,
        "session/prompt" => {
            let live = conn.live(&params)?;
            turn::prompt(conn, &live, &params).await
        }
        other => Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            format!(
                "method `{}` is not served here (initialize, session/new, session/load, session/prompt, session/cancel are)",
                clip(other)
            ),
        )),
    }
}

fn initialize(conn: &Conn, params: &Value) -> Result<Value, RpcError> {
    if !params
        .get("protocolVersion")
        .is_some_and(|v| v.is_u64() || v.is_i64())
    {
        return Err(RpcError::invalid_params(
            "`protocolVersion` (an integer) is required",
        ));
    }
    let caps = &params["clientCapabilities"];
    let yes = |v: &Value| v.as_bool() == Some(true);
    let declared = ClientCaps {
        initialized: true,
        read: yes(&caps["fs"]["readTextFile"]),
        write: yes(&caps["fs"]["writeTextFile"]),
        terminal: yes(&caps["terminal"]),
        forms: caps["elicitation"]["form"].is_object(),
    };
    *conn.caps.lock().unwrap_or_else(PoisonError::into_inner) = declared;
    Ok(json!({
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": true,
            "promptCapabilities": { "image": false, "audio": false, "embeddedContext": true },
            "mcpCapabilities": { "http": false, "sse": false }
        },
        "authMethods": [],
        "agentInfo": {
            "name": conn.port().card().name,
            "title": format!("{} (reins)", conn.port().card().name),
            "version": env!("CARGO_PKG_VERSION")
        }
    }))
}

/// The `cwd` of a session request: required, absolute.
fn cwd(params: &Value) -> Result<PathBuf, RpcError> {
    match params.get("cwd").and_then(Value::as_str) {
        Some(c) if Path::new(c).is_absolute() => Ok(PathBuf::from(c)),
        Some(c) => Err(RpcError::invalid_params(format!(
            "`cwd` must be an absolute path, got `{}`",
            clip(c)
        ))),
        None => Err(RpcError::invalid_params(
            "`cwd` (the absolute working directory) is required",
        )),
    }
}

fn mcp_servers(params: &Value) -> Result<(), RpcError> {
    match params.get("mcpServers") {
        Some(Value::Array(servers)) => {
            if !servers.is_empty() {
                tracing::warn!(
                    count = servers.len(),
                    "the client's MCP servers are not connected: this agent's tools are configured in its program"
                );
            }
            Ok(())
        }
        _ => Err(RpcError::invalid_params(
            "`mcpServers` (an array, possibly empty) is required",
        )),
    }
}

pub(crate) fn session_id(params: &Value) -> Result<&str, RpcError> {
    match params.get("sessionId").and_then(Value::as_str) {
        Some(id) if !id.is_empty() && id.len() <= 300 => Ok(id),
        Some(id) => Err(RpcError::invalid_params(format!(
            "`sessionId` must be 1 to 300 bytes, got {} bytes",
            id.len()
        ))),
        None => Err(RpcError::invalid_params(
            "`sessionId` (a string) is required",
        )),
    }
}

fn open(conn: &Conn, id: String, cwd: PathBuf) -> Arc<Live> {
    let live = Arc::new(Live {
        id: id.clone(),
        cwd,
        cancelled: AtomicBool::new(false),
        busy: AtomicBool::new(false),
        running: Mutex::new(None),
    });
    conn.sessions()
        .entry(id)
        .or_insert_with(|| live.clone())
        .clone()
}

fn new_session(conn: &Conn, params: &Value) -> Result<Value, RpcError> {
    let cwd = cwd(params)?;
    mcp_servers(params)?;
    let id = format!(
        "acp/{}/{}",
        conn.acp.inner.principal.replace('/', "%2F"),
        uuid::Uuid::now_v7()
    );
    open(conn, id.clone(), cwd);
    Ok(json!({ "sessionId": id }))
}

async fn load_session(conn: &Arc<Conn>, params: &Value) -> Result<Value, RpcError> {
    let id = session_id(params)?.to_owned();
    let cwd = cwd(params)?;
    mcp_servers(params)?;
    let stored = match conn.port().read(&id, true).await {
        Ok(record) => record,
        Err(AgentError::Store(reins_memory::Error::SessionNotFound { .. })) => {
            return Err(RpcError::not_found(format!(
                "no stored session `{}`",
                clip(&id)
            )));
        }
        Err(e) => return Err(agent_error(e)),
    };
    let live = open(conn, id, cwd);
    turn::load(conn, &live, stored).await?;
    Ok(json!({}))
}

/// A reins refusal as the JSON-RPC error a client can act on.
pub(crate) fn agent_error(e: AgentError) -> RpcError {
    match &e {
        AgentError::SessionBusy { .. } => RpcError::new(
            code::INVALID_REQUEST,
            format!("{e}; wait for the turn in flight to end (or cancel it) and try again"),
        ),
        AgentError::AlreadyDecided { .. } => {
            RpcError::invalid_params(e.to_string()).with_data(refusal(&e))
        }
        AgentError::Store(reins_memory::Error::SessionNotFound { .. }) => {
            RpcError::not_found(e.to_string())
        }
        AgentError::StaleView { .. }
        | AgentError::InvalidInput(_)
        | AgentError::UnknownRequirement { .. }
        | AgentError::WrongDecision { .. }
        | AgentError::RequirementExpired { .. }
        | AgentError::DuplicateDecision { .. }
        | AgentError::NothingToResume { .. } => {
            RpcError::invalid_params(format!("{e}; nothing changed"))
        }
        _ => RpcError::internal(e.to_string()),
    }
}

/// What a client reads of a reins refusal besides its message: `code` (reins-server's
/// codes: `busy`, `stale_view`, `already_decided`, `expired`, ...), and for
/// `already_decided` the `requirement` and the decision that took effect (`decided`:
/// `{decision, by, at, via}`).
pub(crate) fn refusal(e: &AgentError) -> Value {
    let code = match e {
        AgentError::SessionBusy { .. } => "busy",
        AgentError::AlreadyDecided { .. } => "already_decided",
        AgentError::StaleView { .. } => "stale_view",
        AgentError::RequirementExpired { .. } => "expired",
        AgentError::NothingToResume { .. } => "not_paused",
        AgentError::UnknownRequirement { .. } => "unknown_requirement",
        AgentError::NotEligible { .. } => "not_eligible",
        AgentError::ShownArgumentsChanged { .. } => "fingerprint_mismatch",
        AgentError::AlreadyApproved { .. } => "already_approved",
        AgentError::InvalidBudget { .. } => "invalid_budget",
        AgentError::InvalidInput(_)
        | AgentError::WrongDecision { .. }
        | AgentError::DuplicateDecision { .. } => "invalid_decision",
        AgentError::Store(reins_memory::Error::SessionNotFound { .. }) => "not_found",
        _ => "internal",
    };
    let mut v = json!({ "code": code, "message": e.to_string() });
    if let AgentError::AlreadyDecided { id, decided } = e {
        v["requirement"] = json!(id);
        v["decided"] = json!({
            "decision": decided.decision,
            "by": decided.by,
            "at": decided.at,
            "via": decided.via,
        });
    }
    v
}

/// At most 80 characters of something a client sent, for messages.
pub(crate) fn clip(s: &str) -> String {
    if s.chars().count() > 80 {
        s.chars().take(80).collect::<String>() + "…"
    } else {
        s.to_owned()
    }
}
