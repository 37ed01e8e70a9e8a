//! Server benchmark (not a test): N concurrent sessions, each one run with a tool call,
//! through HTTP on one instance, with a model that takes 20 ms per answer; the same
//! workload on Agno's AgentOS (FastAPI + uvicorn) side by side when a Python with Agno
//! is given. Prints, per server and store: the throughput, the latency percentiles,
//! the overhead over the model's 40 ms (two answers per run: the tool call, then the
//! final text), the server process's peak RSS and CPU time; and, for reference, the
//! same runs made directly on the `Agent` (no HTTP).
//!
//! ```text
//! cargo xtask bench --server        # 1,000 sessions; in-memory and SQLite stores; AgentOS too
//! cargo xtask bench --restate       # PostgreSQL store, beside reins-restate's restate_bench
//! cargo run --release -p reins-server --example server_bench -- --sessions 1000 --store sqlite \
//!     [--agentos PYTHON --agentos-script crates/reins-server/bench/agentos_server.py] [--json FILE]
//! ```
//!
//! Each server runs in its own process (reins: this program run again with
//! `--serve-child`; AgentOS: `bench/agentos_server.py`), so the RSS and CPU figures are
//! the server's alone; this process is the load generator for both, over loopback.
//! A server that cannot start or fails a run is reported as one line (`failed: ...`)
//! and the other rows still print; `--json FILE` writes one JSON object per row.
//! Each in-flight request holds a connection, so the open-files limit must allow
//! 2 × sessions sockets.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reins_agent::Agent;
use reins_memory::MemoryStore;
use reins_message::{Msg, Role};
use reins_model::{ChatRequest, ScriptedModel, ScriptedResponse};
use reins_server::{AccessRole, Auth, Principal, Server};
use reins_tool::{ToolError, Toolkit};
use serde_json::{Value, json};

const MODEL_LATENCY: Duration = Duration::from_millis(20);

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Args {
    /// What to look up.
    q: String,
}

fn respond(req: &ChatRequest) -> ScriptedResponse {
    let last = req.messages.iter().rev().find(|m| m.role != Role::System);
    match last {
        Some(m) if m.role == Role::Tool => ScriptedResponse::text("done"),
        _ => ScriptedResponse::tool_call_with_id(
            format!("call_{}", uuid_v4()),
            "lookup",
            json!({"q": "x"}),
        ),
    }
}

fn uuid_v4() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{:x}", N.fetch_add(1, Ordering::Relaxed))
}

fn agent(store: Arc<dyn MemoryStore>) -> Agent {
    let mut tools = Toolkit::new();
    tools
        .add(Toolkit::function(
            "lookup",
            "Look something up",
            |a: Args, _ctx| async move { Ok::<_, ToolError>(format!("found {}", a.q)) },
        ))
        .unwrap();
    Agent::builder()
        .model(
            ScriptedModel::from_fn(respond)
                .with_latency(MODEL_LATENCY)
                .with_recording(false),
        )
        .toolkit(tools)
        .store_arc(store)
        .build()
        .unwrap()
}

/// `VmHWM` (peak RSS) and CPU seconds (user + system) of a process.
fn usage(pid: u32) -> (f64, f64) {
    let hwm = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?.to_owned();
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(f64::NAN, |kb| kb / 1024.0);
    // Fields 14 and 15 of /proc/PID/stat (after the parenthesised name), in ticks.
    let cpu = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.to_owned();
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            Some(ticks / 100.0)
        })
        .unwrap_or(f64::NAN);
    (hwm, cpu)
}

struct Figures {
    wall: Duration,
    lat: Vec<Duration>,
    /// The server process's peak RSS (MiB) and CPU seconds, when it is a process of
    /// its own.
    server: Option<(f64, f64)>,
}

impl Figures {
    fn pct(&self, p: f64) -> Duration {
        let i = ((self.lat.len() as f64 - 1.0) * p).round() as usize;
        self.lat[i.min(self.lat.len() - 1)]
    }
}

async fn store_of(kind: &str, dir: &Path, tag: &str) -> Arc<dyn MemoryStore> {
    match kind {
        "memory" => Arc::new(reins_memory::InMemoryStore::new()),
        "sqlite" => Arc::new(
            reins_memory::SqliteStore::open(dir.join(format!("{tag}.db")))
                .await
                .unwrap(),
        ),
        // Each program's sessions get their own prefix; the URL comes from the
        // environment so that the server child inherits it.
        "postgres" => {
            let url = std::env::var("REINS_BENCH_POSTGRES_URL")
                .expect("--store postgres needs REINS_BENCH_POSTGRES_URL");
            Arc::new(reins_memory::PostgresStore::connect(&url).await.unwrap())
        }
        other => panic!("unknown store `{other}` (memory, sqlite or postgres)"),
    }
}

/// In the child: serve until stdin closes.
fn serve_child(kind: &str, port_file: &Path, dir: &Path) {
    std::thread::spawn(|| {
        let mut sink = [0u8; 64];
        while std::io::stdin().read(&mut sink).is_ok_and(|n| n > 0) {}
        std::process::exit(0);
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = store_of(kind, dir, "reins").await;
        let server = Server::new(agent(store))
            .auth(Auth::new().token("bench", Principal::new("bench", [AccessRole::Admin])));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let tmp = port_file.with_extension("tmp");
        std::fs::write(&tmp, port.to_string()).unwrap();
        std::fs::rename(&tmp, port_file).unwrap();
        server.serve(listener).await.unwrap();
    });
}

/// A server process; killed when dropped.
struct ServerProcess {
    child: Child,
    port: u16,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a server process and waits for the port it writes; a server that cannot
/// start is a one-line error naming it and the last line it wrote to stderr (kept in
/// `stderr.log` beside the port file).
fn spawn_server(mut cmd: Command, port_file: &Path, what: &str) -> Result<ServerProcess, String> {
    let _ = std::fs::remove_file(port_file);
    let log = port_file.with_file_name("stderr.log");
    let stderr = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("cannot start {what}: {e}"))?;
    let mut proc = ServerProcess { child, port: 0 };
    let start = Instant::now();
    let last_line = || {
        std::fs::read_to_string(&log)
            .ok()
            .and_then(|t| {
                t.lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map(str::to_owned)
            })
            .unwrap_or_default()
    };
    loop {
        if let Ok(p) = std::fs::read_to_string(port_file)
            && let Ok(p) = p.trim().parse::<u16>()
        {
            proc.port = p;
            return Ok(proc);
        }
        if let Ok(Some(status)) = proc.child.try_wait() {
            return Err(format!(
                "{what} exited before listening ({status}): {}",
                last_line()
            ));
        }
        if start.elapsed() > Duration::from_secs(120) {
            return Err(format!(
                "{what} did not listen within 120 s: {}",
                last_line()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Which server the load goes to.
#[derive(Clone, Copy, PartialEq)]
enum Target {
    Reins,
    AgentOs,
}

async fn one_run(
    client: &reqwest::Client,
    target: Target,
    port: u16,
    session: &str,
) -> Result<(), String> {
    let res = match target {
        Target::Reins => client
            .post(format!(
                "http://127.0.0.1:{port}/v1/sessions/{}/runs",
                session.replace('/', "%2F")
            ))
            .bearer_auth("bench")
            .json(&json!({"message": "go"})),
        Target::AgentOs => client
            .post(format!("http://127.0.0.1:{port}/agents/bench/runs"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!(
                "message=go&stream=false&session_id={}",
                session.replace('/', "-")
            )),
    }
    .send()
    .await
    .map_err(|e| format!("request: {e}"))?;
    let status = res.status();
    let text = res.text().await.unwrap_or_default();
    if status != 200 {
        return Err(format!("answered {status}: {}", first_line(&text)));
    }
    let out: Value = serde_json::from_str(&text)
        .map_err(|e| format!("not JSON ({e}): {}", first_line(&text)))?;
    let ok = match target {
        Target::Reins => {
            out["status"] == "completed" && out["message"]["content"][0]["text"] == "done"
        }
        Target::AgentOs => {
            out["status"] == "COMPLETED"
                && out["content"] == "done"
                && out["tools"][0]["result"] == "found x"
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "unexpected answer: {}",
            first_line(&out.to_string())
        ))
    }
}

fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(200)
        .collect()
}

async fn over_http(server: &ServerProcess, target: Target, n: usize) -> Result<Figures, String> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(n)
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    // One run first, so that lazy set-up on either side is not timed.
    one_run(&client, target, server.port, "warm/up").await?;
    let before = usage(server.child.id());
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let client = client.clone();
        let port = server.port;
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            one_run(&client, target, port, &format!("bench/{i}")).await?;
            Ok::<_, String>(t.elapsed())
        }));
    }
    let mut lat = Vec::with_capacity(n);
    for t in tasks {
        lat.push(t.await.map_err(|e| format!("run task: {e}"))??);
    }
    let wall = start.elapsed();
    let after = usage(server.child.id());
    lat.sort();
    Ok(Figures {
        wall,
        lat,
        server: Some((after.0, after.1 - before.1)),
    })
}

async fn direct(store: Arc<dyn MemoryStore>, n: usize) -> Figures {
    let agent = agent(store);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let agent = agent.clone();
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let s = agent.session(&format!("direct/{i}")).await.unwrap();
            let out = s.send(Msg::user("go")).await.unwrap();
            assert_eq!(out.status, reins_agent::RunStatus::Completed);
            t.elapsed()
        }));
    }
    let mut lat = Vec::with_capacity(n);
    for t in tasks {
        lat.push(t.await.unwrap());
    }
    let wall = start.elapsed();
    lat.sort();
    Figures {
        wall,
        lat,
        server: None,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let mut n = 1000usize;
    let mut stores = vec!["memory".to_owned(), "sqlite".to_owned()];
    let mut agentos: Option<(PathBuf, PathBuf)> = None;
    let mut python: Option<PathBuf> = None;
    let mut script: Option<PathBuf> = None;
    let mut json_path: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--serve-child" => {
                let kind = args.next().expect("--serve-child STORE PORT_FILE DIR");
                let port_file = PathBuf::from(args.next().expect("PORT_FILE"));
                let dir = PathBuf::from(args.next().expect("DIR"));
                serve_child(&kind, &port_file, &dir);
                return;
            }
            "--sessions" => {
                n = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--sessions N")
            }
            "--store" => stores = vec![args.next().expect("--store memory|sqlite|postgres")],
            "--agentos" => python = Some(args.next().expect("--agentos PYTHON").into()),
            "--agentos-script" => script = Some(args.next().expect("--agentos-script PATH").into()),
            "--json" => json_path = Some(PathBuf::from(args.next().expect("--json FILE"))),
            "--bench" => {}
            other => panic!("unknown argument `{other}`"),
        }
    }
    if let Some(python) = python {
        let script = script.unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/agentos_server.py")
        });
        agentos = Some((python, script));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let model = ms(MODEL_LATENCY * 2);
    let agno_version = agentos.as_ref().map(|(py, _)| {
        Command::new(py)
            .args([
                "-c",
                "import importlib.metadata as m; print(m.version('agno'), m.version('fastapi'), m.version('uvicorn'))",
            ])
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    });
    println!(
        "server bench: {n} concurrent sessions × 1 run (tool call + answer), model {} ms per answer, {} CPUs",
        ms(MODEL_LATENCY),
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    if let Some(v) = &agno_version {
        let v: Vec<&str> = v.split_whitespace().collect();
        println!(
            "AgentOS: agno {}, fastapi {}, uvicorn {} (one process, one worker)",
            v.first().unwrap_or(&"?"),
            v.get(1).unwrap_or(&"?"),
            v.get(2).unwrap_or(&"?")
        );
    } else {
        println!("AgentOS: not run (no --agentos PYTHON)");
    }
    println!(
        "{:<8} {:<14} {:>8} {:>9} {:>9} {:>9} {:>13} {:>13} {:>9} {:>8}",
        "store",
        "server",
        "runs/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "p50 overhead",
        "p99 overhead",
        "peak RSS",
        "CPU s"
    );
    let exe = std::env::current_exe().unwrap();
    // One JSON object per row (written with `--json FILE`, for `cargo xtask bench --peer`).
    let mut json_rows: Vec<Value> = Vec::new();
    for kind in &stores {
        let mut rows: Vec<(&str, Result<Figures, String>)> = Vec::new();
        let f = rt.block_on(async {
            let store = store_of(kind, dir.path(), &format!("{kind}-direct")).await;
            direct(store, n).await
        });
        rows.push(("reins direct", Ok(f)));
        {
            let sub = dir.path().join(format!("reins-{kind}"));
            std::fs::create_dir_all(&sub).unwrap();
            let port_file = sub.join("port");
            let mut cmd = Command::new(&exe);
            cmd.arg("--serve-child").arg(kind).arg(&port_file).arg(&sub);
            let f = spawn_server(cmd, &port_file, "the reins server")
                .and_then(|server| rt.block_on(over_http(&server, Target::Reins, n)));
            rows.push(("reins HTTP", f));
        }
        if let Some((python, script)) = &agentos {
            let sub = dir.path().join(format!("agentos-{kind}"));
            std::fs::create_dir_all(&sub).unwrap();
            let port_file = sub.join("port");
            let mut cmd = Command::new(python);
            cmd.arg(script)
                .arg("--port-file")
                .arg(&port_file)
                .arg("--db")
                .arg(kind)
                .arg("--dir")
                .arg(&sub)
                .env("AGNO_TELEMETRY", "false");
            let f = spawn_server(cmd, &port_file, "AgentOS")
                .and_then(|server| rt.block_on(over_http(&server, Target::AgentOs, n)));
            rows.push(("AgentOS HTTP", f));
        }
        for (name, f) in rows {
            let f = match f {
                Ok(f) => f,
                Err(e) => {
                    println!("{kind:<8} {name:<14} failed: {e}");
                    json_rows.push(json!({"store": kind, "server": name, "error": e}));
                    continue;
                }
            };
            let (rss, cpu) = match f.server {
                Some((rss, cpu)) => (format!("{rss:.0} MiB"), format!("{cpu:.2}")),
                None => ("-".to_owned(), "-".to_owned()),
            };
            let runs_per_s = n as f64 / f.wall.as_secs_f64();
            println!(
                "{:<8} {:<14} {:>8.0} {:>9.1} {:>9.1} {:>9.1} {:>10.1} ms {:>10.1} ms {:>9} {:>8}",
                kind,
                name,
                runs_per_s,
                ms(f.pct(0.5)),
                ms(f.pct(0.99)),
                ms(*f.lat.last().unwrap()),
                ms(f.pct(0.5)) - model,
                ms(f.pct(0.99)) - model,
                rss,
                cpu,
            );
            json_rows.push(json!({
                "store": kind,
                "server": name,
                "runs_per_s": runs_per_s,
                "p50_ms": ms(f.pct(0.5)),
                "p99_ms": ms(f.pct(0.99)),
                "rss_mib": f.server.map(|(rss, _)| rss),
            }));
        }
    }
    if let Some(path) = &json_path {
        let text = json_rows
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("server_bench: cannot write {}: {e}", path.display());
        }
    }
    println!(
        "peak RSS and CPU s: the server process alone (CPU over the timed runs); direct: in the load generator's process"
    );
}
