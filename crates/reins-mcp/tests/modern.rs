//! The client on revision 2026-07-28 against an in-test rmcp server that speaks only
//! that revision: the connection opens with `server/discover` (no `initialize`), an
//! `input_required` question pauses the agent's run and the answer retries the call
//! with the echoed `requestState`; a call that becomes a task is followed with
//! `tasks/get`, its mid-way question pauses the run and goes back with `tasks/update`;
//! an interrupt sends `tasks/cancel`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::Arc;

use reins_agent::{Agent, Decision, RequirementKind, RunStatus};
use reins_mcp::McpToolset;
use reins_message::{Msg, ToolOutcome, ToolUse};
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_tool::{ExecOptions, ToolContext};
use serde_json::json;
use support::modern_server::{self, Seen};

fn results(messages: &[Msg]) -> Vec<reins_message::ToolResult> {
    messages
        .iter()
        .flat_map(|m| m.tool_results_iter().cloned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_server_is_spoken_to_without_initialize() {
    let seen = Arc::new(Seen::default());
    let set = McpToolset::connect(modern_server::server(&seen))
        .await
        .unwrap();
    assert_eq!(set.tools().len(), 3);
    let requests = seen.requests();
    assert!(
        requests.iter().all(|r| r.ends_with("2026-07-28")),
        "{requests:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_required_question_pauses_the_run_and_the_answer_retries_the_call() {
    let seen = Arc::new(Seen::default());
    let set = McpToolset::connect(modern_server::server(&seen))
        .await
        .unwrap();
    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id("c1", "modern__confirm", json!({ "what": "deploy" })),
        ScriptedResponse::text("done"),
        ScriptedResponse::tool_call_with_id("c2", "modern__confirm", json!({ "what": "wipe" })),
        ScriptedResponse::text("ok"),
    ]);
    let agent = Agent::builder()
        .model(model)
        .toolkit(set.toolkit().unwrap())
        .build()
        .unwrap();
    let session = agent.session("mrtr-1").await.unwrap();
    let out = session.send(Msg::user("deploy")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused, "{:?}", out.message);
    let req = out.requirements[0].clone();
    let RequirementKind::UserInput { fields } = &req.kind else {
        panic!("not a user-input requirement: {:?}", req.kind);
    };
    assert_eq!(fields["required"], json!(["sure"]));
    assert!(req.reason.contains("Really deploy?"), "{}", req.reason);
    let out = session
        .resolve(vec![
            Decision::input(&req.id, json!({ "sure": true })).by("ana"),
        ])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    let r = results(&session.messages().await.unwrap());
    assert_eq!(r[0].outcome, ToolOutcome::Success, "{}", r[0].text());
    assert_eq!(r[0].text(), "confirmed deploy");
    assert_eq!(seen.states(), ["state-for-deploy"]);

    // A rejection declines: the retry carries `decline`.
    let out = session.send(Msg::user("wipe")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let id = out.requirements[0].id.clone();
    session
        .resolve(vec![Decision::reject(&id, "no")])
        .await
        .unwrap();
    let r = results(&session.messages().await.unwrap());
    assert!(r[1].text().contains("decline"), "{}", r[1].text());
    // Every request used the modern revision (two tools/call per question).
    let calls: Vec<String> = seen
        .requests()
        .into_iter()
        .filter(|r| r.starts_with("tools/call"))
        .collect();
    assert_eq!(calls.len(), 4, "{calls:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_followed_and_its_question_pauses_the_run() {
    let seen = Arc::new(Seen::default());
    let set = McpToolset::connect(modern_server::server(&seen))
        .await
        .unwrap();
    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id("p1", "modern__paint", json!({ "what": "wall" })),
        ScriptedResponse::text("painted"),
    ]);
    let agent = Agent::builder()
        .model(model)
        .toolkit(set.toolkit().unwrap())
        .build()
        .unwrap();
    let session = agent.session("task-1").await.unwrap();
    let out = session.send(Msg::user("paint the wall")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused, "{:?}", out.message);
    let req = out.requirements[0].clone();
    assert!(req.reason.contains("Which color?"), "{}", req.reason);
    let out = session
        .resolve(vec![Decision::input(&req.id, json!({ "color": "teal" }))])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    let r = results(&session.messages().await.unwrap());
    assert_eq!(r[0].outcome, ToolOutcome::Success, "{}", r[0].text());
    assert_eq!(r[0].text(), "painted teal");
    let tasks = seen.tasks();
    assert!(
        tasks.iter().any(|t| t.starts_with("get paint-wall")),
        "{tasks:?}"
    );
    let updates: Vec<&String> = tasks.iter().filter(|t| t.starts_with("update")).collect();
    assert_eq!(updates.len(), 1, "{tasks:?}");
    assert!(updates[0].contains("teal"), "{tasks:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_cancels_the_task() {
    let seen = Arc::new(Seen::default());
    let set = McpToolset::connect(modern_server::server(&seen))
        .await
        .unwrap();
    let tk = set.toolkit().unwrap();
    let call = ToolUse::new("e1", "modern__endless", json!({ "what": "loop" }));
    let token = tokio_util::sync::CancellationToken::new();
    let ctx = ToolContext::new("s", &call.id).with_cancel(token.clone());
    // Interrupted once the client has polled the running task twice, however slow
    // the machine (not after a time it hopes is long enough).
    let mut polls = seen.polls.subscribe();
    let stopper = tokio::spawn(async move {
        polls.wait_for(|n| *n >= 2).await.unwrap();
        token.cancel();
    });
    let r = tk
        .execute(&call, ctx, &ExecOptions::default())
        .await
        .into_result()
        .unwrap();
    stopper.await.unwrap();
    assert_eq!(r.outcome, ToolOutcome::Interrupted, "{}", r.text());
    let tasks = seen.tasks();
    assert!(
        tasks.contains(&"cancel endless-loop".to_owned()),
        "{tasks:?}"
    );
    assert!(
        tasks.iter().filter(|t| t.starts_with("get")).count() >= 2,
        "{tasks:?}"
    );
}
