//! A sub-agent through a crash: the process running a parent and its child is killed
//! while the child's tool runs, and another process resumes the parent. The child's
//! side effect stays at most once through the nesting. Runs on SQLite and PostgreSQL
//! (fails under `CI=true` without a server, reported SKIPPED elsewhere), each crash in
//! a child process of this test binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::time::Duration;

use reins_agent::{Agent, AgentError, RunStatus, child_session_id};
use reins_message::{Msg, ToolOutcome};
use reins_model::ScriptedModel;
use serde_json::json;
use support::*;

type Store = SharedStore;

/// Deterministic models for both processes: the lead delegates, then answers; the
/// research agent runs `effect`, then answers.
fn crash_team(store: &Store, log: std::path::PathBuf) -> Agent {
    let lead_model = ScriptedModel::from_fn(|req| {
        if req.messages.iter().any(|m| m.has_tool_results()) {
            text("lead: research finished")
        } else {
            call("p1", "research", json!({"task": "do the effect"}))
        }
    });
    let research_model = ScriptedModel::from_fn(|req| {
        if req.messages.iter().any(|m| m.has_tool_results()) {
            text("research: done")
        } else {
            call("c1", "effect", json!({"query": "x"}))
        }
    });
    let mut tools = reins_tool::Toolkit::new();
    tools
        .add(reins_tool::Toolkit::function(
            "effect",
            "A side effect that takes a while",
            move |_a: QueryArgs, _ctx| {
                let log = log.clone();
                async move {
                    log_effect(&log, "begin");
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    log_effect(&log, "end");
                    Ok::<_, reins_tool::ToolError>("effect done".to_owned())
                }
            },
        ))
        .unwrap();
    let research = Agent::builder()
        .name("research")
        .model(research_model)
        .toolkit(tools)
        .store_arc(store.clone())
        .session_lease(Duration::from_millis(200))
        .tool_lease(Duration::from_millis(600))
        .build()
        .unwrap();
    Agent::builder()
        .name("lead")
        .model(lead_model)
        .store_arc(store.clone())
        .session_lease(Duration::from_millis(200))
        .tool_lease(Duration::from_millis(600))
        .subagent(research.as_tool("research", "Does the effect"))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the nested crash test in a child process"]
async fn nested_crash_child() {
    let spec = StoreSpec::from_env();
    let log: std::path::PathBuf = std::env::var("REINS_EFFECT_LOG").unwrap().into();
    let sid = std::env::var("REINS_SESSION").unwrap();
    let store = spec.open().await;
    let lead = crash_team(&store, log);
    // Killed while the child's tool runs; never returns.
    let _ = lead
        .session(&sid)
        .await
        .unwrap()
        .send(Msg::user("go"))
        .await;
}

/// The process running a parent and its sub-agent is killed while the child's tool
/// runs. Another process resumes the parent: the child's tool is not run again (it
/// becomes `Unknown` once its lease expires), both sessions end valid, and the parent
/// completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_inside_a_subagent_never_runs_its_tool_twice() {
    let dir = tempfile::tempdir().unwrap();
    for spec in harness_stores(dir.path(), "snest") {
        let label = spec.label();
        let sid = format!("sub-{}", reins_message::new_id());
        let log = dir.path().join(format!("{label}-effects.log"));
        // Create the schema before the child races for it.
        let store = spec.open().await;
        let mut cmd = child_test("nested_crash_child");
        cmd.envs(spec.env())
            .env("REINS_EFFECT_LOG", &log)
            .env("REINS_SESSION", &sid)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let mut started = false;
        for _ in 0..6_000 {
            if effects(&log).iter().any(|l| l == "begin") {
                started = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(started, "{label}: the child's tool never started");

        let lead = crash_team(&store, log.clone());
        let session = lead.session(&sid).await.unwrap();
        let mut done = None;
        for _ in 0..400 {
            match session.resume().await {
                Ok(out) => {
                    done = Some(out);
                    break;
                }
                // The dead process's locks and leases run out first.
                Err(
                    AgentError::SessionBusy { .. }
                    | AgentError::ToolInFlight { .. }
                    | AgentError::StaleView { .. },
                ) => tokio::time::sleep(Duration::from_millis(25)).await,
                Err(e) => panic!("{label}: {e}"),
            }
        }
        let out = done.unwrap_or_else(|| panic!("{label}: never resumed"));
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(effects(&log), vec!["begin".to_owned()], "{label}");
        let parent_msgs = session.messages().await.unwrap();
        assert_valid(&parent_msgs);
        assert_eq!(result_text(&parent_msgs, "p1"), "research: done", "{label}");
        let child = lead
            .subagent("research")
            .unwrap()
            .session(&child_session_id(&sid, "p1"))
            .await
            .unwrap();
        let child_msgs = child.messages().await.unwrap();
        assert_valid(&child_msgs);
        assert_eq!(
            outcomes(&child_msgs).get("c1"),
            Some(&ToolOutcome::Unknown),
            "{label}"
        );
    }
}
