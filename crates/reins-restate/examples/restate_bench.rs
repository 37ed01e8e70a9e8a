//! Restate benchmark (not a test): N concurrent sessions, each one run with a tool call
//! (the model answers twice, 20 ms each), through a local restate-server and the
//! `reins-restate-demo` service in processes of their own. Prints the throughput, the
//! latency percentiles, the overhead over the model's 40 ms, and the peak RSS and CPU
//! time of the service and of restate-server.
//!
//! ```text
//! cargo xtask bench --restate        # also runs reins-server + PostgreSQL on the same workload
//! cargo build --release -p reins-restate --all-features --bins --examples
//! target/release/examples/restate_bench --sessions 1000 [--database-url postgres://..] \
//!     [--restate-config FILE]
//! ```
//!
//! `--restate-config FILE` adds TOML to restate-server's configuration (keys before the
//! first table header go to its root table: see `LocalRestate::start_with`), to measure
//! a setting against `LocalRestate`'s own.
//!
//! The demo service binary is looked up beside this program (`../reins-restate-demo`);
//! restate-server comes from the npm package (see docs/restate.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Stdio;
use std::time::{Duration, Instant};

use reins_message::Msg;
use reins_restate::{LocalRestate, RestateClient, TurnRequest};

const MODEL_LATENCY_MS: u64 = 20;

/// `VmHWM` (peak RSS, MiB) and CPU seconds (user + system) of a process.
fn usage(pid: u32) -> (f64, f64) {
    let hwm = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?.to_owned();
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(f64::NAN, |kb| kb / 1024.0);
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn one_run(client: &RestateClient, session: &str) -> Duration {
    let t = Instant::now();
    let out = client
        .run(session, &TurnRequest::message(Msg::user("work 0")), None)
        .await
        .unwrap_or_else(|e| panic!("run of {session}: {e}"));
    assert_eq!(out.status, reins_agent::RunStatus::Completed, "{out:?}");
    assert!(out.message.text().starts_with("done: "), "{out:?}");
    t.elapsed()
}

#[tokio::main]
async fn main() {
    let mut n = 1000usize;
    let mut database_url: Option<String> = None;
    let mut extra = String::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--sessions" => {
                n = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--sessions N")
            }
            "--database-url" => database_url = Some(args.next().expect("--database-url URL")),
            "--restate-config" => {
                let path = args.next().expect("--restate-config FILE");
                extra = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("reading {path}: {e}"));
            }
            "--bench" => {}
            other => panic!("unknown argument `{other}`"),
        }
    }
    let binary = LocalRestate::find_binary().expect(
        "restate-server is not installed: npm ci --ignore-scripts --prefix crates/reins-restate/tests/restate",
    );
    let service_bin = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|p| p.parent())
        .map(|p| p.join("reins-restate-demo"))
        .filter(|p| p.is_file())
        .expect(
            "build the service first: cargo build --release -p reins-restate --all-features --bins",
        );
    let dir = tempfile::tempdir().unwrap();
    let restate = LocalRestate::start_with(binary, dir.path().join("restate"), &extra)
        .await
        .unwrap();
    let port = reins_restate::local::free_port().unwrap();
    let mut cmd = tokio::process::Command::new(&service_bin);
    cmd.arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--db")
        .arg(dir.path().join("reins.sqlite"))
        .arg("--outbox")
        .arg(dir.path().join("outbox.txt"))
        .arg("--latency-ms")
        .arg(MODEL_LATENCY_MS.to_string())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    if let Some(url) = &database_url {
        cmd.arg("--database-url").arg(url);
    }
    let service = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the service did not listen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    restate
        .register(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap();
    let client = RestateClient::new(restate.ingress_url());
    let run_id = std::process::id();
    one_run(&client, &format!("warm-{run_id}")).await;

    let service_pid = service.id().unwrap_or(0);
    let restate_pid = restate_pid(&restate);
    let before = (usage(service_pid).1, usage(restate_pid).1);
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let client = client.clone();
            let session = format!("rb-{run_id}-{i}");
            tokio::spawn(async move { one_run(&client, &session).await })
        })
        .collect();
    let mut lat = Vec::with_capacity(n);
    for t in tasks {
        lat.push(t.await.unwrap());
    }
    let wall = start.elapsed();
    let (svc_rss, svc_cpu) = usage(service_pid);
    let (rs_rss, rs_cpu) = usage(restate_pid);
    lat.sort();
    let pct = |p: f64| lat[(((lat.len() - 1) as f64) * p).round() as usize];
    let model = 2.0 * MODEL_LATENCY_MS as f64;
    println!(
        "restate bench: {n} concurrent sessions × 1 run (tool call + answer), model {MODEL_LATENCY_MS} ms per answer, store {}, {} CPUs",
        if database_url.is_some() {
            "postgres"
        } else {
            "sqlite"
        },
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    println!(
        "{:<22} {:>8} {:>9} {:>9} {:>9} {:>13} {:>13} {:>14} {:>8}",
        "path",
        "runs/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "p50 overhead",
        "p99 overhead",
        "peak RSS",
        "CPU s"
    );
    println!(
        "{:<22} {:>8.0} {:>9.1} {:>9.1} {:>9.1} {:>10.1} ms {:>10.1} ms {:>10.0} MiB {:>8.2}",
        "Restate + service",
        n as f64 / wall.as_secs_f64(),
        ms(pct(0.5)),
        ms(pct(0.99)),
        ms(*lat.last().unwrap()),
        ms(pct(0.5)) - model,
        ms(pct(0.99)) - model,
        svc_rss,
        svc_cpu - before.0,
    );
    println!(
        "{:<22} {:>8} {:>9} {:>9} {:>9} {:>13} {:>13} {:>10.0} MiB {:>8.2}",
        "  (restate-server)",
        "",
        "",
        "",
        "",
        "",
        "",
        rs_rss,
        rs_cpu - before.1,
    );
    println!(
        "peak RSS and CPU s: the service process, and restate-server on the line below (CPU over the timed runs)"
    );
}

/// restate-server's pid: the process listening on its admin port.
fn restate_pid(restate: &LocalRestate) -> u32 {
    restate.pid().unwrap_or(0)
}
