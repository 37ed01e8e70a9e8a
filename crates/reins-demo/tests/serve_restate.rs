//! `serve --restate` as a new user meets it: the real `serve` binary, started in a
//! directory without `.reins-demo/`, with a real restate-server from the npm package
//! (`npm ci --ignore-scripts --prefix crates/reins-restate/tests/restate`), on loopback.
//! The inbox page and the `/v1` API answer; a paused call is approved through `/v1`
//! and the tool runs once. Then each process is killed with SIGKILL — the service
//! (`serve`: reins-server and the agent's Restate endpoint), restate-server, and the
//! service once more without the parent-death signal, so that its restate-server is
//! left running and the rerun must stop it — and the same command, run again, comes
//! back on the same ports with the paused session still there, approved at the end
//! (the tool runs once).
//!
//! And `serve --restate --mcp http` and `serve --restate --acp`: the MCP and ACP doors
//! over the same deployment (they hold `Relayed` over it), driven by the real SDK
//! clients as in tests/serve_mcp.rs and tests/serve_acp.rs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

#[test]
fn help_names_restate() {
    for args in [&["--help"][..], &["--restate", "--help"][..]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_serve"))
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(stdout.contains("--restate"), "{args:?}: {stdout}");
        assert!(stdout.contains("--restate-ports"), "{args:?}: {stdout}");
    }
}

/// The restate-server binary; a missing one fails under CI and is reported otherwise.
fn restate_installed() -> bool {
    if reins_restate::LocalRestate::find_binary().is_some() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "restate-server is not installed: run `npm ci --ignore-scripts --prefix crates/reins-restate/tests/restate`"
    );
    eprintln!(
        "SKIPPED: restate-server is not installed (npm ci --ignore-scripts --prefix crates/reins-restate/tests/restate)"
    );
    false
}

fn port_free(p: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()
}

/// reins-server's port and the first of four consecutive free ports for Restate.
fn pick_ports() -> (u16, u16) {
    let server = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Below Linux's ephemeral range (32768 and up), where other processes' outgoing
    // connections would take ports between this check and restate-server's bind.
    for _ in 0..200 {
        let base = 20_000 + u16::try_from(fastrand_u32() % 12_000).unwrap();
        if (base..base + 4).all(|p| p != server && port_free(p)) {
            return (server, base);
        }
    }
    panic!("no four consecutive free ports");
}

/// A random number without another dependency.
fn fastrand_u32() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    t.subsec_nanos() ^ std::process::id().rotate_left(16)
}

/// One run of `serve --restate` in `cwd`.
struct Serve {
    child: Child,
    token: String,
    base: String,
}

/// The command, as a user types it (in `cwd`, with the default data directory).
async fn start(cwd: &Path, port: u16, restate: u16, no_death_signal: bool) -> Serve {
    let args = [
        "--restate".to_owned(),
        "--port".to_owned(),
        port.to_string(),
        "--restate-ports".to_owned(),
        restate.to_string(),
    ];
    start_with(cwd, &args, port, no_death_signal).await
}

/// `serve` with `args` in `cwd`, serving on `port`.
async fn start_with(cwd: &Path, args: &[String], port: u16, no_death_signal: bool) -> Serve {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_serve"));
    cmd.args(args)
        .current_dir(cwd)
        .env_remove("DASHSCOPE_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if no_death_signal {
        // No `setpriv` on the PATH: restate-server is not killed with its parent.
        cmd.env("PATH", cwd.join("no-bin"));
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = cwd.join("serve-output.log");
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            append(&log, &l);
        }
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut token = None;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("serve --restate did not start; output: {}", output_of(cwd)))
            .unwrap();
        let Some(line) = line else {
            let status = child.wait().await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            panic!(
                "serve --restate exited ({status}) before it served; output: {}",
                output_of(cwd)
            );
        };
        append(&cwd.join("serve-output.log"), &line);
        if let Some(t) = line.strip_prefix("token: ") {
            token = Some(t.trim().to_owned());
        }
        if line.starts_with("(Ctrl-C stops both") {
            break;
        }
    }
    // Keep reading stdout (the log lines) so the process never blocks on a full pipe.
    let log = cwd.join("serve-output.log");
    tokio::spawn(async move {
        while let Ok(Some(l)) = lines.next_line().await {
            append(&log, &l);
        }
    });
    Serve {
        child,
        token: token.expect("a token line"),
        base: format!("http://127.0.0.1:{port}"),
    }
}

/// What the runs of `serve` printed so far (stdout and stderr), the last 4,000 bytes.
fn output_of(cwd: &Path) -> String {
    let all = std::fs::read_to_string(cwd.join("serve-output.log")).unwrap_or_default();
    let mut from = all.len().saturating_sub(4000);
    while !all.is_char_boundary(from) {
        from += 1;
    }
    all[from..].to_owned()
}

fn append(log: &Path, line: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

impl Serve {
    async fn get(&self, path: &str) -> (u16, Value) {
        let r = reqwest::Client::new()
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = reqwest::Client::new()
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Starts a run that pauses on `delete_file`; the requirement id.
    async fn pause(&self, session: &str, file: &str) -> String {
        let (status, out) = self
            .post(
                &format!("/v1/sessions/{session}/runs"),
                json!({"message": format!("delete {file}")}),
            )
            .await;
        assert_eq!(
            (status, out["status"].as_str()),
            (200, Some("paused")),
            "{out}"
        );
        assert_eq!(out["requirements"][0]["tool_use"]["name"], "delete_file");
        out["requirements"][0]["id"].as_str().unwrap().to_owned()
    }

    /// Approves `id` through `/v1`; the run completes.
    async fn approve(&self, session: &str, id: &str) {
        let (status, out) = self
            .post(
                &format!("/v1/sessions/{session}/decisions"),
                json!({"decisions": [{"requirement_id": id, "action": "approve"}]}),
            )
            .await;
        assert_eq!(
            (status, out["status"].as_str()),
            (200, Some("completed")),
            "{out}"
        );
    }

    async fn status(&self, session: &str) -> String {
        let (status, out) = self.get(&format!("/v1/sessions/{session}")).await;
        assert_eq!(status, 200, "{out}");
        out["status"].as_str().unwrap().to_owned()
    }

    /// SIGKILL, and wait for it.
    async fn kill9(mut self) {
        self.child.kill().await.unwrap();
    }
}

/// The pid in restate-server's pid file.
fn restate_pid(cwd: &Path) -> u32 {
    std::fs::read_to_string(pid_file(cwd))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn pid_file(cwd: &Path) -> PathBuf {
    cwd.join(".reins-demo/restate/restate-server.pid")
}

/// Whether `pid` runs (a zombie does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        !s.lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
    })
}

fn kill9(pid: u32) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
}

/// The tool's effects: `file` is gone from the sandbox, and the session's transcript
/// holds exactly one result for the call, a success.
async fn ran_once(s: &Serve, cwd: &Path, session: &str, id: &str, file: &str) {
    assert!(
        !cwd.join(".reins-demo/sandboxes/restate")
            .join(file)
            .exists(),
        "{file} was not deleted"
    );
    let (status, out) = s.get(&format!("/v1/sessions/{session}")).await;
    assert_eq!(status, 200, "{out}");
    let results: Vec<&Value> = out["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|c| c["type"] == "tool_result" && c["id"] == id)
        .collect();
    assert_eq!(results.len(), 1, "{out}");
    let text = results[0].to_string();
    assert!(text.contains("deleted"), "{text}");
}

/// `[driver]` from the file, without `--restate`: `kind = "restate"` runs the sessions
/// on a local restate-server whose first port is `restate_ports` (it answers there,
/// and its pid file is written); a paused call approved through `/v1` runs its tool
/// once, in the Restate sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_restate_driver_and_its_ports_from_the_file() {
    if !restate_installed() {
        return;
    }
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let (port, restate) = pick_ports();
    std::fs::write(
        cwd.join("reins.toml"),
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n\n[driver]\nkind = \"restate\"\nrestate_ports = {restate}\n"
        ),
    )
    .unwrap();
    let args = ["--config".to_owned(), "reins.toml".to_owned()];
    let s = start_with(cwd, &args, port, false).await;
    assert!(pid_file(cwd).exists(), "no restate-server was started");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", restate)).is_ok(),
        "restate-server does not listen on the file's first port {restate}"
    );
    let id = s.pause("dev%2Ffile", "temp.txt").await;
    s.approve("dev%2Ffile", &id).await;
    ran_once(&s, cwd, "dev%2Ffile", &id, "temp.txt").await;
    s.kill9().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_restate_comes_back_after_kill_9_of_each_process() {
    if !restate_installed() || !Path::new("/proc/self").exists() {
        return;
    }
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    std::fs::create_dir(cwd.join("no-bin")).unwrap();
    assert!(!cwd.join(".reins-demo").exists());
    let (port, restate) = pick_ports();

    // First start: the data directory is created; the inbox and the API answer.
    let s = start(cwd, port, restate, false).await;
    assert!(cwd.join(".reins-demo/restate").is_dir());
    let page = reqwest::get(format!("{}/", s.base)).await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("<html"));
    let (status, health) = s.get("/readyz").await;
    assert_eq!(status, 200, "{health}");

    // A paused call approved through /v1: the tool runs once.
    let first = s.pause("dev%2Fone", "temp.txt").await;
    let (status, inbox) = s.get("/v1/requirements?status=pending").await;
    assert_eq!(status, 200);
    assert_eq!(
        inbox["items"][0]["requirement_id"],
        first.as_str(),
        "{inbox}"
    );
    s.approve("dev%2Fone", &first).await;
    ran_once(&s, cwd, "dev%2Fone", &first, "temp.txt").await;

    // A second one stays paused across every kill below.
    let second = s.pause("dev%2Ftwo", "notes.md").await;
    let startup = started.elapsed();

    // 1. kill -9 of the service: its restate-server dies with it; the rerun comes back
    //    on the same ports, the session still paused.
    let old = restate_pid(cwd);
    s.kill9().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(old) {
        assert!(
            Instant::now() < deadline,
            "restate-server outlived its parent"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = start(cwd, port, restate, false).await;
    assert_ne!(restate_pid(cwd), old);
    assert_eq!(s.status("dev%2Ftwo").await, "paused");
    assert_eq!(s.status("dev%2Fone").await, "idle");

    // 2. kill -9 of restate-server: the service stops by itself (so that the same
    //    command can start both again), and the rerun comes back.
    let old = restate_pid(cwd);
    kill9(old);
    let mut child = s.child;
    let exit = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("serve stops when its restate-server dies")
        .unwrap();
    assert!(!exit.success());
    assert!(
        output_of(cwd).contains("restate-server stopped"),
        "{}",
        output_of(cwd)
    );
    let s = start(cwd, port, restate, false).await;
    assert_eq!(s.status("dev%2Ftwo").await, "paused");

    // 3. kill -9 of the service where nothing kills its restate-server with it (no
    //    `setpriv`): the orphan holds the data directory and the ports until the
    //    rerun stops it (the pid file).
    s.kill9().await;
    let s = start(cwd, port, restate, true).await;
    let orphan = restate_pid(cwd);
    s.kill9().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(running(orphan), "the orphan is still there");
    let s = start(cwd, port, restate, false).await;
    assert!(!running(orphan), "the rerun stopped the orphan");
    assert!(output_of(cwd).contains("stopped a restate-server an earlier run left running"));

    // The session paused before the kills is approved now: the tool runs once.
    assert_eq!(s.status("dev%2Ftwo").await, "paused");
    s.approve("dev%2Ftwo", &second).await;
    ran_once(&s, cwd, "dev%2Ftwo", &second, "notes.md").await;
    let (status, trail) = s.get("/v1/sessions/dev%2Ftwo/decisions").await;
    assert_eq!(status, 200, "{trail}");
    let trail = trail["decisions"].as_array().unwrap();
    assert_eq!(trail.len(), 1, "{trail:?}");
    assert_eq!(trail[0]["verdict"], "applied", "{trail:?}");
    assert_eq!(trail[0]["actor"]["principal"], "dev", "{trail:?}");

    let pid = restate_pid(cwd);
    s.kill9().await;
    if running(pid) {
        kill9(pid);
    }
    eprintln!(
        "serve --restate: first start and one approval {:.1} s; whole test {:.1} s",
        startup.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// One restate-server at a time in this binary.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether node and the SDK clients under `dir` (a door crate's tests/client) are
/// installed; under CI their absence fails.
fn clients_installed(dir: &Path, package: &str, test: &str) -> bool {
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if node && dir.join("node_modules").join(package).is_dir() {
        return true;
    }
    let why = format!(
        "{test}: needs node and `npm ci --prefix {}` (node found: {node})",
        dir.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{why}");
    eprintln!("SKIPPED {why}");
    false
}

fn client_dir(door: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(door)
        .join("tests/client")
}

/// Runs `node script args` (a door's demo client), its output kept in `log`; the JSON
/// it prints last. It has 120 s.
async fn run_demo_client(script: &Path, args: &[&str], log: &Path) -> Value {
    let child = Command::new("node")
        .arg(script)
        .args(args)
        .env_remove("DASHSCOPE_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the demo client took longer than 120 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    append(log, &stderr);
    assert!(
        out.status.success(),
        "{} failed:\n{stdout}\n{stderr}",
        script.display()
    );
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON:\n{stdout}\n{stderr}"));
    serde_json::from_str(last).unwrap()
}

/// Stops a restate-server a killed `serve` may have left (its pid file under `data`).
fn stop_restate_left(data: &Path) {
    if let Ok(pid) = std::fs::read_to_string(data.join("restate/restate-server.pid"))
        && let Ok(pid) = pid.trim().parse::<u32>()
        && running(pid)
    {
        kill9(pid);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_restate_with_mcp_http() {
    let clients = client_dir("reins-mcp-server");
    if !restate_installed()
        || !clients_installed(
            &clients,
            "@modelcontextprotocol",
            "serve_restate_with_mcp_http",
        )
    {
        return;
    }
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("serve-output.log");
    let (port, restate) = pick_ports();
    let mut child = Command::new(env!("CARGO_BIN_EXE_serve"))
        .args(["--restate", "--restate-ports", &restate.to_string()])
        .args(["--mcp", "http", "--port", &port.to_string(), "--data-dir"])
        .arg(&data)
        .env_remove("DASHSCOPE_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut url, mut token) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(90);
    while let Some(line) = tokio::time::timeout_at(deadline.into(), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("serve did not start: {}", output_of(dir.path())))
        .unwrap()
    {
        if let Some(t) = line.strip_prefix("token: ") {
            token = Some(t.trim().to_owned());
        }
        if let Some(rest) = line.strip_prefix("mcp:") {
            url = rest.split_whitespace().next().map(str::to_owned);
        }
        if line.starts_with("(Ctrl-C stops both") {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let (url, token) = (url.expect("an mcp line"), token.expect("a token line"));
    let out = run_demo_client(&clients.join("demo.mjs"), &["http", &url, &token], &log).await;
    let sandbox = data.join("sandboxes/restate");

    // A host that cannot be asked: the paused result names the inbox; the decision
    // made there (reins-server over the deployment) ran the call once; the
    // conversation goes on over MCP.
    assert_eq!(out["paused"]["structured"]["status"], "paused", "{out}");
    assert!(
        out["paused"]["structured"]["decide_at"]
            .as_str()
            .unwrap()
            .contains("?session=mcp%2Flocal%2F"),
        "{out}"
    );
    assert_eq!(out["pendingInInbox"], json!(["delete_file"]), "{out}");
    assert_eq!(out["decided"]["status"], 200, "{out}");
    assert_eq!(out["decided"]["runStatus"], "completed", "{out}");
    assert!(
        !sandbox.join("temp.txt").exists(),
        "temp.txt was not deleted"
    );
    assert_eq!(out["next"]["isError"], false, "{out}");
    assert!(
        out["next"]["text"].as_str().unwrap().contains("temp.txt"),
        "{out}"
    );
    // A host that answers in its form.
    assert_eq!(out["elicited"]["isError"], false, "{out}");
    assert!(
        !sandbox.join("notes.md").exists(),
        "notes.md was not deleted"
    );

    child.kill().await.unwrap();
    stop_restate_left(&data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_restate_with_acp() {
    let clients = client_dir("reins-acp");
    if !restate_installed()
        || !clients_installed(&clients, "@agentclientprotocol", "serve_restate_with_acp")
    {
        return;
    }
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("serve-output.log");
    let (_, restate) = pick_ports();
    let restate = restate.to_string();
    let out = run_demo_client(
        &clients.join("demo.mjs"),
        &[
            env!("CARGO_BIN_EXE_serve"),
            "--restate",
            "--restate-ports",
            &restate,
            "--acp",
            "--data-dir",
            data.to_str().unwrap(),
        ],
        &log,
    )
    .await;
    let sandbox = data.join("sandboxes/restate");
    // The editor allowed the first call (ran on Restate), cancelled the second (it
    // waits in the inbox of the reins-server beside it).
    assert_eq!(out["invalid"], json!([]), "{out}");
    assert_eq!(out["init"]["agentInfo"]["name"], "SafeAgent", "{out}");
    assert_eq!(out["allowed"]["stopReason"], "end_turn", "{out}");
    assert!(
        out["allowed"]["said"]
            .as_str()
            .unwrap()
            .contains("temp.txt"),
        "{out}"
    );
    assert!(
        !sandbox.join("temp.txt").exists(),
        "temp.txt was not deleted"
    );
    assert_eq!(out["asked"].as_array().unwrap().len(), 2, "{out}");
    assert_eq!(out["cancelled"]["stopReason"], "end_turn", "{out}");
    assert!(sandbox.join("notes.md").exists(), "notes.md was deleted");
    assert_eq!(out["pendingInInbox"], json!(["delete_file"]), "{out}");
    // The editor closed stdin: serve stopped its restate-server (the pid its banner,
    // on stderr, named).
    let banner = std::fs::read_to_string(&log).unwrap();
    let pid: u32 = banner
        .split("restate-server pid ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no restate-server pid in the banner: {banner}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(pid) {
        assert!(
            Instant::now() < deadline,
            "restate-server outlived serve --acp"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
