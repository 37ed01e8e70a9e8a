//! `serve --config FILE`: the committed example passes `--check` (secrets redacted in
//! what it prints); bad files are refused with the key and the line and nothing starts
//! (no store file, no listener); a good file serves, its tokens work, and SIGHUP
//! reloads the Cedar policies (a new file in the directory is used; a bad one is kept
//! out and shown at `GET /v1/policy`).
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const OPS: &str = "ops-token-from-the-environment";
const ANA: &str = "ana-token-from-the-environment";
const ALICE: &str = "alice-token-from-the-environment";
const HOOK: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/config/reins.toml")
}

fn serve(args: &[&str], cwd: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_serve"));
    c.args(args)
        .current_dir(cwd)
        .env_remove("DASHSCOPE_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env("REINS_OPS_TOKEN", OPS)
        .env("REINS_ANA_TOKEN", ANA)
        .env("REINS_ALICE_TOKEN", ALICE)
        .env("REINS_WEBHOOK_SECRET", HOOK)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    c
}

#[tokio::test]
async fn the_example_passes_check_with_its_secrets_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let out = serve(
        &["--config", example().to_str().unwrap(), "--check"],
        dir.path(),
    )
    .output()
    .await
    .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains(": good"), "{stdout}");
    assert!(
        stdout.contains("<redacted: env REINS_OPS_TOKEN>"),
        "{stdout}"
    );
    assert!(
        stdout.contains("<redacted: env REINS_WEBHOOK_SECRET>"),
        "{stdout}"
    );
    for secret in [OPS, ANA, ALICE, HOOK] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{secret} shown"
        );
    }
    // A missing secret is refused with its key and line.
    let out = serve(
        &["--config", example().to_str().unwrap(), "--check"],
        dir.path(),
    )
    .env_remove("REINS_ANA_TOKEN")
    .output()
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("reins.toml:35:"), "{stderr}");
    assert!(stderr.contains("key `auth.tokens.ana.token`"), "{stderr}");
    assert!(stderr.contains("REINS_ANA_TOKEN is not set"), "{stderr}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn write_config(dir: &Path, port: u16, extra: &str) -> PathBuf {
    let path = dir.join("reins.toml");
    std::fs::write(
        &path,
        format!(
            r#"[server]
listen = "127.0.0.1:{port}"

[store]
sqlite = "data/reins.db"

[auth.tokens.ops]
roles = ["admin"]
token = {{ env = "REINS_OPS_TOKEN" }}

[auth.tokens.alice]
roles = ["user"]
token = {{ env = "REINS_ALICE_TOKEN" }}
{extra}"#
        ),
    )
    .unwrap();
    path
}

#[tokio::test]
async fn bad_files_start_nothing() {
    for (extra, key, line, needs_check) in [
        (
            "\n[policies]\ndir = \"no-such-dir\"\n",
            "policies.dir",
            16,
            false,
        ),
        (
            "\n[telemetry]\nmetrics = \"yes\"\n",
            "telemetry.metrics",
            16,
            false,
        ),
        (
            "\n[budgets.default]\ntokens = 10\nspend = 1\n",
            "budgets.default.spend",
            17,
            true,
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        let port = free_port();
        let config = write_config(dir.path(), port, extra);
        let mut args = vec!["--config", config.to_str().unwrap()];
        if needs_check {
            args.push("--check");
        }
        let out = serve(&args, dir.path()).output().await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("reins.toml:{line}:"))
                && stderr.contains(&format!("key `{key}`")),
            "{key}: {stderr}"
        );
        assert!(
            !dir.path().join("data/reins.db").exists(),
            "a store was opened"
        );
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

const DECIDERS: &str = r#"@id("admins-decide")
permit (principal in Reins::Role::"admin", action == Reins::Action::"decide", resource);
"#;

const TMP: &str = r#"@id("tmp-deletes")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "tmp*" };
"#;

struct Served {
    child: Child,
    base: String,
    client: reqwest::Client,
}

/// `serve --config config` in `root`, once it printed its token (it listens then).
async fn start_served(root: &Path, config: &Path, port: u16) -> Served {
    let mut child = serve(&["--config", config.to_str().unwrap()], root)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(root.join("serve.err")).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
            .await
            .expect("serve did not start in 60 s")
            .unwrap();
        match line {
            Some(l) if l.starts_with("token: ") => break,
            Some(_) => {}
            None => panic!(
                "serve exited: {}",
                std::fs::read_to_string(root.join("serve.err")).unwrap_or_default()
            ),
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Served {
        child,
        base: format!("http://127.0.0.1:{port}"),
        client: reqwest::Client::new(),
    }
}

impl Served {
    async fn get(&self, token: &str, path: &str) -> (u16, Value) {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(i32::try_from(self.child.id().unwrap()).unwrap())
            .unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// Waits (at most 30 s) until `GET /v1/policy` satisfies `done`.
    async fn policy_until(&self, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (st, p) = self.get(OPS, "/v1/policy").await;
            assert_eq!(st, 200, "{p}");
            if done(&p) {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "the policy status never got there: {p}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test]
async fn a_file_serves_and_sighup_reloads_the_policies() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("data")).unwrap();
    std::fs::create_dir(root.join("policies")).unwrap();
    std::fs::write(root.join("policies/deciders.cedar"), DECIDERS).unwrap();
    let port = free_port();
    // No file watch: only the signal reloads.
    let config = write_config(
        root,
        port,
        "\n[policies]\ndir = \"policies\"\nwatch = false\n\n[budgets.default]\ntool_calls = 5\n",
    );
    let s = start_served(root, &config, port).await;
    assert!(root.join("data/reins.db").exists(), "the file's store");

    // The file's tokens: alice runs, and her delete waits (no policy allows it yet).
    let (st, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2F1/runs",
            json!({"message": "delete tmp1.txt"}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["status"], "paused", "{out}");
    let first = s.policy_until(|p| p["state"] == "ok").await;
    assert_eq!(first["active"]["policies"], json!(["admins-decide"]));

    // A new file, then SIGHUP: the new set is used.
    std::fs::write(root.join("policies/tmp.cedar"), TMP).unwrap();
    s.signal(rustix::process::Signal::HUP);
    let reloaded = s.policy_until(|p| p["reloads"] == 1).await;
    assert_eq!(
        reloaded["active"]["policies"],
        json!(["admins-decide", "tmp-deletes"])
    );
    assert_eq!(reloaded["state"], "ok");
    let (st, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2F2/runs",
            json!({"message": "delete tmp2.txt"}),
        )
        .await;
    assert_eq!((st, &out["status"]), (200, &json!("completed")), "{out}");

    // A bad edit and SIGHUP: refused, shown, the sets in use stay.
    std::fs::write(root.join("policies/tmp.cedar"), "permit (\n").unwrap();
    s.signal(rustix::process::Signal::HUP);
    let broken = s.policy_until(|p| p["state"] == "error").await;
    assert_eq!(broken["last_error"]["trigger"], "signal");
    assert!(
        broken["last_error"]["message"]
            .as_str()
            .unwrap()
            .contains("tmp.cedar:"),
        "{broken}"
    );
    assert_eq!(broken["active"], reloaded["active"]);
    let (st, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2F3/runs",
            json!({"message": "delete tmp3.txt"}),
        )
        .await;
    assert_eq!((st, &out["status"]), (200, &json!("completed")), "{out}");
}

/// `driver.ingress` is for a program that builds its `RestateClient` from it; `serve`
/// runs its own restate-server, so it refuses the key (exit 2, naming it) and starts
/// nothing.
#[tokio::test]
async fn serve_refuses_an_ingress_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    let config = write_config(
        dir.path(),
        free_port(),
        "\n[driver]\nkind = \"restate\"\ningress = \"http://127.0.0.1:8080\"\n",
    );
    let out = serve(&["--config", config.to_str().unwrap()], dir.path())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("driver.ingress: serve starts its own restate-server"),
        "{stderr}"
    );
    assert!(!dir.path().join("data/reins.db").exists());
    assert!(!dir.path().join(".reins-demo").exists());
}

/// A stand-in for an OTLP collector on loopback: it keeps every byte it is sent and
/// answers each HTTP request 200 with an empty (valid) export response. An OTLP/gRPC
/// client is told apart by the HTTP/2 preface it opens with.
struct Collector {
    port: u16,
    seen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Collector {
    async fn start() -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let all = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let all = all.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 8192];
                    while let Ok(n) = conn.read(&mut buf).await {
                        if n == 0 {
                            return;
                        }
                        all.lock().unwrap().extend_from_slice(&buf[..n]);
                        request.extend_from_slice(&buf[..n]);
                        if http_request_done(&request) {
                            request.clear();
                            let ok = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                            if conn.write_all(ok.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Self { port, seen, task }
    }

    /// Waits (at most 30 s: spans leave in batches every 5 s) until `needle` was sent.
    async fn wait_for(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let seen = self.seen.lock().unwrap().clone();
            if seen.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the collector never got `{needle}`; it got {:?}",
                String::from_utf8_lossy(&seen)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Whether `request` holds a whole HTTP/1.1 request (head and `content-length` body).
fn http_request_done(request: &[u8]) -> bool {
    let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    request.len() >= end + 4 + length
}

/// `[telemetry]` from the file: `otlp_endpoint` is where reins's spans go,
/// `otlp_protocol` how (OTLP/HTTP: a POST to `/v1/traces`; OTLP/gRPC: an HTTP/2
/// connection), and `service_name` what they carry (the program's own name otherwise).
#[tokio::test]
async fn telemetry_of_the_file_sends_the_spans_where_and_how_it_says() {
    for (protocol, opening) in [
        ("http", "POST /v1/traces HTTP/1.1"),
        ("grpc", "PRI * HTTP/2.0"),
    ] {
        let collector = Collector::start().await;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("data")).unwrap();
        let port = free_port();
        let config = write_config(
            root,
            port,
            &format!(
                "\n[telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\n\
                 otlp_protocol = \"{protocol}\"\nservice_name = \"reins-from-the-file\"\n",
                collector.port
            ),
        );
        let s = start_served(root, &config, port).await;
        let (st, out) = s
            .post(
                ALICE,
                "/v1/sessions/alice%2Ftraced/runs",
                json!({"message": "hello"}),
            )
            .await;
        assert_eq!(st, 200, "{out}");
        collector.wait_for(opening).await;
        if protocol == "http" {
            collector.wait_for("reins-from-the-file").await;
            collector.wait_for("invoke_agent").await;
        }
        drop(s);
    }
}
