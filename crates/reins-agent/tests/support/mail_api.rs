//! A loopback "mail API" that dedupes by `Idempotency-Key`, the way payment and mail
//! APIs do: the far end of the exactly-once tests. It is a real HTTP/1.1 server on
//! 127.0.0.1 (one request per connection), stopped when dropped; the tests count what
//! it delivered. And a client for tools: send with the call's key, look a key up.
//!
//! - `POST /messages` with an `Idempotency-Key` header and a JSON body
//!   `{"to", "session", "tool_use_id"}`: delivers once per key (`201 {"id"}`); a repeated key
//!   gets the first answer again (`200`, `Idempotent-Replayed: true`) and delivers
//!   nothing. No key: `400`.
//! - `GET /messages/by-key/<key>`: `200 {"id"}` when that key delivered, else `404`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_tool::{Reconciliation, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: String,
    pub key: String,
    pub to: String,
    pub session: String,
    pub tool_use_id: String,
}

/// What the API saw.
#[derive(Debug, Default)]
pub struct MailState {
    pub deliveries: Vec<Delivery>,
    /// Every `POST /messages`, with its `Idempotency-Key` header (if any).
    pub posts: Vec<Option<String>>,
    /// Posts answered from the dedupe table (nothing delivered).
    pub replays: usize,
    /// `GET /messages/by-key/..` requests.
    pub lookups: usize,
    by_key: HashMap<String, String>,
}

/// The running API; stops when dropped.
pub struct MailApi {
    pub url: String,
    pub state: Arc<Mutex<MailState>>,
    stop: Stop,
}

enum Stop {
    Task(tokio::task::JoinHandle<()>),
    Thread(Option<tokio::sync::oneshot::Sender<()>>),
}

impl Drop for MailApi {
    fn drop(&mut self) {
        match &mut self.stop {
            Stop::Task(t) => t.abort(),
            Stop::Thread(tx) => {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(());
                }
            }
        }
    }
}

impl MailApi {
    /// Serves on the current runtime.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (url, state, task) = Self::serve_on(listener);
        Self {
            url,
            state,
            stop: Stop::Task(tokio::spawn(task)),
        }
    }

    /// Serves on a thread of its own (for a test whose runtime threads block).
    pub fn start_in_thread() -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let (url, state, task) = Self::serve_on(listener);
                tx.send((url, state)).unwrap();
                tokio::select! {
                    () = task => {}
                    _ = stop_rx => {}
                }
            });
        });
        let (url, state) = rx.recv().unwrap();
        Self {
            url,
            state,
            stop: Stop::Thread(Some(stop_tx)),
        }
    }

    fn serve_on(
        listener: TcpListener,
    ) -> (
        String,
        Arc<Mutex<MailState>>,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(MailState::default()));
        let s = state.clone();
        let task = async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    continue;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    // A client that stalls or dies mid-request is dropped.
                    let _ = tokio::time::timeout(Duration::from_secs(10), serve(conn, s)).await;
                });
            }
        };
        (url, state, task)
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.state.lock().unwrap().deliveries.clone()
    }

    pub fn posts(&self) -> Vec<Option<String>> {
        self.state.lock().unwrap().posts.clone()
    }
}

async fn serve(mut conn: TcpStream, state: Arc<Mutex<MailState>>) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 * 1024 {
            return Ok(());
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let mut headers = HashMap::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: Value = serde_json::from_slice(&buf[head_end..head_end + len]).unwrap_or(Value::Null);
    let mut parts = request_line.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, extra, answer) = {
        let mut s = state.lock().unwrap();
        match (method, path) {
            ("POST", "/messages") => {
                let key = headers.get("idempotency-key").cloned();
                s.posts.push(key.clone());
                match key {
                    None => (
                        "400 Bad Request",
                        "",
                        json!({"error": "an Idempotency-Key header is required"}),
                    ),
                    Some(key) => match s.by_key.get(&key).cloned() {
                        Some(id) => {
                            s.replays += 1;
                            ("200 OK", "Idempotent-Replayed: true\r\n", json!({"id": id}))
                        }
                        None => {
                            let id = format!("msg-{}", s.deliveries.len() + 1);
                            s.by_key.insert(key.clone(), id.clone());
                            s.deliveries.push(Delivery {
                                id: id.clone(),
                                key,
                                to: body["to"].as_str().unwrap_or_default().to_owned(),
                                session: body["session"].as_str().unwrap_or_default().to_owned(),
                                tool_use_id: body["tool_use_id"]
                                    .as_str()
                                    .unwrap_or_default()
                                    .to_owned(),
                            });
                            ("201 Created", "", json!({"id": id}))
                        }
                    },
                }
            }
            ("GET", p) if p.starts_with("/messages/by-key/") => {
                s.lookups += 1;
                let key = &p["/messages/by-key/".len()..];
                match s.by_key.get(key) {
                    Some(id) => ("200 OK", "", json!({"id": id})),
                    None => (
                        "404 Not Found",
                        "",
                        json!({"error": "no message with that key"}),
                    ),
                }
            }
            _ => ("404 Not Found", "", json!({"error": "no such route"})),
        }
    };
    let body = answer.to_string();
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(response.as_bytes()).await?;
    conn.shutdown().await
}

/// What a tool uses to talk to the API.
#[derive(Clone)]
pub struct MailClient {
    base: String,
    http: reqwest::Client,
}

impl MailClient {
    pub fn new(base: impl Into<String>) -> Self {
        Self {
            base: base.into(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap(),
        }
    }

    /// Sends, with the call's idempotency key as the `Idempotency-Key` header.
    pub async fn send(&self, ctx: &ToolContext, to: &str) -> Result<String, ToolError> {
        let (name, key) = ctx
            .idempotency_header()
            .ok_or_else(|| ToolError::failed("no idempotency key"))?;
        let r = self
            .http
            .post(format!("{}/messages", self.base))
            .header(name, key)
            .json(&json!({"to": to, "session": ctx.session_id, "tool_use_id": ctx.tool_use_id}))
            .send()
            .await
            .map_err(|e| ToolError::failed(format!("the mail API is unreachable: {e}")))?;
        let status = r.status();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(ToolError::failed(format!(
                "the mail API said {status}: {body}"
            )));
        }
        Ok(format!(
            "sent to {to} as {}",
            body["id"].as_str().unwrap_or("?")
        ))
    }

    /// Whether the call's key delivered a message: the tool's `reconcile`.
    pub async fn lookup(&self, ctx: &ToolContext) -> Result<Reconciliation, ToolError> {
        let key = ctx
            .idempotency_key()
            .ok_or_else(|| ToolError::failed("no idempotency key"))?;
        let r = self
            .http
            .get(format!("{}/messages/by-key/{key}", self.base))
            .send()
            .await
            .map_err(|e| ToolError::failed(format!("the mail API is unreachable: {e}")))?;
        match r.status().as_u16() {
            200 => {
                let body: Value = r.json().await.unwrap_or(Value::Null);
                Ok(Reconciliation::Happened(ToolOutput::text(format!(
                    "sent as {} (found by its idempotency key)",
                    body["id"].as_str().unwrap_or("?")
                ))))
            }
            404 => Ok(Reconciliation::NotRun),
            s => Ok(Reconciliation::cannot_tell(format!(
                "the mail API said {s}"
            ))),
        }
    }
}
