//! AG-UI against the real client: `tests/agui/client.mjs` drives a live server with
//! `@ag-ui/client`'s `HttpAgent` (pinned in `tests/agui/package-lock.json`, installed by
//! `.ci/run`) and checks every event against `@ag-ui/core`'s schemas; this test starts
//! the server, runs the script, checks what the store and the audit trail say, and
//! snapshots the event streams (ids normalised).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

fn client_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/agui")
}

/// Whether Node.js and the pinned client are installed; under `CI=true` their absence
/// fails the test, elsewhere it is reported as skipped.
fn client_available(test: &str) -> bool {
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let installed = client_dir()
        .join("node_modules/@ag-ui/client/package.json")
        .exists();
    if node && installed {
        return true;
    }
    let why = if node {
        "the AG-UI client is not installed (run `npm ci --prefix crates/reins-server/tests/agui`)"
    } else {
        "Node.js is not installed"
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {why}; CI must run this test");
    }
    eprintln!("SKIPPED {test}: {why}");
    false
}

/// Replaces generated ids (UUIDs, call ids) with stable names in order of appearance.
fn normalise(v: &Value, names: &mut HashMap<String, String>) -> Value {
    match v {
        Value::String(s) => {
            let is_uuid = s.len() == 36 && s.chars().filter(|c| *c == '-').count() == 4;
            let is_call = s.starts_with("call_");
            if is_uuid || is_call {
                let n = names.len() + 1;
                let kind = if is_call { "call" } else { "id" };
                Value::String(
                    names
                        .entry(s.clone())
                        .or_insert_with(|| format!("<{kind}-{n}>"))
                        .clone(),
                )
            } else if s.contains("call_") {
                // A call id inside text (the scripted model's summaries).
                let mut out = s.clone();
                for (k, n) in names.iter() {
                    out = out.replace(k, n);
                }
                Value::String(out)
            } else {
                v.clone()
            }
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| normalise(x, names)).collect()),
        // In key order, whatever order serde_json keeps (`preserve_order` in workspace
        // builds): the names are numbered in the order they are met.
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), normalise(&o[k], names)))
                    .collect(),
            )
        }
        other => other.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agui_client_pauses_resumes_and_validates_every_event() {
    if !client_available("agui") {
        return;
    }
    // The test agent, with the scripted model's answers in larger chunks (readable
    // snapshots), and keep-alives often enough that an aborting client is noticed soon.
    let (dir, store) = sqlite_store().await;
    let ran: Ran = std::sync::Arc::default();
    let agent = reins_agent::Agent::builder()
        .name("TestAgent")
        .model(reins_model::ScriptedModel::from_fn(respond).with_chunk_size(32))
        .toolkit(toolkit(&ran))
        .store_arc(store)
        .interrupt_grace(Duration::from_millis(500))
        .build()
        .unwrap();
    let server = serve(agent, ran, Some(dir), |s| {
        s.keep_alive(Duration::from_millis(200))
    })
    .await;
    let child = tokio::process::Command::new("node")
        .arg(client_dir().join("client.mjs"))
        .arg(&server.base)
        .env("AGUI_CAROL", CAROL)
        .env("AGUI_ALICE", ALICE)
        .env("AGUI_BOB", BOB)
        .current_dir(client_dir())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), child)
        .await
        .expect("the AG-UI client did not finish within 120 s")
        .expect("node could not be started");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the AG-UI client failed:\n{stderr}\n{stdout}"
    );
    let report: Value = serde_json::from_str(stdout.trim()).expect("the client's report");

    // Every tool ran exactly as decided, once: the replay and the stale resume ran
    // nothing; the edit ran with the edited path; the rejection and the abort nothing
    // more than what they show.
    let ran = server.ran();
    assert_eq!(
        ran,
        [
            "delete:a.txt",
            "delete:c.txt",
            "book:dinner@friday",
            "search-start:news",
            "delete:race.txt"
        ],
        "{ran:?}"
    );

    // The audit trail shows the decisions with their actor and that they came over AG-UI.
    let (status, trail) = server
        .get(
            ADMIN,
            &format!("/v1/sessions/{}/decisions", enc("carol/approve")),
        )
        .await;
    assert_eq!(status, 200);
    let decisions = trail["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 1, "{trail}");
    assert_eq!(decisions[0]["actor"]["principal"], "carol");
    assert_eq!(decisions[0]["actor"]["metadata"]["via"], "ag-ui");
    assert_eq!(decisions[0]["decision"], "approve");
    // Alice (a user without the approver role) could not decide: still paused.
    let (_, alice) = server
        .get(ADMIN, &format!("/v1/sessions/{}", enc("alice/x")))
        .await;
    assert_eq!(alice["status"], "paused");

    // Bad input: the refusals are the protocol's (HTTP before a run, RUN_ERROR after).
    let facts = &report["facts"];
    assert_eq!(facts["malformed_status"], 400, "{facts}");
    assert_eq!(facts["malformed_body"]["error"]["code"], "bad_body");
    assert!(
        facts["wrong_principal"]
            .as_str()
            .unwrap()
            .contains("forbidden")
    );
    assert_eq!(facts["invalid_events"], json!([]));
    // Two identical resumes at once: both answered with the outcome, one decision.
    assert_eq!(facts["race"], json!(["success", "success"]), "{facts}");
    let (_, trail) = server
        .get(
            ADMIN,
            &format!("/v1/sessions/{}/decisions", enc("carol/race")),
        )
        .await;
    let applied: Vec<&Value> = trail["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["verdict"] == "applied")
        .collect();
    assert_eq!(applied.len(), 1, "{trail}");

    let mut names = HashMap::new();
    let scenarios = normalise(&report["scenarios"], &mut names);
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!("agui_event_streams", scenarios);
}

/// A cancel request (the native interrupt) ends an AG-UI run with `outcome:
/// cancelled`; a request without a token never starts one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_ends_the_agui_run_as_cancelled() {
    let server = start().await;
    let body = json!({
        "threadId": "carol/cancel",
        "runId": "run-1",
        "messages": [{"id": "m1", "role": "user", "content": "slow weather"}],
        "tools": [],
        "context": [],
    });
    let res = server
        .client
        .post(server.url("/agui"))
        .bearer_auth(CAROL)
        .header("accept", "text/event-stream")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut sse = SseReader::new(res);
    let first = sse.next().await.unwrap();
    assert_eq!(first.data["type"], "RUN_STARTED");
    assert_eq!(first.data["runId"], "run-1");
    // Wait for the tool to run, then ask for the interrupt.
    for _ in 0..200 {
        if server.ran().iter().any(|r| r.starts_with("search-start")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (status, _) = server
        .post(
            CAROL,
            &format!("/v1/sessions/{}/interrupt", enc("carol/cancel")),
            json!({}),
        )
        .await;
    assert_eq!(status, 202);
    let mut types = Vec::new();
    let mut last = Value::Null;
    while let Some(ev) = sse.next().await {
        types.push(ev.data["type"].as_str().unwrap_or("").to_owned());
        last = ev.data;
    }
    assert_eq!(last["type"], "RUN_FINISHED", "{types:?}");
    assert_eq!(last["outcome"], json!({"type": "cancelled"}));
    assert!(types.contains(&"MESSAGES_SNAPSHOT".to_owned()), "{types:?}");
    assert!(!server.ran().iter().any(|r| r.starts_with("search-done")));

    let res = server
        .client
        .post(server.url("/agui"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let (status, err) = server
        .post(CAROL, "/agui", json!({"threadId": "carol/x"}))
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (400, Some("bad_body"))
    );
}

/// A budget requirement over AG-UI (`tests/agui/budget.mjs`, the real client): a
/// `reins:budget` interrupt before the tool starts, a refused low limit, a refused
/// extension above the agent's default from an approver who is no admin, the admin's
/// extension, and an end with an honest final message, all in the audit trail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agui_client_extends_and_ends_a_budget() {
    if !client_available("agui budget") {
        return;
    }
    let (dir, store) = sqlite_store().await;
    let ran: Ran = std::sync::Arc::default();
    let agent = reins_agent::Agent::builder()
        .name("TestAgent")
        .model(reins_model::ScriptedModel::from_fn(respond).with_chunk_size(32))
        .toolkit(toolkit(&ran))
        .store_arc(store)
        .budget(reins_agent::budget::Budget::new().tool_calls(1))
        .build()
        .unwrap();
    let server = serve(agent, ran, Some(dir), |s| s).await;
    let child = tokio::process::Command::new("node")
        .arg(client_dir().join("budget.mjs"))
        .arg(&server.base)
        .env("AGUI_CAROL", CAROL)
        .env("AGUI_ADMIN", ADMIN)
        .current_dir(client_dir())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), child)
        .await
        .expect("the AG-UI client did not finish within 120 s")
        .expect("node could not be started");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the AG-UI budget client failed:\n{stderr}\n{stdout}"
    );
    let report: Value = serde_json::from_str(stdout.trim()).expect("the client's report");
    let facts = &report["facts"];
    assert_eq!(facts["budget_interrupt"]["kind"], "budget", "{facts}");
    assert!(
        facts["low_limit_error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("not above what was spent"),
        "{facts}"
    );
    assert_eq!(server.ran(), ["delete:a.txt", "delete:b.txt"]);
    let (status, trail) = server
        .get(
            ADMIN,
            &format!("/v1/sessions/{}/decisions", enc("carol/budget")),
        )
        .await;
    assert_eq!(status, 200);
    // carol's extension above the default was refused by the run, and recorded so.
    let refused: Vec<&Value> = trail["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"] == "budget" && d["verdict"] == "refused")
        .collect();
    assert_eq!(refused.len(), 1, "{trail}");
    assert_eq!(refused[0]["actor"]["principal"], "carol");
    assert_eq!(refused[0]["reason"], "not_eligible");
    let budget: Vec<&Value> = trail["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"] == "budget" && d["verdict"] == "applied")
        .collect();
    assert_eq!(budget.len(), 2, "{trail}");
    assert_eq!(budget[0]["decision"], "approve");
    assert_eq!(budget[0]["executed_input"]["tool_calls"], 2);
    // Above the agent's default: the admin's to give, not carol's.
    assert_eq!(budget[0]["actor"]["principal"], "ops");
    assert!(
        facts["above_default_error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("only an admin may"),
        "{facts}"
    );
    assert_eq!(budget[1]["decision"], "reject");
}

/// Snapshots with object keys sorted: they pin the content, not the order serde_json
/// keeps keys in (insertion order when a dependency turns on `preserve_order`).
fn sorted_maps() -> insta::internals::SettingsBindDropGuard {
    let mut settings = insta::Settings::clone_current();
    settings.set_sort_maps(true);
    settings.bind_to_scope()
}
