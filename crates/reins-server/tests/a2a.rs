//! A2A against the real client: `tests/a2a/client.py` drives two live servers sharing
//! one store with `a2a-sdk` (pinned in `tests/a2a/requirements.txt`, installed by
//! `.ci/run` into `tests/a2a/.venv`): the card, a message that pauses
//! (INPUT_REQUIRED), the decision as a follow-up message streamed to COMPLETED, get and
//! list from the second instance, cancel of a working and of a paused task, and the
//! protocol's errors. The store is PostgreSQL under `cargo xtask test`
//! (`REINS_TEST_POSTGRES_URL`), else one SQLite file opened by both instances.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

#[path = "a2a/harness.rs"]
mod harness;

use std::sync::Arc;

use harness::{client_available, run_client, two_servers, two_stores};
use reins_memory::MemoryStore;
use serde_json::{Value, json};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_a2a_client_pauses_decides_cancels_and_reads_from_a_second_instance() {
    let Some(python) = client_available("a2a") else {
        return;
    };
    let (dir, store_a, store_b) = two_stores().await;
    let ran: Ran = Arc::default();
    let a = serve(agent(store_a, &ran), ran.clone(), dir, |s| s).await;
    let b = serve(agent(store_b, &ran), ran.clone(), None, |s| s).await;

    let report = run_client(
        &python,
        "client.py",
        &a,
        &b,
        &[("A2A_TOKEN", CAROL), ("A2A_OTHER", BOB)],
    )
    .await;

    // What ran: the edited delete once; the slow search started and never finished;
    // the cancelled paused task's delete never ran.
    let ran = a.ran();
    assert_eq!(ran, ["delete:b.txt", "search-start:news"], "{ran:?}");

    // The card, generated from the agent.
    let card = &report["card"];
    assert_eq!(card["name"], "TestAgent");
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        json!(format!("{}/a2a", a.base))
    );
    assert!(card["securitySchemes"]["bearer"].is_object(), "{card}");

    assert_eq!(
        report["listed_states"],
        json!([
            "TASK_STATE_CANCELED",
            "TASK_STATE_CANCELED",
            "TASK_STATE_COMPLETED"
        ])
    );
    assert_eq!(report["not_found_errors"].as_array().unwrap().len(), 2);

    // The decision is in the audit trail with its actor, marked as coming over A2A.
    let sessions = a.agent.store().list_sessions().await.unwrap();
    let mut actors = Vec::new();
    for s in sessions.iter().filter(|s| s.id.starts_with("carol/a2a-")) {
        let (_, trail) = a
            .get(ADMIN, &format!("/v1/sessions/{}/decisions", enc(&s.id)))
            .await;
        for d in trail["decisions"].as_array().unwrap() {
            actors.push((
                d["decision"].as_str().unwrap().to_owned(),
                d["actor"]["principal"].as_str().unwrap_or("").to_owned(),
                d["actor"]["metadata"]["via"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            ));
        }
    }
    actors.sort();
    assert!(
        actors.contains(&("approve".into(), "carol".into(), "a2a".into())),
        "{actors:?}"
    );
    assert!(
        actors.contains(&("reject".into(), "carol".into(), "a2a".into())),
        "{actors:?}"
    );
}

/// The protocol's error forms for bad input, and nothing stored.
#[tokio::test]
async fn bad_a2a_requests_get_json_rpc_errors_and_change_nothing() {
    let server = start().await;
    let rpc = |body: Value| {
        let server = &server;
        async move {
            let res = server
                .client
                .post(server.url("/a2a"))
                .bearer_auth(CAROL)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
            res.json::<Value>().await.unwrap()
        }
    };
    let code = |v: &Value| v["error"]["code"].as_i64();
    let res = server
        .client
        .post(server.url("/a2a"))
        .bearer_auth(CAROL)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(code(&res.json().await.unwrap()), Some(-32700));
    assert_eq!(
        code(&rpc(json!({"id": 1, "method": "GetTask"})).await),
        Some(-32600)
    );
    assert_eq!(
        code(&rpc(json!({"jsonrpc": "2.0", "id": 1, "method": "Nope"})).await),
        Some(-32601)
    );
    assert_eq!(
        code(&rpc(json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}})).await),
        Some(-32602)
    );
    assert_eq!(
        code(
            &rpc(json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}))
                .await
        ),
        Some(-32001)
    );
    let send = |message: Value| json!({"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": message}});
    // No parts; an unknown task; a context that is not the caller's.
    assert_eq!(
        code(
            &rpc(send(
                json!({"messageId": "m", "role": "ROLE_USER", "parts": []})
            ))
            .await
        ),
        Some(-32602)
    );
    assert_eq!(
        code(&rpc(send(json!({"messageId": "m", "role": "ROLE_USER", "taskId": "t00.x", "parts": [{"text": "hi"}]}))).await),
        Some(-32001)
    );
    assert_eq!(
        code(&rpc(send(json!({"messageId": "m", "role": "ROLE_USER", "contextId": "bob/x", "parts": [{"text": "hi"}]}))).await),
        Some(-32602)
    );
    assert_eq!(
        code(&rpc(json!({"jsonrpc": "2.0", "id": 3, "method": "CreateTaskPushNotificationConfig", "params": {}})).await),
        Some(-32602)
    );
    assert_eq!(
        code(
            &rpc(
                json!({"jsonrpc": "2.0", "id": 3, "method": "CreateTaskPushNotificationConfig",
            "params": {"taskId": "t00.x", "url": "http://127.0.0.1:9/x"}})
            )
            .await
        ),
        Some(-32001)
    );
    let res = server
        .client
        .post(server.url("/a2a"))
        .bearer_auth(CAROL)
        .header("a2a-version", "0.3")
        .json(&json!({"jsonrpc": "2.0", "id": 4, "method": "ListTasks", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(code(&res.json().await.unwrap()), Some(-32009));
    let res = server
        .client
        .post(server.url("/a2a"))
        .json(&json!({"jsonrpc": "2.0", "id": 5, "method": "ListTasks"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    // Nothing was stored by any of it.
    assert!(
        server
            .agent
            .store()
            .list_sessions()
            .await
            .unwrap()
            .is_empty()
    );
}

/// A message sent again with the same `messageId` — on either instance, blocking or
/// streamed, and raced — is answered with the task it started and runs nothing again;
/// the client's id is the history's. A decision message sent again is answered with its
/// task. Two approvers racing on two instances: the loser (and a late third) gets
/// `-32004` naming the decision that took effect, never an internal error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_messages_and_racing_approvals_get_their_task_or_a_documented_error() {
    let Some(python) = client_available("a2a retries") else {
        return;
    };
    let (a, b) = two_servers().await;
    let report = run_client(
        &python,
        "retries.py",
        &a,
        &b,
        &[("A2A_TOKEN", CAROL), ("A2A_APPROVER", ANA)],
    )
    .await;
    let ran = a.ran();
    let count = |what: &str| ran.iter().filter(|r| *r == what).count();
    // Retried, raced three ways: each tool ran once.
    assert_eq!(count("search:cats"), 1, "{ran:?}");
    assert_eq!(count("search:dogs"), 1, "{ran:?}");
    // The paused retry added no call; the raced message on the paused context closed
    // r.txt and paused once on q.txt; the retried decision ran d.txt once.
    for (what, times) in [
        ("delete:p.txt", 0),
        ("delete:r.txt", 0),
        ("delete:q.txt", 0),
    ] {
        assert_eq!(count(what), times, "{what}: {ran:?}");
    }
    assert_eq!(count("delete:d.txt"), 1, "{ran:?}");
    for n in 0..3 {
        assert_eq!(count(&format!("delete:race{n}.txt")), 1, "{ran:?}");
    }
    // One user message per message id: the retries stored nothing.
    for (context, ids) in [
        ("paused_context", vec!["pause-"]),
        ("raced_context", vec!["race-base-", "race-paused-"]),
    ] {
        let context = report[context].as_str().unwrap();
        let stored = a.agent.store().load_session(context).await.unwrap();
        let users: Vec<&str> = stored
            .messages
            .iter()
            .filter(|m| m.role == reins_message::Role::User)
            .map(|m| m.id.as_str())
            .collect();
        assert_eq!(users.len(), ids.len(), "{users:?}");
        for (id, prefix) in users.iter().zip(ids) {
            assert!(id.starts_with(prefix), "{users:?}");
        }
    }
    // The racing losers were told who decided.
    let losers = report["losers"].as_array().unwrap();
    assert_eq!(losers.len(), 3);
    for l in losers {
        assert!(
            l["message"].as_str().unwrap().contains("already decided"),
            "{l}"
        );
        // The late approval went to the run, which refused it into the audit trail.
        let context = l["context"].as_str().unwrap();
        let (_, trail) = a
            .get(ADMIN, &format!("/v1/sessions/{}/decisions", enc(context)))
            .await;
        let refused_late = trail["decisions"].as_array().unwrap().iter().any(|d| {
            d["verdict"] == "refused"
                && d["reason"] == "already_decided"
                && d["actor"]["principal"] == "ana"
                && d["actor"]["metadata"]["message_id"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("late-"))
        });
        assert!(refused_late, "{trail}");
    }
}

/// ListTasks applies `statusTimestampAfter`, pages with a cursor that stays right when
/// tasks are added between pages and refuses tokens it did not give this caller; the
/// card's `application/json` input is accepted on a new message and as a decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_tasks_filters_by_time_and_pages_with_a_cursor_and_json_input_is_honoured() {
    let Some(python) = client_available("a2a tasks") else {
        return;
    };
    let (a, b) = two_servers().await;
    let report = run_client(
        &python,
        "tasks.py",
        &a,
        &b,
        &[("A2A_TOKEN", CAROL), ("A2A_OTHER", BOB)],
    )
    .await;
    assert_eq!(
        report["input_modes"],
        json!(["text/plain", "application/json"])
    );
    assert_eq!(report["refused_page_tokens"].as_object().unwrap().len(), 4);
    assert_eq!(a.ran().iter().filter(|r| *r == "delete:j.txt").count(), 1);
}

async fn post_rpc(server: &TestServer, body: Value, token: Option<&str>) -> reqwest::Response {
    let mut req = server.client.post(server.url("/a2a")).json(&body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.unwrap()
}

/// A JSON-RPC `id` that is not a string, a number or null (JSON-RPC 2.0 allows no
/// other) makes the request invalid: `-32600` with `id: null`, and nothing runs. The
/// SDK cannot send one.
#[tokio::test]
async fn a_json_rpc_id_that_is_an_object_array_or_bool_is_an_invalid_request() {
    let server = start().await;
    for id in [json!({"a": 1}), json!([1]), json!(true)] {
        let res = post_rpc(
            &server,
            json!({"jsonrpc": "2.0", "id": id, "method": "SendMessage", "params": {"message":
                {"messageId": "m-bad-id", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}}),
            Some(CAROL),
        )
        .await;
        assert_eq!(res.status(), 200);
        let v: Value = res.json().await.unwrap();
        assert_eq!(v["error"]["code"], -32600, "id {id}: {v}");
        assert_eq!(v["id"], Value::Null, "id {id}: {v}");
        assert!(v.get("result").is_none(), "{v}");
    }
    assert!(
        server
            .agent
            .store()
            .list_sessions()
            .await
            .unwrap()
            .is_empty(),
        "a request with a bad id was processed"
    );
}

/// `statusTimestampAfter` that is not an RFC 3339 time is refused with `-32602`
/// naming the parameter (the SDK only sends well-formed timestamps).
#[tokio::test]
async fn list_tasks_refuses_a_status_timestamp_that_is_not_a_time() {
    let server = start().await;
    for bad in [
        json!("-1"),
        json!("not-a-time"),
        json!(12),
        json!("2026-13-01T00:00:00Z"),
    ] {
        let res = post_rpc(
            &server,
            json!({"jsonrpc": "2.0", "id": "l", "method": "ListTasks",
                   "params": {"statusTimestampAfter": bad}}),
            Some(CAROL),
        )
        .await;
        let v: Value = res.json().await.unwrap();
        assert_eq!(v["error"]["code"], -32602, "{bad}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("statusTimestampAfter"),
            "{v}"
        );
    }
}

/// A 401 carries the bearer challenge of RFC 6750, with `invalid_token` when a token
/// was given but is unknown; on the A2A endpoint as on the native API.
#[tokio::test]
async fn a_401_carries_a_bearer_challenge() {
    let server = start().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks"});
    for (token, invalid) in [(None, false), (Some("nope"), true)] {
        let res = post_rpc(&server, body.clone(), token).await;
        let native = server
            .client
            .get(server.url("/v1/sessions"))
            .bearer_auth(token.unwrap_or_default())
            .send()
            .await
            .unwrap();
        for res in [res, native] {
            assert_eq!(res.status(), 401);
            let challenge = res
                .headers()
                .get("www-authenticate")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            assert!(challenge.starts_with("Bearer realm="), "{challenge:?}");
            assert_eq!(
                challenge.contains(r#"error="invalid_token""#),
                invalid,
                "{challenge}"
            );
        }
    }
}

/// A2A push notifications with the real client: every state change of an
/// INPUT_REQUIRED → COMPLETED task reaches the receiver its `SendMessage` configured,
/// with its token and authentication, through the outbox, whether its call was approved
/// or rejected; configurations are created,
/// read, listed and deleted through the client's calls (on either instance).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_a2a_client_gets_every_state_change_pushed() {
    let Some(python) = client_available("a2a push") else {
        return;
    };
    let (dir, store_a, store_b) = two_stores().await;
    let ran: Ran = Arc::default();
    let quick = || {
        reins_server::notify::NotifyOptions::default()
            .poll_interval(std::time::Duration::from_millis(100))
    };
    let a = serve(agent(store_a, &ran), ran.clone(), dir, |s| {
        s.notify_options(quick())
    })
    .await;
    let b = serve(agent(store_b, &ran), ran.clone(), None, |s| {
        s.notify_options(quick())
    })
    .await;
    let report = run_client(&python, "push.py", &a, &b, &[("A2A_TOKEN", CAROL)]).await;

    assert_eq!(report["push_capability"], true);
    assert_eq!(report["listed"], json!(["first", "second"]));
    assert_eq!(report["listed_after_delete"], json!(["first"]));
    let received = report["received"].as_array().unwrap();
    // Each state change once. Deliveries are attempted at once, by both instances, so
    // they may arrive in any order: each carries its time, which orders them.
    let states = |path: &str| -> Vec<(String, String)> {
        let mut pushed: Vec<(String, String)> = received
            .iter()
            .filter(|r| r["path"] == path)
            .map(|r| {
                let status = &r["body"]["statusUpdate"]["status"];
                (
                    status["state"].as_str().unwrap().to_owned(),
                    status["timestamp"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        pushed.sort_by_key(|(state, _)| {
            ["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING"]
                .iter()
                .position(|s| s == state)
                .unwrap_or(2)
        });
        let times: Vec<chrono::DateTime<chrono::Utc>> =
            pushed.iter().map(|(_, t)| t.parse().unwrap()).collect();
        assert!(times.is_sorted(), "{path}: {pushed:?}");
        pushed
    };
    let every_change = [
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_WORKING",
        "TASK_STATE_COMPLETED",
    ];
    let names = |p: Vec<(String, String)>| p.into_iter().map(|(s, _)| s).collect::<Vec<_>>();
    assert_eq!(names(states("/first")), every_change, "{received:?}");
    // A rejected call is pushed as an approved one: the task works, then completes.
    assert_eq!(names(states("/rejected")), every_change, "{received:?}");
    for r in received {
        if r["path"] == "/rejected" {
            assert_eq!(r["token"], "tok-3");
            assert_eq!(
                r["body"]["statusUpdate"]["taskId"],
                report["rejected_task_id"]
            );
            continue;
        }
        assert_eq!(r["path"], "/first", "a deleted config got a push: {r}");
        assert_eq!(r["token"], "tok-1");
        assert_eq!(r["authorization"], "Bearer push-secret");
        assert_eq!(r["body"]["statusUpdate"]["taskId"], report["task_id"]);
    }
    assert_eq!(a.ran(), ["delete:a.txt"]);
}

/// A budget requirement over A2A (`tests/a2a/budget.py`, the real a2a-sdk client):
/// INPUT_REQUIRED with a `budget` requirement before the tool starts, a refused low
/// limit, a refused extension above the agent's default by an approver who is no
/// admin, the admin's extension through the second instance, and an end that completes
/// the task with a message saying the budget ended it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_a2a_client_extends_and_ends_a_budget() {
    let Some(python) = client_available("a2a budget") else {
        return;
    };
    let (dir, store_a, store_b) = two_stores().await;
    let ran: Ran = Arc::default();
    let limit = reins_agent::budget::Budget::new().tool_calls(1);
    let with_budget = |store: Arc<dyn MemoryStore>| {
        reins_agent::Agent::builder()
            .name("TestAgent")
            .model(reins_model::ScriptedModel::from_fn(respond))
            .toolkit(toolkit(&ran))
            .store_arc(store)
            .budget(limit)
            .build()
            .unwrap()
    };
    let a = serve(with_budget(store_a), ran.clone(), dir, |s| s).await;
    let b = serve(with_budget(store_b), ran.clone(), None, |s| s).await;
    let report = run_client(
        &python,
        "budget.py",
        &a,
        &b,
        &[("A2A_TOKEN", CAROL), ("A2A_ADMIN_TOKEN", ADMIN)],
    )
    .await;
    assert_eq!(report["ended"], true, "{report}");
    // Carol approves, but only an admin extends above the agent's default.
    assert!(
        report["above_default_error"]
            .as_str()
            .unwrap_or("")
            .contains("only an admin may"),
        "{report}"
    );
    assert!(
        report["low_limit_error"]
            .as_str()
            .unwrap_or("")
            .contains("not above what was spent"),
        "{report}"
    );
    assert_eq!(a.ran(), ["delete:a.txt", "delete:b.txt"]);
}
