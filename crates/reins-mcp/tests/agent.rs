//! MCP tools in a real agent run (the scripted model drives it): the filesystem
//! server's `write_file` pauses for approval (its annotations say destructive); approve
//! writes the file, reject does not; progress shows as run events and an interrupt
//! stops the call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

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
    let out = session.call(Msg::user("write the notes")).await.unwrap();
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
    let mut run = session.start(Msg::user("run it")).await.unwrap();
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
