//! The real TypeScript ACP SDK (`@agentclientprotocol/sdk` 2.4.0, protocol version 1,
//! pinned in tests/client/package-lock.json, installed by .ci/run) as the client of a
//! reins agent over stdio: the client runs as a child whose stdin/stdout are the wire,
//! and every message the agent sends is validated against the pinned ACP schema.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use reins_acp::AcpAgent;
use reins_agent::approval::{GrantEffect, GrantFilter};
use reins_agent::port::Decide;
use reins_agent::{Actor, Decision, RunStatus};
use reins_message::Msg;
use serde_json::Value;
use support::*;
use tokio::io::AsyncBufReadExt;

const CHILD_ENV: &str = "REINS_ACP_PAUSE_CHILD";
const PAUSED: &str = "acp/elsewhere/paused-1";

/// In a child process: pause a session on `delete p.txt` in the store, then exit.
#[test]
fn paused_child() {
    let Ok(db) = std::env::var(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let store = reins_memory::SqliteStore::open(&db).await.unwrap();
        let ran = Ran::default();
        let agent = agent(Arc::new(store), &ran);
        let out = agent
            .session(PAUSED)
            .await
            .unwrap()
            .send(Msg::user("delete p.txt"))
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Paused);
        assert!(ran.all().is_empty());
    });
}

/// Runs `script` under node with its stdin/stdout served by `acp`; the test answers
/// the script's `DECIDE <session> <requirement>` lines by rejecting in the "inbox"
/// (the agent's API, as another door would) and then touching `<dir>/decided`.
async fn drive(acp: AcpAgent, script: &str, args: &[&str], dir: &std::path::Path) -> Value {
    let mut child = tokio::process::Command::new("node")
        .arg(client_dir().join(script))
        .arg(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let to_client = child.stdin.take().unwrap();
    let from_client = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let sessions = acp.sessions().clone();
    let decided = dir.join("decided");
    let inbox = tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("client: {line}");
            let Some(rest) = line.strip_prefix("DECIDE ") else {
                continue;
            };
            let (session, id) = rest.split_once(' ').unwrap();
            // Another door's person decides first, through the same port.
            let decide = Decide::new(
                Actor::new("inbox-user"),
                vec![Decision::reject(id, "not this one")],
            );
            sessions
                .decide(session, decide)
                .await
                .unwrap()
                .wait()
                .await
                .unwrap();
            std::fs::write(&decided, b"").unwrap();
        }
    });
    let served = tokio::spawn(async move { acp.serve(from_client, to_client).await });
    let status = tokio::time::timeout(Duration::from_secs(120), child.wait())
        .await
        .expect("the client did not finish in 120 s")
        .unwrap();
    assert!(status.success(), "the client failed: {status}");
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("the server did not stop after the client left")
        .unwrap()
        .unwrap();
    let _ = inbox.await;
    serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).unwrap()).unwrap()
}

fn kinds(updates: &Value) -> Vec<String> {
    updates
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap().to_owned())
        .collect()
}

fn find<'a>(updates: &'a Value, kind: &str, status: &str) -> Option<&'a Value> {
    updates
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["sessionUpdate"] == kind && (status.is_empty() || u["status"] == status))
}

/// The calls of a turn whose last status is not final (`completed` or `failed`).
fn unfinished(updates: &Value) -> Vec<String> {
    let mut last: Vec<(String, String)> = Vec::new();
    for u in updates.as_array().unwrap() {
        let (Some(id), Some(status)) = (u["toolCallId"].as_str(), u["status"].as_str()) else {
            continue;
        };
        match last.iter_mut().find(|(i, _)| i == id) {
            Some(l) => l.1 = status.to_owned(),
            None => last.push((id.to_owned(), status.to_owned())),
        }
    }
    last.into_iter()
        .filter(|(_, s)| s != "completed" && s != "failed")
        .map(|(id, s)| format!("{id}: {s}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_client_drives_every_scenario() {
    if !client_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    // Another process pauses a session and exits.
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["paused_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &db)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());

    let store = Arc::new(reins_memory::SqliteStore::open(&db).await.unwrap());
    let ran = Ran::default();
    let agent = agent(store, &ran);
    let acp = AcpAgent::builder(agent.clone()).principal("ana").build();
    let out = drive(acp, "scenarios.mjs", &[PAUSED], dir.path()).await;
    if let Ok(to) = std::env::var("REINS_ACP_TRANSCRIPT") {
        std::fs::copy(dir.path().join("transcript.jsonl"), to).unwrap();
    }

    // Every agent message is valid under the pinned schema.
    assert!(
        out["validated"].as_u64().unwrap() > 50,
        "{}",
        out["validated"]
    );
    assert_eq!(
        out["invalid"],
        serde_json::json!([]),
        "{:#}",
        out["invalid"]
    );

    // initialize.
    assert_eq!(out["init"]["protocolVersion"], 1);
    assert_eq!(out["init"]["agentCapabilities"]["loadSession"], true);

    // A prompt that streams: several chunks, the whole text, end_turn.
    let s = &out["stream"];
    assert_eq!(s["stopReason"], "end_turn");
    assert_eq!(s["said"], "echo: hello there");
    assert!(kinds(&s["updates"]).len() > 3, "{s}");

    // Allow once: asked with the four options, the call shown with kind and location,
    // ran once.
    let a = &out["allowOnce"];
    assert_eq!(a["stopReason"], "end_turn");
    assert_eq!(a["asked"], 1);
    let call = find(&a["updates"], "tool_call", "pending").unwrap();
    assert_eq!(call["kind"], "delete");
    let ready = find(&a["updates"], "tool_call_update", "pending").unwrap();
    assert_eq!(ready["locations"][0]["path"], "/home/ana/project/a.txt");
    assert!(find(&a["updates"], "tool_call_update", "in_progress").is_some());
    assert!(find(&a["updates"], "tool_call_update", "completed").is_some());
    assert!(a["said"].as_str().unwrap().contains("deleted a.txt"), "{a}");
    assert_eq!(ran.count("delete:a.txt"), 1);
    // The decision is audited as the door's principal, via acp.
    let s1 = a["session"].as_str().unwrap();
    let records = agent.session(s1).await.unwrap().decisions().await.unwrap();
    let approve = records.iter().find(|r| r.decision == "approve").unwrap();
    let actor = approve.actor.as_ref().unwrap();
    assert_eq!(actor.principal, "ana");
    assert_eq!(actor.metadata.as_ref().unwrap()["via"], "acp");

    // Reject once: never ran; the model was told.
    let r = &out["rejectOnce"];
    assert_eq!(r["stopReason"], "end_turn");
    assert!(r["said"].as_str().unwrap().contains("Rejected"), "{r}");
    assert!(
        find(&r["updates"], "tool_call_update", "failed").is_some(),
        "{r}"
    );
    assert_eq!(ran.count("delete:b.txt"), 0);

    // Allow always: the grant is stored for the tool in this session; the next call
    // runs without asking.
    let s2 = out["allowAlways"]["session"].as_str().unwrap();
    assert_eq!(out["allowAlways"]["asked"], 1);
    assert_eq!(out["allowAlwaysNext"]["asked"], 1, "asked again");
    assert_eq!(ran.count("delete:c.txt"), 1);
    assert_eq!(ran.count("delete:d.txt"), 1);
    let grants = agent.grants(&GrantFilter::all()).await.unwrap();
    assert_eq!(grants.len(), 2, "one grant, one deny rule: {grants:?}");
    let allow = grants
        .iter()
        .find(|g| g.effect == GrantEffect::Allow)
        .unwrap();
    assert_eq!(allow.tool, "delete_file");
    assert_eq!(allow.session.as_deref(), Some(s2));
    assert_eq!(allow.created_by.as_deref(), Some("ana"));
    assert!(allow.note.as_deref().unwrap().contains("via acp"));
    let records = agent.session(s2).await.unwrap().decisions().await.unwrap();
    assert!(records.iter().any(|r| r.via == "grant"), "{records:?}");

    // Reject always: the next call is rejected without asking and never runs.
    assert_eq!(out["rejectAlways"]["asked"], 1);
    assert_eq!(out["rejectAlwaysNext"]["asked"], 1, "asked again");
    assert!(
        out["rejectAlwaysNext"]["said"]
            .as_str()
            .unwrap()
            .contains("Rejected")
    );
    assert_eq!(ran.count("delete:e.txt") + ran.count("delete:f.txt"), 0);
    // The editor sees both calls end as a rejection does: the one answered "reject
    // always", and the one the rule then rejected without asking (failed, with the
    // rule's note).
    for turn in ["rejectAlways", "rejectAlwaysNext"] {
        let updates = &out[turn]["updates"];
        assert_eq!(
            unfinished(updates),
            Vec::<String>::new(),
            "{turn}: {updates:#}"
        );
        let closed = find(updates, "tool_call_update", "failed").unwrap();
        assert_eq!(
            closed["rawOutput"]["outcome"], "rejected",
            "{turn}: {closed:#}"
        );
    }
    let by_rule = find(
        &out["rejectAlwaysNext"]["updates"],
        "tool_call_update",
        "failed",
    )
    .unwrap();
    assert!(
        by_rule["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("standing rule"),
        "{by_rule:#}"
    );
    // ... through a deny rule in the store, audited as such, and revocable: revoked,
    // the next call asks again.
    let s3 = out["rejectAlways"]["session"].as_str().unwrap();
    let deny = grants
        .iter()
        .find(|g| g.effect == GrantEffect::Deny)
        .unwrap();
    assert_eq!(deny.session.as_deref(), Some(s3));
    assert_eq!(deny.created_by.as_deref(), Some("ana"));
    let session3 = agent.session(s3).await.unwrap();
    let records = session3.decisions().await.unwrap();
    let by_rule = records.iter().find(|r| r.via == "grant").unwrap();
    assert_eq!(by_rule.decision, "reject");
    assert_eq!(by_rule.grant_id.as_deref(), Some(deny.id.as_str()));
    agent.revoke_grant(&deny.id, Some("ana")).await.unwrap();
    let after = session3.send(Msg::user("delete z.txt")).await.unwrap();
    assert_eq!(after.status, RunStatus::Paused);
    assert_eq!(ran.count("delete:z.txt"), 0);

    // Cancel mid-stream: cancelled; a second prompt meanwhile was refused as busy; the
    // transcript stays valid (the next prompt answers).
    assert_eq!(out["busy"]["ok"], false);
    assert_eq!(out["busy"]["code"], -32600, "{}", out["busy"]);
    assert_eq!(out["cancel"]["stopReason"], "cancelled");
    assert!(ran.all().contains(&"slow-stopped:g.txt".to_owned()));
    assert!(!ran.all().contains(&"slow-done:g.txt".to_owned()));
    assert_eq!(out["afterCancel"]["stopReason"], "end_turn");
    assert_eq!(out["afterCancel"]["said"], "echo: still there?");

    // A cancelled permission request left the requirement pending; session/load asked
    // again and allow ran it once.
    assert_eq!(out["cancelledAsk"]["stopReason"], "end_turn");
    assert!(
        out["cancelledAsk"]["said"]
            .as_str()
            .unwrap()
            .contains("Waiting for a decision")
    );
    assert_eq!(out["reload"]["asked"], 2);
    assert_eq!(ran.count("delete:h.txt"), 1);
    let reload = kinds(&out["reload"]["updates"]);
    assert_eq!(reload[0], "user_message_chunk", "{reload:?}");

    // The session paused in another process: replayed (the user's message, the call
    // waiting), asked again, ran once after allow.
    let load = &out["load"];
    assert_eq!(load["result"], serde_json::json!({}));
    let replay = kinds(&load["updates"]);
    assert_eq!(
        &replay[..2],
        ["user_message_chunk", "tool_call"],
        "{replay:?}"
    );
    assert_eq!(load["updates"][1]["status"], "pending");
    assert_eq!(load["asked"].as_array().unwrap().len(), 1);
    assert_eq!(load["asked"][0]["options"].as_array().unwrap().len(), 4);
    assert_eq!(ran.count("delete:p.txt"), 1);
    let paused = agent.session(PAUSED).await.unwrap();
    assert!(!paused.is_paused().await.unwrap());

    // A stale answer: the inbox rejected first; the editor's allow changed nothing.
    let st = &out["stale"];
    assert_eq!(st["stopReason"], "end_turn");
    assert!(st["said"].as_str().unwrap().contains("not applied"), "{st}");
    assert_eq!(ran.count("delete:s.txt"), 0);
    let s6 = st["session"].as_str().unwrap();
    let records = agent.session(s6).await.unwrap().decisions().await.unwrap();
    let applied: Vec<_> = records
        .iter()
        .filter(|r| matches!(r.verdict, reins_agent::Verdict::Applied))
        .collect();
    assert_eq!(applied.len(), 1, "{records:?}");
    assert_eq!(applied[0].actor.as_ref().unwrap().principal, "inbox-user");

    // Client tools: executed through the client, their results in the ledger.
    assert!(
        out["read"]["said"]
            .as_str()
            .unwrap()
            .contains("contents of /home/ana/project/notes.txt")
    );
    assert_eq!(out["written"][0]["path"], "/home/ana/project/out.txt");
    assert_eq!(out["written"][0]["content"], "new text");
    assert!(out["run"]["said"].as_str().unwrap().contains("exit code 0"));
    let terminal = out["run"]["updates"]
        .as_array()
        .unwrap()
        .iter()
        .any(|u| u["content"][0]["type"] == "terminal");
    assert!(terminal, "{}", out["run"]);
    let plan = find(&out["plan"]["updates"], "plan", "").unwrap();
    assert!(
        find(&out["plan"]["updates"], "tool_call_update", "").is_none(),
        "the plan is no tool call: {}",
        out["plan"]
    );
    assert_eq!(plan["entries"][1]["priority"], "medium");
    let s7 = out["read"]["session"].as_str().unwrap();
    let messages = agent.session(s7).await.unwrap().messages().await.unwrap();
    let results: Vec<_> = messages
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .collect();
    let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "read_text_file",
            "write_text_file",
            "run_in_terminal",
            "update_plan"
        ]
    );

    // User input through an elicitation form: the value ran; a decline rejected.
    assert_eq!(out["formsAsked"].as_array().unwrap().len(), 2);
    assert_eq!(out["formsAsked"][0]["mode"], "form");
    assert_eq!(
        out["formsAsked"][0]["requestedSchema"]["required"][0],
        "tag"
    );
    assert_eq!(ran.count("tag:c.txt=blue"), 1, "{:?}", ran.all());
    assert!(
        out["formAccept"]["said"]
            .as_str()
            .unwrap()
            .contains("tagged c.txt blue")
    );
    assert!(
        out["formDecline"]["said"]
            .as_str()
            .unwrap()
            .contains("Rejected")
    );
    assert!(!ran.all().iter().any(|r| r.starts_with("tag:d.txt")));

    // Every call shown ends completed or failed, except the one whose permission
    // request was cancelled: it waits (pending) for the inbox or the next load.
    for (turn, waiting) in [
        ("stream", 0),
        ("allowOnce", 0),
        ("rejectOnce", 0),
        ("allowAlways", 0),
        ("allowAlwaysNext", 0),
        ("rejectAlways", 0),
        ("rejectAlwaysNext", 0),
        ("cancel", 0),
        ("afterCancel", 0),
        ("cancelledAsk", 1),
        ("reload", 0),
        ("load", 0),
        ("stale", 0),
        ("read", 0),
        ("write", 0),
        ("run", 0),
        ("plan", 0),
        ("formAccept", 0),
        ("formDecline", 0),
    ] {
        let left = unfinished(&out[turn]["updates"]);
        assert_eq!(
            left.len(),
            waiting,
            "{turn}: {left:?}\n{:#}",
            out[turn]["updates"]
        );
    }

    // The protocol's errors.
    let e = &out["errors"];
    assert_eq!(e["unknownPrompt"]["code"], -32002, "{e}");
    assert_eq!(e["unknownLoad"]["code"], -32002, "{e}");
    assert_eq!(e["relativeCwd"]["code"], -32602, "{e}");
    assert_eq!(e["image"]["code"], -32602, "{e}");
    assert_eq!(e["unknownMethod"]["code"], -32601, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_json_rpc_gets_the_protocols_errors() {
    if !client_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(reins_memory::InMemoryStore::new());
    let ran = Ran::default();
    let acp = AcpAgent::builder(agent(store, &ran)).build();
    let out = drive(acp, "raw.mjs", &[], dir.path()).await;
    assert_eq!(
        out["invalid"],
        serde_json::json!([]),
        "{:#}",
        out["invalid"]
    );
    let by_id = |id: Value| {
        out["responses"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["id"] == id)
            .cloned()
            .collect::<Vec<_>>()
    };
    // Every line is answered, in order: the agent kept serving after each bad one
    // (a line that is not UTF-8 included).
    let names = out["names"].as_array().unwrap();
    let responses = out["responses"].as_array().unwrap();
    assert_eq!(responses.len(), names.len(), "{:#}", out["responses"]);
    let nulls: Vec<i64> = by_id(Value::Null)
        .iter()
        .map(|r| r["error"]["code"].as_i64().unwrap())
        .collect();
    assert_eq!(nulls, [-32700, -32700, -32600], "{:#}", out["responses"]);
    let not_utf8 = &responses[1];
    assert_eq!(names[1], "notUtf8");
    assert_eq!(not_utf8["id"], Value::Null, "{not_utf8}");
    assert_eq!(not_utf8["error"]["code"], -32700, "{not_utf8}");
    assert!(
        not_utf8["error"]["message"]
            .as_str()
            .unwrap()
            .contains("UTF-8"),
        "{not_utf8}"
    );
    let code = |id: i64| by_id(id.into())[0]["error"]["code"].clone();
    assert_eq!(code(2), -32600);
    assert_eq!(code(3), -32600);
    assert_eq!(code(4), -32602);
    assert_eq!(by_id(5.into())[0]["result"]["protocolVersion"], 1);
    assert_eq!(code(6), -32601);
    assert_eq!(code(7), -32002);
    assert_eq!(code(8), -32602);
    assert!(ran.all().is_empty());
}

/// A reached budget through the real SDK client (`tests/client/budget.mjs`): a
/// permission request before the tool starts, after the call's own; allow extends the
/// budget and the call runs, reject ends the run with a message saying so and nothing
/// runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_client_extends_and_ends_a_budget() {
    if !client_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        reins_memory::SqliteStore::open(dir.path().join("s.db"))
            .await
            .unwrap(),
    );
    let ran = Ran::default();
    // The model's tool call costs about four tokens: the limit is reached before the
    // tool starts.
    let agent = reins_agent::Agent::builder()
        .name("files")
        .model(reins_model::ScriptedModel::from_fn(respond))
        .toolkit(toolkit(&ran))
        .store_arc(store)
        .budget(reins_agent::budget::Budget::new().tokens(3))
        .build()
        .unwrap();
    let acp = AcpAgent::builder(agent).principal("ana").build();
    let out = drive(acp, "budget.mjs", &[], dir.path()).await;
    assert_eq!(
        out["invalid"],
        serde_json::json!([]),
        "{:#}",
        out["invalid"]
    );

    let extended = &out["extended"];
    let asked = extended["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 2, "{extended:#}");
    let budget = &asked[1];
    assert_eq!(budget["rawInput"]["reached"][0], "tokens", "{budget:#}");
    assert_eq!(budget["rawInput"]["limit"]["tokens"], 3, "{budget:#}");
    let options = budget["options"].as_array().unwrap();
    assert!(
        options
            .iter()
            .all(|o| !o.as_str().unwrap().ends_with("always")),
        "a budget is never allowed always: {options:?}"
    );
    assert_eq!(extended["stopReason"], "end_turn", "{extended:#}");
    assert!(
        extended["said"].as_str().unwrap().contains("deleted a.txt"),
        "{extended:#}"
    );

    let ended = &out["ended"];
    assert_eq!(ended["asked"].as_array().unwrap().len(), 2, "{ended:#}");
    assert!(
        ended["said"].as_str().unwrap().contains("budget"),
        "{ended:#}"
    );
    assert_eq!(ran.all(), ["delete:a.txt"], "b.txt was not deleted");
}
