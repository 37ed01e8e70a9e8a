//! The caller's trace context on the MCP door: the real TypeScript SDK client
//! (tests/client/traced.mjs) sends a W3C `traceparent` in each `tools/call` request's
//! `_meta` (where OpenTelemetry's MCP conventions and SEP-414 put it); the turn the call
//! starts has the caller's span as its parent, also for a call that pauses and is
//! approved through MRTR. A malformed one is ignored and refuses nothing. The spans are
//! read as the OpenTelemetry SDK hands them to an exporter.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use support::*;
use tracing_subscriber::layer::SubscriberExt;

/// Keeps what it is handed.
#[derive(Debug, Clone, Default)]
struct Collect(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Collect {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        self.0.lock().unwrap().extend(batch);
        std::future::ready(Ok(()))
    }
}

const PLAIN: (&str, &str) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
const APPROVE: (&str, &str) = ("5cf92f3577b34da6a3ce929d0e0e4737", "11f067aa0ba902b8");

/// The `invoke_agent` spans in `trace`.
fn turns_in(spans: &Collect, trace: &str) -> Vec<SpanData> {
    let trace = TraceId::from_hex(trace).unwrap();
    spans
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.name.starts_with("invoke_agent") && s.span_context.trace_id() == trace)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_sdk_s_meta_traceparent_is_the_parent_of_the_turn() {
    if !have_node("trace_context") {
        return;
    }
    let spans = Collect::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test"))),
    )
    .unwrap();

    let (_dir, store) = sqlite_store().await;
    let ran = Ran::default();
    let http = serve_http(server(agent(store, &ran))).await;
    let tp = |(t, s): (&str, &str)| format!("00-{t}-{s}-01");
    let out = run_client(
        "traced.mjs",
        &["http", &http.url],
        &[
            ("TRACEPARENT_PLAIN", &tp(PLAIN)),
            ("TRACEPARENT_APPROVE", &tp(APPROVE)),
        ],
    )
    .await;
    assert!(
        out["plain"]["text"].as_str().unwrap().contains("echo"),
        "{out}"
    );
    assert!(
        out["approve"]["text"].as_str().unwrap().contains("deleted"),
        "{out}"
    );
    assert_eq!(out["malformed"]["isError"], false, "{out}");
    assert_eq!(ran.all(), ["delete:a.txt"]);

    let deadline = Instant::now() + Duration::from_secs(10);
    while turns_in(&spans, APPROVE.0).is_empty() || turns_in(&spans, PLAIN.0).is_empty() {
        assert!(Instant::now() < deadline, "{:#?}", spans.0.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (trace, span) in [PLAIN, APPROVE] {
        let turns = turns_in(&spans, trace);
        // The call's turn (the approval's retry may carry the same `_meta`: then it
        // is a second child of the same caller span).
        assert!(!turns.is_empty(), "{trace}");
        for t in &turns {
            assert_eq!(t.parent_span_id, SpanId::from_hex(span).unwrap(), "{t:#?}");
            assert!(t.parent_span_is_remote, "{t:#?}");
        }
    }
    // The malformed one: every other turn is a root.
    let roots = spans
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.name.starts_with("invoke_agent"))
        .filter(|s| {
            let t = s.span_context.trace_id();
            t != TraceId::from_hex(PLAIN.0).unwrap() && t != TraceId::from_hex(APPROVE.0).unwrap()
        })
        .map(|s| s.parent_span_id)
        .collect::<Vec<_>>();
    assert!(!roots.is_empty());
    assert!(roots.iter().all(|p| *p == SpanId::INVALID), "{roots:?}");
}
