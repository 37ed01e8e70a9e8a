//! What the approval tests share: the venv's Python (or a loud skip), an SMTP server
//! (aiosmtpd) capturing mail, a loopback stand-in for Slack's Web API that records what
//! reins posts, the SDK's signatures, and servers configured with the approval doors.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};

use reins_server::notify::NotifyOptions;
use reins_server::{EmailApprovals, Server, SlackApprovals};

use super::*;

pub const LINK_SECRET: &str = "a link secret of at least thirty-two bytes";
pub const SIGNING_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

pub fn dir() -> PathBuf {
    // From reins-server and from the crates that share this harness (reins-restate).
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-server/tests/approvals")
}

/// The venv's Python, or `None` (the test is skipped; under `CI=true` it fails).
pub fn python_or_skip(test: &str) -> Option<PathBuf> {
    let p = dir().join(".venv/bin/python");
    if p.exists() {
        return Some(p);
    }
    let why = "the approval test clients are not installed (python3 -m venv crates/reins-server/tests/approvals/.venv && \
               crates/reins-server/tests/approvals/.venv/bin/pip install -r crates/reins-server/tests/approvals/requirements.txt)";
    if in_ci() {
        panic!("{test}: {why}; CI must run this test");
    }
    eprintln!("\n!!! SKIPPED {test}: {why}\n");
    None
}

/// aiosmtpd on a loopback port, capturing every mail; stopped when dropped.
pub struct SmtpSink {
    child: Child,
    _stdin: Option<ChildStdin>,
    pub port: u16,
    mails: mpsc::Receiver<Value>,
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl SmtpSink {
    pub fn start(python: &Path) -> Self {
        Self::start_with(python, &[])
    }

    /// A sink that takes mail only from a client logged in as `user` with `password`
    /// (AUTH PLAIN or LOGIN on the plain connection); each mail says who logged in.
    /// (tests/config uses it; the other binaries that share this harness do not.)
    #[allow(dead_code)]
    pub fn start_with_login(python: &Path, user: &str, password: &str) -> Self {
        Self::start_with(python, &["--login", &format!("{user}:{password}")])
    }

    fn start_with(python: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(python)
            .arg(dir().join("smtp_sink.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the SMTP sink starts");
        let stdin = child.stdin.take();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        let port = u16::try_from(first["port"].as_u64().unwrap()).unwrap();
        let (tx, mails) = mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        Self {
            child,
            _stdin: stdin,
            port,
            mails,
        }
    }

    /// The next mail captured (30 s at most).
    pub fn next(&self) -> Value {
        self.mails
            .recv_timeout(Duration::from_secs(30))
            .expect("a mail within 30 s")
    }

    /// Whether a mail arrives within `wait`.
    pub fn any_within(&self, wait: Duration) -> Option<Value> {
        self.mails.recv_timeout(wait).ok()
    }
}

/// The approval link in a mail's body.
pub fn link_in(mail: &Value) -> String {
    let body = mail["body"].as_str().unwrap();
    body.lines()
        .map(str::trim)
        .find(|l| l.contains("/inbox/email/"))
        .unwrap_or_else(|| panic!("no link in {body}"))
        .to_owned()
}

/// A loopback stand-in for Slack's Web API: answers every method `ok` and records the
/// requests (`{method, body, auth}`).
pub struct SlackStub {
    pub base: String,
    pub requests: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SlackStub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SlackStub {
    pub async fn start() -> Self {
        use axum::extract::{Path as AxPath, State};
        let requests: Arc<Mutex<Vec<Value>>> = Arc::default();
        let app = axum::Router::new()
            .route(
                "/api/{method}",
                axum::routing::post(
                    |State(r): State<Arc<Mutex<Vec<Value>>>>,
                     AxPath(method): AxPath<String>,
                     headers: axum::http::HeaderMap,
                     axum::Json(body): axum::Json<Value>| async move {
                        let auth = headers
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_owned();
                        let channel = body["channel"].clone();
                        let ts = body
                            .get("ts")
                            .cloned()
                            .unwrap_or_else(|| json!("1700000000.000100"));
                        r.lock()
                            .unwrap()
                            .push(json!({"method": method, "body": body, "auth": auth}));
                        axum::Json(json!({"ok": true, "channel": channel, "ts": ts}))
                    },
                ),
            )
            .with_state(requests.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            base: format!("http://{addr}/api"),
            requests,
            task,
        }
    }

    /// The requests to `method` so far.
    pub fn calls(&self, method: &str) -> Vec<Value> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r["method"] == method)
            .cloned()
            .collect()
    }

    /// Waits (30 s at most) until there are `n` requests to `method`; returns them.
    pub async fn wait_for(&self, method: &str, n: usize) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let calls = self.calls(method);
            if calls.len() >= n {
                return calls;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no {n} `{method}` requests within 30 s; saw {:?}",
                self.requests.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Runs `slack_check.py` with `args`, `input` on its standard input; its JSON answer.
pub fn slack_check(python: &Path, args: &[&str], input: &[u8]) -> Value {
    let mut child = Command::new(python)
        .arg(dir().join("slack_check.py"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "slack_check.py {args:?} failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The `X-Slack-Signature` slack_sdk makes for `body` at `ts` under `secret`, and
/// whether the SDK itself accepts it now.
pub fn sdk_sign(python: &Path, secret: &str, ts: i64, body: &str) -> (String, bool) {
    let v = slack_check(python, &["sign", secret, &ts.to_string()], body.as_bytes());
    (
        v["signature"].as_str().unwrap().to_owned(),
        v["sdk_accepts"].as_bool().unwrap(),
    )
}

/// A server with email approvals (mail to `smtp_port`; ana and rita have addresses)
/// and, when `slack_api` is given, Slack approvals (U_ANA is ana, U_OPS is ops, U_BOB
/// is bob), on an agent of `build`'s making.
pub async fn approvals_server(
    smtp_port: Option<u16>,
    slack_api: Option<&str>,
    build: impl FnOnce(Arc<dyn reins_memory::MemoryStore>, &Ran) -> reins_agent::Agent,
) -> TestServer {
    approvals_server_with(smtp_port, slack_api, build, |s| s).await
}

/// [`approvals_server`], with `configure` applied last.
pub async fn approvals_server_with(
    smtp_port: Option<u16>,
    slack_api: Option<&str>,
    build: impl FnOnce(Arc<dyn reins_memory::MemoryStore>, &Ran) -> reins_agent::Agent,
    configure: impl FnOnce(Server) -> Server,
) -> TestServer {
    // The in-memory store keeps an outbox (the notices the dispatcher delivers).
    let store: Arc<dyn reins_memory::MemoryStore> = Arc::new(reins_memory::InMemoryStore::new());
    let ran: Ran = Arc::default();
    let agent = build(store, &ran);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = approval_doors(Server::new(agent.clone()), &base, smtp_port, slack_api);
    serve_on(listener, configure(server), agent, ran, None)
}

/// `server` (served at `base`) with the test tokens and the approval doors: email
/// (mail to `smtp_port`; ana and rita have addresses) and, when `slack_api` is given,
/// Slack (U_ANA is ana, U_OPS is ops, U_BOB is bob); notices are polled every 100 ms.
pub fn approval_doors(
    server: Server,
    base: &str,
    smtp_port: Option<u16>,
    slack_api: Option<&str>,
) -> Server {
    let mut server = server
        .auth(auth())
        .poll_interval(Duration::from_millis(200))
        .notify_options(NotifyOptions::default().poll_interval(Duration::from_millis(100)));
    if let Some(port) = smtp_port {
        server = server.email_approvals(
            EmailApprovals::builder()
                .smtp_url(format!("smtp://127.0.0.1:{port}"))
                .from("reins <approvals@reins.test>")
                .base_url(base)
                .secret(LINK_SECRET)
                .approver("ana", "Ana <ana@corp.test>")
                .approver("rita", "rita@corp.test")
                .build()
                .unwrap(),
        );
    }
    if let Some(api) = slack_api {
        server = server.slack_approvals(
            SlackApprovals::builder()
                .bot_token("xoxb-test-token")
                .signing_secret(SIGNING_SECRET)
                .channel("C0APPROVALS")
                .api_base(api)
                .inbox_url(base)
                .user("U_ANA", "ana")
                .user("U_OPS", "ops")
                .user("U_BOB", "bob")
                .build()
                .unwrap(),
        );
    }
    server
}

/// A `block_actions` form body: `user` pressed `action` on the message `posted`.
pub fn press(user: &str, action: &str, posted: &Value) -> String {
    let body = &posted["body"];
    let value = body["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "actions")
        .and_then(|b| {
            b["elements"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["action_id"] == action)
        })
        .map(|e| e["value"].clone())
        .unwrap();
    let payload = json!({
        "type": "block_actions",
        "user": {"id": user, "username": user.to_lowercase(), "team_id": "T1"},
        "api_app_id": "A1",
        "token": "legacy-verification-token",
        "team": {"id": "T1", "domain": "corp"},
        "container": {"type": "message", "message_ts": "1700000000.000100",
                      "channel_id": "C0APPROVALS", "is_ephemeral": false},
        "trigger_id": "1.2.3",
        "channel": {"id": "C0APPROVALS", "name": "approvals"},
        "message": {"type": "message", "ts": "1700000000.000100", "text": body["text"], "blocks": body["blocks"]},
        "response_url": "https://hooks.slack.invalid/actions/T1/1/x",
        "actions": [{"type": "button", "action_id": action, "block_id": "decide",
                     "value": value, "action_ts": "1700000001.000200"}],
    });
    serde_urlencoded::to_string([("payload", payload.to_string())]).unwrap()
}

/// Sends an interaction signed by the SDK under `secret` at `ts`.
pub async fn send(
    s: &TestServer,
    python: &Path,
    secret: &str,
    ts: i64,
    body: &str,
) -> (u16, Value) {
    let (sig, _) = sdk_sign(python, secret, ts, body);
    let res = s
        .client
        .post(s.url("/v1/slack/interactions"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-slack-request-timestamp", ts.to_string())
        .header("x-slack-signature", sig)
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Now, in Unix seconds (a Slack request's timestamp).
pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Polls until `f` holds (30 s at most).
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: not within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
