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
//!   the benchmark issue is met; then runs `concurrency_bench`. `shared/` is
//!   `REINS_SHARED_DIR`, or `../shared` beside the repository. Raw JSON goes to
//!   `target/peer-bench/`.
//! - `cargo xtask bench --server [--sessions N] [--store memory|sqlite] [--no-agentos]` —
//!   reins-server's `server_bench` example (release build): N concurrent sessions
//!   (default 1,000) × one tool-call run with 20 ms model latency, over HTTP (each
//!   server in its own process) and directly, on the in-memory and SQLite stores:
//!   throughput, p50/p99 latency and overhead, the server's peak RSS and CPU time; the
//!   same workload on Agno's AgentOS side by side (`crates/reins-server/bench/
//!   agentos_server.py`, set up from PyPI in `target/agentos-venv` when missing).
//! - `cargo xtask bench --restate [--sessions N]` — the same workload through Restate
//!   (reins-restate's `restate_bench`: a local restate-server and the demo service, in
//!   processes of their own) and through reins-server, both on one throwaway
//!   PostgreSQL.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use crate::json::{Obj, Value, json_number_in, json_string, parse_object};

/// `cargo xtask bench --help`.
const USAGE: &str = "usage: cargo xtask bench [--quick] [FILTER]
       cargo xtask bench --peer [--quick] [--rounds N]
       cargo xtask bench --server [--sessions N] [--store memory|sqlite] [--no-agentos]
       cargo xtask bench --restate [--sessions N]

  (no mode)     every crate's criterion suite (`cargo bench --workspace --bench '*'`),
                then one table of medians; FILTER keeps benchmarks whose id contains it
  --quick       shorter warm-up and measurement (criterion), fewer repetitions (--peer)
  --peer        reins' `peer_bench` (crates/reins-bench) against Agno's
                `shared/peer/agno_bench.py`, N rounds each (default 3), medians, ratios
                and the benchmark issue's targets; then `concurrency_bench`, also with
                100,000 sessions. Sets up Agno in target/agno-venv from PyPI when missing;
                `shared/` is REINS_SHARED_DIR or ../shared. Raw JSON: target/peer-bench/
  --server      reins-server's `server_bench`: N concurrent sessions (default 1,000) over
                HTTP and directly, with Agno's AgentOS beside it unless --no-agentos
  --restate     reins-restate's `restate_bench` (local restate-server from npm, the demo
                service) and reins-server's `server_bench`, both on one throwaway
                PostgreSQL: N concurrent sessions (default 1,000) × one tool-call run

See docs/performance.md.";

/// Runs the benchmarks.
pub fn run(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return Ok(());
    }
    let quick = args.iter().any(|a| a == "--quick");
    if args.iter().any(|a| a == "--server") {
        return server(args);
    }
    if args.iter().any(|a| a == "--restate") {
        return restate(args);
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
        return peer(quick, rounds);
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
    crate::run(crate::cargo().current_dir(repo_root()).args([
        "build",
        "--release",
        "--quiet",
        "-p",
        "reins-restate",
        "--all-features",
        "--bins",
        "--examples",
    ]))?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    crate::run(
        Command::new(
            target
                .join("release")
                .join("examples")
                .join("restate_bench"),
        )
        .args(["--sessions", &sessions, "--database-url", &url]),
    )?;
    crate::run(
        crate::cargo()
            .current_dir(repo_root())
            .env("REINS_BENCH_POSTGRES_URL", &url)
            .args([
                "run",
                "--release",
                "--quiet",
                "-p",
                "reins-server",
                "--example",
                "server_bench",
                "--",
                "--sessions",
                &sessions,
                "--store",
                "postgres",
            ]),
    )
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

/// The python of `target/agentos-venv`, created and filled from PyPI when missing.
/// AgentOS serves with FastAPI + uvicorn; its run endpoint reads form fields
/// (python-multipart); the SQLite store goes through SQLAlchemy.
fn agentos_python() -> Result<PathBuf, String> {
    python_venv(
        "agentos-venv",
        "AgentOS",
        &["agno.os", "fastapi", "uvicorn", "multipart", "sqlalchemy"],
        &[
            "agno",
            "fastapi",
            "uvicorn",
            "python-multipart",
            "sqlalchemy",
        ],
    )
}

/// The python of `target/<dir>`, a virtualenv created and filled with `packages` from
/// PyPI unless it can already import `modules`.
fn python_venv(
    dir: &str,
    what: &str,
    modules: &[&str],
    packages: &[&str],
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
    if python.is_file() && ready(&python) {
        return Ok(python);
    }
    eprintln!("xtask: setting up {what} in {}", venv.display());
    crate::run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    crate::run(
        Command::new(venv.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(packages),
    )?;
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

fn target_dir() -> PathBuf {
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

// ----- the peer comparison ------------------------------------------------------------

fn shared_dir() -> Result<PathBuf, String> {
    let dir = match std::env::var_os("REINS_SHARED_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => repo_root().join("..").join("shared"),
    };
    let script = dir.join("peer").join("agno_bench.py");
    if script.is_file() {
        Ok(dir)
    } else {
        Err(format!(
            "{} not found: set REINS_SHARED_DIR to the folder holding peer/agno_bench.py",
            script.display()
        ))
    }
}

/// The python of `target/agno-venv`, created and filled from PyPI when missing.
/// greenlet: Agno's SQLite store goes through SQLAlchemy's asyncio layer.
fn agno_python() -> Result<PathBuf, String> {
    python_venv(
        "agno-venv",
        "Agno",
        &["agno", "sqlalchemy", "greenlet"],
        &["agno", "sqlalchemy", "greenlet"],
    )
}

/// Runs a program that prints one JSON object and parses it.
fn run_json(cmd: &mut Command) -> Result<(Obj, String), String> {
    eprintln!("$ {}", crate::describe(cmd));
    let out = cmd
        .output()
        .map_err(|e| format!("could not start `{}`: {e}", crate::describe(cmd)))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        return Err(format!(
            "`{}` failed ({})",
            crate::describe(cmd),
            out.status
        ));
    }
    let start = text
        .find('{')
        .ok_or_else(|| format!("no JSON object in:\n{text}"))?;
    let obj = parse_object(&text[start..]).map_err(|e| format!("{e} in:\n{text}"))?;
    Ok((obj, text))
}

fn peer(quick: bool, rounds: usize) -> Result<(), String> {
    let shared = shared_dir()?;
    let python = agno_python()?;
    crate::run(crate::cargo().current_dir(repo_root()).args([
        "build",
        "--quiet",
        "--release",
        "-p",
        "reins-bench",
        "--bin",
        "peer_bench",
        "--bin",
        "concurrency_bench",
    ]))?;
    let bin = target_dir().join("release");
    let out_dir = target_dir().join("peer-bench");
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;

    let mut reins_runs = Vec::new();
    let mut agno_runs = Vec::new();
    for round in 1..=rounds {
        eprintln!("xtask: round {round} of {rounds}");
        let mut cmd = Command::new(bin.join("peer_bench"));
        if quick {
            cmd.arg("--quick");
        }
        let (obj, text) = run_json(&mut cmd)?;
        write(&out_dir.join(format!("reins-{round}.json")), &text)?;
        reins_runs.push(obj);

        let mut cmd = Command::new(&python);
        cmd.arg(shared.join("peer").join("agno_bench.py"));
        if quick {
            cmd.arg("--quick");
        }
        let (obj, text) = run_json(&mut cmd)?;
        write(&out_dir.join(format!("agno-{round}.json")), &text)?;
        agno_runs.push(obj);
    }
    let mut reins = medians(&reins_runs);
    reins.extend(worst_rounds(&reins_runs));
    let agno = medians(&agno_runs);
    let version = agno_runs
        .first()
        .and_then(|o| o.get("version"))
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_owned();

    let mut cmd = Command::new(bin.join("concurrency_bench"));
    let (conc, text) = run_json(&mut cmd)?;
    write(&out_dir.join("concurrency.json"), &text)?;

    print_peer_table(&reins, &agno, &version, rounds, &conc);
    scale_run(&bin, &out_dir)?;
    Ok(())
}

/// The 100,000-session run of the benchmark issue: every run must complete (a run
/// that fails does not stop the report; it shows as not met).
fn scale_run(bin: &Path, out_dir: &Path) -> Result<(), String> {
    let mut cmd = Command::new(bin.join("concurrency_bench"));
    cmd.args(["--sessions", "100000"]);
    eprintln!("$ {}", crate::describe(&cmd));
    let out = cmd
        .output()
        .map_err(|e| format!("could not start `{}`: {e}", crate::describe(&cmd)))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    write(&out_dir.join("concurrency-100000.json"), &text)?;
    let obj = text
        .find('{')
        .and_then(|start| parse_object(&text[start..]).ok())
        .unwrap_or_default();
    let num = |k: &str| obj.get(k).and_then(Value::as_f64);
    let all = out.status.success() && num("completed").is_some_and(|c| c >= 100_000.0);
    if !out.status.success() {
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
    }
    println!(
        "{:<40} {:>12} {:>12} {:>6}",
        "concurrency: 100,000 sessions completed",
        num("completed").map_or("-".to_owned(), |c| format!("{c:.0}")),
        "100000",
        if all { "yes" } else { "NO" }
    );
    println!(
        "concurrency: 100,000 sessions, wall {} ms ({} x ideal), peak RSS {} MB",
        fmt(num("wall_ms")),
        fmt(num("wall_over_ideal")),
        fmt(num("peak_rss_mb")),
    );
    Ok(())
}

/// The SQL-store targets hold "in every round": the worst round's ratio of each, as
/// extra keys beside the medians (`worst_round_*`).
fn worst_rounds(runs: &[Obj]) -> BTreeMap<String, f64> {
    let ratio = |r: &Obj, num: &str, den: &str, per: f64| {
        let (n, d) = (r.get(num)?.as_f64()?, r.get(den)?.as_f64()?);
        (d > 0.0).then(|| n / per / d)
    };
    let pairs = [
        (
            "worst_round_sqlite_full_over_floor",
            "conversation_25_turns_sqlite_us",
            "sqlite_commit_floor_us",
            25.0,
        ),
        (
            "worst_round_sqlite_growth",
            "sqlite_turn_last10_us",
            "sqlite_turn_first10_us",
            1.0,
        ),
        (
            "worst_round_postgres_over_floor",
            "conversation_25_turns_postgres_us",
            "postgres_commit_floor_us",
            25.0,
        ),
        (
            "worst_round_postgres_growth",
            "postgres_turn_last10_us",
            "postgres_turn_first10_us",
            1.0,
        ),
    ];
    let mut out = BTreeMap::new();
    for (key, num, den, per) in pairs {
        let worst = runs
            .iter()
            .filter_map(|r| ratio(r, num, den, per))
            .reduce(f64::max);
        if let Some(w) = worst {
            out.insert(key.to_owned(), w);
        }
    }
    out
}

/// The SQL-store targets: SQLite and PostgreSQL per turn against a bare commit on the
/// same disk or server, and growth, in the worst round; PostgreSQL is `?` when the
/// run had no server (`REINS_BENCH_POSTGRES_URL` / `REINS_TEST_POSTGRES_URL`).
fn sql_store_targets(
    reins: &BTreeMap<String, f64>,
) -> Vec<(String, Option<f64>, String, Option<bool>)> {
    let at_most = |name: &str, key: &str, limit: f64| {
        let v = reins.get(key).copied();
        (
            name.to_owned(),
            v,
            format!("<= {limit}x"),
            v.map(|x| x <= limit),
        )
    };
    vec![
        at_most(
            "SQLite Full, worst round: turn / floor",
            "worst_round_sqlite_full_over_floor",
            2.5,
        ),
        at_most(
            "growth, worst round: last 10 / first 10",
            "worst_round_sqlite_growth",
            1.25,
        ),
        at_most(
            "PostgreSQL: turn / commit floor",
            "worst_round_postgres_over_floor",
            2.5,
        ),
    ]
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The per-key median over rounds of every numeric key.
fn medians(runs: &[Obj]) -> BTreeMap<String, f64> {
    let mut by_key: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in runs {
        for (k, v) in r {
            if let Some(n) = v.as_f64() {
                by_key.entry(k.clone()).or_default().push(n);
            }
        }
    }
    by_key
        .into_iter()
        .map(|(k, mut v)| {
            v.sort_by(f64::total_cmp);
            let n = v.len();
            let m = if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            };
            (k, m)
        })
        .collect()
}

const KEYS: &[&str] = &[
    "construct_us",
    "construct_kib",
    "single_turn_us",
    "tool_call_run_us",
    "conversation_25_turns_us",
    "conversation_25_turns_sqlite_us",
    "conversation_25_turns_sqlite_normal_us",
    "sqlite_commit_floor_us",
    "sqlite_turn_first10_us",
    "sqlite_turn_last10_us",
    "sqlite_growth_turns",
    "conversation_25_turns_postgres_us",
    "postgres_commit_floor_us",
    "postgres_turn_first10_us",
    "postgres_turn_last10_us",
];

fn fmt(v: Option<f64>) -> String {
    match v {
        Some(x) if x >= 100.0 => format!("{x:.0}"),
        Some(x) if x >= 10.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.2}"),
        None => "-".to_owned(),
    }
}

fn print_peer_table(
    reins: &BTreeMap<String, f64>,
    agno: &BTreeMap<String, f64>,
    agno_version: &str,
    rounds: usize,
    conc: &Obj,
) {
    println!("\nreins vs Agno {agno_version} (median of {rounds} rounds each, alternating)\n");
    println!(
        "{:<40} {:>12} {:>12} {:>12}",
        "key", "agno", "reins", "agno/reins"
    );
    println!("{:-<40} {:->12} {:->12} {:->12}", "", "", "", "");
    for k in KEYS {
        let (a, r) = (agno.get(*k).copied(), reins.get(*k).copied());
        let ratio = match (a, r) {
            (Some(a), Some(r)) if r > 0.0 && *k != "sqlite_growth_turns" => {
                format!("{:.1}x", a / r)
            }
            _ => "-".to_owned(),
        };
        println!("{k:<40} {:>12} {:>12} {ratio:>12}", fmt(a), fmt(r));
    }

    // The targets of the benchmark issue.
    let g = |m: &BTreeMap<String, f64>, k: &str| m.get(k).copied();
    let ratio = |k: &str| match (g(agno, k), g(reins, k)) {
        (Some(a), Some(r)) if r > 0.0 => Some(a / r),
        _ => None,
    };
    let mut targets: Vec<(String, Option<f64>, String, Option<bool>)> = Vec::new();
    for k in [
        "construct_us",
        "single_turn_us",
        "tool_call_run_us",
        "conversation_25_turns_us",
    ] {
        let r = ratio(k);
        targets.push((
            format!("{k}: Agno / reins"),
            r,
            ">= 100x".to_owned(),
            r.map(|r| r >= 100.0),
        ));
    }
    let kib = match (g(reins, "construct_kib"), g(agno, "construct_kib")) {
        (Some(r), Some(a)) if a > 0.0 => Some(r / a),
        _ => None,
    };
    targets.push((
        "construct_kib: reins / Agno".to_owned(),
        kib,
        "<= 1x".to_owned(),
        kib.map(|x| x <= 1.0),
    ));
    let full = match (
        g(reins, "conversation_25_turns_sqlite_us"),
        g(reins, "sqlite_commit_floor_us"),
    ) {
        (Some(c), Some(f)) if f > 0.0 => Some(c / 25.0 / f),
        _ => None,
    };
    targets.push((
        "SQLite Full: turn / commit floor".to_owned(),
        full,
        "<= 2.5x".to_owned(),
        full.map(|x| x <= 2.5),
    ));
    let normal = match (
        g(agno, "conversation_25_turns_sqlite_us"),
        g(reins, "conversation_25_turns_sqlite_normal_us"),
    ) {
        (Some(a), Some(r)) if r > 0.0 => Some(a / r),
        _ => None,
    };
    targets.push((
        "SQLite Normal: Agno SQLite / reins".to_owned(),
        normal,
        ">= 100x".to_owned(),
        normal.map(|x| x >= 100.0),
    ));
    let growth = match (
        g(reins, "sqlite_turn_last10_us"),
        g(reins, "sqlite_turn_first10_us"),
    ) {
        (Some(l), Some(f)) if f > 0.0 => Some(l / f),
        _ => None,
    };
    targets.push((
        "growth: last 10 / first 10 turns".to_owned(),
        growth,
        "<= 1.25x".to_owned(),
        growth.map(|x| x <= 1.25),
    ));
    targets.extend(sql_store_targets(reins));
    let wall = conc.get("wall_over_ideal").and_then(Value::as_f64);
    targets.push((
        "concurrency: wall / ideal".to_owned(),
        wall,
        "<= 1.5x".to_owned(),
        wall.map(|x| x <= 1.5),
    ));
    let rss = conc.get("peak_rss_mb").and_then(Value::as_f64);
    targets.push((
        "concurrency: peak RSS (MB)".to_owned(),
        rss,
        "< 300".to_owned(),
        rss.map(|x| x < 300.0),
    ));

    println!(
        "\n{:<40} {:>12} {:>12} {:>6}",
        "target", "measured", "wanted", "met"
    );
    println!("{:-<40} {:->12} {:->12} {:->6}", "", "", "", "");
    let mut met = 0;
    for (name, value, wanted, ok) in &targets {
        let shown = match value {
            Some(v) if name.contains("RSS") => format!("{v:.0}"),
            Some(v) => format!("{v:.2}x"),
            None => "-".to_owned(),
        };
        let verdict = match ok {
            Some(true) => {
                met += 1;
                "yes"
            }
            Some(false) => "NO",
            None => "?",
        };
        println!("{name:<40} {shown:>12} {wanted:>12} {verdict:>6}");
    }
    println!("\n{met} of {} targets met", targets.len());
    println!(
        "concurrency: {} sessions, wall {} ms, ideal {} ms, peak RSS {} MB",
        conc.get("sessions")
            .and_then(Value::as_f64)
            .map_or("?".to_owned(), |n| format!("{n:.0}")),
        fmt(conc.get("wall_ms").and_then(Value::as_f64)),
        fmt(conc.get("ideal_ms").and_then(Value::as_f64)),
        fmt(rss),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_per_key() {
        let runs: Vec<Obj> = ["{\"a\": 1, \"b\": \"x\"}", "{\"a\": 3}", "{\"a\": 2}"]
            .iter()
            .map(|t| parse_object(t).unwrap())
            .collect();
        let m = medians(&runs);
        assert_eq!(m["a"], 2.0);
        assert!(!m.contains_key("b"));
    }
}
