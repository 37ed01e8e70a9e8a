//! The concurrency benchmark: 10,000 sessions at once on one agent, each a tool-call
//! run against a model that takes 20 ms per turn. Prints one JSON object: the wall
//! time, the ideal (two model turns plus the tool's own time), their ratio, and the
//! peak resident memory of the process.
//!
//! ```text
//! cargo run --release -p reins-bench --bin concurrency_bench [-- --sessions N] [-- --latency-ms N]
//! ```
//!
//! A multi-thread tokio runtime with one worker per core; the `InMemoryStore`; the
//! model does not record requests. The tool (`add`) is timed on its own first: its
//! median is the "tool time" in the ideal. `--features mimalloc` builds it on mimalloc
//! (the JSON's `allocator` says which).

use std::hint::black_box;
use std::time::{Duration, Instant};

use reins::message::{Role, ToolUse};
use reins::prelude::*;
use reins::tool::ExecOptions;
use reins_bench::scenario::{Res, add_toolkit};
use serde_json::json;

/// Built with `--features mimalloc`, the program runs on mimalloc instead of the
/// system allocator (glibc malloc): the same workload, to measure the allocator's
/// share of the concurrent cost (see docs/performance.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The allocator this build runs on.
const ALLOCATOR: &str = if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "system"
};

fn arg(name: &str, default: u64) -> Res<u64> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        Some(i) => Ok(args
            .get(i + 1)
            .ok_or_else(|| format!("{name} needs a value"))?
            .parse()?),
        None => Ok(default),
    }
}

/// The peak resident set size (`VmHWM`), in KiB, from `/proc/self/status`.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The median time of one direct `add` execution, in microseconds.
async fn tool_time_us(tools: &Toolkit) -> f64 {
    let call = ToolUse::new("call_t", "add", json!({ "a": 1, "b": 2 }));
    let mut samples = Vec::with_capacity(200);
    for _ in 0..200 {
        let t = Instant::now();
        black_box(
            tools
                .execute(
                    &call,
                    ToolContext::new("t", &call.id),
                    &ExecOptions::default(),
                )
                .await,
        );
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() -> Res<()> {
    let sessions = arg("--sessions", 10_000)?;
    let latency = Duration::from_millis(arg("--latency-ms", 20)?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let tools = add_toolkit()?;
        let tool_us = tool_time_us(&tools).await;
        let model = ScriptedModel::from_fn(|req| {
            if req.messages.last().is_some_and(|m| m.role == Role::Tool) {
                ScriptedResponse::text("3")
            } else {
                ScriptedResponse::tool_call("add", json!({ "a": 1, "b": 2 }))
            }
        })
        .with_latency(latency)
        .with_recording(false);
        let agent = Agent::builder().model(model).toolkit(tools).build()?;

        let start = Instant::now();
        let mut tasks = Vec::with_capacity(sessions as usize);
        for i in 0..sessions {
            let agent = agent.clone();
            tasks.push(tokio::spawn(async move {
                let session = agent.session(&format!("user-{i}")).await?;
                let out = session.send(Msg::user("add 1 and 2")).await?;
                Ok::<_, AgentError>(out.status)
            }));
        }
        let mut completed = 0u64;
        for t in tasks {
            if t.await?? == RunStatus::Completed {
                completed += 1;
            }
        }
        let wall = start.elapsed();
        let ideal_us = 2.0 * latency.as_secs_f64() * 1e6 + tool_us;
        let wall_us = wall.as_secs_f64() * 1e6;
        let out = json!({
            "framework": "reins",
            "sessions": sessions,
            "completed": completed,
            "model_latency_ms": latency.as_millis() as u64,
            "tool_us": tool_us,
            "wall_ms": wall_us / 1e3,
            "ideal_ms": ideal_us / 1e3,
            "wall_over_ideal": wall_us / ideal_us,
            "peak_rss_mb": peak_rss_kib().map(|k| k as f64 / 1024.0),
            "worker_threads": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            "allocator": ALLOCATOR,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        if completed != sessions {
            return Err(format!("only {completed} of {sessions} runs completed").into());
        }
        Ok(())
    })
}
