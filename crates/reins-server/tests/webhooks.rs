//! Webhooks end to end, checked by the Standard Webhooks reference verifier (the PyPI
//! package `standardwebhooks`) in a receiver process (reins-notify's
//! tests/webhooks/receiver.py):
//! bad input on `/v1/webhooks`; a notice written by an instance that died before
//! delivering it, delivered after the restart, retried after a 500, once per attempt;
//! redelivery and secret rotation; two instances on one PostgreSQL database, each
//! notice delivered by exactly one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use reins_memory::{DeliveryFilter, DeliveryState, MemoryStore};
use reins_server::notify::NotifyOptions;
use serde_json::{Value, json};
use support::*;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The receiver process; killed when dropped.
struct Receiver {
    child: Child,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Receiver {
    /// Starts the receiver, or `None` when the verifier is not installed (a loud skip;
    /// under `CI=true` a failure).
    fn start(test: &str, fail_first: u32) -> Option<Self> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-notify/tests/webhooks");
        let python = dir.join(".venv/bin/python");
        if !python.exists() {
            let why = "the webhook verifier is not installed (python3 -m venv crates/reins-notify/tests/webhooks/.venv && \
                       crates/reins-notify/tests/webhooks/.venv/bin/pip install -r crates/reins-notify/tests/webhooks/requirements.txt)";
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{test}: {why}; CI must run this test");
            }
            eprintln!("SKIPPED {test}: {why}");
            return None;
        }
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("received.jsonl");
        let mut child = Command::new(python)
            .arg(dir.join("receiver.py"))
            .args(["--secret", SECRET, "--log"])
            .arg(&log)
            .args(["--fail-first", &fail_first.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut port = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut port)
            .unwrap();
        Some(Self {
            child,
            url: format!("http://127.0.0.1:{}/hook", port.trim()),
            log,
            _dir: tmp,
        })
    }

    /// Every request received so far.
    fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The accepted (200) requests by message id.
    fn successes(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for l in self.lines().iter().filter(|l| l["status"] == 200) {
            *out.entry(l["id"].as_str().unwrap().to_owned()).or_insert(0) += 1;
        }
        out
    }

    /// Waits until `n` distinct messages were accepted (at most 20 s).
    async fn wait_for(&self, n: usize) {
        for _ in 0..200 {
            if self.successes().len() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the receiver got {:?}, wanted {n} messages", self.lines());
    }
}

fn quick() -> NotifyOptions {
    NotifyOptions::default()
        .backoff(Duration::from_millis(50), Duration::from_millis(200))
        .poll_interval(Duration::from_millis(100))
}

async fn create_webhook(s: &TestServer, url: &str) -> String {
    let (st, hook) = s
        .post(
            ADMIN,
            "/v1/webhooks",
            json!({
                "url": url,
                "secret": SECRET,
                "event_types": ["requirement.waiting", "requirement.decided", "run.completed"],
                "tools": ["delete_file"],
                "session_prefix": "alice/",
            }),
        )
        .await;
    assert_eq!(st, 201, "{hook}");
    assert_eq!(hook["secret"], SECRET);
    hook["id"].as_str().unwrap().to_owned()
}

async fn pause(s: &TestServer, session: &str) -> String {
    let (st, out) = s
        .post(
            ALICE,
            &format!("/v1/sessions/{}/runs", enc(session)),
            json!({"message": "delete a.txt"}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["status"], "paused", "{out}");
    out["requirements"][0]["id"].as_str().unwrap().to_owned()
}

async fn approve(s: &TestServer, session: &str, rid: &str) {
    let (st, out) = s
        .post(
            ANA,
            &format!("/v1/sessions/{}/decisions", enc(session)),
            json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
}

#[tokio::test]
async fn bad_webhooks_are_refused_and_nothing_is_stored() {
    let s = start().await;
    let cases = [
        (ADMIN, json!({"url": "not a url"}), 422, "invalid_webhook"),
        (
            ADMIN,
            json!({"url": "ftp://example.com/x"}),
            422,
            "invalid_webhook",
        ),
        (
            ADMIN,
            json!({"url": "http://127.0.0.1:9/x", "event_types": ["requirement.eaten"]}),
            422,
            "invalid_webhook",
        ),
        (
            ADMIN,
            json!({"url": "http://127.0.0.1:9/x", "secret": "hunter2"}),
            422,
            "invalid_webhook",
        ),
        (
            ADMIN,
            json!({"url": "http://127.0.0.1:9/x", "colour": 1}),
            400,
            "bad_body",
        ),
        (
            ANA,
            json!({"url": "http://127.0.0.1:9/x"}),
            403,
            "forbidden",
        ),
        (
            ALICE,
            json!({"url": "http://127.0.0.1:9/x"}),
            403,
            "forbidden",
        ),
    ];
    for (token, body, status, code) in cases {
        let (st, err) = s.post(token, "/v1/webhooks", body.clone()).await;
        assert_eq!(st, status, "{body}: {err}");
        assert_eq!(err["error"]["code"], code, "{body}: {err}");
    }
    let unknown = s
        .post(ADMIN, "/v1/webhooks/wh_nope/rotate", json!({}))
        .await;
    assert_eq!(unknown.0, 404, "{}", unknown.1);
    let (st, list) = s.get(ADMIN, "/v1/webhooks").await;
    assert_eq!(st, 200);
    assert_eq!(list["webhooks"], json!([]));
    let (st, _) = s.get(ANA, "/v1/webhooks").await;
    assert_eq!(st, 403);
}

/// The crash test: the instance that made the change dies before delivering; the
/// next delivers every notice once per attempt, retrying the 500s.
#[tokio::test]
async fn notices_survive_a_crash_and_are_retried_once_per_attempt() {
    let Some(rx) = Receiver::start("webhooks crash", 1) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let open = || async { Arc::new(reins_memory::SqliteStore::open(&path).await.unwrap()) };

    // The first instance writes and routes notices but never delivers (batch 0), then
    // is killed after the change.
    let first_store: Arc<dyn MemoryStore> = open().await;
    let ran: Ran = Arc::default();
    let first = serve(agent(first_store, &ran), ran.clone(), None, |s| {
        s.notify_options(quick().batch(0))
    })
    .await;
    let hook = create_webhook(&first, &rx.url).await;
    let rid = pause(&first, "alice/crash").await;
    // A session outside the webhook's prefix: filtered out.
    let (st, out) = first
        .post(
            ADMIN,
            "/v1/sessions/ops%2Fother/runs",
            json!({"message": "delete b.txt"}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(first);
    assert!(rx.lines().is_empty(), "{:?}", rx.lines());

    // The restarted instance delivers it (the first attempt gets 500, the retry 200).
    let store: Arc<dyn MemoryStore> = open().await;
    let second = serve(agent(Arc::clone(&store), &ran), ran.clone(), None, |s| {
        s.notify_options(quick())
    })
    .await;
    rx.wait_for(1).await;
    approve(&second, "alice/crash", &rid).await;
    rx.wait_for(3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let lines = rx.lines();
    assert!(lines.iter().all(|l| l["verified"] == true), "{lines:?}");
    let types: BTreeSet<&str> = lines.iter().filter_map(|l| l["type"].as_str()).collect();
    assert_eq!(
        types,
        BTreeSet::from([
            "requirement.waiting",
            "requirement.decided",
            "run.completed"
        ])
    );
    let ok = rx.successes();
    assert!(
        ok.values().all(|n| *n == 1),
        "a notice was accepted twice: {ok:?}"
    );
    let failed = lines.iter().filter(|l| l["status"] == 500).count();
    assert_eq!(failed, ok.len(), "one 500 per notice, then one success");

    // The store's delivery log agrees: two attempts each, retry then delivered.
    let deliveries = store
        .deliveries(&DeliveryFilter::all().destination_prefix(format!("webhook:{hook}")))
        .await
        .unwrap();
    assert_eq!(deliveries.len(), 3);
    for d in &deliveries {
        assert_eq!(
            (d.state, d.attempts),
            (DeliveryState::Delivered, 2),
            "{d:?}"
        );
        let log = store.delivery_attempts(&d.id).await.unwrap();
        let outcomes: Vec<&str> = log.iter().map(|a| a.outcome.as_str()).collect();
        assert_eq!(outcomes, ["retry", "delivered"]);
    }
    let (st, api) = second
        .get(ADMIN, &format!("/v1/webhooks/{hook}/deliveries"))
        .await;
    assert_eq!(st, 200);
    assert_eq!(api["deliveries"].as_array().unwrap().len(), 3);
    assert_eq!(
        api["deliveries"][0]["attempt_log"][1]["outcome"],
        "delivered"
    );
    let written = deliveries.len();
    let lost = deliveries
        .iter()
        .filter(|d| !ok.contains_key(&d.notice.id))
        .count();
    let duplicated: usize = ok.values().map(|n| n - 1).sum();
    println!(
        "webhook crash figures: notices written {written}, delivered {}, retried {failed}, duplicated {duplicated}, lost {lost}",
        ok.len()
    );
    assert_eq!(lost, 0);

    // Rotation: both secrets sign until the old one expires; a receiver that knows only
    // the old one still verifies. A redelivery sends the notice again, same id.
    let (st, rotated) = second
        .post(
            ADMIN,
            &format!("/v1/webhooks/{hook}/rotate"),
            json!({"grace_seconds": 600}),
        )
        .await;
    assert_eq!(st, 200, "{rotated}");
    assert_eq!(rotated["live_secrets"], 2);
    assert_ne!(rotated["secret"], SECRET);
    let notice = &deliveries[0].notice.id;
    let (st, again) = second
        .post(
            ADMIN,
            &format!("/v1/webhooks/{hook}/deliveries/{notice}/redeliver"),
            json!({}),
        )
        .await;
    assert_eq!(st, 200, "{again}");
    assert_eq!(again["state"], "pending");
    for _ in 0..100 {
        if rx.successes().get(notice) == Some(&2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let last = rx.lines().into_iter().last().unwrap();
    assert_eq!(
        (last["verified"].clone(), last["signatures"].clone()),
        (json!(true), json!(2))
    );
    assert_eq!(rx.successes()[notice], 2);
    assert_eq!(ran.lock().unwrap().clone(), ["delete:a.txt"]);
}

/// Two instances on one PostgreSQL database: each notice is delivered by exactly one.
#[tokio::test]
async fn two_instances_deliver_each_notice_once() {
    let Ok(url) = std::env::var("REINS_TEST_POSTGRES_URL") else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("REINS_TEST_POSTGRES_URL is not set under CI (run `cargo xtask test`)");
        }
        eprintln!(
            "SKIPPED two_instances_deliver_each_notice_once: REINS_TEST_POSTGRES_URL is not set"
        );
        return;
    };
    let Some(rx) = Receiver::start("webhooks two instances", 0) else {
        return;
    };
    let options = reins_memory::PostgresOptions::default()
        .schema(format!("webhooks_{}", uuid::Uuid::new_v4().simple()));
    let connect = || async {
        Arc::new(
            reins_memory::PostgresStore::connect_with(&url, options.clone())
                .await
                .unwrap(),
        )
    };
    let (sa, sb): (Arc<dyn MemoryStore>, Arc<dyn MemoryStore>) = (connect().await, connect().await);
    let ran: Ran = Arc::default();
    let a = serve(agent(Arc::clone(&sa), &ran), ran.clone(), None, |s| {
        s.notify_options(quick())
    })
    .await;
    let b = serve(agent(sb, &ran), ran.clone(), None, |s| {
        s.notify_options(quick())
    })
    .await;
    create_webhook(&a, &rx.url).await;
    let sessions: Vec<String> = (0..6).map(|i| format!("alice/pg-{i}")).collect();
    for (i, sid) in sessions.iter().enumerate() {
        let (on, other) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let rid = pause(on, sid).await;
        approve(other, sid, &rid).await;
    }
    let expected = sessions.len() * 3;
    rx.wait_for(expected).await;
    // Time for a second delivery to show, if there were one.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let ok = rx.successes();
    assert_eq!(ok.len(), expected, "{ok:?}");
    assert!(
        ok.values().all(|n| *n == 1),
        "a notice was delivered twice: {ok:?}"
    );
    let owners: BTreeSet<String> = {
        let mut set = BTreeSet::new();
        for d in sa.deliveries(&DeliveryFilter::all()).await.unwrap() {
            for at in sa.delivery_attempts(&d.id).await.unwrap() {
                set.insert(at.owner);
            }
        }
        set
    };
    println!(
        "webhook two-instance figures: notices {expected}, delivered {}, duplicated {}, instances that delivered {}",
        ok.len(),
        ok.values().map(|n| n - 1).sum::<usize>(),
        owners.len()
    );
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct LookupArgs {
    /// What to look up.
    #[allow(dead_code)]
    what: String,
}

/// Every applied decision is heard: an approval, a rejection, input values and an
/// external result each write a `requirement.decided` notice in the commit that applies
/// them, naming the decision's kind; the receiver verifies each one.
#[tokio::test]
async fn every_kind_of_decision_writes_its_decided_notice() {
    let Some(rx) = Receiver::start("webhooks every decision", 0) else {
        return;
    };
    let (dir, store) = sqlite_store().await;
    let ran: Ran = Arc::default();
    // The shared test agent, and `lookup`, a tool the caller runs itself.
    let mut tools = toolkit(&ran);
    tools
        .add(
            reins_tool::Toolkit::function(
                "lookup",
                "Look something up (run by the caller)",
                |_: LookupArgs, _ctx| async { Ok::<_, reins_tool::ToolError>(String::new()) },
            )
            .policy(reins_tool::ToolPolicy::external()),
        )
        .unwrap();
    let model = reins_model::ScriptedModel::from_fn(|req| {
        let last = req.messages.last().map(reins_message::Msg::text);
        match last.as_deref().and_then(|t| t.strip_prefix("lookup ")) {
            Some(what) => reins_model::ScriptedResponse::tool_call_with_id(
                format!("call_lookup_{what}"),
                "lookup",
                json!({"what": what}),
            ),
            None => respond(req),
        }
    });
    let agent = reins_agent::Agent::builder()
        .name("TestAgent")
        .model(model)
        .toolkit(tools)
        .store_arc(store)
        .build()
        .unwrap();
    let s = serve(agent, ran.clone(), Some(dir), |s| s.notify_options(quick())).await;
    let (st, hook) = s
        .post(
            ADMIN,
            "/v1/webhooks",
            json!({"url": rx.url, "secret": SECRET, "event_types": ["requirement.decided"]}),
        )
        .await;
    assert_eq!(st, 201, "{hook}");

    let cases = [
        (
            "alice/approved",
            "delete a.txt",
            json!({"action": "approve"}),
        ),
        (
            "alice/rejected",
            "delete b.txt",
            json!({"action": "reject", "note": "keep it"}),
        ),
        (
            "alice/input",
            "book dentist",
            json!({"action": "input", "values": {"date": "2026-12-01"}}),
        ),
        (
            "alice/external",
            "lookup tides",
            json!({"action": "external_result", "output": "high at noon"}),
        ),
    ];
    for (session, message, decision) in &cases {
        let (st, out) = s
            .post(
                ALICE,
                &format!("/v1/sessions/{}/runs", enc(session)),
                json!({"message": message}),
            )
            .await;
        assert_eq!((st, out["status"].as_str()), (200, Some("paused")), "{out}");
        let rid = out["requirements"][0]["id"].as_str().unwrap();
        let mut decision = decision.clone();
        decision["requirement_id"] = json!(rid);
        let (st, out) = s
            .post(
                ANA,
                &format!("/v1/sessions/{}/decisions", enc(session)),
                json!({"decisions": [decision]}),
            )
            .await;
        assert_eq!(
            (st, out["status"].as_str()),
            (200, Some("completed")),
            "{out}"
        );
    }
    rx.wait_for(cases.len()).await;

    let lines = rx.lines();
    assert!(lines.iter().all(|l| l["verified"] == true), "{lines:?}");
    let heard: BTreeMap<String, (String, String)> = lines
        .iter()
        .map(|l| {
            let data = &l["data"];
            assert_eq!(l["type"], "requirement.decided", "{l}");
            (
                data["session"].as_str().unwrap().to_owned(),
                (
                    data["payload"]["decision"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                    data["principals"][0].as_str().unwrap_or("").to_owned(),
                ),
            )
        })
        .collect();
    let want: BTreeMap<String, (String, String)> = [
        ("alice/approved", "approve"),
        ("alice/rejected", "reject"),
        ("alice/input", "input"),
        ("alice/external", "external_result"),
    ]
    .into_iter()
    .map(|(s, d)| (s.to_owned(), (d.to_owned(), "ana".to_owned())))
    .collect();
    assert_eq!(heard, want, "{lines:?}");
    let rejected = lines
        .iter()
        .find(|l| l["data"]["session"] == "alice/rejected")
        .unwrap();
    assert_eq!(rejected["data"]["payload"]["note"], "keep it", "{rejected}");
    assert_eq!(
        ran.lock().unwrap().clone(),
        ["delete:a.txt", "book:dentist@2026-12-01"]
    );
}
