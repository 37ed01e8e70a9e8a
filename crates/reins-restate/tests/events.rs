//! The Restate driver announces the run's events as the local driver does: the same
//! agent, the same stored session (a long history over the context budget, ending in
//! a tool call that never got a result) and the same input, once on each driver — on
//! Restate with the session object served in this process and a witness
//! (`SessionObject::witness`) that keeps what it is told. Both announce `RunStarted`,
//! `Repaired` (the dangling call closed before the request), `ContextCompressed` (the
//! oldest turns summarized) and the rest, in the same order.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_agent::effects::Witness;
use reins_agent::{Agent, ContextPolicy, RunEvent};
use reins_memory::{Commit, MemoryStore, SqliteStore};
use reins_message::{ContentBlock, Msg, Role, ToolUse};
use reins_model::{ChatRequest, ScriptedModel, ScriptedResponse};
use reins_restate::{LocalRestate, RestateClient, SessionObject, TurnRequest};
use serde_json::json;

/// Keeps the names of the events it is told.
#[derive(Debug, Clone, Default)]
struct Keep(Arc<Mutex<Vec<&'static str>>>);

impl Witness for Keep {
    fn send(&self, event: RunEvent) {
        self.0.lock().unwrap().push(event.name());
    }
}

fn respond(req: &ChatRequest) -> ScriptedResponse {
    if req.messages.iter().any(|m| m.text().contains("Summarize")) {
        return ScriptedResponse::text("an earlier talk about the weather");
    }
    ScriptedResponse::text("fine, thanks")
}

/// The agent, on `store`, with a context budget the stored history outgrows.
fn agent(store: Arc<SqliteStore>) -> Agent {
    Agent::builder()
        .name("Talker")
        .model(ScriptedModel::from_fn(respond))
        .context(ContextPolicy::new(700).compress_to(400))
        .store_arc(store)
        .build()
        .unwrap()
}

/// A long history, then a call of the model's that never got a result.
async fn seed(store: &SqliteStore, session: &str) {
    let state = store.open_session(session).await.unwrap();
    let mut append = Vec::new();
    for i in 0..12 {
        append.push(Msg::user(format!(
            "question {i}: {}",
            "weather ".repeat(30)
        )));
        append.push(Msg::assistant(format!(
            "answer {i}: {}",
            "sunny ".repeat(30)
        )));
    }
    append.push(Msg::user("and tomorrow?"));
    append.push(Msg::new(
        Role::Assistant,
        vec![ContentBlock::ToolUse(ToolUse::new(
            "call_lost",
            "forecast",
            json!({"day": "tomorrow"}),
        ))],
    ));
    let mut commit = Commit::at(state.version);
    commit.append = append;
    store.commit(session, commit).await.unwrap();
}

/// The events a listener of a run is told that say what the run did (the deltas
/// left out: a model's text is streamed as it comes).
fn steps(names: &[&'static str]) -> Vec<&'static str> {
    names
        .iter()
        .copied()
        .filter(|n| *n != "text_delta")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restate_announces_the_local_drivers_events() {
    let Some(binary) = support::restate_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();

    // The local driver.
    let local_store = Arc::new(
        SqliteStore::open(dir.path().join("local.sqlite"))
            .await
            .unwrap(),
    );
    seed(&local_store, "s1").await;
    let local = agent(local_store);
    let session = local.session("s1").await.unwrap();
    let mut run = session.send(Msg::user("hello")).start().await.unwrap();
    let mut on_local = Vec::new();
    while let Some(ev) = run.next_event().await {
        on_local.push(ev.name());
    }
    run.wait().await.unwrap();

    // Restate, the session object in this process.
    let restate = LocalRestate::start_with(binary, dir.path().join("restate"), "")
        .await
        .unwrap();
    let store = Arc::new(
        SqliteStore::open(dir.path().join("restate.sqlite"))
            .await
            .unwrap(),
    );
    seed(&store, "s1").await;
    let keep = Keep::default();
    let object = SessionObject::new(agent(store))
        .unwrap()
        .witness(Arc::new(keep.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let service = tokio::spawn(reins_restate::serve(object, listener));
    restate.register(&url).await.unwrap();
    let client = RestateClient::new(restate.ingress_url());
    let s = client
        .submit("s1", &TurnRequest::message(Msg::user("hello")), None)
        .await
        .unwrap();
    client
        .wait_settled("s1", s.version, Duration::from_secs(30))
        .await
        .unwrap();
    // The turn's last announcement comes after its last commit: wait for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !keep.0.lock().unwrap().contains(&"completed") {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            keep.0.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let on_restate = keep.0.lock().unwrap().clone();
    service.abort();

    for name in ["run_started", "repaired", "context_compressed", "completed"] {
        assert!(on_local.contains(&name), "local: {on_local:?}");
    }
    assert_eq!(
        steps(&on_restate),
        steps(&on_local),
        "restate: {on_restate:?}\nlocal: {on_local:?}"
    );
}
