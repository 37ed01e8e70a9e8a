//! A program that runs its agents itself — no reins-server — gets webhook notifications
//! from a `Dispatcher` it runs, checked by the Standard Webhooks reference verifier (the PyPI
//! package `standardwebhooks`) in a receiver process (tests/webhooks/receiver.py). Two
//! dispatchers on one SQLite database (two processes of one program) deliver each
//! notice once; a webhook that could never be delivered to is refused and not stored.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use reins_agent::{Agent, Decision, RunStatus};
use reins_memory::{MemoryStore, NoticeKind, SqliteStore};
use reins_message::Msg;
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_notify::webhook::{Webhook, Webhooks};
use reins_notify::{Dispatcher, Error, NotifyOptions};
use reins_tool::{ToolPolicy, Toolkit};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The receiver process, each request it answered on a channel; killed when dropped.
struct Receiver {
    child: Child,
    url: String,
    requests: UnboundedReceiver<Value>,
    _dir: tempfile::TempDir,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Receiver {
    /// Starts the receiver; the verifier must be installed (`.ci/run` installs it).
    fn start() -> Self {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/webhooks");
        let python = dir.join(".venv/bin/python");
        assert!(
            python.exists(),
            "the webhook verifier is not installed (python3 -m venv crates/reins-notify/tests/webhooks/.venv && \
             crates/reins-notify/tests/webhooks/.venv/bin/pip install -r crates/reins-notify/tests/webhooks/requirements.txt)"
        );
        let tmp = tempfile::tempdir().unwrap();
        let mut child = Command::new(python)
            .arg(dir.join("receiver.py"))
            .args(["--secret", SECRET, "--echo", "--log"])
            .arg(tmp.path().join("received.jsonl"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = lines.next().unwrap().unwrap();
        let (tx, requests) = unbounded_channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                    return;
                }
            }
        });
        Self {
            child,
            url: format!("http://127.0.0.1:{}/hook", port.trim()),
            requests,
            _dir: tmp,
        }
    }

    /// The next request the receiver answered (the receiver's stdout closing fails).
    async fn next(&mut self) -> Value {
        self.requests.recv().await.expect("the receiver stopped")
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// The file.
    path: String,
}

fn agent(store: Arc<dyn MemoryStore>) -> Agent {
    let mut tools = Toolkit::new();
    tools
        .add(
            Toolkit::function(
                "delete_file",
                "Delete a file",
                |a: PathArgs, _ctx| async move {
                    Ok::<_, reins_tool::ToolError>(format!("deleted {}", a.path))
                },
            )
            .policy(ToolPolicy::confirm()),
        )
        .unwrap();
    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id("call_1", "delete_file", json!({"path": "a.txt"})),
        ScriptedResponse::text("a.txt is gone."),
    ]);
    Agent::builder()
        .model(model)
        .toolkit(tools)
        .store_arc(store)
        .build()
        .unwrap()
}

fn quick() -> NotifyOptions {
    NotifyOptions::default()
        .backoff(Duration::from_millis(50), Duration::from_millis(200))
        .poll_interval(Duration::from_millis(50))
}

/// The program's store with a webhook to `receiver` for waiting requirements and
/// completed runs.
async fn subscribed(store: &Arc<dyn MemoryStore>, receiver: &Receiver) -> String {
    let hook = Webhooks::new(store.clone())
        .add(
            Webhook::new(&receiver.url, SECRET)
                .event_types([NoticeKind::RequirementWaiting, NoticeKind::RunCompleted]),
        )
        .await
        .unwrap();
    assert!(hook.id.starts_with("wh_"), "{hook:?}");
    hook.id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_without_a_server_gets_its_webhooks_from_a_running_dispatcher() {
    let mut receiver = Receiver::start();
    let store: Arc<dyn MemoryStore> = Arc::new(reins_memory::InMemoryStore::new());
    let _running = Dispatcher::new(store.clone())
        .webhooks()
        .options(quick())
        .spawn()
        .unwrap();
    subscribed(&store, &receiver).await;

    let agent = agent(store.clone());
    let session = agent.session("ops/chat-1").await.unwrap();
    let out = session.send(Msg::user("delete a.txt")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let waiting = receiver.next().await;
    assert_eq!(waiting["verified"], true, "{waiting}");
    assert_eq!(waiting["status"], 200, "{waiting}");
    assert_eq!(waiting["type"], "requirement.waiting", "{waiting}");
    assert_eq!(waiting["data"]["session"], "ops/chat-1", "{waiting}");
    assert_eq!(waiting["data"]["tool"], "delete_file", "{waiting}");
    assert_eq!(waiting["data"]["requirement"], "call_1", "{waiting}");

    let out = session
        .resolve(vec![Decision::approve("call_1")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    let completed = receiver.next().await;
    assert_eq!(completed["verified"], true, "{completed}");
    assert_eq!(completed["type"], "run.completed", "{completed}");
    assert_ne!(completed["id"], waiting["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_dispatching_for_one_database_deliver_each_notice_once() {
    let mut receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reins.sqlite");
    // Two processes of one program: each its own handle on the database, each
    // dispatching; their rounds race.
    let one: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let two: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let first = Dispatcher::new(one.clone()).webhooks().options(quick());
    let second = Dispatcher::new(two.clone()).webhooks().options(quick());
    let hook = subscribed(&one, &receiver).await;

    let agent = agent(one.clone());
    let session = agent.session("ops/chat-2").await.unwrap();
    let out = session.send(Msg::user("delete a.txt")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let (a, b) = tokio::join!(first.tick(), second.tick());
    assert_eq!(a.unwrap() + b.unwrap(), 1, "one attempt between the two");
    let waiting = receiver.next().await;
    assert_eq!(waiting["type"], "requirement.waiting", "{waiting}");
    assert_eq!(waiting["verified"], true, "{waiting}");

    let out = session
        .resolve(vec![Decision::approve("call_1")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    let (a, b) = tokio::join!(second.tick(), first.tick());
    assert_eq!(a.unwrap() + b.unwrap(), 1, "one attempt between the two");
    let completed = receiver.next().await;
    assert_eq!(completed["type"], "run.completed", "{completed}");

    // Nothing is left to attempt, and both processes read the same record: two
    // deliveries, each delivered at its first attempt.
    let (a, b) = tokio::join!(first.tick(), second.tick());
    assert_eq!((a.unwrap(), b.unwrap()), (0, 0));
    for store in [&one, &two] {
        let filter =
            reins_memory::DeliveryFilter::all().destination_prefix(format!("webhook:{hook}"));
        let deliveries = store.deliveries(&filter).await.unwrap();
        assert_eq!(deliveries.len(), 2, "{deliveries:?}");
        for d in &deliveries {
            assert_eq!(d.state, reins_memory::DeliveryState::Delivered, "{d:?}");
            assert_eq!(d.attempts, 1, "{d:?}");
        }
    }
    assert!(receiver.requests.try_recv().is_err(), "a repeat was sent");
}

#[tokio::test]
async fn a_webhook_that_could_never_be_delivered_to_is_refused_and_not_stored() {
    let store: Arc<dyn MemoryStore> = Arc::new(reins_memory::InMemoryStore::new());
    let hooks = Webhooks::new(store.clone());
    for (hook, says) in [
        (
            Webhook::new("ftp://example.invalid/hook", SECRET),
            "http://",
        ),
        (
            Webhook::new("http://127.0.0.1:9/hook", "not-a-secret"),
            "whsec_",
        ),
        (
            Webhook::new("http://127.0.0.1:9/hook", "whsec_c2hvcnQ="),
            "24 to 64 bytes",
        ),
    ] {
        let refused = hooks.add(hook).await;
        assert!(
            matches!(&refused, Err(Error::InvalidWebhook(m)) if m.contains(says)),
            "{refused:?}"
        );
    }
    assert!(
        store
            .subscriptions(reins_notify::webhook::KIND)
            .await
            .unwrap()
            .is_empty()
    );
}
