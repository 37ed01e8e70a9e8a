//! An rmcp server written for fault injection, served in-process over a byte stream
//! (one fresh server session per connection), and a raw server that sends garbage.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_mcp::rmcp::ServerHandler;
use reins_mcp::rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerConfig, Tool,
};
use reins_mcp::rmcp::service::{RequestContext, RoleServer, ServiceExt};
use reins_mcp::{ByteStream, McpServer};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

/// What the fault server saw and how it misbehaves; shared by every connection.
#[derive(Default)]
pub struct State {
    /// Tool calls received, by tool name, in order.
    pub calls: Mutex<Vec<String>>,
    /// Calls that saw `notifications/cancelled` (by tool name).
    pub cancelled: Mutex<Vec<String>>,
    /// How many more calls of `flaky_read` crash the connection.
    pub flaky_crashes: AtomicUsize,
    /// Whether `change` was called (the tool list is then different).
    pub changed: Mutex<bool>,
    /// Stops the current connection (a "crash").
    current: Mutex<CancellationToken>,
}

impl State {
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
    pub fn cancelled(&self) -> Vec<String> {
        self.cancelled.lock().unwrap().clone()
    }
}

fn tool(name: &str, annotations: Value, properties: Value) -> Tool {
    let mut t = json!({
        "name": name,
        "description": format!("fault server tool {name}"),
        "inputSchema": { "type": "object", "properties": properties },
    });
    if !annotations.is_null() {
        t["annotations"] = annotations;
    }
    serde_json::from_value(t).unwrap()
}

fn tools(changed: bool) -> Vec<Tool> {
    let read_only = json!({ "readOnlyHint": true });
    let mut v = vec![
        tool(
            "echo",
            read_only.clone(),
            json!({ "text": { "type": "string" } }),
        ),
        tool("crash", Value::Null, json!({})),
        tool("flaky_read", read_only.clone(), json!({})),
        tool("slow", Value::Null, json!({})),
        tool("broken", Value::Null, json!({})),
        tool("progress", read_only.clone(), json!({})),
        tool("change", Value::Null, json!({})),
    ];
    if changed {
        v.push(tool("fresh", read_only, json!({})));
    } else {
        v.push(tool("gone", read_only, json!({})));
    }
    v
}

fn text(t: impl Into<String>) -> Result<CallToolResponse, ErrorData> {
    let r: CallToolResult =
        serde_json::from_value(json!({ "content": [{ "type": "text", "text": t.into() }] }))
            .unwrap();
    Ok(r.into())
}

#[derive(Clone)]
struct FaultServer {
    state: Arc<State>,
    connection: CancellationToken,
}

/// Page size of `tools/list` (so the client must follow `nextCursor`).
const PAGE: usize = 3;

impl ServerHandler for FaultServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::default();
        info.capabilities =
            serde_json::from_value(json!({ "tools": { "listChanged": true } })).unwrap();
        info
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let all = tools(*self.state.changed.lock().unwrap());
        let start: usize = request
            .and_then(|r| r.cursor)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let end = (start + PAGE).min(all.len());
        let next = (end < all.len()).then(|| end.to_string());
        Ok(serde_json::from_value(json!({
            "tools": all[start..end],
            "nextCursor": next,
        }))
        .unwrap())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        self.state.calls.lock().unwrap().push(name.clone());
        let wait_for_cancel = || async {
            context.ct.cancelled().await;
            self.state.cancelled.lock().unwrap().push(name.clone());
        };
        match name.as_str() {
            "echo" => {
                let t = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("text"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                text(t)
            }
            "crash" => {
                self.connection.cancel();
                std::future::pending().await
            }
            "flaky_read" => {
                let left = self.state.flaky_crashes.load(Ordering::SeqCst);
                if left > 0 {
                    self.state.flaky_crashes.store(left - 1, Ordering::SeqCst);
                    self.connection.cancel();
                    std::future::pending().await
                } else {
                    text("read ok")
                }
            }
            "slow" => {
                wait_for_cancel().await;
                text("stopped")
            }
            "broken" => Err(ErrorData::internal_error(
                "boom: the database is on fire",
                None,
            )),
            "progress" => {
                let token = context.meta.get_progress_token();
                for i in 1..=3 {
                    if let Some(token) = &token {
                        let p: ProgressNotificationParam = serde_json::from_value(json!({
                            "progressToken": token, "progress": i, "total": 3, "message": format!("step {i}")
                        }))
                        .unwrap();
                        let _ = context.peer.notify_progress(p).await;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                text("progress done")
            }
            "change" => {
                *self.state.changed.lock().unwrap() = true;
                let _ = context.peer.notify_tool_list_changed().await;
                text("changed")
            }
            "gone" | "fresh" => text(format!("{name} ran")),
            _ => Err(ErrorData::invalid_params(format!("no tool {name}"), None)),
        }
    }
}

/// Opens one connection to a fresh session of the fault server.
pub fn connect(state: Arc<State>) -> ByteStream {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let connection = CancellationToken::new();
    *state.current.lock().unwrap() = connection.clone();
    let handler = FaultServer {
        state,
        connection: connection.clone(),
    };
    tokio::spawn(async move {
        let (r, w) = tokio::io::split(server);
        if let Ok(running) = handler.serve_with_ct((r, w), connection.clone()).await {
            connection.cancelled().await;
            drop(running);
        }
    });
    let (r, w) = tokio::io::split(client);
    (Box::new(r), Box::new(w))
}

/// An [`McpServer`] for the fault server (trusted: unannotated tools run at once).
pub fn server(state: &Arc<State>) -> McpServer {
    let state = state.clone();
    McpServer::stream("faults", move || {
        let state = state.clone();
        async move { Ok(connect(state)) }
    })
    .trusted(true)
}

/// A server that completes the handshake by hand, lists one tool, and answers its call
/// with a line of garbage followed by a result that is not a tool result.
pub fn garbage() -> McpServer {
    McpServer::stream("garbage", || async {
        let (client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            let (r, mut w) = tokio::io::split(server);
            let mut lines = BufReader::new(r).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let id = msg["id"].clone();
                let reply = match msg["method"].as_str() {
                    Some("initialize") => json!({ "jsonrpc": "2.0", "id": id, "result": {
                        "protocolVersion": msg["params"]["protocolVersion"],
                        "capabilities": { "tools": {} },
                        "serverInfo": { "name": "garbage", "version": "0" }
                    }}),
                    Some("tools/list") => json!({ "jsonrpc": "2.0", "id": id, "result": {
                        "tools": [{ "name": "junk", "inputSchema": { "type": "object" } }]
                    }}),
                    Some("tools/call") => {
                        w.write_all(b"}{ this is not JSON-RPC\n").await.ok();
                        json!({ "jsonrpc": "2.0", "id": id, "result": { "content": "not a list", "surprise": 1 } })
                    }
                    _ => continue,
                };
                let mut bytes = serde_json::to_vec(&reply).unwrap();
                bytes.push(b'\n');
                if w.write_all(&bytes).await.is_err() {
                    break;
                }
            }
        });
        let (r, w) = tokio::io::split(client);
        Ok((Box::new(r) as _, Box::new(w) as _))
    })
    .trusted(true)
}

/// The fault server over streamable HTTP on a loopback port (stopped when the returned
/// token is cancelled or the test's runtime ends). Records each request's
/// `Authorization` header.
pub async fn serve_http(state: Arc<State>) -> (String, Arc<Mutex<Vec<String>>>, CancellationToken) {
    use reins_mcp::rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use reins_mcp::rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let service = StreamableHttpService::new(
        move || {
            Ok(FaultServer {
                state: state.clone(),
                connection: CancellationToken::new(),
            })
        },
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let auth = Arc::new(Mutex::new(Vec::new()));
    let seen = auth.clone();
    let stopped = stop.clone();
    tokio::spawn(async move {
        loop {
            let stream = tokio::select! {
                () = stopped.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(_) => break,
                },
            };
            let service = service.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        if let Some(v) = req.headers().get("authorization") {
                            seen.lock()
                                .unwrap()
                                .push(v.to_str().unwrap_or_default().to_owned());
                        }
                        let mut service = service.clone();
                        async move { tower_service::Service::call(&mut service, req).await }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (format!("http://{addr}/mcp"), auth, stop)
}
