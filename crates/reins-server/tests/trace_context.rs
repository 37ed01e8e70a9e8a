//! The caller's W3C trace context on reins-server's doors (feature `otel`): a
//! `traceparent` header on the REST API and on A2A's JSON-RPC requests (sent by the
//! real a2a-sdk client, tests/a2a/traced.py) becomes the parent of the turn's
//! `invoke_agent` span, for the message that starts a turn and for the decision that
//! resumes it (each its own caller); a malformed header is ignored and refuses nothing.
//! The spans are read as the OpenTelemetry SDK hands them to an exporter.
#![cfg(feature = "otel")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

// Only the client runner and the venv check are used here.
#[allow(dead_code)]
#[path = "a2a/harness.rs"]
mod harness;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use serde_json::json;
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

/// The spans every test of this binary exports (one process-wide layer: the servers'
/// tasks run on any worker thread).
fn exported() -> &'static Collect {
    static SPANS: OnceLock<(Collect, SdkTracerProvider)> = OnceLock::new();
    &SPANS
        .get_or_init(|| {
            let spans = Collect::default();
            let provider = SdkTracerProvider::builder()
                .with_simple_exporter(spans.clone())
                .build();
            let subscriber = tracing_subscriber::registry()
                .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
            tracing::subscriber::set_global_default(subscriber).unwrap();
            (spans, provider)
        })
        .0
}

/// The `invoke_agent` spans of session `id`, once there are `n`, in the order they
/// ended.
async fn turns_of(id: &str, n: usize) -> Vec<SpanData> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let turns: Vec<SpanData> = exported()
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.name.starts_with("invoke_agent"))
            .filter(|s| {
                s.attributes.iter().any(|kv| {
                    kv.key.as_str() == "gen_ai.conversation.id" && kv.value.as_str() == id
                })
            })
            .cloned()
            .collect();
        if turns.len() >= n {
            return turns;
        }
        assert!(
            Instant::now() < deadline,
            "{id}: {} turns of {n}",
            turns.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A caller's `traceparent`, its trace and span ids drawn from `seed`.
fn caller(seed: u8) -> (String, TraceId, SpanId) {
    let trace = format!(
        "{:032x}",
        0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4700_u128 + u128::from(seed)
    );
    let span = format!("{:016x}", 0x00f0_67aa_0ba9_0200_u64 + u64::from(seed));
    (
        format!("00-{trace}-{span}-01"),
        TraceId::from_hex(&trace).unwrap(),
        SpanId::from_hex(&span).unwrap(),
    )
}

fn assert_child_of(turn: &SpanData, trace: TraceId, span: SpanId) {
    assert_eq!(turn.span_context.trace_id(), trace, "{turn:#?}");
    assert_eq!(turn.parent_span_id, span, "{turn:#?}");
    assert!(turn.parent_span_is_remote, "{turn:#?}");
}

async fn post_traced(
    s: &TestServer,
    token: &str,
    path: &str,
    body: serde_json::Value,
    traceparent: &str,
) -> (u16, serde_json::Value) {
    let r = s
        .client
        .post(s.url(path))
        .bearer_auth(token)
        .header("traceparent", traceparent)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rest_api_makes_the_callers_span_the_parent_of_each_turn() {
    exported();
    let s = start().await;
    let (send, send_trace, send_span) = caller(1);
    let (decide, decide_trace, decide_span) = caller(2);

    let (st, out) = post_traced(
        &s,
        ALICE,
        "/v1/sessions/alice%2Ftraced/runs",
        json!({"message": "delete a.txt"}),
        &send,
    )
    .await;
    assert_eq!((st, out["status"].as_str()), (200, Some("paused")), "{out}");
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    // The approver is another caller, in a trace of its own.
    let (st, out) = post_traced(
        &s,
        ANA,
        "/v1/sessions/alice%2Ftraced/decisions",
        json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}),
        &decide,
    )
    .await;
    assert_eq!(
        (st, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );

    let turns = turns_of("alice/traced", 2).await;
    assert_child_of(&turns[0], send_trace, send_span);
    assert_child_of(&turns[1], decide_trace, decide_span);
    // The resumed turn still links to the paused one.
    assert_eq!(turns[1].links.links.len(), 1, "{:#?}", turns[1]);
    assert_eq!(
        turns[1].links.links[0].span_context.span_id(),
        turns[0].span_context.span_id()
    );

    // A malformed header refuses nothing; the turn starts a trace of its own.
    let (st, out) = post_traced(
        &s,
        ALICE,
        "/v1/sessions/alice%2Fbad-trace/runs",
        json!({"message": "hello"}),
        "00-not-a-trace-context",
    )
    .await;
    assert_eq!(
        (st, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );
    let turns = turns_of("alice/bad-trace", 1).await;
    assert_eq!(turns[0].parent_span_id, SpanId::INVALID, "{:#?}", turns[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_a2a_client_s_traceparent_header_is_the_parent_of_each_turn() {
    exported();
    let Some(python) = harness::client_available("trace_context a2a") else {
        return;
    };
    let s = start().await;
    let (send, send_trace, send_span) = caller(3);
    let (decide, decide_trace, decide_span) = caller(4);
    let report = harness::run_client(
        &python,
        "traced.py",
        &s,
        &s,
        &[
            ("A2A_TOKEN", CAROL),
            ("TRACEPARENT_SEND", &send),
            ("TRACEPARENT_DECIDE", &decide),
        ],
    )
    .await;
    let context = report["context_id"].as_str().unwrap();
    let turns = turns_of(context, 2).await;
    assert_child_of(&turns[0], send_trace, send_span);
    assert_child_of(&turns[1], decide_trace, decide_span);
}
