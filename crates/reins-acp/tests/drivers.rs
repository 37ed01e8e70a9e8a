//! The door's scenarios written once and run on both drivers: the local driver (the
//! `Agent` is the session port) and Restate (a real restate-server, the agent's session
//! object in a process of its own, and the door on `Relayed` over a `RestateClient`,
//! with no live relay: the editor's updates are made from what the run stores). The
//! client is the real TypeScript ACP SDK (`tests/client/drivers.mjs`); every message
//! the agent sends is validated against the pinned schema.
//!
//! The Restate test fails under `CI=true` when restate-server is not installed;
//! elsewhere it is reported SKIPPED.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

// One copy for every door crate, beside the driver it deploys.
#[path = "../../reins-restate/tests/door/deployment.rs"]
mod restate;
mod support;

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use reins_acp::{AcpAgent, REFUSED_META};
use reins_agent::port::{Decide, Sessions};
use reins_agent::{Actor, Decision, Verdict};
use serde_json::Value;
use support::*;
use tokio::io::AsyncBufReadExt;

/// The service process of the Restate deployment (started by [`restate::Deployment`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by the Restate scenarios as the service process"]
async fn door_service() {
    restate::service().await;
}

/// Which driver runs the sessions.
#[derive(Clone, Copy, Debug)]
enum Driver {
    Local,
    Restate,
}

/// Serves `acp` to `drivers.mjs` (its stdin/stdout are the wire); answers the script's
/// `DECIDE <session> <requirement>` lines by approving as `inbox-user` through the port
/// (another door's person), then touching `dir/decided`. Returns the script's result.
async fn drive(acp: AcpAgent, dir: &Path) -> Value {
    let mut child = tokio::process::Command::new("node")
        .arg(client_dir().join("drivers.mjs"))
        .arg(dir)
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
        let mut said = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            said.push_str(&line);
            said.push('\n');
            let Some(rest) = line.strip_prefix("DECIDE ") else {
                continue;
            };
            let (session, id) = rest.split_once(' ').unwrap();
            let decide = Decide::new(Actor::new("inbox-user"), vec![Decision::approve(id)]);
            sessions
                .decide(session, decide)
                .await
                .unwrap()
                .wait()
                .await
                .unwrap();
            std::fs::write(&decided, b"").unwrap();
        }
        said
    });
    let served = tokio::spawn(async move { acp.serve(from_client, to_client).await });
    let status = tokio::time::timeout(Duration::from_secs(180), child.wait())
        .await
        .expect("the client did not finish in 180 s")
        .unwrap();
    let said = inbox.await.unwrap();
    assert!(status.success(), "the client failed: {status}\n{said}");
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("the server did not stop after the client left")
        .unwrap()
        .unwrap();
    serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).unwrap()).unwrap()
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

/// Every call the editor was told of was announced first with a `tool_call`.
fn announced_first(updates: &Value) -> Result<(), String> {
    let mut announced = Vec::new();
    for u in updates.as_array().unwrap() {
        let Some(id) = u["toolCallId"].as_str() else {
            continue;
        };
        match u["sessionUpdate"].as_str() {
            Some("tool_call") => announced.push(id.to_owned()),
            _ if announced.iter().any(|a| a == id) => {}
            _ => return Err(format!("`{id}` updated before its tool_call: {u}")),
        }
    }
    Ok(())
}

async fn scenarios(driver: Driver) {
    let test = format!("scenarios_on_{driver:?}");
    if !client_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (sessions, ran, deployment): (Arc<dyn Sessions>, Ran, _) = match driver {
        Driver::Local => {
            let store = reins_memory::SqliteStore::open(dir.path().join("sessions.db"))
                .await
                .unwrap();
            let ran = Ran::file(dir.path().join("ran.txt"));
            (Arc::new(agent(Arc::new(store), &ran)), ran, None)
        }
        Driver::Restate => {
            let Some(binary) = restate::restate_binary(&test) else {
                return;
            };
            let d = restate::Deployment::start(binary, dir.path(), "door_service").await;
            (d.sessions.clone(), d.ran.clone(), Some(d))
        }
    };
    let acp = AcpAgent::builder(sessions.clone()).principal("ana").build();
    let out = drive(acp, dir.path()).await;
    let log = deployment.as_ref().map(restate::Deployment::log);
    let context = format!("{driver:?}: {out:#}\n{}", log.unwrap_or_default());

    assert!(out["validated"].as_u64().unwrap() > 30, "{context}");
    assert_eq!(out["invalid"], serde_json::json!([]), "{context}");

    // The answer's text reaches the editor.
    assert_eq!(out["stream"]["stopReason"], "end_turn", "{context}");
    assert_eq!(out["stream"]["said"], "echo: hello there", "{context}");

    // Allow once: the call shown, asked, ran once, ended completed; the answer said so.
    let a = &out["allowOnce"];
    assert_eq!(a["stopReason"], "end_turn", "{context}");
    assert_eq!(a["asked"], 1, "{context}");
    let call = find(&a["updates"], "tool_call", "").unwrap();
    assert_eq!(call["kind"], "delete", "{context}");
    assert!(
        find(&a["updates"], "tool_call_update", "completed").is_some(),
        "{context}"
    );
    assert!(
        a["said"].as_str().unwrap().contains("deleted a.txt"),
        "{context}"
    );
    assert_eq!(ran.count("delete:a.txt"), 1, "{context}");
    // The decision is audited as the door's principal, via acp.
    let s1 = out["stream"]["session"].as_str().unwrap();
    let audit = sessions.audit(s1).await.unwrap();
    let approve = audit.iter().find(|r| r.decision == "approve").unwrap();
    let actor = approve.actor.as_ref().unwrap();
    assert_eq!(actor.principal, "ana", "{context}");
    assert_eq!(actor.metadata.as_ref().unwrap()["via"], "acp", "{context}");

    // Reject once: never ran; the call ended failed; the model was told.
    let r = &out["rejectOnce"];
    assert!(
        r["said"].as_str().unwrap().contains("Rejected"),
        "{context}"
    );
    assert!(
        find(&r["updates"], "tool_call_update", "failed").is_some(),
        "{context}"
    );
    assert_eq!(ran.count("delete:b.txt"), 0, "{context}");

    // A late second approver: the editor's answer is refused as already decided,
    // saying who decided (in words and in `_meta`); the call ran once (the inbox's).
    let late = &out["late"];
    assert_eq!(late["stopReason"], "end_turn", "{context}");
    assert!(
        late["said"].as_str().unwrap().contains("not applied"),
        "{context}"
    );
    let refused = late["updates"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|u| u["_meta"].get(REFUSED_META))
        .unwrap_or_else(|| panic!("no refusal in _meta: {context}"));
    assert_eq!(refused["code"], "already_decided", "{context}");
    assert_eq!(refused["decided"]["by"], "inbox-user", "{context}");
    assert_eq!(ran.count("delete:c.txt"), 1, "{context}");
    let s2 = late["session"].as_str().unwrap();
    let audit = sessions.audit(s2).await.unwrap();
    let late_refusal = audit
        .iter()
        .find(|r| matches!(&r.verdict, Verdict::Refused { reason, .. } if reason == "already_decided"))
        .unwrap_or_else(|| panic!("the late answer is audited: {audit:#?}"));
    assert_eq!(late_refusal.actor.as_ref().unwrap().principal, "ana");

    // The same prompt again while the first runs: refused (busy), nothing ran twice;
    // cancel stopped the tool; the session goes on.
    assert_eq!(out["again"]["ok"], false, "{context}");
    assert_eq!(out["again"]["code"], -32600, "{context}");
    assert_eq!(out["cancel"]["stopReason"], "cancelled", "{context}");
    ran.wait_for("slow-stopped:g.txt").await;
    assert_eq!(ran.count("slow-start:g.txt"), 1, "{context}");
    assert_eq!(ran.count("slow-done:g.txt"), 0, "{context}");
    assert_eq!(
        out["afterCancel"]["said"], "echo: still there?",
        "{context}"
    );

    // A question left open is asked again on load; allow ran it once.
    assert!(
        out["left"]["said"]
            .as_str()
            .unwrap()
            .contains("Waiting for a decision"),
        "{context}"
    );
    assert_eq!(out["reload"]["asked"], 2, "{context}");
    assert_eq!(ran.count("delete:h.txt"), 1, "{context}");

    // Client tools: the run paused for each, the editor ran it, the result went back
    // through the decision path and the model answered with it.
    assert!(
        out["read"]["said"]
            .as_str()
            .unwrap()
            .contains("contents of /home/ana/project/notes.txt"),
        "{context}"
    );
    assert_eq!(
        out["written"][0]["path"], "/home/ana/project/out.txt",
        "{context}"
    );
    assert!(
        out["run"]["said"].as_str().unwrap().contains("exit code 0"),
        "{context}"
    );
    assert!(
        find(&out["plan"]["updates"], "plan", "").is_some(),
        "{context}"
    );
    let s5 = out["read"]["session"].as_str().unwrap();
    let record = sessions.read(s5, true).await.unwrap();
    let results: Vec<&str> = record
        .messages
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(
        results,
        [
            "read_text_file",
            "write_text_file",
            "run_in_terminal",
            "update_plan"
        ],
        "{context}"
    );

    // Every call shown was announced, and ended completed or failed, except the one
    // whose question was left open.
    for (turn, waiting) in [
        ("stream", 0),
        ("allowOnce", 0),
        ("rejectOnce", 0),
        ("late", 0),
        ("cancel", 0),
        ("afterCancel", 0),
        ("left", 1),
        ("reload", 0),
        ("read", 0),
        ("write", 0),
        ("run", 0),
        ("plan", 0),
    ] {
        let updates = &out[turn]["updates"];
        let left = unfinished(updates);
        assert_eq!(left.len(), waiting, "{turn}: {left:?}\n{context}");
        if turn != "reload" {
            // (a load replays calls announced in earlier turns)
            announced_first(updates).unwrap_or_else(|e| panic!("{turn}: {e}\n{context}"));
        }
    }
    if let Some(d) = deployment {
        d.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenarios_on_the_local_driver() {
    scenarios(Driver::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenarios_on_restate() {
    scenarios(Driver::Restate).await;
}
