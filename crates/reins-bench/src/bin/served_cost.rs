//! What one served run costs: the tool-call run of `run_cost`, but sent to reins-server
//! over HTTP on loopback (`POST /v1/sessions/{id}/runs`, a new session each run, bearer
//! auth, the JSON answer), to count what the server adds to the run.
//!
//! ```text
//! cargo run --release -p reins-bench --bin served_cost -- [--runs N] [--store memory|sqlite]
//! # instructions per served run: the measured runs' total, divided by the runs
//! valgrind --tool=callgrind --toggle-collect='*::measured_runs' target/cost/served_cost --runs 200
//! # the server round's load (N runs at once, 20 ms per model answer) against a server
//! # in a process of its own: its CPU per run, on the system allocator or on mimalloc
//! cargo run --release -p reins-bench --bin served_cost [--features mimalloc] -- --concurrent 1000
//! ```
//!
//! `--runs N` (default 1,000): the server and the client share one current-thread
//! runtime, so that callgrind counts one thread doing all the work; the model answers
//! at once (the scripted `add` model of `run_cost`), the store is in memory (or a
//! SQLite file at `Durability::Normal` in a temporary directory). The client is a
//! plain keep-alive connection that writes a prepared request and reads the answer:
//! a few hundred instructions of its own beside the server's. Prints one JSON object:
//! allocations and KiB per run (the whole process, client included; system allocator
//! builds only) and the mean time. `cargo xtask bench --cost` runs it under callgrind.
//!
//! `--concurrent N [--latency-ms L]`: this program again as the server
//! (`--serve-child`, a multi-thread runtime, as `serve` runs), N sessions each sending
//! one run at once over its own connection, the model taking L ms (default 20) per
//! answer; prints the server process's CPU seconds (user, system), per run, its peak
//! RSS and the wall time.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reins::prelude::*;
use reins_bench::scenario::{Res, add_toolkit, tool_model};
use reins_server::{AccessRole, Auth, Principal, Server};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[cfg(not(feature = "mimalloc"))]
use reins_bench::alloc::{Counting, INSTRUMENTED_SYSTEM, Snapshot};

/// The system allocator, counted (allocations per run are printed).
#[cfg(not(feature = "mimalloc"))]
#[global_allocator]
static ALLOC: &Counting = &INSTRUMENTED_SYSTEM;

/// Built with `--features mimalloc`: the same program on mimalloc (no counts).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The allocator this build runs on.
const ALLOCATOR: &str = if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "system"
};

const TOKEN: &str = "bench";

fn value(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The served agent: the tool-call scenario's model (answering after `latency`) and
/// toolkit on `store`.
fn agent(store: Arc<dyn reins::memory::MemoryStore>, latency: Duration) -> Res<Agent> {
    let model = if latency.is_zero() {
        tool_model()
    } else {
        tool_model().with_latency(latency)
    };
    Ok(Agent::builder()
        .model(model)
        .toolkit(add_toolkit()?)
        .store_arc(store)
        .build()?)
}

async fn store(kind: &str, dir: &std::path::Path) -> Res<Arc<dyn reins::memory::MemoryStore>> {
    Ok(match kind {
        "memory" => Arc::new(reins::memory::InMemoryStore::new()),
        "sqlite" => Arc::new(
            reins::memory::SqliteStore::open_with(
                dir.join("served.db"),
                reins::memory::SqliteOptions::default()
                    .durability(reins::memory::Durability::Normal),
            )
            .await?,
        ),
        other => return Err(format!("unknown --store {other}: memory or sqlite").into()),
    })
}

/// A server on a loopback port of its own, serving on the current runtime.
async fn start_server(agent: Agent) -> Res<u16> {
    let server = Server::new(agent)
        .auth(Auth::new().token(TOKEN, Principal::new("bench", [AccessRole::Admin])));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(server.serve(listener));
    Ok(port)
}

/// One keep-alive HTTP/1.1 connection that sends runs and reads their answers.
struct Client {
    conn: TcpStream,
    buf: Vec<u8>,
    request: Vec<u8>,
}

impl Client {
    async fn connect(port: u16) -> Res<Self> {
        let conn = TcpStream::connect(("127.0.0.1", port)).await?;
        conn.set_nodelay(true)?;
        Ok(Self {
            conn,
            buf: Vec::with_capacity(8192),
            request: Vec::with_capacity(512),
        })
    }

    /// Sends a run on session `id` and checks that it completed.
    async fn run(&mut self, id: &str) -> Res<()> {
        let body = br#"{"message":"add 1 and 2"}"#;
        self.request.clear();
        write!(
            self.request,
            "POST /v1/sessions/{id}/runs HTTP/1.1\r\nhost: 127.0.0.1\r\n\
             authorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n",
            body.len()
        )?;
        self.request.extend_from_slice(body);
        self.conn.write_all(&self.request).await?;
        self.buf.clear();
        let (head_end, length) = loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let head = std::str::from_utf8(&self.buf[..end])?;
                let length = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse::<usize>().ok())?
                    })
                    .ok_or_else(|| format!("no content-length in: {head}"))?;
                break (end + 4, length);
            }
            self.read_more().await?;
        };
        while self.buf.len() < head_end + length {
            self.read_more().await?;
        }
        let answer = &self.buf[..head_end + length];
        if !answer.starts_with(b"HTTP/1.1 200") || find(answer, br#""completed""#).is_none() {
            return Err(format!("unexpected answer: {}", String::from_utf8_lossy(answer)).into());
        }
        Ok(())
    }

    async fn read_more(&mut self) -> Res<()> {
        let mut chunk = [0u8; 4096];
        let n = self.conn.read(&mut chunk).await?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `--runs N`: N runs one after the other on one runtime thread.
fn sequential() -> Res<()> {
    let runs: u64 = value("--runs").map_or(Ok(1_000), |n| n.parse())?;
    let kind = value("--store").unwrap_or_else(|| "memory".to_owned());
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut client = rt.block_on(async {
        let port = start_server(agent(store(&kind, dir.path()).await?, Duration::ZERO)?).await?;
        let mut client = Client::connect(port).await?;
        for i in 0..20 {
            client.run(&format!("warm-{i}")).await?;
        }
        Res::Ok(client)
    })?;
    #[cfg(not(feature = "mimalloc"))]
    let before = Snapshot::of(ALLOC);
    let t = Instant::now();
    measured_runs(&rt, &mut client, runs)?;
    let elapsed = t.elapsed();
    {
        let per = runs.max(1) as f64;
        #[cfg(not(feature = "mimalloc"))]
        let (allocs, kib) = {
            let d = Snapshot::of(ALLOC).since(before);
            (
                json!(d.allocations as f64 / per),
                json!(d.bytes as f64 / per / 1024.0),
            )
        };
        #[cfg(feature = "mimalloc")]
        let (allocs, kib) = (serde_json::Value::Null, serde_json::Value::Null);
        println!(
            "{}",
            json!({
                "scenario": "served_run",
                "store": kind,
                "allocator": ALLOCATOR,
                "runs": runs,
                "allocs_per_run": allocs,
                "alloc_kib_per_run": kib,
                "us_per_run": elapsed.as_secs_f64() * 1e6 / per,
            })
        );
        Ok(())
    }
}

/// The measured runs, after the warm-up, the server's tasks polled inside: `cargo
/// xtask bench --cost` counts the instructions of this function alone (callgrind's
/// `--toggle-collect`), so that the set-up and the warm-up (one-time initializations
/// such as the metrics clock's calibration, which loops on the wall clock) stay out.
#[inline(never)]
fn measured_runs(rt: &tokio::runtime::Runtime, client: &mut Client, runs: u64) -> Res<()> {
    rt.block_on(async {
        for i in 0..runs {
            client.run(&format!("s-{i}")).await?;
        }
        Ok(())
    })
}

/// `--serve-child STORE LATENCY_MS`: serves on a multi-thread runtime, prints the port
/// on stdout, and exits when stdin closes.
fn serve_child() -> Res<()> {
    let kind = value("--serve-child").unwrap_or_else(|| "memory".to_owned());
    let latency = Duration::from_millis(value("--latency-ms").map_or(Ok(20), |n| n.parse())?);
    std::thread::spawn(|| {
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
        std::process::exit(0);
    });
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let port = start_server(agent(store(&kind, dir.path()).await?, latency)?).await?;
        println!("{port}");
        std::io::stdout().flush()?;
        std::future::pending::<Res<()>>().await
    })
}

/// User and system CPU seconds and peak RSS (MiB) of process `pid`.
fn usage(pid: u32) -> (f64, f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let hwm = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?.to_owned();
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0);
    (ticks(11) / 100.0, ticks(12) / 100.0, hwm)
}

/// `--concurrent N`: the server round's load against this program as a server.
fn concurrent() -> Res<()> {
    let n: usize = value("--concurrent").map_or(Ok(1_000), |n| n.parse())?;
    let kind = value("--store").unwrap_or_else(|| "memory".to_owned());
    let latency = value("--latency-ms").unwrap_or_else(|| "20".to_owned());
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--serve-child", &kind, "--latency-ms", &latency])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    let stdout = child.stdout.take().ok_or("no stdout of the server")?;
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    let port: u16 = line.trim().parse()?;
    let pid = child.id();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        Client::connect(port).await?.run("warm").await?;
        let before = usage(pid);
        let t = Instant::now();
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                tokio::spawn(async move {
                    let mut c = Client::connect(port).await.map_err(|e| e.to_string())?;
                    c.run(&format!("c-{i}")).await.map_err(|e| e.to_string())
                })
            })
            .collect();
        for t in tasks {
            t.await??;
        }
        let wall = t.elapsed();
        let after = usage(pid);
        Ok::<_, Box<dyn std::error::Error>>((before, after, wall))
    });
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();
    let (before, after, wall) = result?;
    let (user, system) = (after.0 - before.0, after.1 - before.1);
    println!(
        "{}",
        json!({
            "scenario": "served_concurrent",
            "store": kind,
            "allocator": ALLOCATOR,
            "sessions": n,
            "latency_ms": latency.parse::<u64>().ok(),
            "server_user_s": user,
            "server_system_s": system,
            "server_cpu_us_per_run": (user + system) * 1e6 / n as f64,
            "server_peak_rss_mib": after.2,
            "wall_ms": wall.as_secs_f64() * 1e3,
        })
    );
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--serve-child") {
        serve_child()
    } else if args.iter().any(|a| a == "--concurrent") {
        concurrent()
    } else {
        sequential()
    }
}
