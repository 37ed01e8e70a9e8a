//! Server benchmark (not a test): N concurrent sessions, each one run with a tool call,
//! through HTTP on one instance, with a model that takes 20 ms per answer. Prints the
//! throughput, the latency percentiles, the overhead over the model's 40 ms (two
//! answers per run: the tool call, then the final text), the same figures for the
//! same runs made directly on the `Agent` (no HTTP), and the peak RSS.
//!
//! ```text
//! cargo xtask bench --server                      # 1,000 sessions, in-memory and SQLite stores
//! cargo run --release -p reins-server --example server_bench -- --sessions 1000 --store sqlite
//! ```
//!
//! Client and server share the process (and its RSS); each in-flight request holds a
//! connection, so the open-files limit must allow 2 × sessions sockets.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use reins_agent::Agent;
use reins_memory::MemoryStore;
use reins_message::{Msg, Role};
use reins_model::{ChatRequest, ScriptedModel, ScriptedResponse};
use reins_server::{Auth, Principal, Role as R, Server};
use reins_tool::{ToolError, Toolkit};
use serde_json::json;

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

fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

struct Figures {
    wall: Duration,
    lat: Vec<Duration>,
}

impl Figures {
    fn pct(&self, p: f64) -> Duration {
        let i = ((self.lat.len() as f64 - 1.0) * p).round() as usize;
        self.lat[i.min(self.lat.len() - 1)]
    }
}

async fn store_of(kind: &str, dir: &std::path::Path, tag: &str) -> Arc<dyn MemoryStore> {
    match kind {
        "memory" => Arc::new(reins_memory::InMemoryStore::new()),
        "sqlite" => Arc::new(
            reins_memory::SqliteStore::open(dir.join(format!("{tag}.db")))
                .await
                .unwrap(),
        ),
        other => panic!("unknown store `{other}` (memory or sqlite)"),
    }
}

async fn over_http(store: Arc<dyn MemoryStore>, n: usize) -> Figures {
    let app = Server::new(agent(store))
        .auth(Auth::new().token("bench", Principal::new("bench", [R::Admin])));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { app.serve(listener).await });
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(n)
        .build()
        .unwrap();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let client = client.clone();
        let url = format!("http://{addr}/v1/sessions/bench%2F{i}/runs");
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let res = client
                .post(url)
                .bearer_auth("bench")
                .json(&json!({"message": "go"}))
                .send()
                .await
                .expect("request");
            assert_eq!(res.status(), 200, "{:?}", res.text().await);
            let out: serde_json::Value = res.json().await.unwrap();
            assert_eq!(out["status"], "completed");
            t.elapsed()
        }));
    }
    let mut lat = Vec::with_capacity(n);
    for t in tasks {
        lat.push(t.await.unwrap());
    }
    let wall = start.elapsed();
    server.abort();
    lat.sort();
    Figures { wall, lat }
}

async fn direct(store: Arc<dyn MemoryStore>, n: usize) -> Figures {
    let agent = agent(store);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let agent = agent.clone();
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let s = agent.session(&format!("bench/{i}")).await.unwrap();
            let out = s.call(Msg::user("go")).await.unwrap();
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
    Figures { wall, lat }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let mut n = 1000usize;
    let mut stores = vec!["memory".to_owned(), "sqlite".to_owned()];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--sessions" => {
                n = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--sessions N")
            }
            "--store" => stores = vec![args.next().expect("--store memory|sqlite")],
            "--bench" => {}
            other => panic!("unknown argument `{other}`"),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let model = ms(MODEL_LATENCY * 2);
    println!(
        "reins-server bench: {n} concurrent sessions × 1 run (tool call + answer), model {} ms per answer, {} CPUs",
        ms(MODEL_LATENCY),
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    println!(
        "{:<8} {:<7} {:>10} {:>9} {:>9} {:>9} {:>14} {:>14}",
        "store", "path", "runs/s", "p50 ms", "p99 ms", "max ms", "p50 overhead", "p99 overhead"
    );
    for kind in &stores {
        for path in ["direct", "http"] {
            let f = rt.block_on(async {
                let store = store_of(kind, dir.path(), &format!("{kind}-{path}")).await;
                if path == "http" {
                    over_http(store, n).await
                } else {
                    direct(store, n).await
                }
            });
            println!(
                "{:<8} {:<7} {:>10.0} {:>9.1} {:>9.1} {:>9.1} {:>11.1} ms {:>11.1} ms",
                kind,
                path,
                n as f64 / f.wall.as_secs_f64(),
                ms(f.pct(0.5)),
                ms(f.pct(0.99)),
                ms(*f.lat.last().unwrap()),
                ms(f.pct(0.5)) - model,
                ms(f.pct(0.99)) - model,
            );
        }
    }
    println!(
        "peak RSS (client and server in one process): {:.1} MiB",
        peak_rss_mib().unwrap_or(f64::NAN)
    );
}
