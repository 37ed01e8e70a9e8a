//! The sweep of waiting calls in a program without reins-server, on a SQLite store: a
//! call that waits too long is escalated once (however many sweeps look), and once its
//! time to live passes it is rejected through the session port, audited `via: expiry`
//! by `reins`; the tool never runs, and the run goes on to its answer. The notices are
//! delivered by the program's own dispatcher. The clock is the test's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use reins_agent::port::Sessions;
use reins_agent::{Agent, RunStatus, Verdict};
use reins_memory::{MemoryStore, Notice, NoticeKind, SqliteStore};
use reins_message::Msg;
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_notify::waiting::{Clock, ExpiryAction, Sweep, WaitPolicy, Waiting};
use reins_notify::{Attempt, Channel, DeliveryError, Dispatcher};
use reins_tool::{ToolPolicy, Toolkit};
use serde_json::json;

/// A clock the test moves.
struct TestClock(Mutex<DateTime<Utc>>);

impl Clock for TestClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

impl TestClock {
    fn advance(&self, by: Duration) {
        let mut now = self.0.lock().unwrap();
        *now += chrono::Duration::from_std(by).unwrap();
    }
}

/// Keeps every notice delivered to it.
#[derive(Default)]
struct Recorder(Mutex<Vec<Notice>>);

#[async_trait]
impl Channel for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn wants(&self, _notice: &Notice) -> bool {
        true
    }
    async fn deliver(&self, notice: &Notice, _attempt: &Attempt) -> Result<(), DeliveryError> {
        self.0.lock().unwrap().push(notice.clone());
        Ok(())
    }
}

impl Recorder {
    fn of(&self, kind: NoticeKind) -> Vec<Notice> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|n| n.kind == kind)
            .cloned()
            .collect()
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// The file.
    path: String,
}

fn agent(store: Arc<dyn MemoryStore>, ran: Arc<AtomicUsize>) -> Agent {
    let mut tools = Toolkit::new();
    tools
        .add(
            Toolkit::function("delete_file", "Delete a file", move |a: PathArgs, _ctx| {
                let ran = ran.clone();
                async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, reins_tool::ToolError>(format!("deleted {}", a.path))
                }
            })
            .policy(ToolPolicy::confirm()),
        )
        .unwrap();
    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id("call_1", "delete_file", json!({"path": "a.txt"})),
        ScriptedResponse::text("Nobody approved; a.txt stays."),
    ]);
    Agent::builder()
        .model(model)
        .toolkit(tools)
        .store_arc(store)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_without_a_server_escalates_then_rejects_a_call_that_waits_too_long() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn MemoryStore> = Arc::new(
        SqliteStore::open(dir.path().join("reins.sqlite"))
            .await
            .unwrap(),
    );
    let recorder = Arc::new(Recorder::default());
    let dispatcher = Dispatcher::new(store.clone()).channel(recorder.clone());
    let ran = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), ran.clone());
    let session = agent.session("ops/cleanup").await.unwrap();
    let out = session.send(Msg::user("delete a.txt")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);

    let clock = Arc::new(TestClock(Mutex::new(Utc::now())));
    let waiting = Waiting::new().clock(clock.clone()).tool(
        "delete_file",
        WaitPolicy::new()
            .escalate_after(Duration::from_secs(600), ["ops-lead"])
            .expire_after(
                Duration::from_secs(3600),
                ExpiryAction::reject("nobody answered within the hour"),
            ),
    );
    let port: Arc<dyn Sessions> = Arc::new(agent.clone());
    let sweep = Sweep::new(port.clone(), waiting);

    // Not yet: nothing but the waiting notice.
    sweep.once().await.unwrap();
    dispatcher.tick().await.unwrap();
    assert_eq!(recorder.of(NoticeKind::RequirementWaiting).len(), 1);
    assert!(recorder.of(NoticeKind::RequirementEscalated).is_empty());

    // Past the escalation: told once, however many sweeps look.
    clock.advance(Duration::from_secs(11 * 60));
    sweep.once().await.unwrap();
    sweep.once().await.unwrap();
    dispatcher.tick().await.unwrap();
    let escalated = recorder.of(NoticeKind::RequirementEscalated);
    assert_eq!(escalated.len(), 1, "{escalated:?}");
    assert_eq!(escalated[0].principals, ["ops-lead"]);
    assert_eq!(escalated[0].session.as_deref(), Some("ops/cleanup"));
    assert_eq!(escalated[0].requirement.as_deref(), Some("call_1"));
    assert_eq!(escalated[0].payload["group"], json!(["ops-lead"]));
    assert_eq!(escalated[0].payload["waited_seconds"], 660);
    assert!(port.view("ops/cleanup").await.unwrap().paused);

    // Past its time to live: rejected through the port, and the run goes on.
    let mut watch = session.watch().await.unwrap();
    clock.advance(Duration::from_secs(3600));
    sweep.once().await.unwrap();
    loop {
        let view = watch
            .next()
            .await
            .expect("the store's feed closed")
            .unwrap();
        if view.outcome() == Some(RunStatus::Completed) {
            break;
        }
    }
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the expired call never ran");
    let trail = port.audit("ops/cleanup").await.unwrap();
    let expiry = trail
        .iter()
        .find(|r| r.verdict == Verdict::Applied)
        .expect("an applied decision");
    assert_eq!(expiry.decision, "reject", "{expiry:?}");
    let actor = expiry.actor.as_ref().unwrap();
    assert_eq!(actor.principal, "reins");
    assert_eq!(actor.metadata.as_ref().unwrap()["via"], "expiry");

    // A later sweep finds nothing waiting; every notice was written once.
    sweep.once().await.unwrap();
    dispatcher.tick().await.unwrap();
    let expired = recorder.of(NoticeKind::RequirementExpired);
    assert_eq!(expired.len(), 1, "{expired:?}");
    assert_eq!(expired[0].payload["action"], "reject");
    assert_eq!(recorder.of(NoticeKind::RequirementEscalated).len(), 1);
    let decided = recorder.of(NoticeKind::RequirementDecided);
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(decided[0].payload["decision"], "reject");
    assert_eq!(recorder.of(NoticeKind::RunCompleted).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_without_rules_is_not_started_and_a_running_one_stops_when_dropped() {
    let store: Arc<dyn MemoryStore> = Arc::new(reins_memory::InMemoryStore::new());
    let agent = agent(store, Arc::default());
    let port: Arc<dyn Sessions> = Arc::new(agent);
    assert!(Sweep::new(port.clone(), Waiting::new()).spawn().is_none());
    let waiting = Waiting::new().tool(
        "delete_file",
        WaitPolicy::new().expire_after(Duration::from_secs(60), ExpiryAction::LeaveWaiting),
    );
    let running = Sweep::new(port, waiting).spawn();
    assert!(running.is_some());
    drop(running);
}
