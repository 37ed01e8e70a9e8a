//! The Restate driver's spans, as the local driver's: on a real restate-server, with
//! the session object served in this process (so that the spans reach this process's
//! OpenTelemetry layer), a call that pauses and its approval each run in an
//! `invoke_agent` span — the caller's `traceparent` its parent, the approved turn
//! linked to the paused one — with the `chat` and `execute_tool` spans under them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::trace::{SpanId, SpanKind, TraceId, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use reins_agent::{Agent, Decision};
use reins_message::{Msg, Role};
use reins_model::{ChatRequest, ScriptedModel, ScriptedResponse};
use reins_restate::{Delivery, LocalRestate, RestateClient, SessionObject, TurnRequest};
use reins_tool::{ToolError, ToolPolicy, Toolkit};
use serde_json::json;
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

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    path: String,
}

/// `delete X` calls `delete_file` (confirmed by a person); after a tool result the
/// model answers `done`.
fn respond(req: &ChatRequest) -> ScriptedResponse {
    match req.messages.last() {
        Some(m) if m.role == Role::Tool => ScriptedResponse::text("done"),
        Some(m) if m.text().starts_with("delete ") => ScriptedResponse::tool_call_with_id(
            "call_d1",
            "delete_file",
            json!({"path": m.text()["delete ".len()..]}),
        ),
        _ => ScriptedResponse::text("ok"),
    }
}

async fn agent(dir: &std::path::Path) -> Agent {
    let store = reins_memory::SqliteStore::open(dir.join("reins.sqlite"))
        .await
        .unwrap();
    let mut tools = Toolkit::new();
    tools
        .add(
            Toolkit::function("delete_file", "Delete a file", |a: PathArgs, _ctx| async move {
                Ok::<_, ToolError>(format!("deleted {}", a.path))
            })
            .policy(ToolPolicy::confirm()),
        )
        .unwrap();
    Agent::builder()
        .name("SafeAgent")
        .model(ScriptedModel::from_fn(respond))
        .toolkit(tools)
        .store_arc(Arc::new(store))
        .build()
        .unwrap()
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_and_approved_turn_on_restate_has_the_local_drivers_spans() {
    let Some(binary) = support::restate_binary() else {
        return;
    };
    let spans = Collect::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test"))),
    )
    .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let restate = LocalRestate::start_with(binary, dir.path().join("restate"), "")
        .await
        .unwrap();
    let object = SessionObject::new(agent(dir.path()).await).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let service = tokio::spawn(reins_restate::serve(object, listener));
    restate.register(&url).await.unwrap();
    let client = RestateClient::new(restate.ingress_url());

    let send_tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let decide_tp = "00-5cf92f3577b34da6a3ce929d0e0e4737-11f067aa0ba902b8-01";
    let mut req = TurnRequest::message(Msg::user("delete a.txt"));
    req.trace_parent = Some(send_tp.to_owned());
    let s = client.submit("s1", &req, Some("start")).await.unwrap();
    assert_eq!(s.delivery, Delivery::Started);
    let view = client
        .wait_settled("s1", s.version, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(view.paused, "{view:?}");
    let id = view.requirements[0].id.clone();
    let mut req = TurnRequest::decisions(vec![Decision::approve(&id).by("ana")]);
    req.view = Some(view.token);
    req.trace_parent = Some(decide_tp.to_owned());
    let s = client.submit("s1", &req, Some("decide")).await.unwrap();
    let end = client
        .wait_settled("s1", s.version, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(!end.paused, "{end:?}");

    // The second turn's span ends before its result is stored; allow the exporter a
    // moment anyway.
    let mut all = Vec::new();
    for _ in 0..100 {
        all = spans.0.lock().unwrap().clone();
        if named(&all, "invoke_agent SafeAgent").len() >= 2
            && !named(&all, "execute_tool delete_file").is_empty()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let turns = named(&all, "invoke_agent SafeAgent");
    assert_eq!(turns.len(), 2, "{all:#?}");
    let trace = |tp: &str| TraceId::from_hex(&tp[3..35]).unwrap();
    let span = |tp: &str| SpanId::from_hex(&tp[36..52]).unwrap();
    let first = turns
        .iter()
        .find(|t| t.span_context.trace_id() == trace(send_tp))
        .expect("the first turn in its caller's trace");
    let second = turns
        .iter()
        .find(|t| t.span_context.trace_id() == trace(decide_tp))
        .expect("the approved turn in its caller's trace");
    assert_eq!(first.parent_span_id, span(send_tp));
    assert_eq!(second.parent_span_id, span(decide_tp));
    for t in [first, second] {
        assert_eq!(t.span_kind, SpanKind::Internal);
        let attr = |k: &str| {
            t.attributes
                .iter()
                .find(|kv| kv.key.as_str() == k)
                .map(|kv| kv.value.as_str().into_owned())
        };
        assert_eq!(
            attr("gen_ai.operation.name").as_deref(),
            Some("invoke_agent")
        );
        assert_eq!(attr("gen_ai.conversation.id").as_deref(), Some("s1"));
    }
    let status = |t: &SpanData| {
        t.attributes
            .iter()
            .find(|kv| kv.key.as_str() == "reins.run.status")
            .map(|kv| kv.value.as_str().into_owned())
    };
    assert_eq!(status(first).as_deref(), Some("paused"));
    assert_eq!(status(second).as_deref(), Some("completed"));
    // The approved turn links to the paused one (its traceparent, kept in the run
    // state).
    assert_eq!(second.links.links.len(), 1, "{second:#?}");
    assert_eq!(
        second.links.links[0].span_context.span_id(),
        first.span_context.span_id()
    );
    // Under each turn its model call; the approved tool call under the second.
    let chats: Vec<&SpanData> = all.iter().filter(|s| s.name.starts_with("chat ")).collect();
    for t in [first, second] {
        assert!(
            chats
                .iter()
                .any(|c| c.parent_span_id == t.span_context.span_id()
                    && c.span_kind == SpanKind::Client),
            "{all:#?}"
        );
    }
    let tools = named(&all, "execute_tool delete_file");
    assert_eq!(tools.len(), 1, "{all:#?}");
    assert_eq!(tools[0].parent_span_id, second.span_context.span_id());
    service.abort();
}
