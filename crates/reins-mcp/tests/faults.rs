//! Fault injection with an rmcp server written for it (in-process, over a byte stream):
//! crashes mid-call, a server that never answers, errors and garbage, pagination and a
//! tool list that changes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use reins_mcp::{Error, McpServer, McpToolset, PolicySource, add_all};
use reins_message::{ContentBlock, ToolOutcome, ToolUse};
use reins_tool::{ExecOptions, GateDecision, ToolCallOutcome, ToolContext, ToolPolicy, Toolkit};
use serde_json::{Value, json};
use support::fault_server::{self, State};

async fn run(tk: &Toolkit, name: &str, args: Value) -> reins_message::ToolResult {
    let call = ToolUse::new("call_1", name, args);
    let ctx = ToolContext::new("s", &call.id);
    match tk.execute(&call, ctx, &ExecOptions::default()).await {
        ToolCallOutcome::Done(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

async fn connect(state: &Arc<State>) -> (McpToolset, Toolkit) {
    let set = McpToolset::connect(fault_server::server(state))
        .await
        .unwrap();
    let tk = set.toolkit().unwrap();
    (set, tk)
}

#[tokio::test]
async fn lists_every_page_and_calls() {
    let state = Arc::new(State::default());
    let (set, tk) = connect(&state).await;
    // 8 tools over pages of 3.
    assert_eq!(set.tools().len(), 8);
    assert!(tk.contains("faults__gone") && tk.contains("faults__echo"));
    let r = run(&tk, "faults__echo", json!({ "text": "hi" })).await;
    assert_eq!(r.outcome, ToolOutcome::Success);
    assert_eq!(r.text(), "hi");
    assert_eq!(r.metadata["mcp_server"], "faults");
    assert_eq!(
        set.tool("faults__echo").unwrap().policy_source,
        PolicySource::ReadOnly
    );
    assert!(tk.is_idempotent("faults__echo"));
    // Trusted server, no annotations: runs at once.
    assert_eq!(
        tk.gate(&ToolUse::new("c", "faults__crash", json!({}))),
        GateDecision::Run
    );
}

#[tokio::test]
async fn arguments_are_checked_before_anything_is_sent() {
    let state = Arc::new(State::default());
    let (_set, tk) = connect(&state).await;
    let r = run(&tk, "faults__echo", json!({ "text": 5 })).await;
    assert_eq!(r.outcome, ToolOutcome::Error);
    assert!(r.text().contains("text"), "{}", r.text());
    assert!(state.calls().is_empty());
}

#[tokio::test]
async fn a_crash_mid_call_is_unknown_and_the_next_call_reconnects() {
    let state = Arc::new(State::default());
    let (set, tk) = connect(&state).await;
    let r = run(&tk, "faults__crash", json!({})).await;
    assert_eq!(r.outcome, ToolOutcome::Unknown, "{}", r.text());
    assert!(
        r.text().contains("may or may not have taken effect"),
        "{}",
        r.text()
    );
    assert_eq!(state.calls(), ["crash"]);

    let r = run(&tk, "faults__echo", json!({ "text": "back" })).await;
    assert_eq!(r.outcome, ToolOutcome::Success, "{}", r.text());
    assert_eq!(set.connections(), 2);
}

#[tokio::test]
async fn an_idempotent_call_is_retried_once_on_a_fresh_connection() {
    let state = Arc::new(State::default());
    state.flaky_crashes.store(1, Ordering::SeqCst);
    let (set, tk) = connect(&state).await;
    let r = run(&tk, "faults__flaky_read", json!({})).await;
    assert_eq!(r.outcome, ToolOutcome::Success, "{}", r.text());
    assert_eq!(r.text(), "read ok");
    assert_eq!(state.calls(), ["flaky_read", "flaky_read"]);
    assert_eq!(set.connections(), 2);

    // Only once: a second loss in a row is Unknown.
    state.flaky_crashes.store(2, Ordering::SeqCst);
    let r = run(&tk, "faults__flaky_read", json!({})).await;
    assert_eq!(r.outcome, ToolOutcome::Unknown, "{}", r.text());
}

#[tokio::test]
async fn a_server_that_never_answers_hits_the_timeout_and_is_told_to_stop() {
    let state = Arc::new(State::default());
    let set =
        McpToolset::connect(fault_server::server(&state).call_timeout(Duration::from_millis(300)))
            .await
            .unwrap();
    let tk = set.toolkit().unwrap();
    let r = run(&tk, "faults__slow", json!({})).await;
    assert_eq!(r.outcome, ToolOutcome::Error);
    assert!(r.text().contains("timed out after 300 ms"), "{}", r.text());
    // The abandoned request is cancelled on the server.
    for _ in 0..100 {
        if !state.cancelled().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(state.cancelled(), ["slow"]);
    assert_eq!(set.cancellations_sent(), 1);
}

#[tokio::test]
async fn an_interrupt_sends_cancelled_and_the_outcome_is_interrupted() {
    let state = Arc::new(State::default());
    let (set, tk) = connect(&state).await;
    let call = ToolUse::new("call_1", "faults__slow", json!({}));
    let token = tokio_util::sync::CancellationToken::new();
    let ctx = ToolContext::new("s", &call.id).with_cancel(token.clone());
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        token.cancel();
    });
    let outcome = tk.execute(&call, ctx, &ExecOptions::default()).await;
    stopper.await.unwrap();
    let r = outcome.into_result().unwrap();
    assert_eq!(r.outcome, ToolOutcome::Interrupted, "{}", r.text());
    for _ in 0..100 {
        if !state.cancelled().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(state.cancelled(), ["slow"]);
    assert_eq!(set.cancellations_sent(), 1);
}

#[tokio::test]
async fn progress_becomes_partial_output() {
    let state = Arc::new(State::default());
    let (_set, tk) = connect(&state).await;
    let call = ToolUse::new("call_1", "faults__progress", json!({}));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let ctx = ToolContext::new("s", &call.id).with_chunk_sender(tx);
    let r = tk
        .execute(&call, ctx, &ExecOptions::default())
        .await
        .into_result()
        .unwrap();
    assert_eq!(r.text(), "progress done");
    let mut chunks = Vec::new();
    while let Ok(c) = rx.try_recv() {
        assert_eq!(c.tool_use_id, "call_1");
        chunks.push(c.block);
    }
    assert_eq!(
        chunks,
        [
            ContentBlock::text("[progress 1/3] step 1"),
            ContentBlock::text("[progress 2/3] step 2"),
            ContentBlock::text("[progress 3/3] step 3"),
        ]
    );
}

#[tokio::test]
async fn server_errors_and_garbage_are_typed_errors() {
    let state = Arc::new(State::default());
    let (_set, tk) = connect(&state).await;
    let r = run(&tk, "faults__broken", json!({})).await;
    assert_eq!(r.outcome, ToolOutcome::Error);
    assert!(
        r.text()
            .contains("MCP server `faults` refused the call to `broken`"),
        "{}",
        r.text()
    );
    assert!(
        r.text().contains("boom") && r.text().contains("-32603"),
        "{}",
        r.text()
    );

    let set = McpToolset::connect(fault_server::garbage().call_timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    let tk = set.toolkit().unwrap();
    let r = run(&tk, "garbage__junk", json!({})).await;
    assert_eq!(r.outcome, ToolOutcome::Error, "{}", r.text());
    assert!(r.text().contains("not a tool result"), "{}", r.text());
}

#[tokio::test]
async fn a_changed_tool_list_is_followed() {
    let state = Arc::new(State::default());
    let (set, tk) = connect(&state).await;
    assert!(!set.tools_changed());
    run(&tk, "faults__change", json!({})).await;
    for _ in 0..100 {
        if set.tools_changed() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(set.tools_changed());
    // A tool the server dropped answers with an error instead of reaching it.
    let r = run(&tk, "faults__gone", json!({})).await;
    assert_eq!(r.outcome, ToolOutcome::Error);
    assert!(r.text().contains("no longer offers"), "{}", r.text());
    assert!(!state.calls().contains(&"gone".to_owned()));
    // The new list is there; a new toolkit offers it.
    assert!(set.tool("faults__fresh").is_some());
    let tk = set.toolkit().unwrap();
    assert_eq!(
        run(&tk, "faults__fresh", json!({})).await.text(),
        "fresh ran"
    );
}

#[tokio::test]
async fn collisions_name_both_tools() {
    let state = Arc::new(State::default());
    let a = McpToolset::connect(fault_server::server(&state).prefix("x"))
        .await
        .unwrap();
    let b = McpToolset::connect(McpServer::clone(&fault_server::server(&state)).prefix("x"))
        .await
        .unwrap();
    let mut tk = Toolkit::new();
    let e = add_all(&[a.clone(), b], &mut tk).unwrap_err();
    assert!(matches!(e, Error::NameCollision { .. }));
    assert!(e.to_string().contains("`x__echo`"), "{e}");
    assert!(
        e.to_string().contains("server `faults`'s tool `echo`"),
        "{e}"
    );
    assert!(tk.is_empty());

    a.add_to(&mut tk).unwrap();
    let e = a.add_to(&mut tk).unwrap_err();
    assert!(e.to_string().contains("already in the toolkit"), "{e}");
}

#[tokio::test]
async fn user_policies_win_over_annotations() {
    let state = Arc::new(State::default());
    let set = McpToolset::connect(
        fault_server::server(&state)
            .trusted(false)
            .tool_policy("echo", ToolPolicy::confirm().reason("ask me")),
    )
    .await
    .unwrap();
    let tk = set.toolkit().unwrap();
    let gate = |n: &str| tk.gate(&ToolUse::new("c", n, json!({})));
    assert_eq!(
        gate("faults__echo"),
        GateDecision::Confirm {
            reason: "ask me".into()
        }
    );
    assert!(matches!(
        gate("faults__crash"),
        GateDecision::Confirm { .. }
    ));
    assert_eq!(gate("faults__progress"), GateDecision::Run);
    assert_eq!(
        set.tool("faults__crash").unwrap().policy_source,
        PolicySource::Untrusted
    );
}
