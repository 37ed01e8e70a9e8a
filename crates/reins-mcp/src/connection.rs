//! One MCP server connection: starting it, the client-side handler (progress, tool list
//! changes), reconnecting, and the tool list as last seen.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use reins_tool::ToolContext;
use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ErrorData, Implementation, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    TASKS_EXTENSION_ID,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, RequestContext, RoleClient,
    RunningService,
};
use serde_json::Value;

use crate::config::{Elicitation, ElicitationAnswer, ElicitationHandler, Endpoint, McpServer};
use crate::error::{Error, Result};

/// How many of a child's last stderr lines are kept for error messages.
#[cfg(feature = "stdio")]
const STDERR_TAIL: usize = 8;

/// Locks a std mutex, recovering the data if a panicking thread poisoned it (every
/// critical section here leaves the data consistent).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How a connection opens, and the revision a legacy `initialize` announces.
///
/// By default: probe with `server/discover` for revision 2026-07-28 and fall back to
/// `initialize` with the newest revision that still has it (2025-11-25; 2026-07-28 has
/// no `initialize`, so announcing it there would name a revision the handshake cannot
/// speak), as the spec's backward-compatibility rules describe (rmcp's `Auto`
/// lifecycle). [`McpServer::protocol_version`] pins one revision instead.
pub(crate) fn lifecycle(
    config: &McpServer,
) -> std::result::Result<(ClientLifecycleMode, ProtocolVersion), String> {
    let legacy = ProtocolVersion::LATEST_WITH_INITIALIZE;
    let Some(wanted) = &config.protocol_version else {
        return Ok((
            ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(legacy.clone()),
            },
            legacy,
        ));
    };
    let Some(version) = ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .find(|v| v.as_str() == wanted)
    else {
        let known: Vec<&str> = ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .map(ProtocolVersion::as_str)
            .collect();
        return Err(format!(
            "protocol version `{wanted}` is not one this client speaks ({})",
            known.join(", ")
        ));
    };
    Ok(if version.has_initialize() {
        (ClientLifecycleMode::Initialize, version.clone())
    } else {
        (
            ClientLifecycleMode::Discover {
                preferred_versions: vec![version.clone()],
            },
            legacy,
        )
    })
}

/// State the client handler shares with calls in flight.
#[derive(Default)]
pub(crate) struct Routes {
    /// Calls in flight by progress token (with the order they started in): progress
    /// goes to their chunk sender, questions to the latest that can ask.
    progress: Mutex<HashMap<String, (u64, ToolContext)>>,
    /// Numbers the calls in flight.
    started: std::sync::atomic::AtomicU64,
    /// Set by `notifications/tools/list_changed`, cleared by a re-list.
    pub(crate) tools_changed: AtomicBool,
    /// The child's last stderr lines.
    stderr: Mutex<VecDeque<String>>,
}

pub(crate) fn token_key(token: &ProgressToken) -> String {
    serde_json::to_string(token).unwrap_or_default()
}

/// Routes a call's progress notifications to its context until dropped.
pub(crate) struct ProgressRoute {
    routes: Arc<Routes>,
    key: String,
}

impl ProgressRoute {
    pub(crate) fn new(routes: &Arc<Routes>, token: &ProgressToken, ctx: ToolContext) -> Self {
        let key = token_key(token);
        let n = routes.started.fetch_add(1, Ordering::Relaxed);
        lock(&routes.progress).insert(key.clone(), (n, ctx));
        Self {
            routes: routes.clone(),
            key,
        }
    }
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        lock(&self.routes.progress).remove(&self.key);
    }
}

/// The MCP client side: answers the server's notifications and questions.
#[derive(Clone)]
pub(crate) struct Handler {
    server: String,
    routes: Arc<Routes>,
    elicitation: Option<ElicitationHandler>,
    elicit_in_runs: bool,
    /// The revision an `initialize` announces.
    legacy_version: ProtocolVersion,
}

/// `[progress 2/5] message` for a progress notification.
pub(crate) fn progress_text(p: &ProgressNotificationParam) -> String {
    let mut text = match p.total {
        Some(total) => format!("[progress {}/{}]", p.progress, total),
        None => format!("[progress {}]", p.progress),
    };
    if let Some(m) = &p.message {
        text.push(' ');
        text.push_str(m);
    }
    text
}

impl Handler {
    /// The call an `elicitation/create` belongs to: MCP does not say which request it
    /// is about, so it goes to the latest call in flight on this server that can ask
    /// (the only one, unless several calls run at once).
    fn latest_asker(&self) -> Option<ToolContext> {
        lock(&self.routes.progress)
            .values()
            .filter(|(_, ctx)| ctx.can_ask())
            .max_by_key(|(n, _)| *n)
            .map(|(_, ctx)| ctx.clone())
    }
}

/// Answers one form elicitation: through the callback when one is set, else as a
/// question of the run of `ctx` (when given), else declined. An accepted answer that
/// does not match the requested schema is refused back to the server.
pub(crate) async fn elicit(
    server: &str,
    callback: Option<&ElicitationHandler>,
    ctx: Option<ToolContext>,
    request: ElicitRequestParams,
) -> std::result::Result<ElicitResult, ErrorData> {
    let ElicitRequestParams::FormElicitationParams {
        message,
        requested_schema,
        ..
    } = request
    else {
        // URL mode is not declared.
        return Ok(ElicitResult::new(ElicitationAction::Decline));
    };
    let schema = serde_json::to_value(&requested_schema).unwrap_or(Value::Null);
    let answer = match (callback, ctx) {
        (Some(answer), _) => {
            answer(Elicitation {
                server: server.to_owned(),
                message,
                requested_schema: schema.clone(),
            })
            .await
        }
        (None, Some(ctx)) => {
            let question = reins_tool::ToolQuestion {
                message,
                schema: schema.clone(),
            };
            match ctx.ask(question).await {
                reins_tool::QuestionAnswer::Accept(values) => ElicitationAnswer::Accept(values),
                reins_tool::QuestionAnswer::Decline => ElicitationAnswer::Decline,
                reins_tool::QuestionAnswer::Cancel => ElicitationAnswer::Cancel,
            }
        }
        (None, None) => {
            tracing::debug!(server = %server, "an elicitation with no call that can ask: declined");
            ElicitationAnswer::Decline
        }
    };
    Ok(match answer {
        ElicitationAnswer::Accept(values) => {
            if let Err(problems) = reins_tool::validate(&schema, &values) {
                return Err(ErrorData::invalid_params(
                    format!(
                        "the answer does not match the requested schema: {}",
                        problems.join("; ")
                    ),
                    None,
                ));
            }
            ElicitResult::new(ElicitationAction::Accept).with_content(values)
        }
        ElicitationAnswer::Decline => ElicitResult::new(ElicitationAction::Decline),
        ElicitationAnswer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
    })
}

impl ClientHandler for Handler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let ctx = lock(&self.routes.progress)
            .get(&token_key(&params.progress_token))
            .map(|(_, ctx)| ctx.clone());
        match ctx {
            Some(ctx) => ctx.emit(progress_text(&params)),
            None => tracing::debug!(server = %self.server, "progress for a call no longer running"),
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::debug!(server = %self.server, "the server's tool list changed");
        self.routes.tools_changed.store(true, Ordering::Release);
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ctx = if self.elicit_in_runs {
            self.latest_asker()
        } else {
            None
        };
        elicit(&self.server, self.elicitation.as_ref(), ctx, request).await
    }

    fn get_info(&self) -> ClientConfig {
        // The Tasks extension is always declared: a server may then answer a long call
        // with a task, which the call follows (`tasks/get`, `tasks/update`, `tasks/cancel`).
        let mut caps = serde_json::json!({ "extensions": { TASKS_EXTENSION_ID: {} } });
        if self.elicitation.is_some() || self.elicit_in_runs {
            caps["elicitation"] = serde_json::json!({ "form": {} });
        }
        let capabilities: ClientCapabilities = serde_json::from_value(caps).unwrap_or_default();
        let mut config = ClientConfig::new(
            capabilities,
            Implementation::new("reins-mcp", env!("CARGO_PKG_VERSION")),
        );
        // What a legacy `initialize` announces (rmcp's default is its newest revision,
        // which has no `initialize`).
        config.protocol_version = self.legacy_version.clone();
        config
    }
}

/// A running session with the server.
pub(crate) struct Live {
    pub(crate) service: RunningService<RoleClient, Handler>,
    pub(crate) pid: Option<u32>,
    pub(crate) generation: u64,
}

impl Live {
    pub(crate) fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }
}

/// The connection to one server, reopened when it is found closed.
pub(crate) struct Connection {
    pub(crate) config: McpServer,
    pub(crate) routes: Arc<Routes>,
    live: tokio::sync::Mutex<Option<Arc<Live>>>,
    generations: AtomicU64,
    pub(crate) cancellations: AtomicU64,
    /// The tools as last listed, by MCP name, in the server's order.
    pub(crate) tools: Mutex<Vec<rmcp::model::Tool>>,
}

impl Connection {
    pub(crate) fn new(config: McpServer) -> Self {
        Self {
            config,
            routes: Arc::default(),
            live: tokio::sync::Mutex::new(None),
            generations: AtomicU64::new(0),
            cancellations: AtomicU64::new(0),
            tools: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// How many connections have been opened so far.
    pub(crate) fn connections(&self) -> u64 {
        self.generations.load(Ordering::Acquire)
    }

    /// The open session, opening one if there is none or the last one closed.
    pub(crate) async fn live(&self) -> Result<Arc<Live>> {
        let mut slot = self.live.lock().await;
        if let Some(live) = slot.as_ref() {
            if !live.is_closed() {
                return Ok(live.clone());
            }
            tracing::info!(server = %self.name(), "MCP connection closed; reconnecting");
        }
        *slot = None;
        let live = Arc::new(self.open().await?);
        *slot = Some(live.clone());
        Ok(live)
    }

    /// The open session, if any (never connects).
    pub(crate) async fn current(&self) -> Option<Arc<Live>> {
        self.live.lock().await.clone()
    }

    /// Drops the session of this generation (a newer one is kept).
    pub(crate) async fn forget(&self, generation: u64) {
        let mut slot = self.live.lock().await;
        if slot.as_ref().is_some_and(|l| l.generation == generation) {
            *slot = None;
        }
    }

    /// Closes the session (the child process, if any, is stopped).
    pub(crate) async fn close(&self) {
        let live = self.live.lock().await.take();
        if let Some(live) = live {
            match Arc::try_unwrap(live) {
                Ok(mut live) => {
                    let _ = live.service.close().await;
                }
                // A call still holds it; dropping the last handle stops it.
                Err(shared) => drop(shared),
            }
        }
    }

    /// The child's last stderr lines, for error messages (empty when none).
    pub(crate) fn stderr_tail(&self) -> String {
        let lines = lock(&self.routes.stderr);
        if lines.is_empty() {
            String::new()
        } else {
            let joined: Vec<&str> = lines.iter().map(String::as_str).collect();
            format!("; the server's last stderr lines: {}", joined.join(" | "))
        }
    }

    async fn open(&self) -> Result<Live> {
        let server = self.name().to_owned();
        let limit = self.config.connect_timeout;
        match tokio::time::timeout(limit, self.open_inner()).await {
            Ok(r) => r,
            Err(_) => Err(Error::ConnectTimeout {
                server,
                seconds: limit.as_secs().max(1),
            }),
        }
    }

    async fn open_inner(&self) -> Result<Live> {
        let (lifecycle, legacy_version) =
            lifecycle(&self.config).map_err(|message| Error::Config {
                server: self.name().to_owned(),
                message,
            })?;
        let handler = Handler {
            server: self.name().to_owned(),
            routes: self.routes.clone(),
            elicitation: self.config.elicitation.clone(),
            elicit_in_runs: self.config.elicit_in_runs,
            legacy_version,
        };
        let handshake = |e: &dyn std::fmt::Display| Error::Handshake {
            server: self.name().to_owned(),
            message: e.to_string(),
        };
        let (service, pid) = match &self.config.endpoint {
            #[cfg(feature = "stdio")]
            Endpoint::Stdio {
                program,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(args).envs(env);
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                let (child, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|source| Error::Spawn {
                        server: self.name().to_owned(),
                        command: self.config.endpoint.describe(),
                        source,
                    })?;
                let pid = child.id();
                if let Some(stderr) = stderr {
                    self.drain_stderr(stderr);
                }
                let service = handler
                    .serve_with_lifecycle(child, lifecycle)
                    .await
                    .map_err(|e| Error::Handshake {
                        server: self.name().to_owned(),
                        message: format!("{e}{}", self.stderr_tail()),
                    })?;
                (service, pid)
            }
            #[cfg(not(feature = "stdio"))]
            Endpoint::Stdio { .. } => {
                return Err(Error::Config {
                    server: self.name().to_owned(),
                    message: "the stdio transport needs reins-mcp's `stdio` feature".into(),
                });
            }
            #[cfg(feature = "http")]
            Endpoint::Http {
                url,
                headers,
                bearer,
            } => {
                let service = crate::http::serve(
                    handler,
                    lifecycle,
                    self.name(),
                    url,
                    headers,
                    bearer.as_deref(),
                )
                .await?;
                (service, None)
            }
            #[cfg(not(feature = "http"))]
            Endpoint::Http { .. } => {
                return Err(Error::Config {
                    server: self.name().to_owned(),
                    message: "the HTTP transport needs reins-mcp's `http` feature".into(),
                });
            }
            Endpoint::Stream(open) => {
                let stream = open().await.map_err(|e| handshake(&e))?;
                (
                    handler
                        .serve_with_lifecycle(stream, lifecycle)
                        .await
                        .map_err(|e| handshake(&e))?,
                    None,
                )
            }
        };
        let generation = self.generations.fetch_add(1, Ordering::AcqRel) + 1;
        tracing::debug!(server = %self.name(), generation, "MCP session open");
        Ok(Live {
            service,
            pid,
            generation,
        })
    }

    #[cfg(feature = "stdio")]
    fn drain_stderr(&self, stderr: tokio::process::ChildStderr) {
        use tokio::io::AsyncBufReadExt;
        let routes = self.routes.clone();
        let server = self.name().to_owned();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(server = %server, "stderr: {line}");
                let mut tail = lock(&routes.stderr);
                if tail.len() == STDERR_TAIL {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
    }

    /// Lists every tool (following pagination) and keeps the list.
    pub(crate) async fn list_tools(&self) -> Result<Vec<rmcp::model::Tool>> {
        let live = self.live().await?;
        // Cleared before listing: a change announced while we list triggers another.
        self.routes.tools_changed.store(false, Ordering::Release);
        let tools = live
            .service
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| Error::Request {
                server: self.name().to_owned(),
                method: "tools/list",
                message: e.to_string(),
            })?;
        let offered: Vec<_> = tools
            .into_iter()
            .filter(|t| self.config.offers(&t.name))
            .collect();
        *lock(&self.tools) = offered.clone();
        Ok(offered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn progress_reads_naturally() {
        let p: ProgressNotificationParam = serde_json::from_value(
            json!({ "progressToken": 1, "progress": 2, "total": 5, "message": "copying" }),
        )
        .unwrap();
        assert_eq!(progress_text(&p), "[progress 2/5] copying");
        let p: ProgressNotificationParam =
            serde_json::from_value(json!({ "progressToken": "a", "progress": 0.5 })).unwrap();
        assert_eq!(progress_text(&p), "[progress 0.5]");
    }
}
