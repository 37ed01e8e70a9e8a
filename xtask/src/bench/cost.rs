//! `cargo xtask bench --cost`: what one run costs, in instructions (callgrind) and
//! allocations (counted), per scenario; `--check` holds the numbers to the committed
//! baseline, `--update-baseline --why TEXT` moves it.
//!
//! The programs are `crates/reins-bench`'s `run_cost` (in memory: a single turn, a
//! tool-call run, a decision, the tool-call run with OpenTelemetry on) and
//! `served_cost` (the tool-call run served by reins-server over HTTP, in memory),
//! built with the `cost` profile (release without line tables) and without the bench
//! crate's `peer` feature, so the build is small. Instructions per run are what
//! callgrind counts inside the programs' `measured_runs` (200 runs after a warm-up of
//! 20; `--toggle-collect`) divided by 200: the set-up and one-time initializations stay
//! out, and the count does not depend on the machine or its load. Allocations per run
//! are counted by the programs' own allocator over 2,000 runs (1,000 served).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::json::{Value, parse_object};

use super::{repo_root, target_dir};

/// The baseline the check compares with, from the repository's root.
pub(crate) const BASELINE: &str = "crates/reins-bench/cost-baseline.json";

/// How much a number may grow over its baseline before the check fails, in percent.
pub(crate) const TOLERANCE_PERCENT: f64 = 3.0;

/// The scenarios: name, program, runs for the allocation count.
const SCENARIOS: [(&str, &str, u32); 5] = [
    ("single_turn", "run_cost", 2000),
    ("tool_call_run", "run_cost", 2000),
    ("decision_run", "run_cost", 2000),
    ("telemetry_run", "run_cost", 2000),
    ("served_run", "served_cost", 1000),
];

/// Scenarios measured and shown beside the checked ones, not held to the baseline:
/// evidence (issue #53) with and without signing, in memory and on SQLite at
/// `Durability::Full`, and the cost of signing as a ratio of the unsigned run.
const REPORTED: [(&str, &str, u32); 4] = [
    ("signed_tool_call_run", "run_cost", 2000),
    ("signed_decision_run", "run_cost", 2000),
    ("sqlite_tool_call_run", "run_cost", 500),
    ("sqlite_signed_tool_call_run", "run_cost", 500),
];

/// (signed scenario, the unsigned one it is compared with).
const SIGNING: [(&str, &str); 3] = [
    ("signed_tool_call_run", "tool_call_run"),
    ("signed_decision_run", "decision_run"),
    ("sqlite_signed_tool_call_run", "sqlite_tool_call_run"),
];

/// The two numbers the check holds, for one scenario.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cost {
    pub scenario: String,
    pub instructions: f64,
    pub allocations: f64,
}

/// What `--cost` was asked to do beside measuring.
#[derive(Debug, PartialEq)]
enum Mode {
    Show,
    Check,
    Update { why: String },
}

/// `cargo xtask bench --cost [--check | --update-baseline --why TEXT]`.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mode = mode(args)?;
    let (programs, built_in) = build()?;
    eprintln!("xtask: the cost programs built in {built_in:.0} s");
    measure_and(mode, &programs)
}

/// CI's check on programs built beforehand ([`build_command`], beside the test run):
/// `--cost --check` without the build.
pub(crate) fn check_built(programs: &Path) -> Result<(), String> {
    measure_and(Mode::Check, programs)
}

fn measure_and(mode: Mode, programs: &Path) -> Result<(), String> {
    let valgrind = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !valgrind {
        if mode != Mode::Show {
            return Err(
                "valgrind is not installed: the cost check counts instructions with callgrind \
                 (apt-get install valgrind)"
                    .to_owned(),
            );
        }
        eprintln!("xtask: valgrind not found: instructions per run left out");
    }
    let measured = measure(programs, valgrind, &SCENARIOS)?;
    if mode == Mode::Show {
        println!("\nreported, not checked (evidence, issue #53):");
        let reported = measure(programs, valgrind, &REPORTED)?;
        print!("{}", signing_table(&measured, &reported));
    }
    let path = repo_root().join(BASELINE);
    match mode {
        Mode::Show => Ok(()),
        Mode::Update { why } => {
            write_baseline(&path, &why, &measured)?;
            println!("\nwrote {BASELINE}: commit it with a message that says why ({why})");
            Ok(())
        }
        Mode::Check => {
            let (why, baseline) = read_baseline(&path)?;
            let comparison = compare(&baseline, &measured, TOLERANCE_PERCENT);
            println!("\nagainst {BASELINE} (last moved: {why})");
            print!("{}", render(&comparison));
            if comparison.failed() {
                Err(format!(
                    "the cost check failed: {} above the baseline by more than {TOLERANCE_PERCENT} % \
                     (or missing). If the growth is wanted, move the baseline in a commit that says \
                     why: cargo xtask bench --cost --update-baseline --why \"...\"",
                    comparison.failures().join(", ")
                ))
            } else {
                println!(
                    "cost check passed: every number within +{TOLERANCE_PERCENT} % of the baseline"
                );
                Ok(())
            }
        }
    }
}

fn mode(args: &[String]) -> Result<Mode, String> {
    let check = args.iter().any(|a| a == "--check");
    let update = args.iter().any(|a| a == "--update-baseline");
    let why = match args.iter().position(|a| a == "--why") {
        Some(i) => Some(
            args.get(i + 1)
                .filter(|w| !w.starts_with("--") && !w.trim().is_empty())
                .cloned()
                .ok_or("--why needs a reason")?,
        ),
        None => None,
    };
    match (check, update, why) {
        (true, true, _) => Err("--check and --update-baseline go one at a time".to_owned()),
        (_, true, None) => Err(
            "--update-baseline needs --why \"...\": the baseline moves only with a reason"
                .to_owned(),
        ),
        (_, true, Some(why)) => Ok(Mode::Update { why }),
        (true, false, _) => Ok(Mode::Check),
        (false, false, _) => Ok(Mode::Show),
    }
}

/// Builds `run_cost` and `served_cost` with the `cost` profile; their paths and the
/// seconds the build took.
fn build() -> Result<(PathBuf, f64), String> {
    let t = std::time::Instant::now();
    crate::run(&mut build_command(&target_dir()))?;
    Ok((target_dir().join("cost"), t.elapsed().as_secs_f64()))
}

/// The build of `run_cost` and `served_cost` with the `cost` profile into `target`
/// (they land in `target/cost`).
pub(crate) fn build_command(target: &Path) -> Command {
    let mut cmd = crate::cargo();
    cmd.current_dir(repo_root())
        .args([
            "build",
            "--quiet",
            "--profile",
            "cost",
            "-p",
            "reins-bench",
            "--no-default-features",
            "--bin",
            "run_cost",
            "--bin",
            "served_cost",
            "--target-dir",
        ])
        .arg(target);
    cmd
}

/// Runs every scenario, prints the table and returns the numbers the check holds
/// (instructions 0 without valgrind).
fn measure(
    programs: &Path,
    valgrind: bool,
    scenarios: &[(&str, &str, u32)],
) -> Result<Vec<Cost>, String> {
    println!(
        "\n{:<16} {:>12} {:>16} {:>14} {:>18}",
        "scenario", "allocs/run", "KiB alloc/run", "µs/run", "instructions/run"
    );
    let mut out = Vec::new();
    for &(scenario, program, runs) in scenarios {
        let bin = programs.join(program);
        let run = Command::new(&bin)
            .args(["--scenario", scenario, "--runs", &runs.to_string()])
            .output()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        if !run.status.success() {
            return Err(format!(
                "{program} --scenario {scenario} failed: {}",
                String::from_utf8_lossy(&run.stderr)
            ));
        }
        let text = String::from_utf8_lossy(&run.stdout);
        let obj = parse_object(text.trim()).map_err(|e| format!("{e} in: {text}"))?;
        let num = |k: &str| obj.get(k).and_then(Value::as_f64);
        let instructions = if valgrind {
            Some(
                callgrind_total(&bin, scenario, CALLGRIND_RUNS)? as f64 / f64::from(CALLGRIND_RUNS),
            )
        } else {
            None
        };
        let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
        println!(
            "{scenario:<16} {:>12} {:>16} {:>14} {:>18}",
            show(num("allocs_per_run")),
            show(num("alloc_kib_per_run")),
            show(num("us_per_run")),
            instructions.map_or("-".to_owned(), |v| format!("{v:.0}")),
        );
        out.push(Cost {
            scenario: scenario.to_owned(),
            instructions: instructions.unwrap_or(0.0).round(),
            allocations: num("allocs_per_run")
                .ok_or_else(|| format!("{program} printed no allocs_per_run: {text}"))?,
        });
    }
    Ok(out)
}

/// What signing adds, per pair of [`SIGNING`]: instructions and allocations of the
/// signed run over the unsigned one, in percent.
fn signing_table(checked: &[Cost], reported: &[Cost]) -> String {
    let find = |name: &str| {
        checked
            .iter()
            .chain(reported)
            .find(|c| c.scenario == name)
            .cloned()
    };
    let pct = |signed: f64, plain: f64| {
        if plain > 0.0 {
            format!("{:+.1} %", (signed - plain) / plain * 100.0)
        } else {
            "-".to_owned()
        }
    };
    let mut s = format!(
        "\n{:<56} {:>14} {:>14}\n",
        "signing costs", "instructions", "allocations"
    );
    for (signed, plain) in SIGNING {
        if let (Some(a), Some(b)) = (find(signed), find(plain)) {
            let _ = writeln!(
                s,
                "{:<56} {:>14} {:>14}",
                format!("{signed} / {plain}"),
                pct(a.instructions, b.instructions),
                pct(a.allocations, b.allocations)
            );
        }
    }
    s
}

/// The runs callgrind counts per scenario.
const CALLGRIND_RUNS: u32 = 200;

/// The instructions callgrind counts in a cost program's `measured_runs` (the `runs`
/// runs after the warm-up, and nothing else: not the set-up, nor one-time
/// initializations whose cost moves between processes).
fn callgrind_total(bin: &Path, scenario: &str, runs: u32) -> Result<u64, String> {
    let file = target_dir().join(format!("run_cost.callgrind.{scenario}.{runs}"));
    let out = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--toggle-collect=*::measured_runs")
        .arg(format!("--callgrind-out-file={}", file.display()))
        .arg(bin)
        .args(["--scenario", scenario, "--runs", &runs.to_string()])
        .output()
        .map_err(|e| format!("cannot start valgrind: {e}"))?;
    let _ = std::fs::remove_file(&file);
    let log = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "callgrind of {} --scenario {scenario} failed ({}):\n{log}",
            bin.display(),
            out.status
        ));
    }
    log.lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| format!("no instruction total in callgrind's output:\n{log}"))
}

// ----- the baseline file ---------------------------------------------------------------

/// The baseline as text: a flat JSON object, `why` (the reason of its last move) and
/// `<scenario>.instructions` / `<scenario>.allocations` per scenario.
pub(crate) fn baseline_text(why: &str, costs: &[Cost]) -> String {
    let mut s = String::from("{\n");
    let _ = writeln!(s, "  \"why\": \"{}\",", escape(why));
    let _ = writeln!(
        s,
        "  \"tolerance\": \"+{TOLERANCE_PERCENT} % (xtask/src/bench/cost.rs)\","
    );
    let _ = writeln!(
        s,
        "  \"measured_with\": \"cargo xtask bench --cost --update-baseline (profile cost, callgrind)\","
    );
    let mut members = Vec::new();
    for c in costs {
        members.push(format!(
            "  \"{}.instructions\": {}",
            c.scenario, c.instructions
        ));
        members.push(format!(
            "  \"{}.allocations\": {}",
            c.scenario, c.allocations
        ));
    }
    s.push_str(&members.join(",\n"));
    s.push_str("\n}\n");
    s
}

/// Reads a baseline written by [`baseline_text`]: its `why` and its numbers, in the
/// file's order of scenarios (sorted by name).
pub(crate) fn parse_baseline(text: &str) -> Result<(String, Vec<Cost>), String> {
    let obj = parse_object(text.trim())?;
    let why = obj
        .get("why")
        .and_then(Value::as_str)
        .filter(|w| !w.trim().is_empty())
        .ok_or("the baseline has no `why`")?
        .to_owned();
    let mut costs = Vec::new();
    for (key, value) in &obj {
        let Some(scenario) = key.strip_suffix(".instructions") else {
            continue;
        };
        let instructions = value
            .as_f64()
            .ok_or_else(|| format!("`{key}` is not a number"))?;
        let allocations = obj
            .get(&format!("{scenario}.allocations"))
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("the baseline has no `{scenario}.allocations`"))?;
        costs.push(Cost {
            scenario: scenario.to_owned(),
            instructions,
            allocations,
        });
    }
    if costs.is_empty() {
        return Err("the baseline has no scenarios".to_owned());
    }
    Ok((why, costs))
}

fn read_baseline(path: &Path) -> Result<(String, Vec<Cost>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read the baseline {}: {e} (write it with --update-baseline --why \"...\")",
            path.display()
        )
    })?;
    parse_baseline(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn write_baseline(path: &Path, why: &str, costs: &[Cost]) -> Result<(), String> {
    if costs.iter().any(|c| c.instructions == 0.0) {
        return Err("no instruction counts to write (is valgrind installed?)".to_owned());
    }
    super::write(path, &baseline_text(why, costs))
}

fn escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c < ' ' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

// ----- the comparison --------------------------------------------------------------------

/// How one number compares with its baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Verdict {
    /// Within the tolerance either way.
    Within,
    /// Grew by more than the tolerance: the check fails.
    Grew,
    /// Shrank by more than the tolerance: passes; the baseline may move down.
    Shrank,
    /// In the baseline, not measured (a scenario removed or renamed): fails.
    Missing,
    /// Measured, not in the baseline: fails until the baseline holds it.
    New,
}

/// One line of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub scenario: String,
    pub metric: &'static str,
    pub baseline: Option<f64>,
    pub now: Option<f64>,
    pub verdict: Verdict,
}

impl Row {
    /// The change in percent of the baseline, when both numbers are there.
    pub fn change_percent(&self) -> Option<f64> {
        match (self.baseline, self.now) {
            (Some(b), Some(n)) if b > 0.0 => Some((n - b) / b * 100.0),
            (Some(_), Some(n)) if n > 0.0 => Some(f64::INFINITY),
            (Some(_), Some(_)) => Some(0.0),
            _ => None,
        }
    }
}

/// The baseline against the measurement, number by number.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Comparison {
    pub rows: Vec<Row>,
    pub tolerance_percent: f64,
}

impl Comparison {
    /// Whether any number grew above the tolerance, or a scenario is on one side only.
    pub fn failed(&self) -> bool {
        !self.failures().is_empty()
    }

    /// `scenario metric` of every failing row.
    pub fn failures(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter(|r| matches!(r.verdict, Verdict::Grew | Verdict::Missing | Verdict::New))
            .map(|r| format!("{} {}", r.scenario, r.metric))
            .collect()
    }
}

/// Compares `now` with `baseline`: a number fails when it is above its baseline by
/// more than `tolerance_percent`; a scenario on one side only fails too.
pub(crate) fn compare(baseline: &[Cost], now: &[Cost], tolerance_percent: f64) -> Comparison {
    let verdict = |b: f64, n: f64| {
        let limit = b * tolerance_percent / 100.0;
        if n > b + limit {
            Verdict::Grew
        } else if n < b - limit {
            Verdict::Shrank
        } else {
            Verdict::Within
        }
    };
    let mut rows = Vec::new();
    for b in baseline {
        let n = now.iter().find(|n| n.scenario == b.scenario);
        for (metric, base, now) in [
            ("instructions", b.instructions, n.map(|n| n.instructions)),
            ("allocations", b.allocations, n.map(|n| n.allocations)),
        ] {
            rows.push(Row {
                scenario: b.scenario.clone(),
                metric,
                baseline: Some(base),
                now,
                verdict: now.map_or(Verdict::Missing, |n| verdict(base, n)),
            });
        }
    }
    for n in now {
        if baseline.iter().any(|b| b.scenario == n.scenario) {
            continue;
        }
        for (metric, value) in [
            ("instructions", n.instructions),
            ("allocations", n.allocations),
        ] {
            rows.push(Row {
                scenario: n.scenario.clone(),
                metric,
                baseline: None,
                now: Some(value),
                verdict: Verdict::New,
            });
        }
    }
    Comparison {
        rows,
        tolerance_percent,
    }
}

/// The comparison as a table: every number, its baseline, the change and whether it
/// passes.
pub(crate) fn render(c: &Comparison) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<16} {:<13} {:>12} {:>12} {:>9}  verdict",
        "scenario", "per run", "baseline", "now", "change"
    );
    let num = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
    for r in &c.rows {
        let change = r
            .change_percent()
            .map_or("-".to_owned(), |p| format!("{p:+.2} %"));
        let verdict = match r.verdict {
            Verdict::Within => "ok".to_owned(),
            Verdict::Shrank => format!(
                "ok, below by more than {} %: the baseline may move down",
                c.tolerance_percent
            ),
            Verdict::Grew => format!("FAIL: above +{} %", c.tolerance_percent),
            Verdict::Missing => "FAIL: not measured (in the baseline)".to_owned(),
            Verdict::New => "FAIL: not in the baseline".to_owned(),
        };
        let _ = writeln!(
            s,
            "{:<16} {:<13} {:>12} {:>12} {:>9}  {verdict}",
            r.scenario,
            r.metric,
            num(r.baseline),
            num(r.now),
            change
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(scenario: &str, instructions: f64, allocations: f64) -> Cost {
        Cost {
            scenario: scenario.to_owned(),
            instructions,
            allocations,
        }
    }

    #[test]
    fn within_the_tolerance_passes_and_above_it_fails() {
        let base = [cost("single_turn", 100_000.0, 100.0)];
        // +3 % exactly is within; a fall of any size passes.
        let c = compare(&base, &[cost("single_turn", 103_000.0, 50.0)], 3.0);
        assert!(!c.failed(), "{c:?}");
        assert_eq!(c.rows[0].verdict, Verdict::Within);
        assert_eq!(c.rows[1].verdict, Verdict::Shrank);
        // +3.001 % on instructions fails, and only that row.
        let c = compare(&base, &[cost("single_turn", 103_001.0, 103.0)], 3.0);
        assert!(c.failed());
        assert_eq!(c.failures(), ["single_turn instructions"]);
        // +5 % on allocations fails.
        let c = compare(&base, &[cost("single_turn", 100_000.0, 105.0)], 3.0);
        assert_eq!(c.failures(), ["single_turn allocations"]);
        let change = c.rows[1].change_percent().unwrap();
        assert!((change - 5.0).abs() < 1e-9, "{change}");
    }

    #[test]
    fn a_scenario_on_one_side_only_fails() {
        let base = [cost("a", 10.0, 1.0), cost("b", 10.0, 1.0)];
        let c = compare(&base, &[cost("a", 10.0, 1.0), cost("c", 10.0, 1.0)], 3.0);
        assert_eq!(
            c.failures(),
            [
                "b instructions",
                "b allocations",
                "c instructions",
                "c allocations"
            ]
        );
        assert_eq!(c.rows[2].verdict, Verdict::Missing);
        assert_eq!(c.rows[4].verdict, Verdict::New);
    }

    #[test]
    fn the_table_says_what_grew_by_how_much() {
        let base = [cost("tool_call_run", 200_000.0, 200.0)];
        let c = compare(&base, &[cost("tool_call_run", 210_000.0, 200.0)], 3.0);
        let table = render(&c);
        let line = table.lines().find(|l| l.contains("instructions")).unwrap();
        assert!(line.contains("200000.0"), "{table}");
        assert!(line.contains("210000.0"), "{table}");
        assert!(line.contains("+5.00 %"), "{table}");
        assert!(line.contains("FAIL"), "{table}");
        let allocs = table.lines().find(|l| l.contains("allocations")).unwrap();
        assert!(
            allocs.contains("+0.00 %") && allocs.ends_with("ok"),
            "{table}"
        );
    }

    #[test]
    fn the_baseline_reads_back_what_was_written() {
        let costs = vec![
            cost("served_run", 400_000.0, 491.0),
            cost("single_turn", 72_942.0, 70.5),
        ];
        let text = baseline_text("first \"baseline\"\nof round 5", &costs);
        let (why, back) = parse_baseline(&text).unwrap();
        assert_eq!(why, "first \"baseline\"\nof round 5");
        assert_eq!(back, costs);
        assert!(
            parse_baseline("{\"single_turn.instructions\": 1, \"single_turn.allocations\": 1}")
                .is_err()
        );
        assert!(parse_baseline("{\"why\": \"x\", \"single_turn.instructions\": 1}").is_err());
    }

    #[test]
    fn updating_needs_a_reason() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(mode(&args(&["--cost"])), Ok(Mode::Show));
        assert_eq!(mode(&args(&["--cost", "--check"])), Ok(Mode::Check));
        assert!(mode(&args(&["--cost", "--update-baseline"])).is_err());
        assert!(mode(&args(&["--cost", "--update-baseline", "--why", "--check"])).is_err());
        assert_eq!(
            mode(&args(&["--cost", "--update-baseline", "--why", "faster"])),
            Ok(Mode::Update {
                why: "faster".to_owned()
            })
        );
    }
}
