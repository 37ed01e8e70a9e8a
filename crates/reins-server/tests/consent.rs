//! Consent through the server (issue #24): a late second approver always gets `409
//! already_decided` naming the decision that took effect (a 50-round race of two
//! deciders on two server instances sharing one store, on SQLite and PostgreSQL); a
//! nested call answered on the child session is no longer decidable at the parent
//! (and leaves the inbox); a new message at the parent closes the child's pending call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use reins_agent::Agent;
use reins_memory::MemoryStore;
use reins_message::Role;
use reins_model::{ChatRequest, ScriptedModel, ScriptedResponse};
use serde_json::{Value, json};
use support::*;

/// Rounds of the late-approver race (`REINS_LONG=1`: 500).
fn rounds() -> usize {
    if std::env::var("REINS_LONG").is_ok_and(|v| v == "1") {
        500
    } else {
        50
    }
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// One store, opened twice (two pools, as two instances would): SQLite, and
/// PostgreSQL when `REINS_TEST_POSTGRES_URL` is set (required under `CI`).
async fn store_pairs() -> Vec<(
    &'static str,
    Arc<dyn MemoryStore>,
    Arc<dyn MemoryStore>,
    Option<tempfile::TempDir>,
)> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let a: Arc<dyn MemoryStore> = Arc::new(reins_memory::SqliteStore::open(&path).await.unwrap());
    let b: Arc<dyn MemoryStore> = Arc::new(reins_memory::SqliteStore::open(&path).await.unwrap());
    let mut out = vec![("sqlite", a, b, Some(dir))];
    match std::env::var("REINS_TEST_POSTGRES_URL") {
        Ok(url) => {
            let a: Arc<dyn MemoryStore> =
                Arc::new(reins_memory::PostgresStore::connect(&url).await.unwrap());
            let b: Arc<dyn MemoryStore> =
                Arc::new(reins_memory::PostgresStore::connect(&url).await.unwrap());
            out.push(("postgres", a, b, None));
        }
        Err(_) => {
            let msg = "REINS_TEST_POSTGRES_URL is not set (run `cargo xtask test`)";
            assert!(!in_ci(), "{msg}; CI requires it");
            eprintln!("\n!!! SKIPPED the PostgreSQL half of this test: {msg}\n");
        }
    }
    out
}

fn tag() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_second_approver_always_gets_already_decided() {
    for (label, sa, sb, _keep) in store_pairs().await {
        let (ran_a, ran_b): (Ran, Ran) = (Arc::default(), Arc::default());
        let a = serve(agent(sa, &ran_a), ran_a.clone(), None, |s| s).await;
        let b = serve(agent(sb, &ran_b), ran_b.clone(), None, |s| s).await;
        let t = tag();
        let mut wins = [0usize; 2];
        for round in 0..rounds() {
            let id = format!("alice/late-{t}-{round}");
            let (st, out) = a
                .post(
                    ALICE,
                    &format!("/v1/sessions/{}/runs", enc(&id)),
                    json!({"message": format!("delete f{round}.txt")}),
                )
                .await;
            assert_eq!(st, 200, "{label} {out}");
            let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
            // Half the rounds decide on the view token they read, half without one.
            let token = if round % 2 == 0 {
                let (_, view) = b.get(ANA, &format!("/v1/sessions/{}", enc(&id))).await;
                Some(view["view_token"].clone())
            } else {
                None
            };
            let body = |token: &Option<Value>| {
                let mut b = json!({"decisions": [{"requirement_id": rid, "action": "approve"}]});
                if let Some(t) = token {
                    b["view_token"] = t.clone();
                }
                b
            };
            let path = format!("/v1/sessions/{}/decisions", enc(&id));
            let (ra, rb) = tokio::join!(
                a.post(ANA, &path, body(&token)),
                b.post(ADMIN, &path, body(&token))
            );
            let results = [("ana", ra), ("ops", rb)];
            let won: Vec<usize> = (0..2).filter(|i| results[*i].1.0 == 200).collect();
            assert_eq!(won.len(), 1, "{label} round {round}: {results:?}");
            let (winner, loser) = (won[0], 1 - won[0]);
            wins[winner] += 1;
            let (st, err) = &results[loser].1;
            assert_eq!(*st, 409, "{label} round {round}: {err}");
            assert_eq!(
                err["error"]["code"], "already_decided",
                "{label} round {round}: {err}"
            );
            assert_eq!(
                err["error"]["decided"]["by"], results[winner].0,
                "{label} round {round}: {err}"
            );
            assert_eq!(err["error"]["decided"]["decision"], "approve");
            assert!(err["error"]["decided"]["at"].is_string(), "{err}");
            // And once more, late by any measure: the same answer.
            let (st, err) = b.post(ANA, &path, body(&None)).await;
            assert_eq!(
                (st, err["error"]["code"].as_str()),
                (409, Some("already_decided")),
                "{err}"
            );
        }
        let mut ran: Vec<String> = ran_a.lock().unwrap().clone();
        ran.extend(ran_b.lock().unwrap().iter().cloned());
        assert_eq!(
            ran.len(),
            rounds(),
            "{label}: every approved call ran exactly once"
        );
        eprintln!("{label}: {} rounds, wins ana/ops = {wins:?}", rounds());
    }
}

// ----- sub-agents through the server ----------------------------------------------

fn call_id() -> String {
    format!("call_{}", reins_message::new_id().replace('-', ""))
}

/// The lead: `research X` calls the `research` sub-agent with task X; a tool result
/// gets a one-line summary; anything else is echoed.
fn lead_respond(req: &ChatRequest) -> ScriptedResponse {
    let Some(last) = req.messages.iter().rev().find(|m| m.role != Role::System) else {
        return ScriptedResponse::text("hello");
    };
    if last.role == Role::Tool {
        return ScriptedResponse::text(format!(
            "lead: {}",
            last.tool_results_iter()
                .map(|r| r.text())
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    let text = last.text();
    match text.strip_prefix("research ") {
        Some(task) => {
            ScriptedResponse::tool_call_with_id(call_id(), "research", json!({"task": task}))
        }
        None => ScriptedResponse::text(format!("echo: {text}")),
    }
}

fn team(store: Arc<dyn MemoryStore>, ran: &Ran) -> Agent {
    let research = Agent::builder()
        .name("research")
        .model(ScriptedModel::from_fn(respond))
        .toolkit(toolkit(ran))
        .store_arc(store.clone())
        .build()
        .unwrap();
    Agent::builder()
        .name("lead")
        .model(ScriptedModel::from_fn(lead_respond))
        .store_arc(store)
        .subagent(research.as_tool("research", "Does what it is told, with tools"))
        .session_lease(Duration::from_secs(3))
        .build()
        .unwrap()
}

async fn team_server() -> TestServer {
    let (dir, store) = sqlite_store().await;
    let ran: Ran = Arc::default();
    let agent = team(store, &ran);
    serve(agent, ran, Some(dir), |s| s).await
}

/// The parent pauses on its sub-agent's `send_email`: (parent requirement id, child
/// session id, child requirement id).
async fn paused_team(s: &TestServer, id: &str) -> (String, String, String) {
    let (st, out) = s
        .post(
            ALICE,
            &format!("/v1/sessions/{}/runs", enc(id)),
            json!({"message": "research mail ops"}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["status"], "paused", "{out}");
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let path: Vec<String> = out["requirements"][0]["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect();
    (rid, format!("{id}/{}", path[0]), path[1].clone())
}

async fn inbox_ids(s: &TestServer) -> Vec<(String, String)> {
    let (st, inbox) = s.get(ANA, "/v1/requirements").await;
    assert_eq!(st, 200, "{inbox}");
    inbox["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["session_id"].as_str().unwrap().to_owned(),
                i["requirement_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_answered_on_the_child_is_no_longer_decidable_at_the_parent() {
    let s = team_server().await;
    let id = "alice/nest-1";
    let (rid, child, cid) = paused_team(&s, id).await;
    // The inbox lists the call twice: at the parent (nested) and on the child.
    let listed = inbox_ids(&s).await;
    assert!(listed.contains(&(id.to_owned(), rid.clone())), "{listed:?}");
    assert!(listed.contains(&(child.clone(), cid.clone())), "{listed:?}");
    let (_, parent_view) = s.get(ANA, &format!("/v1/sessions/{}", enc(id))).await;
    let old_token = parent_view["view_token"].clone();
    // The sessions list shows the parent waiting on the child's call.
    let row = |page: &Value, id: &str| {
        page["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} is not listed: {page}"))
    };
    let (_, page) = s.get(ANA, "/v1/sessions?status=paused").await;
    let parent = row(&page, id);
    assert_eq!(parent["pending_tools"], json!(["send_email"]), "{parent}");
    assert_eq!(parent["pending_count"], 1, "{parent}");
    assert_eq!(row(&page, &child)["pending_tools"], json!(["send_email"]));

    // Ana approves it on the child session: the email goes out.
    let (st, out) = s
        .post(
            ANA,
            &format!("/v1/sessions/{}/decisions", enc(&child)),
            json!({"decisions": [{"requirement_id": cid, "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(s.ran(), ["mail:ops"]);

    // The parent follows: nothing pending there, and not in the inbox.
    let (_, view) = s.get(ANA, &format!("/v1/sessions/{}", enc(id))).await;
    assert!(
        view["requirements"].as_array().unwrap().is_empty(),
        "{view}"
    );
    assert!(inbox_ids(&s).await.is_empty());
    // And so does the sessions list: the parent waits on nothing any more.
    let (_, page) = s.get(ANA, "/v1/sessions?tool=send_email").await;
    assert!(page["sessions"].as_array().unwrap().is_empty(), "{page}");
    let (_, page) = s.get(ANA, "/v1/sessions").await;
    assert_eq!(row(&page, id)["pending_count"], 0, "{page}");

    // Rejecting it at the parent, with or without the old view: 409 already_decided,
    // naming Ana's approval; nothing recorded as applied at the parent.
    for token in [None, Some(old_token)] {
        let mut body = json!({"decisions": [{"requirement_id": rid, "action": "reject", "note": "do NOT send"}]});
        if let Some(t) = token {
            body["view_token"] = t;
        }
        let (st, err) = s
            .post(ADMIN, &format!("/v1/sessions/{}/decisions", enc(id)), body)
            .await;
        assert_eq!(st, 409, "{err}");
        assert_eq!(err["error"]["code"], "already_decided", "{err}");
        assert_eq!(err["error"]["decided"]["by"], "ana", "{err}");
    }
    let (_, trail) = s
        .get(ANA, &format!("/v1/sessions/{}/decisions", enc(id)))
        .await;
    assert!(
        !trail["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["verdict"] == "applied"),
        "{trail}"
    );
    assert_eq!(s.ran(), ["mail:ops"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_message_at_the_parent_closes_the_childs_pending_call() {
    let s = team_server().await;
    let id = "alice/nest-2";
    let (_, child, cid) = paused_team(&s, id).await;
    assert_eq!(inbox_ids(&s).await.len(), 2);

    let (st, out) = s
        .post(
            ALICE,
            &format!("/v1/sessions/{}/runs", enc(id)),
            json!({"message": "never mind"}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["status"], "completed", "{out}");

    // Gone from the inbox; the child is no longer paused.
    assert!(inbox_ids(&s).await.is_empty());
    let (_, view) = s.get(ANA, &format!("/v1/sessions/{}", enc(&child))).await;
    assert_eq!(view["status"], "idle", "{view}");
    assert!(
        view["requirements"].as_array().unwrap().is_empty(),
        "{view}"
    );
    // The child's trail records the rejection, by the parent's caller.
    let (_, trail) = s
        .get(ANA, &format!("/v1/sessions/{}/decisions", enc(&child)))
        .await;
    assert!(
        trail["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["requirement_id"] == cid.as_str()
                && d["decision"] == "reject"
                && d["via"] == "parent"
                && d["verdict"] == "applied"
                && d["actor"]["principal"] == "alice"),
        "{trail}"
    );
    // Approving it on the child now: 409 already_decided, nothing runs.
    let (st, err) = s
        .post(
            ANA,
            &format!("/v1/sessions/{}/decisions", enc(&child)),
            json!({"decisions": [{"requirement_id": cid, "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 409, "{err}");
    assert_eq!(err["error"]["code"], "already_decided", "{err}");
    assert_eq!(err["error"]["decided"]["via"], "parent", "{err}");
    assert!(s.ran().is_empty());
}

// ----- approvals bound to what was shown ------------------------------------------

#[tokio::test]
async fn an_approval_is_bound_to_the_arguments_shown_single_use_and_needs_a_caller() {
    let s = start().await;
    let id = "alice/bound-1";
    let (st, out) = s
        .post(
            ALICE,
            &format!("/v1/sessions/{}/runs", enc(id)),
            json!({"message": "delete a.txt"}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    // The session view and the inbox show the arguments' fingerprint.
    let (_, view) = s.get(ANA, &format!("/v1/sessions/{}", enc(id))).await;
    let fp = view["requirements"][0]["fingerprint"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(fp, reins_memory::fingerprint(&json!({"path": "a.txt"})));
    let (_, inbox) = s.get(ANA, "/v1/requirements").await;
    assert_eq!(inbox["items"][0]["fingerprint"], fp.as_str(), "{inbox}");
    let path = format!("/v1/sessions/{}/decisions", enc(id));
    let version = view["version"].clone();

    // No caller: 401, nothing changes.
    let res = s
        .client
        .post(s.url(&path))
        .json(&json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 401);

    // Shown other arguments: 409 fingerprint_mismatch, nothing changes.
    let other = reins_memory::fingerprint(&json!({"path": "important.txt"}));
    let (st, err) = s
        .post(ANA, &path, json!({"decisions": [{"requirement_id": rid, "action": "approve", "shown_fingerprint": other}]}))
        .await;
    assert_eq!(st, 409, "{err}");
    assert_eq!(err["error"]["code"], "fingerprint_mismatch", "{err}");
    // A fingerprint on a rejection does not apply.
    let (st, err) = s
        .post(ANA, &path, json!({"decisions": [{"requirement_id": rid, "action": "reject", "shown_fingerprint": fp}]}))
        .await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (422, Some("invalid_decision")),
        "{err}"
    );
    let (_, view) = s.get(ANA, &format!("/v1/sessions/{}", enc(id))).await;
    assert_eq!(view["version"], version, "{view}");
    assert_eq!(view["status"], "paused");
    assert!(s.ran().is_empty());

    // Bound to what was shown, with an edit: runs once; the trail records who, and
    // both fingerprints.
    let body = json!({"decisions": [{"requirement_id": rid, "action": "approve",
        "edited_args": {"path": "b.txt"}, "shown_fingerprint": fp}]});
    let (st, out) = s.post(ANA, &path, body.clone()).await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(s.ran(), ["delete:b.txt"]);
    let (_, trail) = s
        .get(ANA, &format!("/v1/sessions/{}/decisions", enc(id)))
        .await;
    let applied: Vec<&Value> = trail["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["verdict"] == "applied")
        .collect();
    assert_eq!(applied.len(), 1, "{trail}");
    assert_eq!(applied[0]["actor"]["principal"], "ana");
    assert_eq!(applied[0]["shown_fingerprint"], fp.as_str());
    assert_eq!(
        applied[0]["executed_fingerprint"],
        reins_memory::fingerprint(&json!({"path": "b.txt"})).as_str()
    );
    assert!(
        trail["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["reason"] == "fingerprint_mismatch"),
        "{trail}"
    );

    // Single use: replayed, 409 already_decided; nothing runs again.
    let (st, err) = s.post(ANA, &path, body).await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (409, Some("already_decided")),
        "{err}"
    );
    assert_eq!(s.ran(), ["delete:b.txt"]);
}

#[tokio::test]
async fn an_expired_requirement_is_refused_with_nothing_changed() {
    let (dir, store) = sqlite_store().await;
    let ran: Ran = Arc::default();
    let agent = Agent::builder()
        .name("TestAgent")
        .model(ScriptedModel::from_fn(respond))
        .toolkit(toolkit(&ran))
        .store_arc(store)
        .approval_ttl("delete_file", Duration::from_secs(1))
        .build()
        .unwrap();
    let s = serve(agent, ran, Some(dir), |s| s).await;
    let id = "alice/ttl-1";
    let (_, out) = s
        .post(
            ALICE,
            &format!("/v1/sessions/{}/runs", enc(id)),
            json!({"message": "delete a.txt"}),
        )
        .await;
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    assert!(out["requirements"][0]["expires_at"].is_string(), "{out}");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (st, err) = s
        .post(
            ANA,
            &format!("/v1/sessions/{}/decisions", enc(id)),
            json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}),
        )
        .await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (422, Some("expired")),
        "{err}"
    );
    assert!(s.ran().is_empty());
    let (_, view) = s.get(ANA, &format!("/v1/sessions/{}", enc(id))).await;
    assert_eq!(view["status"], "paused", "{view}");
}
