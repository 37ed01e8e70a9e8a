//! The server holds one contract: the session port, here `Relayed` over a
//! `SessionBackend` that is not an `Agent` — one that runs each input on an agent of
//! its own, detached, as a remote deployment's processes do, and relays the live
//! events of its steps to the server's `POST /v1/sessions/{id}/live` — and every door
//! (runs, decisions with their second caller, streaming, interrupts, AG-UI, reads)
//! answers as it does over the local driver, on the same stored state: both servers
//! compute the session's view with the one function that computes it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use reins_agent::{
    Agent, ReplayReport, ReplayTurn, RunEvent, SessionBackend, SessionView, Started, Submission,
};
use serde_json::{Value, json};
use support::*;
use tokio::sync::mpsc::UnboundedSender;

/// A backend whose runs execute "elsewhere": on its own agent (which shares the
/// server's store), followed by the server through the store and the live relay.
struct Elsewhere {
    agent: Agent,
    /// The server's base URL, known once it listens.
    relay_to: Arc<OnceLock<String>>,
    http: reqwest::Client,
}

/// The run events a backend's process relays (those of a step in progress).
fn is_live(e: &RunEvent) -> bool {
    matches!(
        e,
        RunEvent::ReasoningStarted { .. }
            | RunEvent::TextDelta { .. }
            | RunEvent::ToolCallStarted { .. }
            | RunEvent::ToolCallReady { .. }
            | RunEvent::ToolExecutionStarted { .. }
            | RunEvent::ToolExecutionFinished { .. }
    )
}

#[async_trait]
impl SessionBackend for Elsewhere {
    async fn view(&self, session: &str) -> reins_agent::Result<SessionView> {
        SessionBackend::view(&self.agent, session).await
    }

    async fn submit(&self, session: &str, submission: Submission) -> reins_agent::Result<()> {
        let Started::Here(mut handle) = self.agent.start(session, submission).await? else {
            unreachable!("an agent runs its sessions here");
        };
        match handle.next_event().await {
            Some(RunEvent::RunStarted { .. }) => {}
            _ => return handle.wait().await.map(|_| ()),
        }
        let (http, base) = (self.http.clone(), self.relay_to.get().cloned());
        let path = format!("/v1/sessions/{}/live", enc(session));
        tokio::spawn(async move {
            while let Some(ev) = handle.next_event().await {
                if let (true, Some(base)) = (is_live(&ev), &base) {
                    let mut data = serde_json::to_value(&ev).unwrap();
                    data["attempt"] = json!("a1");
                    let _ = http
                        .post(format!("{base}{path}"))
                        .bearer_auth(ADMIN)
                        .json(&json!({"events": [data]}))
                        .send()
                        .await;
                }
            }
            let _ = handle.wait().await;
        });
        Ok(())
    }

    async fn interrupt(&self, session: &str) -> reins_agent::Result<bool> {
        SessionBackend::interrupt(&self.agent, session).await
    }

    async fn replay(
        &self,
        session: &str,
        turns: Option<UnboundedSender<ReplayTurn>>,
    ) -> reins_agent::Result<ReplayReport> {
        SessionBackend::replay(&self.agent, session, turns).await
    }
}

/// Two servers on one store: `local` runs the sessions itself, `remote` fronts
/// [`Elsewhere`] (whose agent is a second one on the same store).
async fn servers() -> (TestServer, TestServer) {
    let (dir, store) = sqlite_store().await;
    let ran: Ran = Arc::default();
    let local = serve(agent(store.clone(), &ran), ran.clone(), Some(dir), |s| s).await;
    let relay_to = Arc::new(OnceLock::new());
    let backend = Elsewhere {
        agent: agent(store.clone(), &ran),
        relay_to: relay_to.clone(),
        http: reqwest::Client::new(),
    };
    let remote = serve_relayed(agent(store, &ran), Arc::new(backend), ran, None).await;
    relay_to.set(remote.base.clone()).unwrap();
    (local, remote)
}

/// The parts of a session's view that the store determines.
fn view_of(v: &Value) -> Value {
    json!({
        "status": v["status"], "paused": v["paused"], "version": v["version"],
        "requirements": v["requirements"], "view_token": v["view_token"],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_is_not_an_agent_serves_every_door_and_shows_the_same_view() {
    let (local, remote) = servers().await;
    let path = "/v1/sessions/alice%2Fr1";

    // A run through the backend: answered once the store says it paused.
    let (st, out) = remote
        .post(
            ALICE,
            &format!("{path}/runs"),
            json!({"message": "delete a.txt"}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["status"], "paused", "{out}");
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();

    // Both servers show the same view of the same stored state, and so does the
    // agent's own view (the one computation).
    let (_, on_remote) = remote.get(ALICE, path).await;
    let (_, on_local) = local.get(ALICE, path).await;
    assert_eq!(view_of(&on_remote), view_of(&on_local));
    assert_eq!(on_remote["status"], "paused");
    let stored = local.agent.store().load_session("alice/r1").await.unwrap();
    let computed = reins_agent::stored_view(local.agent.store(), stored)
        .await
        .unwrap();
    let agents = SessionBackend::view(&local.agent, "alice/r1")
        .await
        .unwrap();
    assert_eq!(computed, agents);
    assert_eq!(computed.token.to_string(), on_remote["view_token"]);

    // Two approvers decide at once through the backend: one wins, the other is
    // told who decided first; the tool ran once.
    let token = on_remote["view_token"].as_str().unwrap().to_owned();
    let body = json!({"view_token": token, "decisions": [
        {"requirement_id": rid, "action": "approve"}]});
    let decisions = format!("{path}/decisions");
    let (a, b) = tokio::join!(
        remote.post(ANA, &decisions, body.clone()),
        remote.post(ADMIN, &decisions, body.clone()),
    );
    let mut answers = [a, b];
    answers.sort_by_key(|(st, _)| *st);
    assert_eq!(answers[0].0, 200, "{answers:?}");
    assert_eq!(answers[0].1["status"], "completed", "{answers:?}");
    assert_eq!(answers[1].0, 409, "{answers:?}");
    assert!(
        ["already_decided", "busy", "stale_view", "not_paused"]
            .contains(&answers[1].1["error"]["code"].as_str().unwrap()),
        "{answers:?}"
    );
    assert_eq!(remote.ran(), ["delete:a.txt"]);
    // A late retry: refused as already decided, nothing runs again.
    let (st, late) = remote.post(ANA, &decisions, body).await;
    assert_eq!(st, 409, "{late}");
    assert_eq!(late["error"]["code"], "already_decided", "{late}");
    assert_eq!(remote.ran(), ["delete:a.txt"]);
    let (_, on_remote) = remote.get(ALICE, path).await;
    let (_, on_local) = local.get(ALICE, path).await;
    assert_eq!(view_of(&on_remote), view_of(&on_local));
    assert_eq!(on_remote["status"], "idle");

    // A streamed run: the live events relayed meanwhile and the run's end, then the
    // output — the same stream as a run of the local driver's.
    let res = remote
        .client
        .post(remote.url(&format!("{path}/runs?stream=true")))
        .bearer_auth(ALICE)
        .json(&json!({"message": "hello there"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let mut sse = SseReader::new(res);
    let events = tokio::time::timeout(Duration::from_secs(20), sse.until("output"))
        .await
        .unwrap();
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert!(
        names.starts_with(&["run_started"]) && names.ends_with(&["completed", "output"]),
        "{names:?}"
    );
    let output = &events.last().unwrap().data["output"];
    assert_eq!(output["status"], "completed", "{output}");
    assert!(output["message"].to_string().contains("echo: hello there"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_and_ag_ui_go_through_the_backend() {
    let (_local, remote) = servers().await;
    let path = "/v1/sessions/alice%2Fr2";
    let (client, url) = (remote.client.clone(), remote.url(&format!("{path}/runs")));
    let slow = tokio::spawn(async move {
        let res = client
            .post(url)
            .bearer_auth(ALICE)
            .json(&json!({"message": "slow cats"}))
            .send()
            .await
            .unwrap();
        let st = res.status().as_u16();
        (st, res.json::<Value>().await.unwrap_or(Value::Null))
    });
    // Wait until the tool runs.
    for _ in 0..200 {
        if remote.ran().iter().any(|r| r == "search-start:cats") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(remote.ran().iter().any(|r| r == "search-start:cats"));
    let (_, running) = remote.get(ALICE, path).await;
    assert_eq!(running["status"], "running", "{running}");
    // The interrupt goes through the backend, which stores it for its run.
    let (st, ans) = remote
        .post(ALICE, &format!("{path}/interrupt"), json!({}))
        .await;
    assert_eq!(st, 202, "{ans}");
    assert_eq!(ans["delivered"], "backend");
    let (st, out) = tokio::time::timeout(Duration::from_secs(20), slow)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["status"], "cancelled", "{out}");
    assert!(!remote.ran().iter().any(|r| r == "search-done:cats"));

    // AG-UI through the backend: the run, then its stored transcript and outcome.
    let res = remote
        .client
        .post(remote.url("/agui"))
        .bearer_auth(ALICE)
        .json(&json!({
            "threadId": "alice/agui", "runId": "run-1", "state": {}, "tools": [],
            "context": [], "forwardedProps": {},
            "messages": [{"id": "m1", "role": "user", "content": "delete b.txt"}],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let text = res.text().await.unwrap();
    assert!(text.contains("RUN_STARTED"), "{text}");
    assert!(text.contains("MESSAGES_SNAPSHOT"), "{text}");
    assert!(
        text.contains("RUN_FINISHED") && text.contains("interrupt"),
        "{text}"
    );
}

/// A backend whose processes are fast: its `submit` answers only once the run it
/// started has paused or ended, each live event relayed (and delivered) before the
/// step's commit, as a Restate deployment's steps deliver them. A stream that starts
/// after that finds the run settled in the store, its live events waiting for it.
struct Settled {
    agent: Agent,
    relay_to: Arc<OnceLock<String>>,
    http: reqwest::Client,
}

#[async_trait]
impl SessionBackend for Settled {
    async fn view(&self, session: &str) -> reins_agent::Result<SessionView> {
        SessionBackend::view(&self.agent, session).await
    }

    async fn submit(&self, session: &str, submission: Submission) -> reins_agent::Result<()> {
        let Started::Here(mut handle) = self.agent.start(session, submission).await? else {
            unreachable!("an agent runs its sessions here");
        };
        let base = self.relay_to.get().cloned().unwrap();
        let url = format!("{base}/v1/sessions/{}/live", enc(session));
        while let Some(ev) = handle.next_event().await {
            if is_live(&ev) {
                let mut data = serde_json::to_value(&ev).unwrap();
                data["attempt"] = json!("a1");
                let res = self
                    .http
                    .post(&url)
                    .bearer_auth(ADMIN)
                    .json(&json!({"events": [data]}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status().as_u16(), 202);
            }
        }
        handle.wait().await.map(|_| ())
    }

    async fn interrupt(&self, session: &str) -> reins_agent::Result<bool> {
        SessionBackend::interrupt(&self.agent, session).await
    }

    async fn replay(
        &self,
        session: &str,
        turns: Option<UnboundedSender<ReplayTurn>>,
    ) -> reins_agent::Result<ReplayReport> {
        SessionBackend::replay(&self.agent, session, turns).await
    }
}

/// The AG-UI events (`data:` lines as JSON) of one `POST /agui`.
async fn agui(server: &TestServer, body: Value) -> Vec<Value> {
    let res = server
        .client
        .post(server.url("/agui"))
        .bearer_auth(CAROL)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let text = res.text().await.unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect()
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

/// A run that is over before its stream begins (the backend answered the input once
/// the run had ended): the stream still carries the live events relayed before the
/// end, on AG-UI and on the native stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_over_before_its_stream_begins_still_streams_its_live_events() {
    let (dir, store) = sqlite_store().await;
    let ran: Ran = Arc::default();
    let relay_to = Arc::new(OnceLock::new());
    let backend = Settled {
        agent: agent(store.clone(), &ran),
        relay_to: relay_to.clone(),
        http: reqwest::Client::new(),
    };
    let server = serve_relayed(agent(store, &ran), Arc::new(backend), ran, Some(dir)).await;
    relay_to.set(server.base.clone()).unwrap();

    // AG-UI: the pause, then the approval, whose run ends before its stream starts.
    let input = |messages: Value, resume: Value| {
        json!({
            "threadId": "carol/fast", "runId": uuid_like_id(), "state": {}, "tools": [],
            "context": [], "forwardedProps": {}, "messages": messages, "resume": resume,
        })
    };
    let say = json!([{"id": "m1", "role": "user", "content": "delete a.txt"}]);
    let first = agui(&server, input(say.clone(), Value::Null)).await;
    let finished = first.last().unwrap();
    assert_eq!(finished["outcome"]["type"], "interrupt", "{first:#?}");
    assert!(types(&first).contains(&"TOOL_CALL_START"), "{first:#?}");
    let interrupt = finished["outcome"]["interrupts"][0]["id"].clone();
    let resume = json!([{"interruptId": interrupt, "status": "resolved",
                         "payload": {"approved": true}}]);
    let second = agui(&server, input(say, resume)).await;
    let result = second
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .unwrap_or_else(|| panic!("no tool result: {:?}", types(&second)));
    assert_eq!(result["content"], "deleted a.txt");
    let deltas: String = second
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(deltas.starts_with("Outcome — delete_file"), "{second:#?}");
    assert_eq!(
        &types(&second)[types(&second).len() - 2..],
        ["MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    );
    assert_eq!(server.ran(), ["delete:a.txt"]);

    // The native stream: the live deltas, then the end and the output.
    let res = server
        .client
        .post(server.url("/v1/sessions/alice%2Ffast/runs?stream=true"))
        .bearer_auth(ALICE)
        .json(&json!({"message": "hello there"}))
        .send()
        .await
        .unwrap();
    let mut sse = SseReader::new(res);
    let events = sse.until("output").await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    let delta = names.iter().position(|n| *n == "text_delta");
    let end = names.iter().rposition(|n| *n == "completed");
    assert!(
        matches!((delta, end), (Some(d), Some(e)) if d < e),
        "{names:?}"
    );
}

fn uuid_like_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("run-{}", N.fetch_add(1, Ordering::Relaxed))
}
