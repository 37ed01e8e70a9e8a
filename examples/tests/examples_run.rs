//! Runs every example binary and checks that it succeeds. Each example asserts its
//! own outcome (it exits non-zero when the behaviour is wrong), so this test is the
//! examples' check in CI. The binaries are brought up to date with one
//! `cargo build --examples` (a no-op when `cargo test` has just built them) and run
//! directly, one after another.
//!
//! `postgres_workers` talks to PostgreSQL when `REINS_TEST_POSTGRES_URL` (or
//! `DATABASE_URL`) is set and reports itself skipped otherwise; `openai_quickstart` is
//! run without API keys (it must explain what to set and exit 0).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// Each example, and a line its output must contain.
const EXAMPLES: &[(&str, &str)] = &[
    ("hook_stop", "c3 delete_file  rejected"),
    (
        "confirmation_required",
        "executed with {\"path\":\"/tmp/report-copy.pdf\"}",
    ),
    ("user_input", "agent: Your flight to Lisbon is booked."),
    ("external_execution", "(executed_by \"external\")"),
    (
        "esc_interrupt",
        "delete_file  cancelled   not run: interrupted",
    ),
    ("durable_resume", "ledger: del-1 Finished, attempts 1"),
    (
        "exactly_once",
        "2 sessions, 2 emails in the outbox, none sent twice",
    ),
    (
        "custom_hook",
        "rewriting path /etc/motd -> sandbox/etc/motd",
    ),
    (
        "custom_provider",
        "The forecast says: sunny and 21°C in Lisbon.",
    ),
    ("subagents", "second approval refused; still one email"),
    (
        "structured_output",
        "expense filed: 12.4 EUR at Café Lisboa",
    ),
    ("approval_views", "refused (stale_view)"),
    (
        "context_compression",
        "the store keeps all 80 original messages",
    ),
    // Checked below: "SKIPPED" without PostgreSQL, one charge per round with it.
    ("postgres_workers", ""),
    ("openai_quickstart", "SKIPPED"),
    // Needs Node.js and the npm MCP servers (.ci/run installs them); without them it
    // prints SKIPPED, and fails under CI=true.
    ("mcp_tools", ""),
];

fn examples_dir() -> PathBuf {
    // target/<profile>/deps/examples_run-<hash> -> target/<profile>/examples
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("examples")
}

fn binary(name: &str) -> PathBuf {
    examples_dir().join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

#[test]
fn every_example_runs_and_checks_itself() {
    // `cargo test --test examples_run` alone does not rebuild the examples. A runner
    // that has just built them (e.g. xtask) may set REINS_EXAMPLES_PREBUILT to skip it.
    if std::env::var_os("REINS_EXAMPLES_PREBUILT").is_none() {
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "--quiet", "-p", "reins-examples", "--examples"]);
        if examples_dir().parent().unwrap().ends_with("release") {
            build.arg("--release");
        }
        assert!(
            build.status().unwrap().success(),
            "building the examples failed"
        );
    }
    for (name, _) in EXAMPLES {
        assert!(
            binary(name).is_file(),
            "{} is missing",
            binary(name).display()
        );
    }
    let postgres = std::env::var("REINS_TEST_POSTGRES_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .is_ok();
    if !postgres {
        eprintln!(
            "examples_run: postgres_workers will report itself SKIPPED (set \
             REINS_TEST_POSTGRES_URL to run it against PostgreSQL)"
        );
    }
    let mut failures = Vec::new();
    for (name, marker) in EXAMPLES {
        let started = Instant::now();
        let out = Command::new(binary(name))
            .env_remove("DASHSCOPE_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("examples_run: {name} took {:.1?}", started.elapsed());
        if !out.status.success() {
            failures.push(format!(
                "{name} exited with {}:\n{stdout}\n{stderr}",
                out.status
            ));
        } else if !stdout.contains(marker) {
            failures.push(format!("{name}: output lacks {marker:?}:\n{stdout}"));
        } else if *name == "postgres_workers" {
            let expected = if postgres {
                "charged 1 time(s)"
            } else {
                "SKIPPED"
            };
            if !stdout.contains(expected) || (postgres && stdout.contains("SKIPPED")) {
                failures.push(format!("{name}: expected {expected:?}:\n{stdout}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
