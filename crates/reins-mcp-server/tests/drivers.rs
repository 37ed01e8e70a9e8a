//! The door's scenarios written once and run on both drivers: the local driver (the
//! `Agent` is the session port) and Restate (a real restate-server, the agent's session
//! object in a process of its own, and the door on `Relayed` over a `RestateClient`).
//! The clients are the real TypeScript SDKs (`tests/client/drivers.mjs` at revision
//! 2026-07-28, `tests/client/drivers_legacy.mjs` before it); the Tasks extension's flow
//! (`tests/client/tasks.mjs`) runs on both too (tests/tasks.rs on the local driver).
//!
//! The Restate tests fail under `CI=true` when restate-server is not installed;
//! elsewhere they are reported SKIPPED.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

// One copy for every door crate, beside the driver it deploys.
#[path = "../../reins-restate/tests/door/deployment.rs"]
mod restate;
mod support;

use std::path::Path;
use std::sync::Arc;

use reins_agent::port::{Decide, Sessions};
use reins_agent::{Actor, Decision};
use serde_json::Value;
use support::*;
use tokio::io::AsyncBufReadExt;

/// The service process of the Restate deployments (started by [`restate::Deployment`]).
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

/// The port over `driver` (with what its tools ran, in `dir/ran.txt`), and the
/// deployment that keeps a Restate driver alive; `None` when restate-server is not
/// installed (outside CI).
async fn port(
    driver: Driver,
    dir: &Path,
    test: &str,
) -> Option<(Arc<dyn Sessions>, Ran, Option<restate::Deployment>)> {
    match driver {
        Driver::Local => {
            let store = reins_memory::SqliteStore::open(dir.join("sessions.db"))
                .await
                .unwrap();
            let ran = Ran::file(dir.join("ran.txt"));
            let sessions: Arc<dyn Sessions> = Arc::new(agent(Arc::new(store), &ran));
            Some((sessions, ran, None))
        }
        Driver::Restate => {
            let binary = restate::restate_binary(test)?;
            let d = restate::Deployment::start(binary, dir, "door_service").await;
            Some((d.sessions.clone(), d.ran.clone(), Some(d)))
        }
    }
}

/// Runs a client script; answers its `DECIDE <session> <requirement>` lines by
/// approving as `carol@inbox` through the port (another door's person), then touching
/// `dir/decided`. Returns the JSON the script prints last.
async fn run_with_inbox(
    sessions: Arc<dyn Sessions>,
    script: &str,
    args: &[&str],
    dir: &Path,
) -> Value {
    let mut child = tokio::process::Command::new("node")
        .arg(client_dir().join(script))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
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
            let decide = Decide::new(Actor::new("carol@inbox"), vec![Decision::approve(id)]);
            let out = sessions
                .decide(session, decide)
                .await
                .unwrap()
                .wait()
                .await
                .unwrap();
            assert!(
                out.message.text().contains("deleted"),
                "the inbox's approval ran the call: {out:?}"
            );
            std::fs::write(&decided, b"").unwrap();
        }
        said
    });
    let mut stdout = child.stdout.take().unwrap();
    let mut printed = String::new();
    let read = async {
        use tokio::io::AsyncReadExt;
        stdout.read_to_string(&mut printed).await.unwrap();
        child.wait().await.unwrap()
    };
    let status = tokio::time::timeout(std::time::Duration::from_secs(180), read)
        .await
        .expect("the client script took longer than 180 s");
    let said = inbox.await.unwrap();
    assert!(status.success(), "{script} failed:\n{printed}\n{said}");
    let last = printed
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{script} printed no JSON:\n{printed}\n{said}"));
    serde_json::from_str(last).unwrap()
}

/// The refusal a late (or repeated) answer gets: `-32602`, `data.code`
/// `already_decided`, naming who decided first, in words and in `data.decided`.
fn check_already_decided(e: &Value, by: &str, what: &str) {
    assert_eq!(e["ok"], false, "{what}: {e}");
    assert_eq!(e["code"], -32602, "{what}: {e}");
    let message = e["message"].as_str().unwrap();
    assert!(message.contains("already decided"), "{what}: {message}");
    assert!(message.contains(by), "{what}: {message}");
    assert_eq!(e["data"]["code"], "already_decided", "{what}: {e}");
    assert_eq!(e["data"]["decided"]["by"], by, "{what}: {e}");
    assert_eq!(e["data"]["decided"]["decision"], "approve", "{what}: {e}");
}

async fn scenarios(driver: Driver) {
    let test = format!("scenarios_on_{driver:?}");
    if !have_node(&test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((sessions, ran, deployment)) = port(driver, dir.path(), &test).await else {
        return;
    };
    let http = serve_http(server(sessions.clone())).await;
    let dir_arg = dir.path().to_str().unwrap().to_owned();
    let out = run_with_inbox(
        sessions.clone(),
        "drivers.mjs",
        &[&http.url, &dir_arg],
        dir.path(),
    )
    .await;
    let log = deployment.as_ref().map(restate::Deployment::log);
    let context = format!("{driver:?}: {out:#}\n{}", log.unwrap_or_default());

    // Approve: ran once; the answer says so.
    let approve = out["approve"]["text"].as_str().unwrap();
    assert!(approve.contains("deleted a.txt"), "{context}");
    assert_eq!(ran.count("delete:a.txt"), 1, "{context}");
    // Reject: never ran; the model was told the note.
    let reject = out["reject"]["text"].as_str().unwrap();
    assert!(
        reject.contains("Rejected") && reject.contains("keep it"),
        "{context}"
    );
    assert_eq!(ran.count("delete:b.txt"), 0, "{context}");
    // A late second approver: told already_decided, naming the inbox's person; the
    // call ran once (the inbox's approval).
    assert_eq!(out["lateAsked"], "input_required", "{context}");
    check_already_decided(&out["late"], "carol@inbox", &context);
    assert_eq!(ran.count("delete:c.txt"), 1, "{context}");
    // A retried identical answer: applied once, refused after, ran once.
    let first = out["retriedFirst"]["text"].as_str().unwrap();
    assert!(first.contains("deleted d.txt"), "{context}");
    check_already_decided(&out["retried"], "alice", &context);
    assert_eq!(ran.count("delete:d.txt"), 1, "{context}");
    // Two identical answers at once: one applied, the other already decided.
    let racing = out["racing"].as_array().unwrap();
    let applied: Vec<&Value> = racing.iter().filter(|r| r["ok"] == true).collect();
    assert_eq!(applied.len(), 1, "{context}");
    assert!(
        applied[0]["text"]
            .as_str()
            .unwrap()
            .contains("deleted e.txt"),
        "{context}"
    );
    let refused = racing.iter().find(|r| r["ok"] == false).unwrap();
    check_already_decided(refused, "alice", &context);
    assert_eq!(ran.count("delete:e.txt"), 1, "{context}");
    // Cancel mid-run: the call failed for the client, the tool was stopped.
    assert_eq!(out["cancel"]["ok"], false, "{context}");
    ran.wait_for("slow-stopped:g.txt").await;
    assert_eq!(ran.count("slow-done:g.txt"), 0, "{context}");
    assert_eq!(
        out["afterCancel"]["text"], "echo: still there?",
        "{context}"
    );

    // Every decision is in the audit trail, refusals included, with who made it.
    let session = out["approve"]["session"].as_str().unwrap();
    let audit = sessions.audit(session).await.unwrap();
    let refused: Vec<_> = audit
        .iter()
        .filter(|d| {
            matches!(&d.verdict, reins_agent::Verdict::Refused { reason, .. } if reason == "already_decided")
        })
        .collect();
    assert!(refused.len() >= 3, "{context}\n{audit:#?}");
    assert!(
        refused
            .iter()
            .any(|d| d.actor.as_ref().unwrap().principal == "alice"),
        "{audit:#?}"
    );
    if let Some(d) = deployment {
        d.stop().await;
    }
}

/// The same door with the SDK before 2026-07-28: asked with `elicitation/create`
/// while the call waits (tests/client/drivers_legacy.mjs).
async fn legacy_scenarios(driver: Driver) {
    let test = format!("legacy_scenarios_on_{driver:?}");
    if !have_node(&test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((sessions, ran, deployment)) = port(driver, dir.path(), &test).await else {
        return;
    };
    let http = serve_http(server(sessions.clone())).await;
    let dir_arg = dir.path().to_str().unwrap().to_owned();
    let out = run_with_inbox(
        sessions.clone(),
        "drivers_legacy.mjs",
        &[&http.url, &dir_arg],
        dir.path(),
    )
    .await;
    let log = deployment.as_ref().map(restate::Deployment::log);
    let context = format!("{driver:?}: {out:#}\n{}", log.unwrap_or_default());
    assert!(
        out["approve"]["text"]
            .as_str()
            .unwrap()
            .contains("deleted a.txt"),
        "{context}"
    );
    assert_eq!(ran.count("delete:a.txt"), 1, "{context}");
    let reject = out["reject"]["text"].as_str().unwrap();
    assert!(
        reject.contains("Rejected") && reject.contains("declined"),
        "{context}"
    );
    assert_eq!(ran.count("delete:b.txt"), 0, "{context}");
    check_already_decided(&out["late"], "carol@inbox", &context);
    assert_eq!(ran.count("delete:c.txt"), 1, "{context}");
    assert_eq!(out["cancel"]["ok"], false, "{context}");
    ran.wait_for("slow-stopped:g.txt").await;
    assert_eq!(ran.count("slow-done:g.txt"), 0, "{context}");
    if let Some(d) = deployment {
        d.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_scenarios_on_the_local_driver() {
    legacy_scenarios(Driver::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_scenarios_on_restate() {
    legacy_scenarios(Driver::Restate).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenarios_on_the_local_driver() {
    scenarios(Driver::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenarios_on_restate() {
    scenarios(Driver::Restate).await;
}

/// The Tasks flow (see [`support::tasks_flow`]; tests/tasks.rs runs it on the local
/// driver, on SQLite and PostgreSQL) through two door instances on one Restate
/// deployment: each follows the runs it starts through the store; a cancel from the
/// instance that does not follow the run goes to the driver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_on_restate() {
    let test = "tasks_on_restate";
    if !have_node(test) {
        return;
    }
    let Some(binary) = restate::restate_binary(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = restate::Deployment::start(binary, dir.path(), "door_service").await;
    // A second instance: its own port over the same deployment and store.
    let b = d.second_port().await;
    tasks_flow(d.sessions.clone(), b, &d.ran, "restate").await;
    d.stop().await;
}

/// A decision sent twice with one idempotency key (a client's retry of the same
/// request): the second handle ends — on Restate with the first answer (the
/// deployment keeps keys), on the local driver refused as already decided (it keeps
/// none) — and the tool ran once. Through the port, as a door that keys its decisions
/// sends them.
async fn a_keyed_retry(driver: Driver) {
    let test = format!("a_keyed_retry_on_{driver:?}");
    let dir = tempfile::tempdir().unwrap();
    let Some((sessions, ran, deployment)) = port(driver, dir.path(), &test).await else {
        return;
    };
    let id = "mcp/alice/keyed";
    let message = reins_agent::RunInput::Message(reins_message::Msg::user("delete k.txt"));
    let out = sessions
        .start(id, reins_agent::Submission::new(message))
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(out.status, reins_agent::RunStatus::Paused, "{out:?}");
    let view = sessions.view(id).await.unwrap();
    let decide = Decide::new(
        Actor::new("alice"),
        vec![Decision::approve(&out.requirements[0].id)],
    )
    .at(view.token)
    .key("approve-k");
    let first = sessions
        .decide(id, decide.clone())
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(first.status, reins_agent::RunStatus::Completed, "{first:?}");
    let again = async {
        match sessions.decide(id, decide).await {
            Ok(run) => run.wait().await,
            Err(e) => Err(e),
        }
    };
    let again = tokio::time::timeout(std::time::Duration::from_secs(30), again)
        .await
        .expect("the retried decision's handle never ended");
    match driver {
        Driver::Restate => {
            let again = again.unwrap();
            assert_eq!(again.status, first.status, "{again:?}");
            assert_eq!(again.message.text(), first.message.text());
        }
        Driver::Local => assert!(
            matches!(again, Err(reins_agent::AgentError::AlreadyDecided { .. })),
            "{again:?}"
        ),
    }
    assert_eq!(ran.count("delete:k.txt"), 1, "{:?}", ran.all());
    if let Some(d) = deployment {
        d.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_retry_on_the_local_driver() {
    a_keyed_retry(Driver::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_retry_on_restate() {
    a_keyed_retry(Driver::Restate).await;
}
