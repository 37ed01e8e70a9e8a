//! The notification dispatcher with channels registered on the server: every notice a
//! paused and approved run writes reaches a channel that wants it, and a grant's too;
//! a retryable failure is retried with backoff until the attempts run out (dead, every
//! attempt logged); a permanent one is dead at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use reins_memory::{DeliveryFilter, DeliveryState, MemoryStore, Notice, NoticeKind};
use reins_server::notify::{Attempt, Channel, DeliveryError, NotifyOptions};
use serde_json::json;
use support::*;

/// Records what it is given and answers as told.
#[derive(Clone)]
struct Probe {
    name: &'static str,
    answer: Result<(), DeliveryError>,
    seen: Arc<Mutex<Vec<(NoticeKind, u32)>>>,
}

impl Probe {
    fn new(name: &'static str, answer: Result<(), DeliveryError>) -> Self {
        Self {
            name,
            answer,
            seen: Arc::default(),
        }
    }
    fn seen(&self) -> Vec<(NoticeKind, u32)> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait]
impl Channel for Probe {
    fn name(&self) -> &str {
        self.name
    }
    fn wants(&self, notice: &Notice) -> bool {
        notice.kind != NoticeKind::RunCompleted || self.name == "probe"
    }
    async fn deliver(&self, notice: &Notice, attempt: &Attempt) -> Result<(), DeliveryError> {
        self.seen
            .lock()
            .unwrap()
            .push((notice.kind, attempt.number));
        self.answer.clone()
    }
}

fn quick() -> NotifyOptions {
    NotifyOptions::default()
        .max_attempts(3)
        .backoff(Duration::from_millis(20), Duration::from_millis(50))
        .poll_interval(Duration::from_millis(50))
}

async fn settle(
    store: &Arc<dyn MemoryStore>,
    destination: &str,
    n: usize,
) -> Vec<reins_memory::Delivery> {
    for _ in 0..200 {
        let ds = store
            .deliveries(&DeliveryFilter::all().destination_prefix(destination))
            .await
            .unwrap();
        if ds.len() >= n && ds.iter().all(|d| d.state != DeliveryState::Pending) {
            return ds;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the deliveries to {destination} never settled");
}

#[tokio::test]
async fn channels_get_their_notices_and_failures_are_retried_then_dead() {
    let ok = Probe::new("probe", Ok(()));
    let flaky = Probe::new("flaky", Err(DeliveryError::Retryable("try later".into())));
    let broken = Probe::new(
        "broken",
        Err(DeliveryError::Permanent("no such address".into())),
    );
    let s = start_with(|s| {
        s.channel(ok.clone())
            .channel(flaky.clone())
            .channel(broken.clone())
            .notify_options(quick())
    })
    .await;
    let store = s.agent.store().clone();

    let (st, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fn-1/runs",
            json!({"message": "delete a.txt"}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let (st, out) = s
        .post(
            ANA,
            "/v1/sessions/alice%2Fn-1/decisions",
            json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    let (st, out) = s
        .post(
            ANA,
            "/v1/grants",
            json!({"tool": "delete_file", "principal": "alice"}),
        )
        .await;
    assert_eq!(st, 201, "{out}");

    let delivered = settle(&store, "probe", 4).await;
    assert!(
        delivered
            .iter()
            .all(|d| d.state == DeliveryState::Delivered)
    );
    let mut kinds: Vec<NoticeKind> = ok.seen().iter().map(|(k, _)| *k).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            NoticeKind::RequirementWaiting,
            NoticeKind::RequirementDecided,
            NoticeKind::RunCompleted,
            NoticeKind::GrantCreated
        ]
    );
    let waiting = delivered
        .iter()
        .find(|d| d.notice.kind == NoticeKind::RequirementWaiting)
        .unwrap();
    assert_eq!(waiting.notice.requirement.as_deref(), Some(rid.as_str()));
    assert_eq!(waiting.notice.tool.as_deref(), Some("delete_file"));
    assert_eq!(
        waiting.notice.payload["tool_use"]["input"],
        json!({"path": "a.txt"})
    );
    let decided = delivered
        .iter()
        .find(|d| d.notice.kind == NoticeKind::RequirementDecided)
        .unwrap();
    assert_eq!(decided.notice.principals, ["ana"]);

    // Retryable: three attempts, then dead, each logged.
    let dead = settle(&store, "flaky", 3).await;
    for d in &dead {
        assert_eq!((d.state, d.attempts), (DeliveryState::Dead, 3), "{d:?}");
        let log = store.delivery_attempts(&d.id).await.unwrap();
        let outcomes: Vec<&str> = log.iter().map(|a| a.outcome.as_str()).collect();
        assert_eq!(outcomes, ["retry", "retry", "dead"]);
        assert!(
            log[2]
                .error
                .as_deref()
                .unwrap()
                .contains("gave up after 3 attempts")
        );
    }
    // Permanent: dead after one attempt.
    let dead = settle(&store, "broken", 3).await;
    assert!(
        dead.iter()
            .all(|d| d.state == DeliveryState::Dead && d.attempts == 1)
    );
    assert_eq!(broken.seen().len(), 3);
    assert_eq!(flaky.seen().len(), 9);
    assert!(flaky.seen().iter().all(|(_, n)| (1..=3).contains(n)));
}

/// A run that fails (here the model answers with an error) commits nothing a notice
/// could ride with: a `run.failed` notice is written alone and reaches the channel; a
/// refused input (a message to a session whose run is busy) writes none.
#[tokio::test]
async fn a_failed_run_writes_a_run_failed_notice() {
    let probe = Probe::new("probe", Ok(()));
    let (dir, store) = sqlite_store().await;
    let ran: Ran = Arc::default();
    let model = reins_model::ScriptedModel::from_fn(|req| {
        if req.messages.iter().any(|m| m.text() == "boom") {
            reins_model::ScriptedResponse::error(reins_model::ModelError::BadRequest {
                status: 400,
                message: "the model is down".into(),
            })
        } else {
            respond(req)
        }
    });
    let agent = reins_agent::Agent::builder()
        .name("TestAgent")
        .model(model)
        .toolkit(toolkit(&ran))
        .store_arc(store.clone())
        .build()
        .unwrap();
    let s = serve(agent, ran, Some(dir), |s| {
        s.channel(probe.clone()).notify_options(quick())
    })
    .await;
    let (st, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fn-2/runs",
            json!({"message": "hi"}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    let (st, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fn-2/runs",
            json!({"message": "boom"}),
        )
        .await;
    assert!(st >= 500, "{st} {out}");
    let delivered = settle(&store, "probe", 2).await;
    assert_eq!(delivered.len(), 2, "{delivered:?}");
    let failed = delivered
        .iter()
        .find(|d| d.notice.kind == NoticeKind::RunFailed)
        .expect("a run.failed notice");
    assert_eq!(failed.notice.session.as_deref(), Some("alice/n-2"));
    assert!(
        failed.notice.payload["error"]
            .as_str()
            .unwrap()
            .contains("the model is down"),
        "{:?}",
        failed.notice.payload
    );
}
