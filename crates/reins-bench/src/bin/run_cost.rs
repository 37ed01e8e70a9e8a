//! What one run costs the CPU and the allocator, for profiling: runs a peer-bench
//! scenario `--runs N` times on a current-thread runtime (after 20 warm-up runs) and
//! prints one JSON object with allocations and KiB allocated per run and the mean time.
//!
//! ```text
//! cargo run --release -p reins-bench --bin run_cost -- [--scenario tool_call_run|single_turn] [--runs N]
//! # instructions per run: the difference of two callgrind totals, divided by the runs between them
//! valgrind --tool=callgrind target/release/run_cost --runs 200
//! valgrind --tool=callgrind target/release/run_cost --runs 400
//! ```
//!
//! `cargo xtask bench --cost` does the two callgrind runs and prints the difference.

use std::time::Instant;

use reins_bench::alloc::{Counting, INSTRUMENTED_SYSTEM, Snapshot};
use reins_bench::scenario::{Res, one_run, text_model, tool_agent};
use serde_json::json;

#[global_allocator]
static ALLOC: &Counting = &INSTRUMENTED_SYSTEM;

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let scenario = value("--scenario").unwrap_or_else(|| "tool_call_run".to_owned());
    let runs: u64 = match value("--runs") {
        Some(n) => n.parse().map_err(|e| format!("--runs {n}: {e}"))?,
        None => 1_000,
    };
    let (agent, text) = match scenario.as_str() {
        "tool_call_run" => (tool_agent()?, "add 1 and 2"),
        "single_turn" => (
            reins::prelude::Agent::builder()
                .model(text_model("done".to_owned()))
                .build()?,
            "hello",
        ),
        other => {
            return Err(
                format!("unknown --scenario {other}: use tool_call_run or single_turn").into(),
            );
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for _ in 0..20 {
        rt.block_on(one_run(&agent, text))?;
    }
    let before = Snapshot::of(ALLOC);
    let t = Instant::now();
    for _ in 0..runs {
        rt.block_on(one_run(&agent, text))?;
    }
    let elapsed = t.elapsed();
    let d = Snapshot::of(ALLOC).since(before);
    let per = runs.max(1) as f64;
    println!(
        "{}",
        json!({
            "scenario": scenario,
            "runs": runs,
            "allocs_per_run": d.allocations as f64 / per,
            "alloc_kib_per_run": d.bytes as f64 / per / 1024.0,
            "us_per_run": elapsed.as_secs_f64() * 1e6 / per,
        })
    );
    Ok(())
}
