//! MCP tools in a real agent run (the scripted model drives it): the filesystem
//! server's `write_file` pauses for approval (its annotations say destructive); approve
//! writes the file, reject does not; progress shows as run events and an interrupt
//! stops the call; server-everything's elicitation pauses the run and the answer given
//! with `resolve` reaches the server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::time::Duration;

use reins_agent::{Agent, Decision, RequirementKind, RunEvent, RunStatus};
use reins_mcp::{McpToolset, PolicySource};
use reins_message::{Msg, ToolOutcome};
use reins_model::{ScriptedModel, ScriptedResponse};
use serde_json::json;

fn tool_results(messages: &[Msg]) -> Vec<reins_message::ToolResult> {
    messages
        .iter()
        .flat_map(|m| m.tool_results_iter().cloned())
        .collect()
}

async fn write_file_run(approve: bool) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let target = root.join("notes.txt");
    let fs = McpToolset::connect(support::filesystem(&root))
        .await
        .unwrap();
    let write = fs.tool("fs__write_file").unwrap();
    assert_eq!(write.policy_source, PolicySource::Destructive);

    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id(
            "w1",
            "fs__write_file",
            json!({ "path": target.display().to_string(), "content": "hello from reins" }),
        ),
        ScriptedResponse::text("done"),
    ]);
    let agent = Agent::builder()
        .name("fs-agent")
        .model(model)
        .toolkit(fs.toolkit().unwrap())
        .build()
        .unwrap();
    let session = agent.session("fs-1").await.unwrap();
    let out = session.send(Msg::user("write the notes")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    assert_eq!(out.requirements.len(), 1);
    assert!(matches!(
        out.requirements[0].kind,
        RequirementKind::Confirmation
    ));
    assert!(!target.exists(), "nothing is written before approval");

    let decision = if approve {
        Decision::approve("w1").by("ana")
    } else {
        Decision::reject("w1", "not now").by("ana")
    };
    let out = session.resolve(vec![decision]).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    let results = tool_results(&session.messages().await.unwrap());
    assert_eq!(results.len(), 1);
    if approve {
        assert_eq!(
            results[0].outcome,
            ToolOutcome::Success,
            "{}",
            results[0].text()
        );
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "hello from reins"
        );
    } else {
        assert!(matches!(results[0].outcome, ToolOutcome::Rejected { .. }));
        assert!(!target.exists());
    }
}

#[tokio::test]
async fn filesystem_write_waits_for_approval_then_writes() {
    if !support::servers_available("filesystem_write_waits_for_approval_then_writes") {
        return;
    }
    write_file_run(true).await;
}

#[tokio::test]
async fn filesystem_write_rejected_writes_nothing() {
    if !support::servers_available("filesystem_write_rejected_writes_nothing") {
        return;
    }
    write_file_run(false).await;
}

#[tokio::test]
async fn progress_is_a_run_event_and_an_interrupt_stops_the_call() {
    if !support::servers_available("progress_is_a_run_event_and_an_interrupt_stops_the_call") {
        return;
    }
    let set = McpToolset::connect(support::everything()).await.unwrap();
    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id(
            "lr1",
            "everything__trigger-long-running-operation",
            json!({ "duration": 20, "steps": 40 }),
        ),
        ScriptedResponse::text("unused"),
    ]);
    let agent = Agent::builder()
        .name("everything-agent")
        .model(model)
        .toolkit(set.toolkit().unwrap())
        .build()
        .unwrap();
    let session = agent.session("ev-1").await.unwrap();
    let mut run = session.send(Msg::user("run it")).start().await.unwrap();
    let mut chunks = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while let Ok(Some(event)) = tokio::time::timeout_at(deadline, run.next_event()).await {
        if let RunEvent::ToolExecutionChunk { id, text } = event {
            assert_eq!(id, "lr1");
            chunks.push(text);
            if chunks.len() == 2 {
                run.interrupt();
                break;
            }
        }
    }
    assert_eq!(chunks[0], "[progress 1/40]");
    let out = run.wait().await.unwrap();
    assert_eq!(out.status, RunStatus::Cancelled);
    let results = tool_results(&session.messages().await.unwrap());
    assert_eq!(results.len(), 1);
    assert_eq!(
        results[0].outcome,
        ToolOutcome::Interrupted,
        "{}",
        results[0].text()
    );
    assert_eq!(set.cancellations_sent(), 1);
}

/// Waits until server-everything has registered its elicitation tool (it does so after
/// the handshake, for clients that declare elicitation).
async fn with_elicitation_tool(set: &McpToolset) {
    for _ in 0..100 {
        if set
            .tool("everything__trigger-elicitation-request")
            .is_some()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        set.refresh().await.unwrap();
    }
    panic!("server-everything never offered trigger-elicitation-request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_pauses_the_run_and_resolve_answers_the_server() {
    if !support::servers_available("an_elicitation_pauses_the_run_and_resolve_answers_the_server") {
        return;
    }
    let set = McpToolset::connect(support::everything()).await.unwrap();
    with_elicitation_tool(&set).await;
    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id(
            "e1",
            "everything__trigger-elicitation-request",
            json!({}),
        ),
        ScriptedResponse::text("thanks"),
        ScriptedResponse::tool_call_with_id(
            "e2",
            "everything__trigger-elicitation-request",
            json!({}),
        ),
        ScriptedResponse::text("ok"),
    ]);
    let agent = Agent::builder()
        .model(model)
        .toolkit(set.toolkit().unwrap())
        .build()
        .unwrap();
    let session = agent.session("elicit-1").await.unwrap();
    let out = session.send(Msg::user("ask me")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused, "{:?}", out.message);
    let req = out.requirements[0].clone();
    assert_eq!(req.tool_use.id, "e1");
    let RequirementKind::UserInput { fields } = &req.kind else {
        panic!("not a user-input requirement: {:?}", req.kind);
    };
    assert!(fields["properties"]["name"].is_object(), "{fields}");
    assert!(!req.reason.is_empty());

    // An answer that does not match the server's schema is refused before it is sent.
    let e = session
        .resolve(vec![Decision::input(
            &req.id,
            json!({ "integer": "seven" }),
        )])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("does not match"), "{e}");

    let out = session
        .resolve(vec![Decision::input(
            &req.id,
            json!({ "name": "Ada Lovelace", "check": true, "integer": 7, "untitledSingleSelectEnum": "Joey" }),
        )
        .by("ana")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    let results = tool_results(&session.messages().await.unwrap());
    assert_eq!(
        results[0].outcome,
        ToolOutcome::Success,
        "{}",
        results[0].text()
    );
    assert!(
        results[0].text().contains("Ada Lovelace"),
        "{}",
        results[0].text()
    );

    // A rejection declines: the server hears "decline".
    let out = session.send(Msg::user("ask again")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let id = out.requirements[0].id.clone();
    let out = session
        .resolve(vec![Decision::reject(&id, "not telling")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    let results = tool_results(&session.messages().await.unwrap());
    let text = results[1].text().to_lowercase();
    assert!(text.contains("decline"), "{text}");
}
