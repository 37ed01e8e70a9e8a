//! reins-server fronting a Restate deployment (`Server::backend` with a
//! `RestateClient`): a real restate-server, the reins demo service as a real child
//! process, and reins-server on loopback in front of them, reading the same SQLite
//! store. The same HTTP script runs against reins-server on the local driver: runs
//! pause, the inbox lists what waits, decisions go through the decide route and the
//! tool runs once, and bad input gets the same statuses and codes from both.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use reins_agent::{Agent, SessionBackend, ViewToken};
use reins_memory::SqliteStore;
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_server::Server;
use reins_tool::{ToolError, ToolPolicy, Toolkit};
use serde_json::{Value, json};
use support::http::*;

/// The script: a run that pauses, the inbox, refused decisions, the approval, a late
/// second decision, a decision on an idle session, an interrupt with nothing running.
/// Returns each refusal as `(what, status, code)`; asserts the rest.
async fn script(http: &Http, tag: &str, runs: impl Fn() -> usize) -> Vec<(String, u16, String)> {
    let sid = format!("alice/{tag}");
    let path = format!("/v1/sessions/alice%2F{tag}");
    let mut refusals = Vec::new();
    let mut refused = |what: &str, (status, body): (u16, Value)| {
        assert!(status >= 400, "{what}: {status} {body}");
        refusals.push((what.to_owned(), status, code(&body)));
    };

    let (status, out) = http
        .post(
            "alice-token",
            &format!("{path}/runs"),
            json!({"message": "delete a.txt"}),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["status"], "paused", "{out}");
    assert_eq!(out["requirements"][0]["tool_use"]["name"], "delete_file");
    let req_id = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(runs(), 0);

    // The inbox lists it (read from the store), with the view token to decide on.
    let (status, page) = http
        .get("bob-token", "/v1/requirements?status=pending")
        .await;
    assert_eq!(status, 200, "{page}");
    let item = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["session_id"] == sid.as_str())
        .unwrap_or_else(|| panic!("not in the inbox: {page}"))
        .clone();
    assert_eq!(item["requirement_id"], req_id.as_str());
    let token = item["view_token"].as_str().unwrap().to_owned();
    let (status, detail) = http.get("bob-token", &path).await;
    assert_eq!((status, detail["status"].as_str()), (200, Some("paused")));

    // Refused, and nothing runs.
    refused(
        "read an unknown session",
        http.get("bob-token", "/v1/sessions/alice%2Fnobody").await,
    );
    let approve = |id: &str, token: Option<&str>| {
        let mut b = json!({"decisions": [{"requirement_id": id, "action": "approve"}]});
        if let Some(t) = token {
            b["view_token"] = json!(t);
        }
        b
    };
    refused(
        "decide on an unknown session",
        http.post(
            "bob-token",
            "/v1/sessions/alice%2Fnobody/decisions",
            approve("call_1", None),
        )
        .await,
    );
    let stale = ViewToken::new(true, ["call_other"]).to_string();
    refused(
        "decide on a stale view",
        http.post(
            "bob-token",
            &format!("{path}/decisions"),
            approve(&req_id, Some(&stale)),
        )
        .await,
    );
    refused(
        "decide on a requirement never pending",
        http.post(
            "bob-token",
            &format!("{path}/decisions"),
            approve("call_nope", Some(&token)),
        )
        .await,
    );
    refused(
        "decide without the approver role",
        http.post(
            "alice-token",
            &format!("{path}/decisions"),
            approve(&req_id, Some(&token)),
        )
        .await,
    );
    assert_eq!(runs(), 0);

    // The approval, through the decide route: the tool runs once.
    let (status, out) = http
        .post(
            "bob-token",
            &format!("{path}/decisions"),
            approve(&req_id, Some(&token)),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["status"], "completed", "{out}");
    assert_eq!(runs(), 1);

    // A late second approver: already decided, by whom.
    let (status, body) = http
        .post(
            "bob-token",
            &format!("{path}/decisions"),
            approve(&req_id, Some(&token)),
        )
        .await;
    assert_eq!(body["error"]["decided"]["by"], "bob", "{body}");
    refused("decide again", (status, body));

    // An idle session: a decision for nothing pending, an interrupt with nothing running.
    let idle = format!("/v1/sessions/alice%2F{tag}-idle");
    let (status, out) = http
        .post(
            "alice-token",
            &format!("{idle}/runs"),
            json!({"message": "hello"}),
        )
        .await;
    assert_eq!(
        (status, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );
    refused(
        "decide with nothing pending",
        http.post(
            "bob-token",
            &format!("{idle}/decisions"),
            approve("call_1", None),
        )
        .await,
    );
    refused(
        "interrupt with nothing running",
        http.post("alice-token", &format!("{idle}/interrupt"), json!({}))
            .await,
    );
    refused(
        "an empty message",
        http.post(
            "alice-token",
            &format!("{idle}/runs"),
            json!({"message": " "}),
        )
        .await,
    );
    assert_eq!(runs(), 1);
    refusals
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct DeleteArgs {
    /// The file.
    #[allow(dead_code)]
    path: String,
}

/// The same script on reins-server's local driver.
async fn on_the_local_driver() -> Vec<(String, u16, String)> {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&runs);
    let mut tools = Toolkit::new();
    tools
        .add(
            Toolkit::function(
                "delete_file",
                "Delete a file",
                move |_a: DeleteArgs, _ctx| {
                    let r = Arc::clone(&r);
                    async move {
                        r.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, ToolError>("deleted")
                    }
                },
            )
            .policy(ToolPolicy::confirm()),
        )
        .unwrap();
    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id("call_1", "delete_file", json!({"path": "a.txt"})),
        ScriptedResponse::text("done"),
        ScriptedResponse::text("ok"),
    ]);
    let agent = Agent::builder()
        .model(model)
        .toolkit(tools)
        .build()
        .unwrap();
    let http = Http::start(Server::new(agent)).await;
    script(&http, "local", || runs.load(Ordering::SeqCst)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reins_server_fronts_a_restate_deployment_with_the_local_drivers_answers() {
    let Some(h) = support::Harness::start(&[]).await else {
        return;
    };
    // The server reads the store the service records in; its model is never called.
    let store = SqliteStore::open(h.dir.path().join("reins.sqlite"))
        .await
        .unwrap();
    let agent = Agent::builder()
        .model(ScriptedModel::new(Vec::<ScriptedResponse>::new()))
        .store(store)
        .build()
        .unwrap();
    let backend: Arc<dyn SessionBackend> = Arc::new(h.client.clone());
    let http = Http::start(Server::new(agent).backend(backend)).await;
    let on_restate = script(&http, "restate", || h.count("delete_file start")).await;

    // The audit trail (from the store) names the approver.
    let (status, trail) = http
        .get("bob-token", "/v1/sessions/alice%2Frestate/decisions")
        .await;
    assert_eq!(status, 200);
    assert!(
        trail["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["actor"]["principal"] == "bob" && d["verdict"] == "applied"),
        "{trail}"
    );
    // A2A runs the local driver: not served in front of a backend.
    let (status, body) = http.post("alice-token", "/a2a", json!({})).await;
    assert_eq!((status, code(&body).as_str()), (501, "not_supported"));

    let on_local = on_the_local_driver().await;
    assert_eq!(on_restate, on_local);
    assert_eq!(h.count("delete_file start"), 1, "{:?}", h.outbox());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_restate_streams_its_stored_steps_through_reins_server() {
    let Some(h) = support::Harness::start(&[]).await else {
        return;
    };
    let store = SqliteStore::open(h.dir.path().join("reins.sqlite"))
        .await
        .unwrap();
    let agent = Agent::builder()
        .model(ScriptedModel::new(Vec::<ScriptedResponse>::new()))
        .store(store)
        .build()
        .unwrap();
    let http = Http::start(Server::new(agent).backend(Arc::new(h.client.clone()))).await;
    let resp = http
        .client
        .post(format!(
            "{}/v1/sessions/alice%2Fs1/runs?stream=true",
            http.base
        ))
        .bearer_auth("alice-token")
        .header("idempotency-key", "start-s1")
        .json(&json!({"message": "work 10"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.unwrap();
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(events.last(), Some(&"output"), "{text}");
    assert!(
        events.contains(&"message") && events.contains(&"state"),
        "{text}"
    );
    let output = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap();
    let output: Value = serde_json::from_str(output).unwrap();
    assert_eq!(output["output"]["status"], "completed", "{output}");
    assert!(
        output["output"]["message"].to_string().contains("done: "),
        "{output}"
    );
    assert_eq!(h.count("work start"), 1);
}
