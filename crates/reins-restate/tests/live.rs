//! Live events of Restate-driven turns through reins-server (`Server::backend`): a
//! real restate-server, the reins demo service as a real child process relaying its
//! run events, and two reins-servers on one SQLite store. Deltas reach listeners on
//! every instance before the stored message, an interrupt mid-stream reaches them,
//! a crash marks events by attempt and a journaled step sends none again, and the
//! real AG-UI client streams Restate turns.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use reins_agent::{Agent, Relayed};
use reins_memory::SqliteStore;
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_server::Server;
use serde_json::{Value, json};
use support::http::*;

/// reins-server on the local driver (no backend).
async fn on_the_local_server() -> Http {
    let agent = Agent::builder()
        .model(ScriptedModel::new(Vec::<ScriptedResponse>::new()))
        .build()
        .unwrap();
    Http::start(Server::new(agent)).await
}

/// The stored answer: a `message` event of the session stream, or the `completed`
/// event that ends a run's own stream (with the message it stored).
fn is_answer(e: &Sse) -> bool {
    (e.event == "message" && e.data["message"]["role"] == "assistant" || e.event == "completed")
        && e.data["message"]["content"]
            .as_array()
            .is_some_and(|c| c.iter().any(|b| b["text"].is_string()))
}

/// Two reins-server instances fronting one deployment (and the same store), each listed
/// in the service's live relay: a reins-server on a free port, bound before the service
/// starts.
async fn two_fronts() -> Option<(support::Harness, Http, Http)> {
    let (h, listeners) = support::Harness::start_with_listeners(2, |urls| {
        vec![
            "--live".to_owned(),
            urls[0].clone(),
            "--live".to_owned(),
            urls[1].clone(),
            "--live-token".to_owned(),
            "relay-token".to_owned(),
        ]
    })
    .await?;
    let mut fronts = Vec::new();
    for listener in listeners {
        let store = SqliteStore::open(h.dir.path().join("reins.sqlite"))
            .await
            .unwrap();
        let agent = Agent::builder()
            .model(ScriptedModel::new(Vec::<ScriptedResponse>::new()))
            .store(store)
            .build()
            .unwrap();
        let every = std::time::Duration::from_millis(200);
        let port = Relayed::new(agent, Arc::new(h.client.clone())).reread(every);
        let server = Server::new(port).poll_interval(every);
        fronts.push(Http::start_on(server, listener));
    }
    let b = fronts.pop().unwrap();
    let a = fronts.pop().unwrap();
    Some((h, a, b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restate_turns_text_deltas_reach_listeners_on_every_instance_before_its_message() {
    let Some((h, a, b)) = two_fronts().await else {
        return;
    };
    let path = "/v1/sessions/alice%2Flive";
    let (status, out) = a
        .post(
            "alice-token",
            &format!("{path}/runs"),
            json!({"message": "hello"}),
        )
        .await;
    assert_eq!(
        (status, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );

    // A listener on instance A from the start, the run's own stream on A, and a
    // listener on instance B that joins mid-turn.
    let mut on_a = a
        .listen("alice-token", &format!("{path}/events"), None)
        .await;
    on_a.until("the first state", |e| e.event == "state").await;
    let mut run = a
        .listen(
            "alice-token",
            &format!("{path}/runs?stream=true"),
            Some(json!({"message": "stream 8"})),
        )
        .await;
    on_a.until("two deltas", |e| {
        e.event == "text_delta" && e.data["text"] == "part 1. "
    })
    .await;
    let mut on_b = b.listen("bob-token", &format!("{path}/events"), None).await;

    let parts: Vec<String> = (0..8).map(|i| format!("part {i}. ")).collect();
    let whole = parts.concat();
    let events = run
        .until("the output", |e| e.event == "output")
        .await
        .to_vec();
    assert_eq!(run.texts(), parts, "{events:#?}");
    let output = &events.last().unwrap().data["output"];
    assert_eq!(output["status"], "completed");
    assert_eq!(
        output["message"]["content"][0]["text"],
        whole.as_str(),
        "{output}"
    );
    // Deltas, then the stored answer; the live events name the Restate turn and one
    // attempt of the model step, which began with `reasoning_started`.
    let answer = events
        .iter()
        .position(is_answer)
        .expect("the stored answer");
    let last_delta = events
        .iter()
        .rposition(|e| e.event == "text_delta")
        .unwrap();
    assert!(last_delta < answer, "{events:#?}");
    let live: Vec<&Sse> = events
        .iter()
        .filter(|e| e.data.get("attempt").is_some())
        .collect();
    assert_eq!(live[0].event, "reasoning_started", "{events:#?}");
    assert!(live.iter().all(|e| {
        e.data["attempt"] == live[0].data["attempt"]
            && e.data["run_id"] == live[0].data["run_id"]
            && e.data["run_id"]
                .as_str()
                .is_some_and(|r| r.starts_with("inv_"))
    }));

    for (name, listener) in [("A", &mut on_a), ("B", &mut on_b)] {
        let seen = listener
            .until("the stored answer", is_answer)
            .await
            .to_vec();
        let texts = listener.texts();
        assert!(
            !texts.is_empty() && parts.ends_with(&texts),
            "{name}: the rest of the deltas, in order: {texts:?}"
        );
        let last_delta = seen.iter().rposition(|e| e.event == "text_delta").unwrap();
        assert!(last_delta < seen.len() - 1, "{name}: {seen:#?}");
        assert_eq!(
            seen.last().unwrap().data["message"]["content"][0]["text"],
            whole.as_str()
        );
    }
    assert_eq!(on_a.texts(), parts, "A listened from the start");
    assert!(
        on_b.texts().len() < parts.len(),
        "B joined mid-turn: {:?}",
        on_b.texts()
    );
    assert_eq!(h.count("model"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_mid_stream_on_restate_reaches_the_listeners() {
    let Some((h, a, b)) = two_fronts().await else {
        return;
    };
    let path = "/v1/sessions/alice%2Fcut";
    let (status, _) = a
        .post(
            "alice-token",
            &format!("{path}/runs"),
            json!({"message": "hello"}),
        )
        .await;
    assert_eq!(status, 200);
    let mut on_b = b.listen("bob-token", &format!("{path}/events"), None).await;
    on_b.until("the first state", |e| e.event == "state").await;
    let mut run = a
        .listen(
            "alice-token",
            &format!("{path}/runs?stream=true"),
            Some(json!({"message": "stream 50"})),
        )
        .await;
    on_b.until("three deltas", |e| {
        e.event == "text_delta" && e.data["text"] == "part 2. "
    })
    .await;
    // Interrupted through the other instance.
    let (status, body) = b
        .post("alice-token", &format!("{path}/interrupt"), json!({}))
        .await;
    assert_eq!(
        (status, body["delivered"].as_str()),
        (202, Some("backend")),
        "{body}"
    );

    let events = run
        .until("the output", |e| e.event == "output")
        .await
        .to_vec();
    assert_eq!(
        events.last().unwrap().data["output"]["status"],
        "cancelled",
        "{events:#?}"
    );
    assert!(!events.iter().any(is_answer), "{events:#?}");
    let heard = run.texts().len();
    assert!((3..50).contains(&heard), "{heard} deltas");
    // B hears the deltas stop and the session settle (idle), with no answer stored.
    let seen = on_b
        .until("the settled state", |e| {
            e.event == "state" && e.data["status"] == "idle"
        })
        .await
        .to_vec();
    assert!(!seen.iter().any(is_answer), "{seen:#?}");
    assert!(on_b.texts().len() < 50);
    // Sanitized: the partial answer was never stored.
    let stored = h.stored("alice/cut").await;
    // The live route takes live events only, from a backend's process only; a refused
    // batch publishes nothing.
    let live = format!("{path}/live");
    let delta = json!({"event": "text_delta", "text": "forged"});
    let (status, body) = b
        .post("alice-token", &live, json!({"events": [delta]}))
        .await;
    assert_eq!((status, code(&body).as_str()), (403, "forbidden"), "{body}");
    for bad in [
        json!({"event": "completed", "status": "completed", "message": stored.messages[2]}),
        json!({"event": "no_such_event"}),
        json!("text"),
    ] {
        let (status, body) = b
            .post("relay-token", &live, json!({"events": [delta, bad]}))
            .await;
        assert_eq!(
            (status, code(&body).as_str()),
            (422, "invalid_input"),
            "{body}"
        );
    }
    let (status, body) = b
        .post("relay-token", &live, json!({"event": [delta]}))
        .await;
    assert!(status == 400 || status == 422, "{status} {body}");
    assert!(on_b.texts().iter().all(|t| t != "forged"));
    // A server that fronts no backend has no such route.
    let (status, _) = on_the_local_server()
        .await
        .post(
            "relay-token",
            "/v1/sessions/alice%2Fcut/live",
            json!({"events": []}),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(stored.messages.len(), 3, "{:?}", stored.messages);
    assert_eq!(stored.messages[2].role, reins_message::Role::User);
}

/// The live events of `seen`, grouped by the attempt of the step that sent them, in
/// order of their first event.
fn attempts(seen: &[Sse]) -> Vec<(String, Vec<Sse>)> {
    let mut out: Vec<(String, Vec<Sse>)> = Vec::new();
    for e in seen {
        let Some(a) = e.data.get("attempt").and_then(Value::as_str) else {
            continue;
        };
        match out.iter_mut().find(|(k, _)| k == a) {
            Some((_, v)) => v.push(e.clone()),
            None => out.push((a.to_owned(), vec![e.clone()])),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_live_events_are_marked_by_attempt_and_a_journaled_step_sends_none_again() {
    let Some((mut h, a, _b)) = two_fronts().await else {
        return;
    };
    let path = "/v1/sessions/alice%2Fcrash";
    let (status, _) = a
        .post(
            "alice-token",
            &format!("{path}/runs"),
            json!({"message": "hello"}),
        )
        .await;
    assert_eq!(status, 200);
    let mut on_a = a
        .listen("alice-token", &format!("{path}/events"), None)
        .await;
    on_a.until("the first state", |e| e.event == "state").await;

    // kill -9 mid-stream: Restate runs the model step again on the restarted service, a
    // new model call under a new attempt id; the first attempt's text is void.
    let runs = a.clone_client();
    let started = tokio::spawn(async move {
        runs.post(
            "alice-token",
            &format!("{path}/runs"),
            json!({"message": "stream 10"}),
        )
        .await
    });
    on_a.until("four deltas", |e| e.data["text"] == "part 3. ")
        .await;
    h.service.restart().await;
    let seen = on_a.until("the stored answer", is_answer).await.to_vec();
    let (status, out) = started.await.unwrap();
    assert_eq!(
        (status, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );
    let parts: Vec<String> = (0..10).map(|i| format!("part {i}. ")).collect();
    let texts = |events: &[Sse]| -> Vec<String> {
        events
            .iter()
            .filter(|e| e.event == "text_delta")
            .map(|e| e.data["text"].as_str().unwrap().to_owned())
            .collect()
    };
    let tries = attempts(&seen);
    assert_eq!(tries.len(), 2, "{seen:#?}");
    for (_, events) in &tries {
        assert_eq!(events[0].event, "reasoning_started");
        assert_eq!(events[0].data["iteration"], 1);
    }
    let first = texts(&tries[0].1);
    assert!(first.len() >= 4 && parts.starts_with(&first), "{first:?}");
    assert_eq!(texts(&tries[1].1), parts);
    assert_eq!(
        seen.last().unwrap().data["message"]["content"][0]["text"],
        parts.concat().as_str()
    );
    assert_eq!(h.count("model"), 3);

    // kill -9 mid-tool, after the model step was journaled: the replay takes the model's
    // answer from the journal and sends nothing for it again; the tool, cut off, is
    // `Unknown` and does not run (nor announce itself) again.
    let from = on_a.seen.len();
    let runs = a.clone_client();
    let started = tokio::spawn(async move {
        runs.post(
            "alice-token",
            &format!("{path}/runs"),
            json!({"message": "work 1500"}),
        )
        .await
    });
    on_a.until("the tool starting", |e| e.event == "tool_execution_started")
        .await;
    h.wait_for_line("work start").await;
    h.service.restart().await;
    let (status, out) = started.await.unwrap();
    assert_eq!(
        (status, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );
    let seen = on_a.until("the stored answer", is_answer).await[from..].to_vec();
    let named = |name: &str| seen.iter().filter(|e| e.event == name).count();
    let reasoning: Vec<&Value> = seen
        .iter()
        .filter(|e| e.event == "reasoning_started")
        .map(|e| &e.data["iteration"])
        .collect();
    assert_eq!(reasoning, [&json!(1), &json!(2)], "{seen:#?}");
    assert_eq!(named("tool_call_ready"), 1, "{seen:#?}");
    assert_eq!(named("tool_execution_started"), 1, "{seen:#?}");
    assert_eq!(named("tool_execution_finished"), 0, "{seen:#?}");
    assert_eq!(h.count("work start"), 1);
    assert_eq!(h.count("work end"), 0);
}

/// reins-server's AG-UI test folder: the pinned `@ag-ui/client` and `@ag-ui/core`
/// (installed by `.ci/run`), and the script this test runs with them.
fn agui_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-server/tests/agui")
}

/// Whether Node.js and the pinned AG-UI client are installed; under CI their absence
/// fails the test, elsewhere it is reported as skipped.
fn agui_client_available() -> bool {
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let installed = agui_dir()
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
    assert!(
        std::env::var_os("CI").is_none(),
        "{why}; CI must run this test"
    );
    eprintln!("SKIPPED: {why}");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agui_client_streams_restate_turns_through_reins_server() {
    if !agui_client_available() {
        return;
    }
    let Some((h, a, _b)) = two_fronts().await else {
        return;
    };
    let child = tokio::process::Command::new("node")
        .arg(agui_dir().join("restate.mjs"))
        .arg(&a.base)
        .env("AGUI_CAROL", "carol-token")
        .current_dir(agui_dir())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(60), child)
        .await
        .expect("the AG-UI client did not finish within 60 s")
        .expect("node could not be started");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the AG-UI client failed:\n{stderr}\n{stdout}\nservice log:\n{}",
        h.service_log()
    );
    let facts: Value = serde_json::from_str(stdout.trim()).unwrap();

    // Streamed: one TEXT_MESSAGE_CONTENT per chunk the model streamed, in order, then
    // the stored transcript and the end.
    let parts: Vec<String> = (0..5).map(|i| format!("part {i}. ")).collect();
    assert_eq!(facts["stream_deltas"], json!(parts), "{facts}");
    let types: Vec<&str> = facts["stream_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(types.first(), Some(&"RUN_STARTED"));
    assert_eq!(
        &types[types.len() - 2..],
        ["MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    );
    let last_content = types
        .iter()
        .rposition(|t| *t == "TEXT_MESSAGE_CONTENT")
        .unwrap();
    assert!(types[last_content + 1] == "TEXT_MESSAGE_END", "{types:?}");
    assert_eq!(
        facts["stream_last_message"]["content"],
        parts.concat().as_str()
    );

    // A pause as an interrupt; the resume runs the tool once, its result streamed.
    assert_eq!(facts["approve_result"], "deleted a.txt", "{facts}");
    assert!(
        facts["approve_text"]
            .as_str()
            .unwrap()
            .starts_with("done: deleted a.txt"),
        "{facts}"
    );
    let first: Vec<&str> = facts["approve_types"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        first.contains(&"TOOL_CALL_START") && first.contains(&"TOOL_CALL_END"),
        "{first:?}"
    );
    assert_eq!(h.count("delete_file start"), 1);
    let trail = h.decisions("carol/agui-approve").await;
    assert_eq!(trail.len(), 1);
    assert_eq!(trail[0].record["actor"]["principal"], "carol");
    assert_eq!(trail[0].record["actor"]["metadata"]["via"], "ag-ui");

    // Client-side tools: the model is offered them, a call of one waits for the
    // client, and the client's result goes on; nothing runs in the service.
    assert!(facts["tools_error"].is_null(), "{facts}");
    assert_eq!(
        facts["tools_pending"].as_array().map(Vec::len),
        Some(1),
        "{facts}"
    );
    assert_eq!(facts["tools_answer"], "done: blue", "{facts}");
    let trail = h.decisions("carol/agui-tools").await;
    assert_eq!(trail.len(), 1, "{trail:?}");
    assert_eq!(trail[0].record["actor"]["metadata"]["via"], "ag-ui");
}
