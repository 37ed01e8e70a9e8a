//! What one run costs the CPU and the allocator, for profiling: runs a peer-bench
//! scenario `--runs N` times on a current-thread runtime (after 20 warm-up runs) and
//! prints one JSON object with allocations and KiB allocated per run and the mean time.
//!
//! ```text
//! cargo run --release -p reins-bench --bin run_cost -- [--scenario NAME] [--runs N]
//! # instructions per run: the measured runs' total (not the set-up's, nor the warm-up's), divided by the runs
//! valgrind --tool=callgrind --toggle-collect='*::measured_runs' target/cost/run_cost --runs 200
//! ```
//!
//! `cargo xtask bench --cost` does the callgrind run and the division.
//!
//! Scenarios: `tool_call_run` (two model turns and one `add` call, the peer's
//! workload), `single_turn` (one model turn), `decision_run` (a call that needs a
//! person's confirmation: the run pauses, the approval runs it and the model answers —
//! the whole human-in-the-loop cycle), `telemetry_run` (the tool-call run with the
//! OpenTelemetry layer on: every span built and handed to the SDK's batch processor,
//! whose exporter drops them). Each on a fresh in-memory session.
//!
//! Evidence (issue #53; reported by `cargo xtask bench --cost`, not held to the
//! baseline): `signed_tool_call_run` and `signed_decision_run` are the tool-call run and
//! the decision with an evidence signer (the hash chain and a signed receipt per
//! decision and per call); `sqlite_tool_call_run` and `sqlite_signed_tool_call_run` are
//! the tool-call run on a `SqliteStore` file at `Durability::Full` (a temporary
//! directory), without and with signing.

use std::time::Instant;

use reins_bench::alloc::{Counting, INSTRUMENTED_SYSTEM, Snapshot};
use reins_bench::scenario::{
    Res, confirm_agent, decision_run, one_run, signed_confirm_agent, text_model, tool_agent,
    tool_agent_with,
};
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
    // The SQLite scenarios' database, removed at the end.
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let sqlite = || -> Res<std::sync::Arc<dyn reins::memory::MemoryStore>> {
        let options =
            reins::memory::SqliteOptions::default().durability(reins::memory::Durability::Full);
        let store = rt.block_on(reins::memory::SqliteStore::open_with(
            dir.path().join("cost.sqlite"),
            options,
        ))?;
        Ok(std::sync::Arc::new(store))
    };
    let (agent, text) = match scenario.as_str() {
        "tool_call_run" | "telemetry_run" => (tool_agent()?, "add 1 and 2"),
        "decision_run" => (confirm_agent()?, "add 1 and 2"),
        "signed_tool_call_run" => (tool_agent_with(None, true)?, "add 1 and 2"),
        "signed_decision_run" => (signed_confirm_agent()?, "add 1 and 2"),
        "sqlite_tool_call_run" => (tool_agent_with(Some(sqlite()?), false)?, "add 1 and 2"),
        "sqlite_signed_tool_call_run" => (tool_agent_with(Some(sqlite()?), true)?, "add 1 and 2"),
        "single_turn" => (
            reins::prelude::Agent::builder()
                .model(text_model("done".to_owned()))
                .build()?,
            "hello",
        ),
        other => {
            return Err(format!(
                "unknown --scenario {other}: use tool_call_run, single_turn, decision_run, \
                 telemetry_run, signed_tool_call_run, signed_decision_run, sqlite_tool_call_run \
                 or sqlite_signed_tool_call_run"
            )
            .into());
        }
    };
    // The OpenTelemetry layer, for `telemetry_run`: kept until the end of the program.
    let _telemetry = (scenario == "telemetry_run").then(telemetry);
    let decide = scenario == "decision_run" || scenario == "signed_decision_run";
    let run = |agent: &reins::prelude::Agent| {
        let agent = agent.clone();
        async move {
            if decide {
                decision_run(&agent, text).await
            } else {
                one_run(&agent, text).await
            }
        }
    };
    for _ in 0..20 {
        rt.block_on(run(&agent))?;
    }
    let before = Snapshot::of(ALLOC);
    let t = Instant::now();
    measured_runs(runs, || rt.block_on(run(&agent)))?;
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

/// The measured runs, after the warm-up: `cargo xtask bench --cost` counts the
/// instructions of this function alone (callgrind's `--toggle-collect`), so that
/// the set-up and the warm-up (one-time initializations) stay out of the count.
#[inline(never)]
fn measured_runs(runs: u64, mut run: impl FnMut() -> Res<()>) -> Res<()> {
    for _ in 0..runs {
        run()?;
    }
    Ok(())
}

/// Takes the span batches and drops them (the cost is reins's and the SDK's in the
/// run's process, not the network's).
#[derive(Debug)]
struct Discard;

impl opentelemetry_sdk::trace::SpanExporter for Discard {
    fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> impl std::future::Future<Output = opentelemetry_sdk::error::OTelSdkResult> + Send {
        std::hint::black_box(batch);
        std::future::ready(Ok(()))
    }
}

/// Installs the `tracing-opentelemetry` layer over the SDK's simple span processor as
/// the global subscriber; the provider is returned to keep it alive.
///
/// The simple processor hands each span to the exporter as it ends, on the run's
/// thread: every instruction of a span (built, exported, dropped) is counted, and
/// counted the same each time. The batch processor's worker thread frees the spans the
/// run's thread allocated, and how those frees interleave with the run moves glibc's
/// `malloc_consolidate` by about 1 % of the run from one process to the next
/// (callgrind, two 400-run processes: 113.6 and 114.6 million instructions).
fn telemetry() -> opentelemetry_sdk::trace::SdkTracerProvider {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt;
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(Discard)
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("run_cost")));
    if tracing::subscriber::set_global_default(subscriber).is_err() {
        eprintln!("run_cost: a tracing subscriber was already set");
    }
    provider
}
