//! A Restate service in its own process tells people a call waits, without reins-server:
//! a run that pauses on a real restate-server produces `requirement.waiting`, then —
//! once approved through the ingress — `run.completed`, each verified by the Standard
//! Webhooks reference library (`standardwebhooks`, in reins-notify's
//! tests/webhooks/receiver.py), delivered by a `reins_notify::Dispatcher` either beside
//! the service (this test's process, on the service's database) or in the service's
//! own process (the demo service's `--notify`). The webhook subscriber is stored from
//! this test's process. Without restate-server or the verifier's venv the test
//! fails under `CI=true` and says SKIPPED elsewhere.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use reins_agent::Decision;
use reins_agent::run::Phase;
use reins_memory::{MemoryStore, NoticeKind, SqliteStore};
use reins_message::Msg;
use reins_notify::webhook::{Webhook, Webhooks};
use reins_notify::{Dispatcher, NotifyOptions};
use reins_restate::{Delivery, TurnRequest};
use serde_json::Value;
use support::Harness;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SETTLE: Duration = Duration::from_secs(30);

/// reins-notify's webhook receiver (a Python process checking each delivery with
/// `standardwebhooks`), each request it answered on a channel; killed when dropped.
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
    /// Starts the receiver; `None` (SKIPPED) without its venv, outside CI.
    fn start() -> Option<Self> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-notify/tests/webhooks");
        let python = dir.join(".venv/bin/python");
        if !python.exists() {
            let install = "python3 -m venv crates/reins-notify/tests/webhooks/.venv && \
                 crates/reins-notify/tests/webhooks/.venv/bin/pip install -r crates/reins-notify/tests/webhooks/requirements.txt";
            assert!(
                std::env::var_os("CI").is_none(),
                "the webhook verifier is not installed: {install}"
            );
            eprintln!("SKIPPED: the webhook verifier is not installed ({install})");
            return None;
        }
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
        Some(Self {
            child,
            url: format!("http://127.0.0.1:{}/hook", port.trim()),
            requests,
            _dir: tmp,
        })
    }

    /// The next request the receiver answered (its stdout closing fails).
    async fn next(&mut self) -> Value {
        self.requests.recv().await.expect("the receiver stopped")
    }
}

/// The store of the harness's service, opened from this process, with a webhook to
/// `receiver` for waiting requirements and completed runs (subscribers are stored:
/// every process dispatching for the store sees them).
async fn subscribed(h: &Harness, receiver: &Receiver) -> Arc<dyn MemoryStore> {
    let store: Arc<dyn MemoryStore> = Arc::new(
        SqliteStore::open(h.dir.path().join("reins.sqlite"))
            .await
            .unwrap(),
    );
    Webhooks::new(store.clone())
        .add(
            Webhook::new(&receiver.url, SECRET)
                .event_types([NoticeKind::RequirementWaiting, NoticeKind::RunCompleted]),
        )
        .await
        .unwrap();
    store
}

/// A run of `session` pauses on Restate and the receiver is told, verified; approved
/// through the ingress, it runs the tool once and the receiver is told it completed.
async fn paused_notified_approved_notified(h: &Harness, receiver: &mut Receiver, session: &str) {
    let started = h
        .client
        .submit(
            session,
            &TurnRequest::message(Msg::user("delete a.txt")),
            Some(&format!("{session}-start")),
        )
        .await
        .unwrap();
    assert_eq!(started.delivery, Delivery::Started);
    let view = h
        .client
        .wait_settled(session, started.version, SETTLE)
        .await
        .unwrap();
    assert!(view.paused, "{view:?}\n{}", h.service_log());
    let req = view.requirements[0].clone();

    let waiting = receiver.next().await;
    assert_eq!(waiting["verified"], true, "{waiting}");
    assert_eq!(waiting["status"], 200, "{waiting}");
    assert_eq!(waiting["type"], "requirement.waiting", "{waiting}");
    assert_eq!(waiting["data"]["session"], session, "{waiting}");
    assert_eq!(waiting["data"]["tool"], "delete_file", "{waiting}");
    assert_eq!(waiting["data"]["requirement"], req.id.as_str(), "{waiting}");

    let decided = h
        .client
        .decide(
            session,
            vec![Decision::approve(&req.id).by("ana")],
            Some(view.token),
            Some(&format!("{session}-approve")),
        )
        .await
        .unwrap();
    let end = h
        .client
        .wait_settled(session, decided.version, SETTLE)
        .await
        .unwrap();
    assert!(matches!(end.phase, Phase::Finished(_)), "{end:?}");
    assert_eq!(h.count("delete_file start"), 1);
    let completed = receiver.next().await;
    assert_eq!(completed["verified"], true, "{completed}");
    assert_eq!(completed["type"], "run.completed", "{completed}");
    assert_eq!(completed["data"]["session"], session, "{completed}");
    assert_ne!(completed["id"], waiting["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_paused_on_restate_is_notified_by_a_dispatcher_beside_the_service() {
    let Some(mut receiver) = Receiver::start() else {
        return;
    };
    let Some(h) = Harness::start(&[]).await else {
        return;
    };
    // This process dispatches for the service's database; the session object turns the
    // service's outbox on, so its turns write the notices this dispatcher delivers.
    let store = subscribed(&h, &receiver).await;
    let _dispatching = Dispatcher::new(store)
        .webhooks()
        .options(NotifyOptions::default().poll_interval(Duration::from_millis(100)))
        .spawn()
        .unwrap();
    paused_notified_approved_notified(&h, &mut receiver, "beside-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_paused_on_restate_is_notified_by_the_services_own_dispatcher() {
    let Some(mut receiver) = Receiver::start() else {
        return;
    };
    // `--notify`: the service process runs the dispatcher itself; nothing else does.
    let Some(h) = Harness::start(&["--notify"]).await else {
        return;
    };
    subscribed(&h, &receiver).await;
    paused_notified_approved_notified(&h, &mut receiver, "own-1").await;
}
