//! The measurement: seed, serve, time each request kind over HTTP (one request at a
//! time), the store work of decisions in this process, the server's RSS with N and
//! with 1,000 sessions stored; then the table with the targets.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reins_agent::Decision;
use serde_json::{Value, json};

use crate::seed::{Layout, Raw};
use crate::{Args, CALL_ID};

/// Every read's p99 target (ms).
const READ_P99_MS: f64 = 20.0;
/// A decision's store work p99 target (ms).
const STORE_P99_MS: f64 = 10.0;
/// RSS growth target (%): N stored against 1,000 stored.
const RSS_PCT: f64 = 10.0;
/// How deep the deep inbox page is (items before it), at most.
const DEEP: usize = 10_000;

/// One row of the table.
struct Row {
    what: String,
    p50: f64,
    p99: f64,
    /// The p99 target (ms), when there is one.
    target: Option<f64>,
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn row(what: impl Into<String>, mut ms: Vec<f64>, target: Option<f64>) -> Row {
    ms.sort_by(f64::total_cmp);
    Row {
        what: what.into(),
        p50: pct(&ms, 0.5),
        p99: pct(&ms, 0.99),
        target,
    }
}

/// The bench's store: where it is and how to drop it.
struct Place {
    kind: String,
    /// What `open_store` takes: a file path, or `URL|SCHEMA`.
    target: String,
    schema: Option<(String, String)>,
}

impl Place {
    fn new(args: &Args, dir: &Path, tag: &str) -> Result<Self, String> {
        if args.store == "sqlite" {
            return Ok(Self {
                kind: "sqlite".to_owned(),
                target: dir.join(format!("{tag}.db")).display().to_string(),
                schema: None,
            });
        }
        let url = args
            .database_url
            .clone()
            .ok_or("--store postgres needs --database-url or REINS_BENCH_POSTGRES_URL")?;
        let schema = format!("reins_scale_{}_{tag}", std::process::id());
        Ok(Self {
            kind: "postgres".to_owned(),
            target: format!("{url}|{schema}"),
            schema: Some((url, schema)),
        })
    }

    async fn raw(&self) -> Result<(Arc<dyn reins_memory::MemoryStore>, Raw), String> {
        if self.kind == "sqlite" {
            let s = crate::open_sqlite(&self.target)
                .await
                .map_err(|e| e.to_string())?;
            return Ok((Arc::new(s.clone()), Raw::Sqlite(s)));
        }
        let (url, schema) = self.schema.clone().unwrap_or_default();
        let options = reins_memory::PostgresOptions::default().schema(schema);
        let s = reins_memory::PostgresStore::connect_with(&url, options)
            .await
            .map_err(|e| e.to_string())?;
        Ok((Arc::new(s.clone()), Raw::Postgres(s)))
    }

    /// Drops the data (the SQLite file goes with the temporary directory).
    async fn drop_data(&self) {
        if let Some((url, schema)) = &self.schema
            && let Ok(pool) = sqlx::PgPool::connect(url).await
        {
            let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .execute(&pool)
                .await;
        }
    }
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

fn spawn_server(place: &Place, dir: &Path) -> Result<ServerProcess, String> {
    let port_file = dir.join("port");
    let _ = std::fs::remove_file(&port_file);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let log = dir.join("server.log");
    let stderr = std::fs::File::create(&log).map_err(|e| e.to_string())?;
    let child = Command::new(exe)
        .args(["--serve-child", &port_file.display().to_string()])
        .args(["--store", &place.kind, "--target", &place.target])
        .args(crate::inline_checkpoints().then_some("--inline-checkpoints"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("cannot start the server: {e}"))?;
    let mut proc = ServerProcess { child, port: 0 };
    let start = Instant::now();
    loop {
        if let Ok(p) = std::fs::read_to_string(&port_file)
            && let Ok(p) = p.trim().parse::<u16>()
        {
            proc.port = p;
            return Ok(proc);
        }
        if let Ok(Some(status)) = proc.child.try_wait() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(format!("the server exited ({status}): {text}"));
        }
        if start.elapsed() > Duration::from_secs(120) {
            return Err("the server did not listen within 120 s".to_owned());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `VmRSS` of a process, in MiB.
fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?.to_owned();
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn enc(id: &str) -> String {
    id.replace('/', "%2F")
}

/// An HTTP client for one server.
struct Http {
    client: reqwest::Client,
    base: String,
}

impl Http {
    async fn call(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value, f64), String> {
        let url = format!("{}{path}", self.base);
        let req = match method {
            "GET" => self.client.get(&url),
            _ => self.client.post(&url).json(&body.unwrap_or(Value::Null)),
        };
        let t = Instant::now();
        let res = req
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| format!("{path}: {e}"))?;
        let status = res.status().as_u16();
        let text = res.text().await.map_err(|e| format!("{path}: {e}"))?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, v, ms))
    }

    /// `n` timed calls of `path(k)` (after 3 untimed), each expected to answer `want`.
    async fn times(
        &self,
        n: usize,
        token: &str,
        method: &str,
        want: u16,
        path: impl Fn(usize) -> (String, Option<Value>),
    ) -> Result<Vec<f64>, String> {
        let mut ms = Vec::with_capacity(n);
        for k in 0..n + 3 {
            let (p, body) = path(k);
            let (status, v, t) = self.call(token, method, &p, body).await?;
            if status != want {
                return Err(format!("{method} {p}: {status} (wanted {want}): {v}"));
            }
            if k >= 3 {
                ms.push(t);
            }
        }
        Ok(ms)
    }
}

/// The workload on one served store: every request kind, `n` times each (decisions and
/// forks on distinct sessions). Returns the rows and the server's RSS after it.
async fn workload(http: &Http, layout: Layout, n: usize) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    let read = Some(READ_P99_MS);
    let get = |path: String| move |_k: usize| (path.clone(), None);
    let inbox = "/v1/requirements?limit=50".to_owned();
    let t = http
        .times(n, "admin", "GET", 200, get(inbox.clone()))
        .await?;
    rows.push(row("inbox: first page", t, read));
    // A cursor `DEEP` items in (at most half the pending list), reached by paging.
    let mut cursor: Option<String> = None;
    let mut seen = 0;
    while seen < DEEP.min(layout.paused / 2) {
        let path = match &cursor {
            Some(c) => format!("/v1/requirements?limit=200&cursor={c}"),
            None => "/v1/requirements?limit=200".to_owned(),
        };
        let (_, v, _) = http.call("admin", "GET", &path, None).await?;
        seen += v["items"].as_array().map_or(0, Vec::len);
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    if let Some(c) = &cursor {
        let t = http
            .times(n, "admin", "GET", 200, get(format!("{inbox}&cursor={c}")))
            .await?;
        rows.push(row(format!("inbox: page after {seen} items"), t, read));
    }
    let t = http
        .times(n, "approver", "GET", 200, get(inbox.clone()))
        .await?;
    rows.push(row("inbox: by tool (approver of delete_file)", t, read));
    let t = http.times(n, "u3", "GET", 200, get(inbox.clone())).await?;
    rows.push(row("inbox: by principal (user u3)", t, read));
    for (what, q) in [
        ("sessions: all", ""),
        ("sessions: status=paused", "&status=paused"),
        ("sessions: tool=delete_file", "&tool=delete_file"),
        ("sessions: principal=u3", "&principal=u3"),
    ] {
        let t = http
            .times(
                n,
                "admin",
                "GET",
                200,
                get(format!("/v1/sessions?limit=50{q}")),
            )
            .await?;
        rows.push(row(what, t, read));
    }
    let paused = |k: usize| layout.id(layout.paused_session(k % layout.paused));
    let t = http
        .times(n, "admin", "GET", 200, |k| {
            (format!("/v1/sessions/{}", enc(&paused(k))), None)
        })
        .await?;
    rows.push(row("session view (paused)", t, read));
    // Decisions on the second half of the paused sessions (the first half is the
    // in-process store-work measurement's).
    let decisions = n.min(layout.paused / 2).max(1);
    let half = layout.paused / 2;
    let t = http
        .times(
            decisions.saturating_sub(3).max(1),
            "admin",
            "POST",
            200,
            |k| {
                (
                    format!("/v1/sessions/{}/decisions", enc(&paused(half + k))),
                    Some(json!({"decisions": [{"requirement_id": CALL_ID, "action": "approve"}]})),
                )
            },
        )
        .await?;
    rows.push(row("decision: approve and run (HTTP)", t, None));
    let t = http
        .times(n, "admin", "GET", 200, |k| {
            let s = paused(half + k % decisions.saturating_sub(3).max(1));
            (format!("/v1/sessions/{}/decisions", enc(&s)), None)
        })
        .await?;
    rows.push(row("audit trail (decided session)", t, read));
    let t = http
        .times(n, "admin", "POST", 201, |k| {
            let s = layout.id(layout.idle_session(k));
            (
                format!("/v1/sessions/{}/fork", enc(&s)),
                Some(json!({"new_session_id": format!("u0/fork-{k}"), "before_turn": 5})),
            )
        })
        .await?;
    rows.push(row("fork (before turn 5 of 10)", t, None));
    Ok(rows)
}

/// The store work of `n` decisions made in this process on the first paused sessions:
/// every store call the agent makes, from opening the session to the end of the run.
/// Also returns the calls a decision makes: per call name, how many per decision and
/// their p50 / p99 time.
async fn store_work(
    store: Arc<dyn reins_memory::MemoryStore>,
    layout: Layout,
    n: usize,
) -> Result<(Row, Vec<String>), String> {
    let calls: crate::timed::CallLog = Arc::default();
    let timed = crate::timed::Timed {
        inner: store,
        calls: calls.clone(),
    };
    let agent = crate::agent(Arc::new(timed));
    let mut ms = Vec::new();
    let mut by_name: BTreeMap<&'static str, (usize, Vec<f64>)> = BTreeMap::new();
    let decisions = n.min(layout.paused / 2).max(1);
    for j in 0..decisions {
        let id = layout.id(layout.paused_session(j));
        calls.lock().unwrap().clear();
        let session = agent.session(&id).await.map_err(|e| e.to_string())?;
        session
            .resolve(vec![Decision::approve(CALL_ID)])
            .await
            .map_err(|e| format!("decision on {id}: {e}"))?;
        let log = std::mem::take(&mut *calls.lock().unwrap());
        ms.push(log.iter().map(|c| c.1).sum::<u64>() as f64 / 1e6);
        for (name, ns) in log {
            let e = by_name.entry(name).or_default();
            e.0 += 1;
            e.1.push(ns as f64 / 1e6);
        }
    }
    let lines = by_name
        .into_iter()
        .map(|(name, (count, mut t))| {
            t.sort_by(f64::total_cmp);
            format!(
                "  {name:<32} {:>5.2} per decision  p50 {:>7.3} ms  p99 {:>7.3} ms",
                count as f64 / decisions as f64,
                pct(&t, 0.5),
                pct(&t, 0.99)
            )
        })
        .collect();
    Ok((
        row("decision: its store work", ms, Some(STORE_P99_MS)),
        lines,
    ))
}

/// Seeds, serves and measures one layout; returns its rows, the server's RSS, the
/// seeding time and the store's size, and a decision's store calls.
async fn one(
    args: &Args,
    dir: &Path,
    tag: &str,
    layout: Layout,
    full: bool,
) -> Result<(Vec<Row>, f64, (f64, f64), Vec<String>), String> {
    let place = Place::new(args, dir, tag)?;
    let result = async {
        let (store, raw) = place.raw().await?;
        eprintln!(
            "scale_bench: seeding {} sessions ({} paused) on {} ...",
            layout.sessions, layout.paused, place.kind
        );
        let seeded = crate::seed::seed(&place.kind, store.clone(), &raw, layout).await?;
        let size = raw.size_mib().await?;
        eprintln!("scale_bench: seeded in {seeded:.1} s, {size:.0} MiB");
        if full {
            crate::plans::print(&raw, &place.kind).await?;
        }
        let server = spawn_server(&place, dir)?;
        let http = Http {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(600))
                .build()
                .map_err(|e| e.to_string())?,
            base: format!("http://127.0.0.1:{}", server.port),
        };
        let mut rows = workload(&http, layout, args.samples).await?;
        let rss = rss_mib(server.child.id());
        drop(server);
        let mut calls = Vec::new();
        if full {
            let (row, lines) = store_work(store, layout, args.samples).await?;
            rows.push(row);
            calls = lines;
        }
        Ok::<_, String>((rows, rss, (seeded, size), calls))
    }
    .await;
    place.drop_data().await;
    result
}

/// The whole bench (see the crate docs).
pub(crate) async fn run(args: Args) -> Result<(), String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir: PathBuf = tmp.path().to_owned();
    let small = Layout {
        sessions: 1000.min(args.sessions),
        paused: (args.paused * 1000 / args.sessions).clamp(1, 1000.min(args.sessions)),
    };
    let big = Layout {
        sessions: args.sessions,
        paused: args.paused,
    };
    let (_, small_rss, _, _) = one(&args, &dir, "small", small, false).await?;
    let (rows, big_rss, (seeded, size), calls) = one(&args, &dir, "big", big, true).await?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!();
    println!(
        "scale: {} sessions of 20 messages, {} paused, {} store (seeded in {seeded:.0} s, {size:.0} MiB); load average {}",
        big.sessions,
        big.paused,
        args.store,
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("{:<44} {:>9} {:>9}  target", "what", "p50 ms", "p99 ms");
    let mut all_met = true;
    for r in &rows {
        let (target, verdict) = match r.target {
            Some(t) => {
                let met = r.p99 <= t;
                all_met &= met;
                (
                    format!("p99 ≤ {t:.0} ms"),
                    if met { "met" } else { "not met" },
                )
            }
            None => ("-".to_owned(), ""),
        };
        println!(
            "{:<44} {:>9.2} {:>9.2}  {:<14} {verdict}",
            r.what, r.p50, r.p99, target
        );
    }
    let growth = (big_rss / small_rss - 1.0) * 100.0;
    let met = growth <= RSS_PCT;
    all_met &= met;
    println!(
        "{:<44} {:>9.1} {:>9.1}  {:<14} {}",
        format!(
            "server RSS MiB: {} / {} stored",
            small.sessions, big.sessions
        ),
        small_rss,
        big_rss,
        format!("≤ +{RSS_PCT:.0} % ({growth:+.1} %)"),
        if met { "met" } else { "not met" }
    );
    println!("a decision's store calls:");
    for line in &calls {
        println!("{line}");
    }
    println!(
        "targets: {}",
        if all_met { "all met" } else { "not all met" }
    );
    Ok(())
}
