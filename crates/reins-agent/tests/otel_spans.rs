//! The spans a turn exports, as the OpenTelemetry SDK hands them to an exporter
//! (feature `otel`): the GenAI conventions' names, kinds and attribute types; the
//! caller's `traceparent` as the turn's parent; the `execute_tool` span's context in
//! the tool's `ToolContext` (what reins-mcp sends on as `_meta.traceparent`).
//! Phoenix's API (crates/reins-demo/tests/serve_otlp.rs) does not keep span kinds,
//! so they are checked here.
#![cfg(feature = "otel")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::{Arc, Mutex};

use opentelemetry::trace::{SpanId, SpanKind, TraceId, TracerProvider as _};
use opentelemetry::{Array, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use reins_agent::RunStatus;
use reins_message::Msg;
use reins_model::ScriptedModel;
use reins_tool::{ToolError, Toolkit};
use serde_json::json;
use support::*;
use tracing_subscriber::layer::SubscriberExt;

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

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

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// One turn that calls `lookup` (which reports the trace context it was given) and
/// answers, on a session handle with `traceparent`; the exported spans and what the
/// tool saw.
async fn turn(session: &str, traceparent: &str) -> (Vec<SpanData>, Option<String>) {
    let spans = Collect::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    // This thread's runtime (current-thread) runs the turn and its tool.
    let _guard = tracing::subscriber::set_default(subscriber);

    let seen = Arc::new(Mutex::new(None));
    let mut tools = Toolkit::new();
    let s = seen.clone();
    tools
        .add(Toolkit::function(
            "lookup",
            "Look a thing up",
            move |_a: QueryArgs, ctx: reins_tool::ToolContext| {
                let s = s.clone();
                async move {
                    *s.lock().unwrap() = ctx.trace_parent().map(str::to_owned);
                    Ok::<_, ToolError>("found".to_owned())
                }
            },
        ))
        .unwrap();
    let model = ScriptedModel::new(vec![
        call("c1", "lookup", json!({"query": "x"})),
        text("done"),
    ]);
    let agent = agent(model, tools).build().unwrap();
    let out = agent
        .session(session)
        .await
        .unwrap()
        .with_trace_parent(traceparent)
        .send(Msg::user("go"))
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    provider.force_flush().unwrap();
    let spans = spans.0.lock().unwrap().clone();
    let seen = seen.lock().unwrap().clone();
    (spans, seen)
}

#[tokio::test]
async fn a_turn_joins_its_callers_trace_with_the_conventions_names_kinds_and_types() {
    let (spans, seen) = turn("s1", &format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")).await;

    let turns = named(&spans, "invoke_agent SafeAgent");
    assert_eq!(turns.len(), 1, "{spans:#?}");
    let turn = turns[0];
    // The caller's span is the parent (remote), in the caller's trace.
    assert_eq!(
        turn.span_context.trace_id(),
        TraceId::from_hex(CALLER_TRACE).unwrap()
    );
    assert_eq!(turn.parent_span_id, SpanId::from_hex(CALLER_SPAN).unwrap());
    assert!(turn.parent_span_is_remote);
    assert_eq!(turn.span_kind, SpanKind::Internal);
    assert_eq!(
        attr(turn, "gen_ai.operation.name"),
        Some(&Value::from("invoke_agent"))
    );
    assert_eq!(
        attr(turn, "gen_ai.agent.name"),
        Some(&Value::from("SafeAgent"))
    );
    assert_eq!(
        attr(turn, "gen_ai.conversation.id"),
        Some(&Value::from("s1"))
    );
    assert!(attr(turn, "gen_ai.request.model").is_some(), "{turn:#?}");
    // The scripted model names no provider: the attribute is left out.
    assert_eq!(attr(turn, "gen_ai.provider.name"), None);

    // Two model calls (the tool call, the answer): client spans under the turn.
    let chats: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    assert_eq!(chats.len(), 2, "{spans:#?}");
    let mut reasons = Vec::new();
    for c in &chats {
        assert_eq!(c.span_kind, SpanKind::Client);
        assert_eq!(c.parent_span_id, turn.span_context.span_id());
        assert_eq!(attr(c, "gen_ai.operation.name"), Some(&Value::from("chat")));
        for k in ["gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"] {
            assert!(matches!(attr(c, k), Some(Value::I64(_))), "{k}: {c:#?}");
        }
        match attr(c, "gen_ai.response.finish_reasons") {
            Some(Value::Array(Array::String(r))) => {
                reasons.extend(r.iter().map(|s| s.as_str().to_owned()));
            }
            other => panic!("finish reasons: {other:?}"),
        }
    }
    reasons.sort();
    assert_eq!(reasons, ["stop", "tool_call"]);

    let tools = named(&spans, "execute_tool lookup");
    assert_eq!(tools.len(), 1, "{spans:#?}");
    let tool = tools[0];
    assert_eq!(tool.span_kind, SpanKind::Internal);
    assert_eq!(tool.parent_span_id, turn.span_context.span_id());
    assert_eq!(
        attr(tool, "gen_ai.operation.name"),
        Some(&Value::from("execute_tool"))
    );
    assert_eq!(attr(tool, "gen_ai.tool.name"), Some(&Value::from("lookup")));
    assert_eq!(attr(tool, "gen_ai.tool.call.id"), Some(&Value::from("c1")));
    assert_eq!(
        attr(tool, "gen_ai.tool.type"),
        Some(&Value::from("function"))
    );
    assert_eq!(
        attr(tool, "reins.tool.outcome"),
        Some(&Value::from("success"))
    );
    // The tool was handed its own span's context, to pass on.
    assert_eq!(
        seen.as_deref(),
        Some(
            format!(
                "00-{}-{}-01",
                tool.span_context.trace_id(),
                tool.span_context.span_id()
            )
            .as_str()
        )
    );
}

#[tokio::test]
async fn a_malformed_traceparent_is_ignored_and_the_turn_starts_its_own_trace() {
    for bad in [
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // uppercase
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01", // all-zero trace
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",    // missing flags
        "not a traceparent",
    ] {
        let (spans, _) = turn("s2", bad).await;
        let turns = named(&spans, "invoke_agent SafeAgent");
        assert_eq!(turns.len(), 1, "{bad}: {spans:#?}");
        assert_eq!(turns[0].parent_span_id, SpanId::INVALID, "{bad}");
        assert_ne!(
            turns[0].span_context.trace_id(),
            TraceId::from_hex(CALLER_TRACE).unwrap(),
            "{bad}"
        );
    }
}
