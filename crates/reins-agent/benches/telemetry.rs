//! The cost of OpenTelemetry tracing on a run (feature `otel`): the tool-call run of
//! `benches/agent.rs` (two zero-latency model turns and one `add` call, on the
//! `InMemoryStore`) with no tracing subscriber (`off`), and with the
//! `tracing-opentelemetry` layer feeding the OpenTelemetry SDK's batch span processor
//! (`exported`) — every `invoke_agent`, `chat` and `execute_tool` span and event built,
//! batched and handed to an exporter. The exporter drops the batches, so the figure is
//! reins's and the SDK's cost in the run's process, not the network's.
//!
//! ```sh
//! cargo bench -p reins-agent --features otel --bench telemetry
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter};
use reins_agent::{Agent, RunStatus};
use reins_message::{Msg, Role};
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_tool::{ToolError, Toolkit};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;

/// Arguments of the `add` tool.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    /// The first addend.
    a: i64,
    /// The second addend.
    b: i64,
}

/// Takes the batches and drops them.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        black_box(batch);
        std::future::ready(Ok(()))
    }
}

/// The agent of `benches/agent.rs`'s `tool_call_run`: calls `add` when the last
/// message is not a tool result, else answers.
fn agent() -> Agent {
    let mut tools = Toolkit::new();
    tools
        .add(Toolkit::function(
            "add",
            "Add two integers.",
            |args: AddArgs, _ctx| async move { Ok::<_, ToolError>((args.a + args.b).to_string()) },
        ))
        .unwrap();
    let model = ScriptedModel::from_fn(|req| {
        if req.messages.last().is_some_and(|m| m.role == Role::Tool) {
            ScriptedResponse::text("3")
        } else {
            ScriptedResponse::tool_call("add", json!({ "a": 1, "b": 2 }))
        }
    })
    .with_recording(false);
    Agent::builder()
        .name("bench")
        .model(model)
        .toolkit(tools)
        .build()
        .unwrap()
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// One tool-call run on a fresh session.
async fn one_run(agent: &Agent) {
    let id = format!("s-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let session = agent.session(&id).await.unwrap();
    let out = session.send(Msg::user("add 1 and 2")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    black_box(out);
}

fn telemetry(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let agent = agent();
    let mut g = c.benchmark_group("telemetry");
    g.sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));

    g.bench_function("tool_call_run/off", |b| {
        b.iter(|| rt.block_on(one_run(&agent)));
    });

    let provider = SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(Discard).build())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench")));
    tracing::subscriber::with_default(subscriber, || {
        g.bench_function("tool_call_run/exported", |b| {
            b.iter(|| rt.block_on(one_run(&agent)));
        });
    });
    g.finish();
    provider.shutdown().unwrap();
}

criterion_group!(benches, telemetry);
criterion_main!(benches);
