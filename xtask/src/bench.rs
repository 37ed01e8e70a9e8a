//! `cargo xtask bench`: runs the criterion suites of every crate and prints one
//! summary table; `--peer` runs the side-by-side comparison with Agno instead.
//!
//! - `cargo xtask bench [--quick] [FILTER]` — `cargo bench --workspace --bench '*'`, then
//!   the median of every benchmark that ran, read from criterion's
//!   `target/criterion/**/new/estimates.json`.
//! - `cargo xtask bench --peer [--quick] [--rounds N]` — sets up Agno in a virtualenv
//!   (`target/agno-venv`, from PyPI) when it is missing, runs reins' `peer_bench`
//!   (a program of `crates/reins-bench`) and `shared/peer/agno_bench.py` in turn, `N`
//!   rounds each (default 3),
//!   prints the per-key medians, the Agno / reins ratios and whether each target of
//!   the benchmark issue is met; then runs `concurrency_bench` and the server round
//!   (`--server` below, with its targets). `shared/` is
//!   `REINS_SHARED_DIR`, or `../shared` beside the repository. Raw JSON goes to
//!   `target/peer-bench/`.
//! - `cargo xtask bench --server [--sessions N] [--store memory|sqlite] [--no-agentos]` —
//!   reins-server's `server_bench` example (release build): N concurrent sessions
//!   (default 1,000) × one tool-call run with 20 ms model latency, over HTTP (each
//!   server in its own process) and directly, on the in-memory and SQLite stores:
//!   throughput, p50/p99 latency and overhead, the server's peak RSS and CPU time; the
//!   same workload on Agno's AgentOS side by side (`crates/reins-server/bench/
//!   agentos_server.py`, set up from PyPI in `target/agentos-venv` when missing).
//! - `cargo xtask bench --scale [--sessions N] [--paused M] [--store sqlite|postgres|both]
//!   [--samples K] [--inline-checkpoints]` — the scale of the waiting: reins-server's `scale_bench` example
//!   (release build) seeds a store with N sessions of 20 messages (default 1,000,000),
//!   M of them paused on a pending requirement (default 100,000), serves it on
//!   loopback and times the inbox, the session list, a session's view, its audit
//!   trail, a decision and a fork over HTTP, a decision's store work, and the server's
//!   RSS against 1,000 stored; prints the targets, met or not. SQLite in a temporary
//!   directory; PostgreSQL on a throwaway cluster (or `REINS_BENCH_POSTGRES_URL`), in
//!   a schema of its own; both dropped at the end.
//! - `cargo xtask bench --restate [--sessions N]` — the same workload through Restate
//!   (reins-restate's `restate_bench`: a local restate-server and the demo service, in
//!   processes of their own) and through reins-server, both on one throwaway
//!   PostgreSQL.
//! - `cargo xtask bench --cost [--check | --update-baseline --why TEXT]` — instructions
//!   (callgrind) and allocations per run of five scenarios; `--check` fails when one
//!   is above the committed baseline by more than 3 % (`bench/cost.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use crate::json::{json_number_in, json_string};

pub(crate) mod cost;
mod peer;

/// `cargo xtask bench --help`.
const USAGE: &str = "usage: cargo xtask bench [--quick] [FILTER]
       cargo xtask bench --peer [--quick] [--rounds N]
       cargo xtask bench --server [--sessions N] [--store memory|sqlite] [--no-agentos]
       cargo xtask bench --restate [--sessions N]
       cargo xtask bench --scale [--sessions N] [--paused M] [--store sqlite|postgres|both] [--samples K]
                             [--inline-checkpoints]
       cargo xtask bench --cost [--check | --update-baseline --why TEXT]

  (no mode)     every crate's criterion suite (`cargo bench --workspace --bench '*'`),
                then one table of medians; FILTER keeps benchmarks whose id contains it
  --quick       shorter warm-up and measurement (criterion), fewer repetitions (--peer)
  --peer        reins' `peer_bench` (crates/reins-bench) against Agno's
                `shared/peer/agno_bench.py`, N rounds each (default 3), medians, ratios
                and the benchmark issue's targets; then `concurrency_bench`, also with
                100,000 sessions; then the server round (`--server`: reins-server
                against AgentOS, in memory and on SQLite) and its targets. Sets up Agno in target/agno-venv from PyPI when missing;
                `shared/` is REINS_SHARED_DIR or ../shared. Raw JSON: target/peer-bench/
  --server      reins-server's `server_bench`: N concurrent sessions (default 1,000) over
                HTTP and directly, with Agno's AgentOS beside it unless --no-agentos
  --restate     reins-restate's `restate_bench` (local restate-server from npm, the demo
                service) and reins-server's `server_bench`, both on one throwaway
                PostgreSQL: N concurrent sessions (default 1,000) × one tool-call run
  --scale       the scale of the waiting: reins-server's `scale_bench` seeds N sessions
                of 20 messages (default 1,000,000), M paused on a requirement (default
                100,000), serves them on loopback and times the inbox (first page, a
                deep page, by tool, by principal), GET /v1/sessions with each filter,
                a session's view, its audit trail, a decision, a fork (K requests each,
                default 200), a decision's store work, and the server's RSS against
                1,000 stored; targets met / not met. Stores: sqlite, postgres (a
                throwaway cluster, or REINS_BENCH_POSTGRES_URL) or both (default);
                the data is created and dropped by the run; --inline-checkpoints opens
                SQLite with its own WAL checkpoints inside commits (to compare)
  --cost        allocations (counted) and instructions (callgrind, when valgrind is
                installed) per run: a single turn, a tool-call run, a decision (pause,
                approve, resume) and the tool-call run with OpenTelemetry on, in memory
                (`run_cost`), and the tool-call run served by reins-server over HTTP
                (`served_cost`); built with the `cost` profile
  --check       (with --cost) compare with crates/reins-bench/cost-baseline.json and
                fail when a number is above it by more than 3 %
  --update-baseline --why TEXT
                (with --cost) rewrite the baseline with the numbers measured and the
                reason; commit it with a message that says why

See docs/performance.md.";

/// Runs the benchmarks.
pub fn run(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        crate::say(USAGE);
        return Ok(());
    }
    let quick = args.iter().any(|a| a == "--quick");
    if args.iter().any(|a| a == "--server") {
        return server(args);
    }
    if args.iter().any(|a| a == "--restate") {
        return restate(args);
    }
    if args.iter().any(|a| a == "--cost") {
        return cost::run(args);
    }
    if args.iter().any(|a| a == "--scale") {
        return scale(args);
    }
    if args.iter().any(|a| a == "--peer") {
        let rounds = match args.iter().position(|a| a == "--rounds") {
            Some(i) => args
                .get(i + 1)
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n > 0)
                .ok_or("--rounds needs a positive number")?,
            None => 3,
        };
        return peer::peer(quick, rounds);
    }
    let filter: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    criterion_suites(quick, &filter)
}

// ----- --restate: reins on Restate vs reins-server + PostgreSQL -----------------------

/// `--restate [--sessions N]`: reins-restate's `restate_bench` (a local restate-server
/// from the npm package and the demo service, PostgreSQL store) and reins-server's
/// `server_bench` on the same PostgreSQL (a throwaway cluster on loopback), the same
/// workload, one after the other.
fn restate(args: &[String]) -> Result<(), String> {
    let sessions = match args.iter().position(|a| a == "--sessions") {
        Some(i) => args
            .get(i + 1)
            .cloned()
            .ok_or("--sessions needs a number")?,
        None => "1000".to_owned(),
    };
    let (url, _pg) = match std::env::var("REINS_TEST_POSTGRES_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let pg = crate::postgres::Cluster::start_if_available(true)?
                .ok_or("PostgreSQL is not installed (initdb not found)")?;
            (pg.url(), Some(pg))
        }
    };
    // One build for both programs, so that they share one feature set (and one build).
    crate::run(crate::cargo().current_dir(repo_root()).args([
        "build",
        "--release",
        "--quiet",
        "-p",
        "reins-restate",
        "-p",
        "reins-server",
        "--all-features",
        "--bins",
        "--example",
        "restate_bench",
        "--example",
        "server_bench",
    ]))?;
    let examples = target_dir().join("release").join("examples");
    let on_restate = run_captured(Command::new(examples.join("restate_bench")).args([
        "--sessions",
        &sessions,
        "--database-url",
        &url,
    ]))?;
    let on_server = run_captured(
        Command::new(examples.join("server_bench"))
            .env("REINS_BENCH_POSTGRES_URL", &url)
            .args(["--sessions", &sessions, "--store", "postgres"]),
    )?;
    // Side by side: the rows both programs printed, as numbers.
    let row = |out: &str, label: &str| -> Option<Vec<f64>> {
        let line = out.lines().find(|l| l.trim_start().starts_with(label))?;
        let rest = line.trim_start().strip_prefix(label)?;
        Some(
            rest.split_whitespace()
                .filter_map(|t| t.parse::<f64>().ok())
                .collect(),
        )
    };
    let restate = row(&on_restate, "Restate + service");
    let restate_server = row(&on_restate, "(restate-server)");
    let server = row(&on_server, "postgres reins HTTP");
    println!();
    println!(
        "side by side: {sessions} sessions × 1 run (tool call + answer, 20 ms per model answer), one PostgreSQL store"
    );
    println!(
        "{:<34} {:>8} {:>13} {:>13} {:>13}",
        "path", "runs/s", "p50 overhead", "p99 overhead", "service RSS"
    );
    // Both rows: runs/s, p50, p99, max, p50 overhead, p99 overhead, RSS, CPU.
    let print = |name: &str, r: &Option<Vec<f64>>, extra: &str| match r {
        Some(v) if v.len() >= 7 => println!(
            "{:<34} {:>8.0} {:>10.1} ms {:>10.1} ms {:>9.0} MiB{extra}",
            name, v[0], v[4], v[5], v[6]
        ),
        _ => println!("{name:<34} (no figures: see the output above)"),
    };
    let rs_rss = restate_server
        .as_ref()
        .and_then(|v| v.first())
        .map_or(String::new(), |m| format!(" + restate-server {m:.0} MiB"));
    print("Restate (service + restate-server)", &restate, &rs_rss);
    print("reins-server (HTTP, one process)", &server, "");
    Ok(())
}

/// Runs `cmd`, passing its output through, and returns its standard output.
fn run_captured(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run {cmd:?}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{text}");
    if !out.status.success() {
        return Err(format!("{cmd:?} failed ({})", out.status));
    }
    Ok(text)
}

// ----- --scale: the scale of the waiting ----------------------------------------------

/// `--scale [--sessions N] [--paused M] [--store sqlite|postgres|both] [--samples K]
/// [--inline-checkpoints]`:
/// reins-server's `scale_bench` (release build) on each store in turn; PostgreSQL on a
/// throwaway cluster unless `REINS_BENCH_POSTGRES_URL` names a server.
fn scale(args: &[String]) -> Result<(), String> {
    let value = |name: &str| -> Result<Option<String>, String> {
        match args.iter().position(|a| a == name) {
            None => Ok(None),
            Some(i) => args
                .get(i + 1)
                .filter(|v| !v.starts_with("--"))
                .cloned()
                .map(Some)
                .ok_or_else(|| format!("{name} needs a value")),
        }
    };
    let stores: &[&str] = match value("--store")?.as_deref() {
        None | Some("both") => &["sqlite", "postgres"],
        Some("sqlite") => &["sqlite"],
        Some("postgres") => &["postgres"],
        Some(other) => {
            return Err(format!(
                "--store is sqlite, postgres or both, not `{other}`"
            ));
        }
    };
    let mut pass = Vec::new();
    for name in ["--sessions", "--paused", "--samples"] {
        if let Some(v) = value(name)? {
            pass.push(name.to_owned());
            pass.push(v);
        }
    }
    if args.iter().any(|a| a == "--inline-checkpoints") {
        pass.push("--inline-checkpoints".to_owned());
    }
    crate::run(crate::cargo().current_dir(repo_root()).args([
        "build",
        "--release",
        "--quiet",
        "-p",
        "reins-server",
        "--all-features",
        "--example",
        "scale_bench",
    ]))?;
    let exe = target_dir()
        .join("release")
        .join("examples")
        .join("scale_bench");
    for store in stores {
        let mut cmd = Command::new(&exe);
        cmd.args(["--store", store]).args(&pass);
        // Kept alive (and dropped, which stops it) around the run.
        let mut _cluster = None;
        if *store == "postgres" {
            let url = match std::env::var("REINS_BENCH_POSTGRES_URL") {
                Ok(url) => url,
                Err(_) => {
                    let pg = crate::postgres::Cluster::start_fresh()?;
                    let url = pg.url();
                    _cluster = Some(pg);
                    url
                }
            };
            cmd.args(["--database-url", &url]);
        }
        crate::run(&mut cmd)?;
    }
    Ok(())
}

// ----- --server: reins-server vs Agno's AgentOS ---------------------------------------

/// `--server [--sessions N] [--store KIND] [--no-agentos]`: reins-server's `server_bench`
/// with AgentOS beside it (set up from PyPI in `target/agentos-venv` when missing).
fn server(args: &[String]) -> Result<(), String> {
    let no_agentos = args.iter().any(|a| a == "--no-agentos");
    let rest: Vec<&String> = args
        .iter()
        .filter(|a| *a != "--server" && *a != "--no-agentos")
        .collect();
    let mut cmd = crate::cargo();
    cmd.current_dir(repo_root()).args([
        "run",
        "--release",
        "--quiet",
        "-p",
        "reins-server",
        "--example",
        "server_bench",
        "--",
    ]);
    cmd.args(rest);
    if !no_agentos {
        match agentos_python() {
            Ok(python) => {
                cmd.arg("--agentos")
                    .arg(python)
                    .arg("--agentos-script")
                    .arg(
                        repo_root()
                            .join("crates")
                            .join("reins-server")
                            .join("bench")
                            .join("agentos_server.py"),
                    );
            }
            Err(e) => eprintln!("xtask: AgentOS left out of the comparison: {e}"),
        }
    }
    crate::run(&mut cmd)
}

/// The python of `target/agentos-venv`, created and filled from PyPI when missing, with
/// the versions pinned in `crates/reins-server/bench/agentos-requirements.txt`.
/// AgentOS serves with FastAPI + uvicorn; its run endpoint reads form fields
/// (python-multipart); the SQLite store goes through SQLAlchemy's asyncio layer
/// (greenlet).
fn agentos_python() -> Result<PathBuf, String> {
    python_venv(
        "agentos-venv",
        "AgentOS",
        &[
            "agno.os",
            "fastapi",
            "uvicorn",
            "multipart",
            "sqlalchemy",
            "greenlet",
        ],
        &repo_root()
            .join("crates")
            .join("reins-server")
            .join("bench")
            .join("agentos-requirements.txt"),
    )
}

/// The python of `target/<dir>`, a virtualenv filled from PyPI with the pinned
/// `requirements` unless it can already import `modules` at those versions (`pip
/// install -r` again is a no-op when they are; it fixes a venv made by an older
/// unpinned set-up).
fn python_venv(
    dir: &str,
    what: &str,
    modules: &[&str],
    requirements: &Path,
) -> Result<PathBuf, String> {
    let venv = target_dir().join(dir);
    let python = venv.join("bin").join("python");
    let import = format!("import {}", modules.join(", "));
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", import.as_str()])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let stamp = venv.join(".reins-requirements");
    let wanted = std::fs::read_to_string(requirements)
        .map_err(|e| format!("cannot read {}: {e}", requirements.display()))?;
    let current = std::fs::read_to_string(&stamp).unwrap_or_default();
    if python.is_file() && current == wanted && ready(&python) {
        return Ok(python);
    }
    eprintln!("xtask: setting up {what} in {}", venv.display());
    if !python.is_file() {
        crate::run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    }
    crate::run(
        Command::new(venv.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(requirements),
    )?;
    write(&stamp, &wanted)?;
    if ready(&python) {
        Ok(python)
    } else {
        Err(format!(
            "{} cannot import {} after installing them",
            python.display(),
            modules.join(", ")
        ))
    }
}

fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// The workspace's target directory (`CARGO_TARGET_DIR`, or `target/`).
pub(crate) fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                repo_root().join(d)
            }
        }
        _ => repo_root().join("target"),
    }
}

// ----- criterion suites ---------------------------------------------------------------

fn criterion_suites(quick: bool, filter: &[&String]) -> Result<(), String> {
    let started = SystemTime::now();
    let mut cmd = crate::cargo();
    cmd.current_dir(repo_root()).args([
        "bench",
        "--workspace",
        // Bench targets only: `--benches` would also run the libraries' test
        // harness, which rejects criterion's options.
        "--bench",
        "*",
        "--all-features",
        "--",
    ]);
    if quick {
        cmd.args(["--warm-up-time", "0.3", "--measurement-time", "1"]);
    }
    cmd.args(filter.iter().map(|s| s.as_str()));
    crate::run(&mut cmd)?;
    let rows = criterion_results(&target_dir().join("criterion"), started);
    if rows.is_empty() {
        return Err("no criterion results were written (did any benchmark run?)".to_owned());
    }
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(8).max(8);
    println!("\n{:<width$}  {:>12}", "benchmark", "median");
    println!("{:-<width$}  {:->12}", "", "");
    for (name, ns) in rows {
        println!("{name:<width$}  {:>12}", human_ns(ns));
    }
    Ok(())
}

/// `(full id, median ns)` of every benchmark whose estimates were written after
/// `since`, sorted by id.
fn criterion_results(dir: &Path, since: SystemTime) -> Vec<(String, f64)> {
    let mut found = Vec::new();
    collect_estimates(dir, &mut found);
    let mut rows: Vec<(String, f64)> = found
        .into_iter()
        .filter_map(|new_dir| {
            let estimates = new_dir.join("estimates.json");
            let fresh = std::fs::metadata(&estimates)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= since);
            if !fresh {
                return None;
            }
            let text = std::fs::read_to_string(&estimates).ok()?;
            let median = json_number_in(&text, "median", "point_estimate")?;
            let id = std::fs::read_to_string(new_dir.join("benchmark.json"))
                .ok()
                .and_then(|b| json_string(&b, "full_id"))
                .unwrap_or_else(|| {
                    new_dir
                        .parent()
                        .and_then(|p| p.strip_prefix(dir).ok())
                        .map(|p| p.display().to_string())
                        .unwrap_or_default()
                });
            Some((id, median))
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

/// Every `.../new` directory holding an `estimates.json`.
fn collect_estimates(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if !p.is_dir() {
            continue;
        }
        if p.file_name().is_some_and(|n| n == "new") && p.join("estimates.json").is_file() {
            out.push(p);
        } else if p.file_name().is_none_or(|n| n != "report") {
            collect_estimates(&p, out);
        }
    }
}

fn human_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.3} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
