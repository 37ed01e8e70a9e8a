//! A2A against the real client: `tests/a2a/client.py` drives two live servers sharing
//! one store with `a2a-sdk` (pinned in `tests/a2a/requirements.txt`, installed by
//! `.ci/run` into `tests/a2a/.venv`): the card, a message that pauses
//! (INPUT_REQUIRED), the decision as a follow-up message streamed to COMPLETED, get and
//! list from the second instance, cancel of a working and of a paused task, and the
//! protocol's errors. The store is PostgreSQL under `cargo xtask test`
//! (`REINS_TEST_POSTGRES_URL`), else one SQLite file opened by both instances.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use reins_memory::MemoryStore;
use serde_json::{Value, json};
use support::*;

fn client_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/a2a")
}

fn python() -> Option<PathBuf> {
    let p = client_dir().join(".venv/bin/python");
    p.exists().then_some(p)
}

/// The venv's Python, or `None` (the test is skipped; under `CI=true` it fails).
fn client_available(test: &str) -> Option<PathBuf> {
    if let Some(p) = python() {
        return Some(p);
    }
    let why = "the A2A client is not installed (python3 -m venv crates/reins-server/tests/a2a/.venv && \
               crates/reins-server/tests/a2a/.venv/bin/pip install -r crates/reins-server/tests/a2a/requirements.txt)";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {why}; CI must run this test");
    }
    eprintln!("SKIPPED {test}: {why}");
    None
}

/// Two stores on one database: PostgreSQL when the test harness gives one, else one
/// SQLite file.
async fn two_stores() -> (
    Option<tempfile::TempDir>,
    Arc<dyn MemoryStore>,
    Arc<dyn MemoryStore>,
) {
    if let Ok(url) = std::env::var("REINS_TEST_POSTGRES_URL") {
        let a = reins_memory::PostgresStore::connect(&url).await.unwrap();
        let b = reins_memory::PostgresStore::connect(&url).await.unwrap();
        return (None, Arc::new(a), Arc::new(b));
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("a2a: REINS_TEST_POSTGRES_URL is not set under CI (run `cargo xtask test`)");
    }
    let dir = tempfile::tempdir().unwrap();
    let a = reins_memory::SqliteStore::open(dir.path().join("s.db"))
        .await
        .unwrap();
    let b = reins_memory::SqliteStore::open(dir.path().join("s.db"))
        .await
        .unwrap();
    (Some(dir), Arc::new(a), Arc::new(b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_a2a_client_pauses_decides_cancels_and_reads_from_a_second_instance() {
    let Some(python) = client_available("a2a") else {
        return;
    };
    let (dir, store_a, store_b) = two_stores().await;
    let ran: Ran = Arc::default();
    let a = serve(agent(store_a, &ran), ran.clone(), dir, |s| s).await;
    let b = serve(agent(store_b, &ran), ran.clone(), None, |s| s).await;

    let child = tokio::process::Command::new(python)
        .arg(client_dir().join("client.py"))
        .arg(&a.base)
        .arg(&b.base)
        .env("A2A_TOKEN", CAROL)
        .env("A2A_OTHER", BOB)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), child)
        .await
        .expect("the A2A client did not finish within 120 s")
        .expect("python could not be started");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the A2A client failed:\n{stderr}\n{stdout}"
    );
    let report: Value = serde_json::from_str(stdout.trim()).expect("the client's report");

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
        Some(-32003)
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
