//! Standing grants and quorums through the server (issue #24): `/v1/grants` creates,
//! lists and revokes grants (bad input is refused with a typed error and stores
//! nothing); a grant lets a run go through without a person and the session's trail
//! names it; a tool under a quorum of two is approved by two approvers on two server
//! instances sharing one store (SQLite, and PostgreSQL when `REINS_TEST_POSTGRES_URL`
//! is set, required under `CI`), with racing approvals never lost and one rejection
//! closing it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use reins_agent::{Agent, Quorum};
use reins_memory::MemoryStore;
use reins_model::ScriptedModel;
use serde_json::{Value, json};
use support::*;

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

type Pair = (
    &'static str,
    Arc<dyn MemoryStore>,
    Arc<dyn MemoryStore>,
    Option<tempfile::TempDir>,
);

/// One store opened twice (as two instances would): SQLite, and PostgreSQL when
/// `REINS_TEST_POSTGRES_URL` is set (required under `CI`).
async fn store_pairs() -> Vec<Pair> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let a: Arc<dyn MemoryStore> = Arc::new(reins_memory::SqliteStore::open(&path).await.unwrap());
    let b: Arc<dyn MemoryStore> = Arc::new(reins_memory::SqliteStore::open(&path).await.unwrap());
    let mut out: Vec<Pair> = vec![("sqlite", a, b, Some(dir))];
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

/// The test agent, with `delete_file` under a quorum of two.
fn quorum_agent(store: Arc<dyn MemoryStore>, ran: &Ran) -> Agent {
    Agent::builder()
        .name("TestAgent")
        .model(ScriptedModel::from_fn(respond))
        .toolkit(toolkit(ran))
        .store_arc(store)
        .session_lease(Duration::from_secs(3))
        .quorum("delete_file", Quorum::of(2))
        .build()
        .unwrap()
}

async fn delete(server: &TestServer, token: &str, path: &str) -> (u16, Value) {
    let res = server
        .client
        .delete(server.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

async fn grant_count(server: &TestServer) -> usize {
    let (st, list) = server.get(ADMIN, "/v1/grants?include_revoked=true").await;
    assert_eq!(st, 200, "{list}");
    list["grants"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_are_created_listed_used_and_revoked_over_the_api() {
    for (label, sa, sb, _keep) in store_pairs().await {
        let (ran_a, ran_b): (Ran, Ran) = (Arc::default(), Arc::default());
        let a = serve(agent(sa, &ran_a), ran_a.clone(), None, |s| s).await;
        let b = serve(agent(sb, &ran_b), ran_b.clone(), None, |s| s).await;
        let t = tag();
        let session = format!("alice/grants-{t}");
        let tool = "send_email";

        // Create on A: 201 with the grant.
        let (st, g) = a
            .post(
                ANA,
                "/v1/grants",
                json!({
                    "tool": tool,
                    "session": session,
                    "principal": "alice",
                    "conditions": [{"pointer": "/to", "op": "ends_with", "value": "@example.com"}],
                    "ttl_seconds": 3600,
                    "note": "colleagues"
                }),
            )
            .await;
        assert_eq!(st, 201, "{label}: {g}");
        let id = g["id"].as_str().unwrap().to_owned();
        assert_eq!(g["state"], "live");
        assert_eq!(g["created_by"], "ana");
        assert_eq!(g["principal"], "alice");
        assert!(g["expires_at"].is_string());
        assert_eq!(g["revoked_at"], Value::Null);
        assert_eq!(g["conditions"][0]["op"], "ends_with");

        // Listed on B, with filters; a user sees its own grants only.
        let q = format!("/v1/grants?session={}&tool={tool}", enc(&session));
        let (st, list) = b.get(ANA, &q).await;
        assert_eq!(st, 200, "{list}");
        assert_eq!(
            list["grants"].as_array().unwrap().len(),
            1,
            "{label}: {list}"
        );
        assert_eq!(list["grants"][0]["id"], id.as_str());
        let (_, list) = b.get(ANA, "/v1/grants?principal=nobody").await;
        assert_eq!(list["grants"], json!([]));
        let (_, mine) = b.get(ALICE, &q).await;
        assert_eq!(mine["grants"].as_array().unwrap().len(), 1, "{mine}");
        let (_, theirs) = b.get(BOB, &q).await;
        assert_eq!(theirs["grants"], json!([]), "{theirs}");

        // Bad input: a typed error, nothing stored.
        let before = grant_count(&a).await;
        let bad = [
            (
                json!({"tool": tool, "ttl_seconds": 60, "expires_at": "2099-01-01T00:00:00Z"}),
                422,
                "invalid_grant",
            ),
            (
                json!({"tool": tool, "ttl_seconds": 0}),
                422,
                "invalid_grant",
            ),
            (
                json!({"tool": tool, "expires_at": "2001-01-01T00:00:00Z"}),
                422,
                "invalid_grant",
            ),
            (
                json!({"tool": tool, "conditions": [{"pointer": "to", "op": "equals", "value": 1}]}),
                422,
                "invalid_grant",
            ),
            (
                json!({"tool": tool, "conditions": [{"pointer": "/to", "op": "one_of", "value": "x"}]}),
                422,
                "invalid_grant",
            ),
            (
                json!({"tool": tool, "conditions": [{"pointer": "/to", "op": "regex", "value": "."}]}),
                400,
                "bad_body",
            ),
            (json!({"tool": tool, "colour": "red"}), 400, "bad_body"),
            (json!({"tool": " "}), 422, "invalid_grant"),
            (json!({"ttl_seconds": 5}), 400, "bad_body"),
        ];
        for (body, status, code) in bad {
            let (st, err) = a.post(ANA, "/v1/grants", body.clone()).await;
            assert_eq!(
                (st, err["error"]["code"].as_str()),
                (status, Some(code)),
                "{label}: {body} -> {err}"
            );
        }
        let (st, err) = a.post(ALICE, "/v1/grants", json!({"tool": tool})).await;
        assert_eq!(
            (st, err["error"]["code"].as_str()),
            (403, Some("forbidden")),
            "{err}"
        );
        let (st, err) = a
            .post(RITA, "/v1/grants", json!({"tool": "delete_file"}))
            .await;
        assert_eq!(st, 403, "{err}");
        assert_eq!(
            grant_count(&a).await,
            before,
            "{label}: bad input stored nothing"
        );

        // A run that matches goes through without a person; the trail names the grant.
        let runs = format!("/v1/sessions/{}/runs", enc(&session));
        let (st, out) = a
            .post(ALICE, &runs, json!({"message": "mail bob@example.com"}))
            .await;
        assert_eq!(st, 200, "{out}");
        assert_eq!(out["status"], "completed", "{label}: {out}");
        let (_, trail) = b
            .get(ANA, &format!("/v1/sessions/{}/decisions", enc(&session)))
            .await;
        let used: Vec<&Value> = trail["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["via"] == "grant")
            .collect();
        assert_eq!(used.len(), 1, "{label}: {trail}");
        assert_eq!(used[0]["grant_id"], id.as_str());
        assert_eq!(used[0]["verdict"], "applied");
        assert!(used[0]["executed_fingerprint"].is_string());
        // One that does not match pauses.
        let (_, out) = a
            .post(ALICE, &runs, json!({"message": "mail eve@evil.test"}))
            .await;
        assert_eq!(out["status"], "paused", "{label}: {out}");

        // Revoke on B: 200 with the revoked grant; again 409; unknown 404; forbidden 403.
        let (st, err) = delete(&b, RITA, "/v1/grants/no-such-grant").await;
        assert_eq!(
            (st, err["error"]["code"].as_str()),
            (404, Some("unknown_grant")),
            "{err}"
        );
        let (st, err) = delete(&b, ALICE, &format!("/v1/grants/{id}")).await;
        assert_eq!(st, 403, "{err}");
        let (st, revoked) = delete(&b, RITA, &format!("/v1/grants/{id}")).await;
        assert_eq!(st, 200, "{label}: {revoked}");
        assert_eq!(revoked["state"], "revoked");
        assert_eq!(revoked["revoked_by"], "rita");
        let (st, err) = delete(&a, ANA, &format!("/v1/grants/{id}")).await;
        assert_eq!(
            (st, err["error"]["code"].as_str()),
            (409, Some("grant_revoked")),
            "{err}"
        );
        let (_, again) = a
            .get(
                ANA,
                &format!("/v1/grants?include_revoked=true&session={}", enc(&session)),
            )
            .await;
        assert_eq!(
            again["grants"][0]["revoked_by"], "rita",
            "the second revocation changed nothing"
        );
        let (_, list) = a.get(ANA, &q).await;
        assert_eq!(
            list["grants"],
            json!([]),
            "revoked grants leave the default listing"
        );
        // Revoked: the same run pauses now.
        let (_, out) = b
            .post(ALICE, &runs, json!({"message": "mail carol@example.com"}))
            .await;
        assert_eq!(out["status"], "paused", "{label}: {out}");
        assert_eq!(
            ran_a
                .lock()
                .unwrap()
                .iter()
                .chain(ran_b.lock().unwrap().iter())
                .filter(|r| r.starts_with("mail:"))
                .count(),
            1
        );
    }
}

/// Approves `rid` on `server` as `token`, trying again while the session is busy with
/// the other approval.
async fn approve(server: &TestServer, token: &str, session: &str, rid: &str) -> (u16, Value) {
    let path = format!("/v1/sessions/{}/decisions", enc(session));
    let body = json!({"decisions": [{"requirement_id": rid, "action": "approve"}]});
    for _ in 0..100 {
        let (st, out) = server.post(token, &path, body.clone()).await;
        if st == 409 && out["error"]["code"] == "busy" {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        return (st, out);
    }
    panic!("still busy after 100 tries")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quorum_of_two_is_met_by_two_approvers_on_two_instances() {
    for (label, sa, sb, _keep) in store_pairs().await {
        let (ran_a, ran_b): (Ran, Ran) = (Arc::default(), Arc::default());
        let a = serve(quorum_agent(sa, &ran_a), ran_a.clone(), None, |s| s).await;
        let b = serve(quorum_agent(sb, &ran_b), ran_b.clone(), None, |s| s).await;
        let t = tag();
        let ran = || {
            let mut r = ran_a.lock().unwrap().clone();
            r.extend(ran_b.lock().unwrap().iter().cloned());
            r
        };

        let session = format!("alice/quorum-{t}");
        let (st, out) = a
            .post(
                ALICE,
                &format!("/v1/sessions/{}/runs", enc(&session)),
                json!({"message": "delete prod.db"}),
            )
            .await;
        assert_eq!((st, out["status"].as_str()), (200, Some("paused")), "{out}");
        let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
        assert_eq!(out["requirements"][0]["quorum"]["needed"], 2, "{out}");

        // The inbox on B shows the count.
        let (st, inbox) = b.get(ANA, "/v1/requirements").await;
        assert_eq!(st, 200, "{label}: {inbox}");
        let item = inbox["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["requirement_id"] == rid.as_str())
            .unwrap();
        assert_eq!(
            item["quorum"],
            json!({"needed": 2, "approvals": []}),
            "{label}: {item}"
        );

        // First approval on A: still pending, with the count.
        let (st, out) = approve(&a, ANA, &session, &rid).await;
        assert_eq!(
            (st, out["status"].as_str()),
            (200, Some("paused")),
            "{label}: {out}"
        );
        assert_eq!(
            out["requirements"][0]["quorum"]["approvals"][0]["by"], "ana",
            "{out}"
        );
        let (_, view) = b
            .get(ADMIN, &format!("/v1/sessions/{}", enc(&session)))
            .await;
        assert_eq!(
            view["requirements"][0]["quorum"]["approvals"]
                .as_array()
                .unwrap()
                .len(),
            1,
            "{view}"
        );
        let (st, inbox) = b.get(ANA, "/v1/requirements").await;
        assert_eq!(st, 200, "{label}: {inbox}");
        let item = inbox["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["requirement_id"] == rid.as_str())
            .unwrap();
        assert_eq!(item["quorum"]["approvals"][0]["by"], "ana", "{item}");
        assert!(ran().is_empty());

        // The same approver on B: 409 already_approved, nothing changed.
        let (st, err) = approve(&b, ANA, &session, &rid).await;
        assert_eq!(
            (st, err["error"]["code"].as_str()),
            (409, Some("already_approved")),
            "{label}: {err}"
        );

        // A second approver on B completes it: it runs once.
        let (st, out) = approve(&b, ADMIN, &session, &rid).await;
        assert_eq!(
            (st, out["status"].as_str()),
            (200, Some("completed")),
            "{label}: {out}"
        );
        assert_eq!(ran(), ["delete:prod.db"]);
        let (st, err) = approve(&a, CAROL, &session, &rid).await;
        assert_eq!(
            (st, err["error"]["code"].as_str()),
            (409, Some("already_decided")),
            "{err}"
        );

        // One reject closes it.
        let session = format!("alice/quorum-reject-{t}");
        let (_, out) = a
            .post(
                ALICE,
                &format!("/v1/sessions/{}/runs", enc(&session)),
                json!({"message": "delete x.db"}),
            )
            .await;
        let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
        approve(&a, ANA, &session, &rid).await;
        let (st, out) = b
            .post(
                ADMIN,
                &format!("/v1/sessions/{}/decisions", enc(&session)),
                json!({"decisions": [{"requirement_id": rid, "action": "reject", "note": "not x"}]}),
            )
            .await;
        assert_eq!(
            (st, out["status"].as_str()),
            (200, Some("completed")),
            "{label}: {out}"
        );
        assert_eq!(
            ran(),
            ["delete:prod.db"],
            "{label}: a rejected quorum runs nothing"
        );

        // Racing approvers on the two instances: both count, exactly one completes.
        for round in 0..10 {
            let session = format!("alice/quorum-race-{t}-{round}");
            let (_, out) = a
                .post(
                    ALICE,
                    &format!("/v1/sessions/{}/runs", enc(&session)),
                    json!({"message": format!("delete r{round}")}),
                )
                .await;
            let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
            let (x, y) = tokio::join!(
                approve(&a, ANA, &session, &rid),
                approve(&b, ADMIN, &session, &rid)
            );
            assert_eq!((x.0, y.0), (200, 200), "{label} round {round}: {x:?} {y:?}");
            let mut statuses = [
                x.1["status"].as_str().unwrap(),
                y.1["status"].as_str().unwrap(),
            ];
            statuses.sort_unstable();
            assert_eq!(statuses, ["completed", "paused"], "{label} round {round}");
            let runs = ran()
                .iter()
                .filter(|r| **r == format!("delete:r{round}"))
                .count();
            assert_eq!(runs, 1, "{label} round {round}");
        }
    }
}

/// A quorum restricted to a role counts a principal's server roles: an admin is not an
/// approver here (403 `not_eligible`, nothing recorded as an approval), two approvers
/// complete it and the tool runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_with_roles_counts_the_server_roles_of_each_approver() {
    let ran: Ran = Arc::default();
    let agent = Agent::builder()
        .name("TestAgent")
        .model(ScriptedModel::from_fn(respond))
        .toolkit(toolkit(&ran))
        .quorum("delete_file", Quorum::of(2).roles(["approver"]))
        .build()
        .unwrap();
    let server = serve(agent, ran.clone(), None, |s| s).await;
    let session = format!("alice/quorum-roles-{}", tag());
    let (st, out) = server
        .post(
            ALICE,
            &format!("/v1/sessions/{}/runs", enc(&session)),
            json!({"message": "delete prod.db"}),
        )
        .await;
    assert_eq!((st, out["status"].as_str()), (200, Some("paused")), "{out}");
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();

    let (st, err) = approve(&server, ADMIN, &session, &rid).await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (403, Some("not_eligible")),
        "{err}"
    );
    let (st, out) = approve(&server, ANA, &session, &rid).await;
    assert_eq!((st, out["status"].as_str()), (200, Some("paused")), "{out}");
    let approvals = &out["requirements"][0]["quorum"]["approvals"];
    assert_eq!(approvals.as_array().map(Vec::len), Some(1), "{out}");
    assert_eq!(approvals[0]["by"], "ana", "{out}");
    assert!(ran.lock().unwrap().is_empty());

    let (st, out) = approve(&server, CAROL, &session, &rid).await;
    assert_eq!(
        (st, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );
    assert_eq!(ran.lock().unwrap().len(), 1, "the tool ran once");
}
