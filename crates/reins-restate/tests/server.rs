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

use reins_agent::{Agent, Relayed, SessionBackend, ViewToken};
use reins_memory::SqliteStore;
use reins_message::Role;
use reins_model::{
    ChatChunk, ChatModel, ChatRequest, ChatStream, FinishReason, ScriptedModel, ScriptedResponse,
};
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
    refusals.extend(a2a(http, tag, &runs).await);
    refusals.extend(fork_and_replay(http, tag, &runs).await);
    refusals.extend(agui_client_tools(http, tag).await);
    refusals
}

/// One AG-UI run: the events (`data:` JSON) of its SSE answer.
async fn agui(http: &Http, token: &str, body: Value) -> Vec<Value> {
    let resp = http
        .client
        .post(format!("{}/agui", http.base))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp.text()
        .await
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// AG-UI with the client's own tools: the model calls one, the run ends with the call
/// pending for the client; the client's tool message with the result goes on, and the
/// model answers with it. A result for a call that does not wait for one, sent alone,
/// is nothing new (`RUN_ERROR`).
async fn agui_client_tools(http: &Http, tag: &str) -> Vec<(String, u16, String)> {
    let thread = format!("alice/{tag}-agui");
    let tools = json!([{
        "name": "client_clock",
        "description": "The time where the user is",
        "parameters": {"type": "object", "properties": {}},
    }]);
    let user = json!({"id": format!("{tag}-u1"), "role": "user", "content": "use client_clock"});
    let events = agui(
        http,
        "alice-token",
        json!({"threadId": thread, "runId": "r1", "messages": [user], "tools": tools}),
    )
    .await;
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_FINISHED", "{events:?}");
    assert_eq!(last["outcome"]["type"], "success", "{events:?}");
    let call = last["outcome"]["pendingToolCallIds"][0]
        .as_str()
        .unwrap_or_else(|| panic!("no pending client call: {events:?}"))
        .to_owned();

    // The client ran it: its tool message goes on.
    let result =
        json!({"id": format!("{tag}-t1"), "role": "tool", "toolCallId": call, "content": "12:00"});
    let events = agui(
        http,
        "alice-token",
        json!({"threadId": thread, "runId": "r2", "messages": [user, result], "tools": tools}),
    )
    .await;
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_FINISHED", "{events:?}");
    assert_eq!(last["outcome"], json!({"type": "success"}), "{events:?}");
    let snapshot = events
        .iter()
        .find(|e| e["type"] == "MESSAGES_SNAPSHOT")
        .unwrap_or_else(|| panic!("no snapshot: {events:?}"));
    assert!(snapshot.to_string().contains("done: 12:00"), "{snapshot}");

    // The same result again: nothing new to run.
    let events = agui(
        http,
        "alice-token",
        json!({"threadId": thread, "runId": "r3", "messages": [user, result], "tools": tools}),
    )
    .await;
    let last = events.last().unwrap();
    let what = "ag-ui: a client tool's result sent again";
    vec![(
        what.to_owned(),
        200,
        format!(
            "{} {}",
            last["type"].as_str().unwrap_or("-"),
            last["code"].as_str().unwrap_or("-")
        ),
    )]
}

/// One A2A JSON-RPC call: `(HTTP status, the JSON-RPC answer)`.
async fn rpc(http: &Http, token: &str, method: &str, params: Value) -> (u16, Value) {
    http.post(
        token,
        "/a2a",
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
    )
    .await
}

/// An A2A message; `data`: a JSON part (decisions) instead of text.
fn a2a_message(
    id: &str,
    context: &str,
    task: Option<&str>,
    text: &str,
    data: Option<Value>,
) -> Value {
    let part = match data {
        Some(d) => json!({"data": d, "mediaType": "application/json"}),
        None => json!({"text": text}),
    };
    let mut m =
        json!({"messageId": id, "contextId": context, "role": "ROLE_USER", "parts": [part]});
    if let Some(t) = task {
        m["taskId"] = json!(t);
    }
    json!({"message": m})
}

/// The refusal of a JSON-RPC answer, as `(what, HTTP status, "rpc <code> <reinsCode>")`.
fn rpc_refusal(what: &str, (status, body): (u16, Value)) -> (String, u16, String) {
    let e = &body["error"];
    assert!(e.is_object(), "{what}: not refused: {body}");
    let reins = e["data"][0]["metadata"]["reinsCode"]
        .as_str()
        .unwrap_or("-");
    (
        what.to_owned(),
        status,
        format!("rpc {} {reins}", e["code"]),
    )
}

/// A2A: a message that pauses (input required), the same message again (its task, nothing
/// runs again), refused decisions, the approval (the tool runs once), the decision
/// message again (its task), and a decision on the ended task.
async fn a2a(http: &Http, tag: &str, runs: &impl Fn() -> usize) -> Vec<(String, u16, String)> {
    let ctx = format!("alice/{tag}-a2a");
    let before = runs();
    let send = a2a_message(&format!("{tag}-m1"), &ctx, None, "delete c.txt", None);
    let (status, out) = rpc(http, "alice-token", "SendMessage", send.clone()).await;
    assert_eq!(status, 200, "{out}");
    let task = out["result"]["task"].clone();
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{out}"
    );
    let task_id = task["id"].as_str().unwrap().to_owned();
    let data = &task["status"]["message"]["parts"][1]["data"];
    let req_id = data["requirements"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(data["requirements"][0]["tool_use"]["name"], "delete_file");
    let token = data["view_token"].as_str().unwrap().to_owned();

    // The same message again (a client's retry): its task, and nothing runs again.
    let (status, again) = rpc(http, "alice-token", "SendMessage", send).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["result"]["task"]["id"], task_id.as_str(), "{again}");
    assert_eq!(
        again["result"]["task"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );
    let (status, got) = rpc(http, "bob-token", "GetTask", json!({"id": task_id})).await;
    assert_eq!(
        (status, got["result"]["status"]["state"].as_str()),
        (200, Some("TASK_STATE_INPUT_REQUIRED")),
        "{got}"
    );
    assert_eq!(runs(), before);

    let decide = |id: &str, req: &str, token: &str| {
        a2a_message(
            id,
            &ctx,
            Some(&task_id),
            "",
            Some(
                json!({"decisions": [{"requirement_id": req, "action": "approve"}], "view_token": token}),
            ),
        )
    };
    let mut refusals = vec![
        rpc_refusal(
            "a2a: decide without the approver role",
            rpc(
                http,
                "alice-token",
                "SendMessage",
                decide(&format!("{tag}-d0"), &req_id, &token),
            )
            .await,
        ),
        rpc_refusal(
            "a2a: decide on a stale view",
            rpc(
                http,
                "bob-token",
                "SendMessage",
                decide(
                    &format!("{tag}-d1"),
                    &req_id,
                    &ViewToken::new(true, ["call_other"]).to_string(),
                ),
            )
            .await,
        ),
        rpc_refusal(
            "a2a: decide on a requirement never pending",
            rpc(
                http,
                "bob-token",
                "SendMessage",
                decide(&format!("{tag}-d2"), "call_nope", &token),
            )
            .await,
        ),
        rpc_refusal(
            "a2a: cancel another's task",
            rpc(http, "carol-token", "CancelTask", json!({"id": "tnope.x"})).await,
        ),
    ];
    assert_eq!(runs(), before);

    // The approval: the task completes with the answer, the tool ran once.
    let approval = decide(&format!("{tag}-d3"), &req_id, &token);
    let (status, out) = rpc(http, "bob-token", "SendMessage", approval.clone()).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        out["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{out}"
    );
    assert_eq!(runs(), before + 1);
    // The decision message again: its task, nothing decided or run again.
    let (status, again) = rpc(http, "bob-token", "SendMessage", approval).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        again["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{again}"
    );
    assert_eq!(runs(), before + 1);
    // A new decision message on the ended task.
    refusals.push(rpc_refusal(
        "a2a: decide on an ended task",
        rpc(
            http,
            "bob-token",
            "SendMessage",
            decide(&format!("{tag}-d4"), &req_id, &token),
        )
        .await,
    ));
    refusals.push(rpc_refusal(
        "a2a: cancel an ended task",
        rpc(http, "alice-token", "CancelTask", json!({"id": task_id})).await,
    ));
    // The audit trail names the approver, via A2A.
    let (_, trail) = http
        .get(
            "bob-token",
            &format!("/v1/sessions/alice%2F{tag}-a2a/decisions"),
        )
        .await;
    assert!(
        trail["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["actor"]["principal"] == "bob"
                && d["actor"]["metadata"]["via"] == "a2a"
                && d["verdict"] == "applied"),
        "{trail}"
    );
    assert_eq!(runs(), before + 1);
    refusals
}

/// A fork of the first session before its first turn, whose run serves the recorded
/// call instead of running it again; its turns; refused forks; a replay that matches
/// the recording; refused replays.
async fn fork_and_replay(
    http: &Http,
    tag: &str,
    runs: &impl Fn() -> usize,
) -> Vec<(String, u16, String)> {
    let path = format!("/v1/sessions/alice%2F{tag}");
    let fork_id = format!("alice/{tag}-fork");
    let fork_path = format!("/v1/sessions/alice%2F{tag}-fork");
    let before = runs();
    let (status, fork) = http
        .post(
            "alice-token",
            &format!("{path}/fork"),
            json!({"new_session_id": fork_id, "before_turn": 0}),
        )
        .await;
    assert_eq!(status, 201, "{fork}");
    assert_eq!(fork["recorded_calls"], 1, "{fork}");
    let (status, turns) = http.get("alice-token", &format!("{fork_path}/turns")).await;
    assert_eq!(status, 200, "{turns}");
    assert_eq!(
        turns["forked_from"]["source"],
        format!("alice/{tag}"),
        "{turns}"
    );

    // The fork's run: the same call is served from the record; nothing asks, nothing runs.
    let (status, out) = http
        .post(
            "alice-token",
            &format!("{fork_path}/runs"),
            json!({"message": "delete a.txt"}),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["status"], "completed", "{out}");
    assert!(
        out["message"].to_string().contains("done: deleted a.txt"),
        "{out}"
    );
    assert_eq!(runs(), before);

    let mut refusals = Vec::new();
    let mut refused = |what: &str, (status, body): (u16, Value)| {
        assert!(status >= 400, "{what}: {status} {body}");
        refusals.push((what.to_owned(), status, code(&body)));
    };
    refused(
        "fork into a taken id",
        http.post(
            "alice-token",
            &format!("{path}/fork"),
            json!({"new_session_id": fork_id, "before_turn": 0}),
        )
        .await,
    );
    refused(
        "fork at no turn",
        http.post(
            "alice-token",
            &format!("{path}/fork"),
            json!({"new_session_id": format!("alice/{tag}-fork2"), "before_turn": 9}),
        )
        .await,
    );
    refused(
        "fork another's session",
        http.post(
            "bob-token",
            &format!("{path}/fork"),
            json!({"new_session_id": "bob/x", "before_turn": 0}),
        )
        .await,
    );

    // The replay: the recorded session's turn with the agent that runs it; no tool runs.
    let resp = http
        .client
        .post(format!("{}{path}/replay", http.base))
        .bearer_auth("alice-token")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.unwrap();
    let report = text
        .split("\n\n")
        .find(|block| block.contains("event: report"))
        .and_then(|block| block.lines().find_map(|l| l.strip_prefix("data: ")))
        .unwrap_or_else(|| panic!("no report: {text}"));
    let report: Value = serde_json::from_str(report).unwrap();
    assert_eq!(report["source"], format!("alice/{tag}"), "{report}");
    assert_eq!(
        report["turns"][0]["served"],
        json!(["delete_file"]),
        "{report}"
    );
    assert!(report["first_divergence"].is_null(), "{report}");
    assert!(text.contains("event: turn"), "{text}");
    assert_eq!(runs(), before);
    refused(
        "replay an unknown session",
        http.post(
            "alice-token",
            "/v1/sessions/alice%2Fnobody/replay",
            json!({}),
        )
        .await,
    );
    refused(
        "replay another's session",
        http.post("bob-token", &format!("{path}/replay"), json!({}))
            .await,
    );
    refusals
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct DeleteArgs {
    /// The file.
    path: String,
}

/// The demo service's model, for the local driver: `delete PATH` calls `delete_file`
/// and `use TOOL` calls `TOOL` (id `call_<number of messages>`), tool results are
/// answered `done: <results>`, anything else `ok`.
struct Rules;

#[async_trait::async_trait]
impl ChatModel for Rules {
    fn model_name(&self) -> &str {
        "rules"
    }

    async fn stream(&self, request: ChatRequest) -> reins_model::Result<ChatStream> {
        let n = request.messages.len();
        let call = |name: &str, args: Value| {
            vec![
                ChatChunk::ToolCallStart {
                    index: 0,
                    id: format!("call_{n}"),
                    name: name.to_owned(),
                },
                ChatChunk::ToolArgsDelta {
                    index: 0,
                    fragment: args.to_string(),
                },
                ChatChunk::Finish {
                    reason: FinishReason::ToolUse,
                },
            ]
        };
        let text = |t: String| {
            vec![
                ChatChunk::TextDelta { text: t },
                ChatChunk::Finish {
                    reason: FinishReason::Stop,
                },
            ]
        };
        let chunks = match request.messages.last() {
            Some(m) if m.role == Role::Tool => {
                let results: Vec<String> = m.tool_results_iter().map(|r| r.text()).collect();
                text(format!("done: {}", results.join("; ")))
            }
            Some(m) if m.role == Role::User && m.text().starts_with("delete ") => {
                let path = m.text().trim_start_matches("delete ").to_owned();
                call("delete_file", json!({"path": path}))
            }
            Some(m) if m.role == Role::User && m.text().starts_with("use ") => {
                call(m.text().trim_start_matches("use "), json!({}))
            }
            _ => text("ok".to_owned()),
        };
        Ok(Box::pin(futures::stream::iter(chunks.into_iter().map(Ok))))
    }
}

/// The same script on reins-server's local driver, with the demo service's model and
/// its confirmed `delete_file`.
async fn on_the_local_driver() -> Vec<(String, u16, String)> {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&runs);
    let mut tools = Toolkit::new();
    tools
        .add(
            Toolkit::function(
                "delete_file",
                "Delete a file",
                move |a: DeleteArgs, _ctx| {
                    let r = Arc::clone(&r);
                    async move {
                        r.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, ToolError>(format!("deleted {}", a.path))
                    }
                },
            )
            .policy(ToolPolicy::confirm()),
        )
        .unwrap();
    let agent = Agent::builder()
        .model(Rules)
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
    let http = Http::start(Server::new(Relayed::new(agent, backend))).await;
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
    let on_local = on_the_local_driver().await;
    assert_eq!(on_restate, on_local);
    // Once for the session's approval, once for the A2A task's; the fork and the
    // replay served the recorded call.
    assert_eq!(h.count("delete_file start"), 2, "{:?}", h.outbox());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_restate_streams_its_steps_through_reins_server() {
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
    let http = Http::start(Server::new(Relayed::new(agent, Arc::new(h.client.clone())))).await;
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
    // The same stream as a run of the local driver's: its start, its steps' events
    // (made from what each step stored, when no live relay is set up), its end.
    assert_eq!(events.first(), Some(&"run_started"), "{text}");
    assert_eq!(events.last(), Some(&"output"), "{text}");
    assert!(
        events.contains(&"tool_execution_finished") && events.contains(&"completed"),
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
