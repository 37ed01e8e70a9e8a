//! `cargo xtask bench --peer`: reins' `peer_bench` beside Agno's `agno_bench.py` and
//! rig's `rig_bench` (both from `shared/peer/`), alternating rounds; medians, ratios and
//! the benchmark issue's targets; then the concurrency runs.
//!
//! A peer that cannot be set up or fails in a round is reported in one line and left
//! out; reins' rows and the other peer's still print.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{python_venv, repo_root, target_dir, write};
use crate::json::{Obj, Value, parse_object};

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

/// The python of `target/agno-venv`, created and filled from PyPI when missing, with
/// the versions pinned in `crates/reins-bench/peers/agno-requirements.txt`.
/// greenlet: Agno's SQLite store goes through SQLAlchemy's asyncio layer.
fn agno_python() -> Result<PathBuf, String> {
    python_venv(
        "agno-venv",
        "Agno",
        &["agno", "sqlalchemy", "greenlet"],
        &repo_root()
            .join("crates")
            .join("reins-bench")
            .join("peers")
            .join("agno-requirements.txt"),
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

/// One peer program: how to start a round, the rounds it gave, and why it stopped.
struct Peer {
    name: &'static str,
    cmd: Option<Command>,
    runs: Vec<Obj>,
}

impl Peer {
    /// A peer whose set-up gave `cmd`, or one left out with the reason printed.
    fn new(name: &'static str, cmd: Result<Command, String>) -> Self {
        let cmd = cmd
            .map_err(|e| eprintln!("xtask: {name} left out of the comparison: {e}"))
            .ok();
        Self {
            name,
            cmd,
            runs: Vec::new(),
        }
    }

    /// Runs one round; on failure the peer is left out of the later rounds.
    fn round(&mut self, round: usize, quick: bool, out_dir: &Path) -> Result<(), String> {
        let Some(cmd) = self.cmd.as_mut() else {
            return Ok(());
        };
        if quick && !cmd.get_args().any(|a| a == "--quick") {
            cmd.arg("--quick");
        }
        match run_json(cmd) {
            Ok((obj, text)) => {
                let file = format!("{}-{round}.json", self.name.to_lowercase());
                write(&out_dir.join(file), &text)?;
                self.runs.push(obj);
            }
            Err(e) => {
                eprintln!("xtask: {} left out after round {round}: {e}", self.name);
                self.cmd = None;
            }
        }
        Ok(())
    }

    /// The version the peer printed (`version` key), or `?`.
    fn version(&self) -> String {
        self.runs
            .first()
            .and_then(|o| o.get("version"))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned()
    }
}

/// The command of Agno's round: the pinned venv's python on `agno_bench.py`.
fn agno_command(shared: &Path) -> Result<Command, String> {
    let python = agno_python()?;
    let mut cmd = Command::new(python);
    cmd.arg(shared.join("peer").join("agno_bench.py"));
    Ok(cmd)
}

/// rig's bench, built from `shared/peer/rig_bench` in `target/rig-bench` (a copy of its
/// sources, made a workspace of its own, with the lockfile pinned in
/// `crates/reins-bench/peers/rig_bench.Cargo.lock`; the shared folder is never written).
fn rig_command(shared: &Path) -> Result<Command, String> {
    let from = shared.join("peer").join("rig_bench");
    if !from.join("Cargo.toml").is_file() {
        return Err(format!("{} not found", from.join("Cargo.toml").display()));
    }
    let root = target_dir().join("rig-bench");
    let src = root.join("src");
    copy_dir(&from.join("src"), &src.join("src"))?;
    let manifest = std::fs::read_to_string(from.join("Cargo.toml"))
        .map_err(|e| format!("cannot read rig_bench's Cargo.toml: {e}"))?;
    // Its own workspace: the copy lives under this repository's target/.
    write(
        &src.join("Cargo.toml"),
        &format!("{manifest}\n[workspace]\n"),
    )?;
    let lock = repo_root()
        .join("crates")
        .join("reins-bench")
        .join("peers")
        .join("rig_bench.Cargo.lock");
    std::fs::copy(&lock, src.join("Cargo.lock"))
        .map_err(|e| format!("cannot copy {}: {e}", lock.display()))?;
    let build = root.join("target");
    crate::run(
        crate::cargo()
            .current_dir(&src)
            .env("CARGO_TARGET_DIR", &build)
            .args(["build", "--quiet", "--release", "--locked"]),
    )?;
    Ok(Command::new(build.join("release").join("rig_bench")))
}

/// Copies the files of `from` into `to` (recursively), replacing what is there.
fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let entries =
        std::fs::read_dir(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    for e in entries.flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_dir(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).map_err(|e| format!("cannot copy {}: {e}", src.display()))?;
        }
    }
    Ok(())
}

pub(super) fn peer(quick: bool, rounds: usize) -> Result<(), String> {
    let shared = shared_dir()?;
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

    // The PostgreSQL rows: a throwaway cluster on loopback (fsync off, as the floor it
    // is compared with) unless a server is named in the environment; without one
    // installed the rows show `?` and say why.
    let mut pg = None;
    if std::env::var_os("REINS_BENCH_POSTGRES_URL").is_none() {
        match crate::postgres::Cluster::start_if_available(false) {
            Ok(cluster) => pg = cluster,
            Err(e) => eprintln!("xtask: PostgreSQL rows left out: {e}"),
        }
    }
    let mut reins_runs = Vec::new();
    let mut agno = Peer::new("Agno", agno_command(&shared));
    let mut rig = Peer::new("rig", rig_command(&shared));
    for round in 1..=rounds {
        eprintln!("xtask: round {round} of {rounds}");
        let mut cmd = Command::new(bin.join("peer_bench"));
        if quick {
            cmd.arg("--quick");
        }
        if let Some(pg) = &pg {
            cmd.env("REINS_BENCH_POSTGRES_URL", pg.url());
        }
        let (obj, text) = run_json(&mut cmd)?;
        write(&out_dir.join(format!("reins-{round}.json")), &text)?;
        reins_runs.push(obj);
        agno.round(round, quick, &out_dir)?;
        rig.round(round, quick, &out_dir)?;
    }
    let mut reins = medians(&reins_runs);
    reins.extend(worst_rounds(&reins_runs));

    let mut cmd = Command::new(bin.join("concurrency_bench"));
    let (conc, text) = run_json(&mut cmd)?;
    write(&out_dir.join("concurrency.json"), &text)?;

    print_peer_table(&reins, &agno, &rig, rounds, &conc);
    scale_run(&bin, &out_dir)?;
    server_round(&out_dir, quick)
}

/// The server round: reins-server against Agno's AgentOS (`bench --server`, in memory
/// and on SQLite), then the target per store: reins-server's runs/s at least
/// 100x AgentOS's, at a lower p99. A side that failed shows as not met, with its
/// one-line reason above the table.
fn server_round(out_dir: &Path, quick: bool) -> Result<(), String> {
    let file = out_dir.join("server.jsonl");
    let _ = std::fs::remove_file(&file);
    let mut args = vec!["--server".to_owned(), "--json".to_owned()];
    args.push(file.display().to_string());
    if quick {
        args.extend(["--sessions".to_owned(), "200".to_owned()]);
    }
    if let Err(e) = super::server(&args) {
        eprintln!("xtask: the server round failed: {e}");
    }
    let rows: Vec<Obj> = std::fs::read_to_string(&file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| parse_object(l).ok())
        .collect();
    let row = |store: &str, server: &str| {
        rows.iter().find(|r| {
            r.get("store").and_then(Value::as_str) == Some(store)
                && r.get("server").and_then(Value::as_str) == Some(server)
        })
    };
    let num = |r: Option<&Obj>, k: &str| r.and_then(|r| r.get(k)).and_then(Value::as_f64);
    for store in ["memory", "sqlite"] {
        let (reins, agentos) = (row(store, "reins HTTP"), row(store, "AgentOS HTTP"));
        let ratio = match (num(reins, "runs_per_s"), num(agentos, "runs_per_s")) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        let p99 = (num(reins, "p99_ms"), num(agentos, "p99_ms"));
        let met = ratio.is_some_and(|r| r >= 100.0) && matches!(p99, (Some(a), Some(b)) if a < b);
        println!(
            "{:<40} {:>12} {:>12} {:>6}",
            format!("server ({store}): reins / AgentOS runs/s"),
            ratio.map_or("-".to_owned(), |r| format!("{r:.1}x")),
            ">= 100x",
            if met { "yes" } else { "NO" }
        );
        println!(
            "{:<40} {:>12} {:>12}",
            format!("server ({store}): p99 ms reins / AgentOS"),
            match p99 {
                (Some(a), Some(b)) => format!("{a:.0} / {b:.0}"),
                _ => "-".to_owned(),
            },
            "lower",
        );
    }
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
    "single_turn_allocs",
    "tool_call_run_allocs",
    "tool_call_run_alloc_kib",
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
    agno_peer: &Peer,
    rig_peer: &Peer,
    rounds: usize,
    conc: &Obj,
) {
    let agno = &medians(&agno_peer.runs);
    let rig = &medians(&rig_peer.runs);
    println!(
        "\nreins vs Agno {} and rig {} (median of {rounds} rounds each, alternating)\n",
        agno_peer.version(),
        rig_peer.version()
    );
    println!(
        "{:<40} {:>10} {:>10} {:>10} {:>11} {:>10}",
        "key", "agno", "rig", "reins", "agno/reins", "rig/reins"
    );
    println!(
        "{:-<40} {:->10} {:->10} {:->10} {:->11} {:->10}",
        "", "", "", "", "", ""
    );
    let ratio_of = |peer: Option<f64>, r: Option<f64>, k: &str| match (peer, r) {
        (Some(p), Some(r)) if r > 0.0 && k.ends_with("_us") => format!("{:.1}x", p / r),
        _ => "-".to_owned(),
    };
    for k in KEYS {
        let (a, g, r) = (
            agno.get(*k).copied(),
            rig.get(*k).copied(),
            reins.get(*k).copied(),
        );
        println!(
            "{k:<40} {:>10} {:>10} {:>10} {:>11} {:>10}",
            fmt(a),
            fmt(g),
            fmt(r),
            ratio_of(a, r, k),
            ratio_of(g, r, k)
        );
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
        "<= 3x".to_owned(),
        wall.map(|x| x <= 3.0),
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
