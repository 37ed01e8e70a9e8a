//! Shared helpers: a test agent (scripted model, a confirm-gated `delete_file`, a
//! cancellable `slow_search`, a `send_email` and a user-input `book`), a server on a
//! loopback port that stops when dropped, and a small SSE reader.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use reins_agent::Agent;
use reins_memory::MemoryStore;
use reins_message::{Msg, Role};
use reins_model::{ChatRequest, ScriptedModel, ScriptedResponse};
use reins_server::{AccessRole, Auth, Principal, Server};
use reins_tool::{ToolContext, ToolError, ToolPolicy, Toolkit};
use serde_json::{Value, json};

pub const ADMIN: &str = "admin-token";
pub const ALICE: &str = "alice-token";
pub const BOB: &str = "bob-token";
pub const ANA: &str = "ana-token";
/// An approver for `send_email` only.
pub const RITA: &str = "rita-token";
/// A user who also approves (the person at an AG-UI page deciding on their own runs).
pub const CAROL: &str = "carol-token";

pub fn auth() -> Auth {
    Auth::new()
        .token(ADMIN, Principal::new("ops", [AccessRole::Admin]))
        .token(ALICE, Principal::new("alice", [AccessRole::User]))
        .token(BOB, Principal::new("bob", [AccessRole::User]))
        .token(ANA, Principal::new("ana", [AccessRole::Approver]))
        .token(
            RITA,
            Principal::new("rita", [AccessRole::Approver]).tools(["send_email"]),
        )
        .token(
            CAROL,
            Principal::new("carol", [AccessRole::User, AccessRole::Approver]),
        )
}

/// What the tools did (e.g. `delete:a.txt`), to check that nothing ran twice.
pub type Ran = Arc<Mutex<Vec<String>>>;

/// A file that every tool of this process also writes what it did to, one line each
/// (see [`record_to_file`]).
static RAN_FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Makes every tool of this process also append what it did to `path`: a process
/// that runs the sessions for a test in another process (reins-restate's door suite)
/// tells it what ran. The first path given stays.
pub fn record_to_file(path: impl Into<std::path::PathBuf>) {
    let _ = RAN_FILE.set(path.into());
}

/// Records `what` a tool did in `ran` (and in the file of [`record_to_file`]).
fn record(ran: &Ran, what: String) {
    if let Some(path) = RAN_FILE.get() {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        // One write per line: a reader never sees half of one.
        f.write_all(format!("{what}\n").as_bytes()).unwrap();
    }
    ran.lock().unwrap().push(what);
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// The file.
    path: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct QueryArgs {
    /// What to search.
    query: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct MailArgs {
    /// Recipient.
    to: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct BookArgs {
    /// What to book.
    what: String,
    /// When.
    #[serde(default)]
    date: Option<String>,
}

pub fn toolkit(ran: &Ran) -> Toolkit {
    let mut t = Toolkit::new();
    let r = ran.clone();
    t.add(
        Toolkit::function("delete_file", "Delete a file", move |a: PathArgs, _ctx| {
            let r = r.clone();
            async move {
                record(&r, format!("delete:{}", a.path));
                Ok::<_, ToolError>(format!("deleted {}", a.path))
            }
        })
        .policy(ToolPolicy::confirm()),
    )
    .unwrap();
    let r = ran.clone();
    t.add(
        Toolkit::function("send_email", "Send an email", move |a: MailArgs, _ctx| {
            let r = r.clone();
            async move {
                record(&r, format!("mail:{}", a.to));
                Ok::<_, ToolError>(format!("mailed {}", a.to))
            }
        })
        .policy(ToolPolicy::confirm()),
    )
    .unwrap();
    let r = ran.clone();
    t.add(
        Toolkit::function("book", "Book something", move |a: BookArgs, _ctx| {
            let r = r.clone();
            async move {
                let date = a.date.unwrap_or_default();
                record(&r, format!("book:{}@{date}", a.what));
                Ok::<_, ToolError>(format!("booked {} on {date}", a.what))
            }
        })
        .policy(ToolPolicy::user_input(json!({
            "type": "object",
            "properties": {"date": {"type": "string"}},
            "required": ["date"]
        }))),
    )
    .unwrap();
    let r = ran.clone();
    t.add(Toolkit::function(
        "slow_search",
        "Search, slowly (about 20 s unless interrupted)",
        move |a: QueryArgs, ctx: ToolContext| {
            let r = r.clone();
            async move {
                record(&r, format!("search-start:{}", a.query));
                for _ in 0..400 {
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(50)) => {}
                        () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
                    }
                }
                record(&r, format!("search-done:{}", a.query));
                Ok::<_, ToolError>(format!("results for {}", a.query))
            }
        },
    ))
    .unwrap();
    t
}

fn new_call_id() -> String {
    format!("call_{}", uuid_like())
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{:x}{:x}{n}", t, std::process::id())
}

/// The model's rules: `delete X`, `mail X`, `book X`, `slow X` (and `ui X`, the client's
/// own `pick_color`) call tools; tool
/// results get a one-line summary; anything else is echoed.
pub fn respond(req: &ChatRequest) -> ScriptedResponse {
    let Some(last) = req.messages.iter().rev().find(|m| m.role != Role::System) else {
        return ScriptedResponse::text("hello");
    };
    if last.role == Role::Tool {
        let parts: Vec<String> = last
            .tool_results_iter()
            .map(|r| format!("{}: {:?} {}", r.name, r.outcome, r.text()))
            .collect();
        return ScriptedResponse::text(format!("Outcome — {}", parts.join("; ")));
    }
    let text = last.text();
    let mut words = text.split_whitespace();
    let verb = words.next().unwrap_or("");
    let arg = words.collect::<Vec<_>>().join(" ");
    let call =
        |name: &str, args: Value| ScriptedResponse::tool_call_with_id(new_call_id(), name, args);
    match verb {
        "delete" => call("delete_file", json!({"path": arg})),
        "mail" => call("send_email", json!({"to": arg})),
        "book" => call("book", json!({"what": arg})),
        "slow" => call("slow_search", json!({"query": arg})),
        // A tool the client declares and runs itself (not in the toolkit).
        "ui" => call("pick_color", json!({"hint": arg})),
        _ => ScriptedResponse::text(format!("echo: {text}")),
    }
}

pub fn agent(store: Arc<dyn MemoryStore>, ran: &Ran) -> Agent {
    agent_with(store, ran, |b| b)
}

/// The test agent, with more settings from `more` (a policy, a budget...).
pub fn agent_with(
    store: Arc<dyn MemoryStore>,
    ran: &Ran,
    more: impl FnOnce(reins_agent::AgentBuilder) -> reins_agent::AgentBuilder,
) -> Agent {
    more(
        Agent::builder()
            .name("TestAgent")
            .model(ScriptedModel::from_fn(respond).with_chunk_size(4))
            .toolkit(toolkit(ran))
            .store_arc(store)
            .session_lease(Duration::from_secs(3))
            .tool_lease(Duration::from_secs(3))
            .interrupt_grace(Duration::from_millis(500)),
    )
    .build()
    .unwrap()
}

/// A server on a loopback port; it stops when dropped.
pub struct TestServer {
    pub base: String,
    pub addr: std::net::SocketAddr,
    pub client: reqwest::Client,
    pub ran: Ran,
    pub agent: Agent,
    task: tokio::task::JoinHandle<()>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn sqlite_store() -> (tempfile::TempDir, Arc<dyn MemoryStore>) {
    let dir = tempfile::tempdir().unwrap();
    let store = reins_memory::SqliteStore::open(dir.path().join("s.db"))
        .await
        .unwrap();
    (dir, Arc::new(store))
}

pub async fn start() -> TestServer {
    start_with(|s| s).await
}

pub async fn start_with(configure: impl FnOnce(Server) -> Server) -> TestServer {
    let (dir, store) = sqlite_store().await;
    let ran: Ran = Arc::default();
    let agent = agent(store, &ran);
    serve(agent, ran, Some(dir), configure).await
}

pub async fn serve(
    agent: Agent,
    ran: Ran,
    dir: Option<tempfile::TempDir>,
    configure: impl FnOnce(Server) -> Server,
) -> TestServer {
    let server = configure(
        Server::new(agent.clone())
            .auth(auth())
            .poll_interval(Duration::from_millis(200)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve_on(listener, server, agent, ran, dir)
}

/// A server over `backend` (whose own processes run the sessions), with `agent` as
/// the port's configuration and store ([`reins_agent::Relayed`]).
pub async fn serve_relayed(
    agent: Agent,
    backend: Arc<dyn reins_agent::SessionBackend>,
    ran: Ran,
    dir: Option<tempfile::TempDir>,
) -> TestServer {
    let port = reins_agent::Relayed::new(agent.clone(), backend).reread(Duration::from_millis(200));
    let server = Server::new(port)
        .auth(auth())
        .poll_interval(Duration::from_millis(200));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve_on(listener, server, agent, ran, dir)
}

/// Serves `server` on `listener` (bound by the caller, who may need its address in
/// the server's configuration first).
pub fn serve_on(
    listener: tokio::net::TcpListener,
    server: Server,
    agent: Agent,
    ran: Ran,
    dir: Option<tempfile::TempDir>,
) -> TestServer {
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = server.serve(listener).await;
    });
    TestServer {
        base: format!("http://{addr}"),
        addr,
        client: reqwest::Client::new(),
        ran,
        agent,
        task,
        _dir: dir,
    }
}

/// Runs `text` on `session` as alice and checks that it paused, each requirement with
/// the fingerprint of its arguments; returns the run's answer.
pub async fn paused_run(s: &TestServer, session: &str, text: &str) -> Value {
    let (st, out) = s
        .post(
            ALICE,
            &format!("/v1/sessions/{}/runs", enc(session)),
            json!({"message": text}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["status"], "paused", "{out}");
    // Every requirement of a run's answer carries the fingerprint of its arguments.
    for r in out["requirements"].as_array().unwrap() {
        assert_eq!(
            r["fingerprint"].as_str().map(str::len),
            Some(64),
            "no fingerprint: {r}"
        );
    }
    out
}

impl TestServer {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn post(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
        let res = self
            .client
            .post(self.url(path))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = res.status().as_u16();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, token: &str, path: &str) -> (u16, Value) {
        let res = self
            .client
            .get(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let status = res.status().as_u16();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    pub fn ran(&self) -> Vec<String> {
        self.ran.lock().unwrap().clone()
    }
}

/// One SSE event.
#[derive(Debug, Clone, Default)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: String,
    pub data: Value,
}

/// Reads SSE events from a response.
pub struct SseReader {
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
}

impl SseReader {
    pub fn new(res: reqwest::Response) -> Self {
        Self {
            stream: res.bytes_stream().boxed(),
            buf: String::new(),
        }
    }

    /// The next event (keep-alive comments skipped), or `None` at the end. Gives up
    /// after 30 s so that a broken test fails instead of hanging.
    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(at) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..at + 2).collect();
                let mut ev = SseEvent::default();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        ev.id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        ev.event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if ev.event.is_empty() && data.is_empty() {
                    continue;
                }
                ev.data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                return Some(ev);
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.stream.next())
                .await
                .expect("no SSE event within 30 s")?;
            self.buf.push_str(&String::from_utf8_lossy(&chunk.ok()?));
        }
    }

    /// Reads until an event with this name.
    pub async fn until(&mut self, name: &str) -> Vec<SseEvent> {
        let mut seen = Vec::new();
        while let Some(ev) = self.next().await {
            let done = ev.event == name;
            seen.push(ev);
            if done {
                return seen;
            }
        }
        panic!(
            "the stream ended before a `{name}` event; saw {:?}",
            seen.iter().map(|e| e.event.clone()).collect::<Vec<_>>()
        );
    }
}

/// Percent-encodes a session id for a path.
pub fn enc(id: &str) -> String {
    id.replace('%', "%25")
        .replace('/', "%2F")
        .replace(' ', "%20")
}

/// A user message, for direct agent calls.
pub fn user(text: &str) -> Msg {
    Msg::user(text)
}
