//! Against real MCP servers from the npm registry, started over stdio:
//! `@modelcontextprotocol/server-everything` (installed by `.ci/run`; skipped loudly
//! elsewhere when Node.js or the packages are missing, never under `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::time::Duration;

use reins_mcp::{McpToolset, PolicySource};
use reins_message::{ContentBlock, ToolOutcome, ToolResult, ToolUse};
use reins_tool::{ExecOptions, GateDecision, ToolContext, ToolPolicy, Toolkit};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

async fn run(tk: &Toolkit, name: &str, args: Value) -> ToolResult {
    let call = ToolUse::new("call_1", name, args);
    let ctx = ToolContext::new("s", &call.id);
    tk.execute(&call, ctx, &ExecOptions::default())
        .await
        .into_result()
        .unwrap()
}

#[tokio::test]
async fn everything_lists_its_tools_and_answers() {
    if !support::servers_available("everything_lists_its_tools_and_answers") {
        return;
    }
    let set = McpToolset::connect(support::everything()).await.unwrap();
    let names: Vec<String> = set.tools().into_iter().map(|t| t.name).collect();
    for expected in [
        "everything__echo",
        "everything__get-sum",
        "everything__trigger-long-running-operation",
        "everything__get-tiny-image",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in {names:?}"
        );
    }
    let echo = set.tool("everything__echo").unwrap();
    assert_eq!(echo.policy_source, PolicySource::ReadOnly);
    assert!(echo.policy.idempotent);
    let tk = set.toolkit().unwrap();
    assert_eq!(
        tk.gate(&ToolUse::new(
            "c",
            "everything__echo",
            json!({ "message": "x" })
        )),
        GateDecision::Run
    );

    let r = run(&tk, "everything__echo", json!({ "message": "hello" })).await;
    assert_eq!(r.outcome, ToolOutcome::Success, "{}", r.text());
    assert!(r.text().contains("hello"), "{}", r.text());

    let r = run(&tk, "everything__get-sum", json!({ "a": 2, "b": 40 })).await;
    assert_eq!(r.outcome, ToolOutcome::Success, "{}", r.text());
    assert!(r.text().contains("42"), "{}", r.text());

    // The schema is checked before anything is sent.
    let r = run(&tk, "everything__get-sum", json!({ "a": "two", "b": 40 })).await;
    assert_eq!(r.outcome, ToolOutcome::Error);
    assert!(r.text().contains("invalid arguments"), "{}", r.text());

    let r = run(&tk, "everything__get-tiny-image", json!({})).await;
    assert_eq!(r.outcome, ToolOutcome::Success, "{}", r.text());
    assert!(
        r.output
            .iter()
            .any(|b| matches!(b, ContentBlock::Image { .. })),
        "{:?}",
        r.output
    );

    let r = run(
        &tk,
        "everything__get-structured-content",
        json!({ "location": "New York" }),
    )
    .await;
    assert_eq!(r.outcome, ToolOutcome::Success, "{}", r.text());
    assert!(
        r.metadata["structured_content"]["temperature"].is_number(),
        "{:?}",
        r.metadata
    );

    let pid = set.child_pid().await.unwrap();
    set.close().await;
    // The child is gone once closed (kill -0 fails).
    let mut gone = false;
    for _ in 0..50 {
        let alive = std::process::Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !alive {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the server process {pid} outlived close()");
}

#[tokio::test]
async fn an_interrupted_long_operation_is_cancelled_on_the_wire() {
    if !support::servers_available("an_interrupted_long_operation_is_cancelled_on_the_wire") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wire.jsonl");
    let set = McpToolset::connect(support::everything_logged(&log))
        .await
        .unwrap();
    let tk = set.toolkit().unwrap();

    let call = ToolUse::new(
        "call_1",
        "everything__trigger-long-running-operation",
        json!({ "duration": 20, "steps": 40 }),
    );
    let token = CancellationToken::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let ctx = ToolContext::new("s", &call.id)
        .with_cancel(token.clone())
        .with_chunk_sender(tx);
    let watcher = tokio::spawn(async move {
        // Two progress notifications arrive as partial output, then the person presses ESC.
        let mut seen = Vec::new();
        while let Some(chunk) = rx.recv().await {
            seen.push(chunk.block);
            if seen.len() == 2 {
                token.cancel();
                break;
            }
        }
        seen
    });
    let r = tk
        .execute(&call, ctx, &ExecOptions::default())
        .await
        .into_result()
        .unwrap();
    let seen = watcher.await.unwrap();
    assert_eq!(seen[0], ContentBlock::text("[progress 1/40]"));
    assert_eq!(r.outcome, ToolOutcome::Interrupted, "{}", r.text());
    assert_eq!(set.cancellations_sent(), 1);

    // What the server received: the call, then notifications/cancelled for its id
    // (`tee` copies it to the log a moment after it is sent).
    let mut wire = String::new();
    for _ in 0..100 {
        wire = std::fs::read_to_string(&log).unwrap_or_default();
        if wire.contains("notifications/cancelled") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let messages: Vec<Value> = wire
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let call_id = messages
        .iter()
        .find(|m| m["method"] == "tools/call")
        .map(|m| m["id"].clone())
        .unwrap();
    let cancel = messages
        .iter()
        .find(|m| m["method"] == "notifications/cancelled")
        .unwrap_or_else(|| panic!("no notifications/cancelled on the wire:\n{wire}"));
    assert_eq!(cancel["params"]["requestId"], call_id);
}

#[tokio::test]
async fn a_killed_server_gives_unknown_then_restarts() {
    if !support::servers_available("a_killed_server_gives_unknown_then_restarts") {
        return;
    }
    // Declared not idempotent (overriding the readOnlyHint), so a lost call is Unknown.
    let set = McpToolset::connect(
        support::everything().tool_policy("trigger-long-running-operation", ToolPolicy::auto()),
    )
    .await
    .unwrap();
    let tk = set.toolkit().unwrap();
    let pid = set.child_pid().await.unwrap();
    let call = ToolUse::new(
        "call_1",
        "everything__trigger-long-running-operation",
        json!({ "duration": 20, "steps": 40 }),
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let ctx = ToolContext::new("s", &call.id).with_chunk_sender(tx);
    let killer = tokio::spawn(async move {
        rx.recv().await;
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
    });
    let r = tk
        .execute(&call, ctx, &ExecOptions::default())
        .await
        .into_result()
        .unwrap();
    killer.await.unwrap();
    assert_eq!(r.outcome, ToolOutcome::Unknown, "{}", r.text());

    // The next call starts the server again.
    let r = run(&tk, "everything__echo", json!({ "message": "again" })).await;
    assert_eq!(r.outcome, ToolOutcome::Success, "{}", r.text());
    assert_eq!(set.connections(), 2);
    assert_ne!(set.child_pid().await, Some(pid));
}

#[tokio::test]
async fn a_killed_server_reruns_an_idempotent_call() {
    if !support::servers_available("a_killed_server_reruns_an_idempotent_call") {
        return;
    }
    // readOnlyHint: true, so the call is idempotent: one reconnect and retry.
    let set = McpToolset::connect(support::everything()).await.unwrap();
    let tk = set.toolkit().unwrap();
    let pid = set.child_pid().await.unwrap();
    let call = ToolUse::new(
        "call_1",
        "everything__trigger-long-running-operation",
        json!({ "duration": 0.6, "steps": 3 }),
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let ctx = ToolContext::new("s", &call.id).with_chunk_sender(tx);
    let killer = tokio::spawn(async move {
        rx.recv().await;
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
    });
    let r = tk
        .execute(&call, ctx, &ExecOptions::default())
        .await
        .into_result()
        .unwrap();
    killer.await.unwrap();
    assert_eq!(r.outcome, ToolOutcome::Success, "{}", r.text());
    assert!(r.text().contains("completed"), "{}", r.text());
    assert_eq!(set.connections(), 2);
}

#[tokio::test]
async fn elicitation_is_answered_while_the_call_waits() {
    if !support::servers_available("elicitation_is_answered_while_the_call_waits") {
        return;
    }
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = asked.clone();
    let set = McpToolset::connect(support::everything().on_elicitation(move |q| {
        log.lock().unwrap().push(q.clone());
        async move {
            reins_mcp::ElicitationAnswer::Accept(json!({
                "name": "Ada Lovelace",
                "check": true,
                "integer": 7,
                "untitledSingleSelectEnum": "Joey"
            }))
        }
    }))
    .await
    .unwrap();
    // server-everything registers this tool after the handshake, for clients that
    // declare elicitation, and announces it with notifications/tools/list_changed.
    for _ in 0..100 {
        if set
            .tool("everything__trigger-elicitation-request")
            .is_some()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        set.refresh().await.unwrap();
    }
    let tk = set.toolkit().unwrap();
    let r = run(&tk, "everything__trigger-elicitation-request", json!({})).await;
    assert_eq!(r.outcome, ToolOutcome::Success, "{}", r.text());
    assert!(r.text().contains("Ada Lovelace"), "{}", r.text());
    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].server, "everything");
    assert!(asked[0].requested_schema["properties"]["name"].is_object());
}

#[tokio::test]
async fn without_elicitation_declared_servers_do_not_ask() {
    if !support::servers_available("without_elicitation_declared_servers_do_not_ask") {
        return;
    }
    let set = McpToolset::connect(support::everything().no_elicitation())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    set.refresh().await.unwrap();
    assert!(
        set.tool("everything__trigger-elicitation-request")
            .is_none()
    );
}

#[tokio::test]
async fn dropping_the_toolset_and_its_tools_stops_the_child() {
    if !support::servers_available("dropping_the_toolset_and_its_tools_stops_the_child") {
        return;
    }
    let set = McpToolset::connect(support::everything()).await.unwrap();
    let tk = set.toolkit().unwrap();
    let pid = set.child_pid().await.unwrap();
    drop(set);
    // The toolkit's tools still hold the connection.
    let r = run(&tk, "everything__echo", json!({ "message": "still here" })).await;
    assert_eq!(r.outcome, ToolOutcome::Success, "{}", r.text());
    drop(tk);
    let mut gone = false;
    for _ in 0..50 {
        let alive = std::process::Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !alive {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the server process {pid} outlived its last handle");
}

#[tokio::test]
async fn the_idempotency_key_and_the_trace_context_reach_the_server_in_meta() {
    if !support::servers_available(
        "the_idempotency_key_and_the_trace_context_reach_the_server_in_meta",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wire.jsonl");
    let set = McpToolset::connect(support::everything_logged(&log))
        .await
        .unwrap();
    let tk = set.toolkit().unwrap();
    let args = json!({ "message": "hello" });
    // A key set by the caller (an agent sets the ledger's), and one the toolkit
    // derives when the context has none.
    let given = ToolUse::new("call_1", "everything__echo", args.clone());
    // With the trace context of the call's span, as an agent that records traces
    // sets it: it goes out as `_meta.traceparent`.
    let ctx = ToolContext::new("s", &given.id)
        .with_idempotency_key("key-from-the-agent")
        .with_trace_parent(Some(TRACEPARENT.to_owned()));
    let r = tk.execute(&given, ctx, &ExecOptions::default()).await;
    assert_eq!(r.into_result().unwrap().outcome, ToolOutcome::Success);
    let derived = ToolUse::new("call_2", "everything__echo", args.clone());
    let r = run_use(&tk, &derived).await;
    assert_eq!(r.outcome, ToolOutcome::Success, "{}", r.text());
    let expected = reins_tool::idempotency_key("s", "call_2", &reins_message::fingerprint(&args));

    let mut metas = Vec::new();
    for _ in 0..100 {
        let wire = std::fs::read_to_string(&log).unwrap_or_default();
        metas = wire
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|m| m["method"] == "tools/call")
            .map(|m| m["params"]["_meta"].clone())
            .collect();
        if metas.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let keys: Vec<&Value> = metas
        .iter()
        .map(|m| &m[reins_mcp::IDEMPOTENCY_KEY_META])
        .collect();
    assert_eq!(keys, [&json!("key-from-the-agent"), &json!(expected)]);
    // The trace context went with the first call only (the second had none).
    assert_eq!(metas[0]["traceparent"], TRACEPARENT, "{metas:?}");
    assert!(metas[1].get("traceparent").is_none(), "{metas:?}");
}

/// The W3C trace context of a call's span, as an agent hands it to the tool.
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

async fn run_use(tk: &Toolkit, call: &ToolUse) -> ToolResult {
    tk.execute(
        call,
        ToolContext::new("s", &call.id),
        &ExecOptions::default(),
    )
    .await
    .into_result()
    .unwrap()
}

/// What the client wrote to a logged server, as JSON messages.
async fn wire(log: &std::path::Path, until: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut msgs = Vec::new();
    for _ in 0..100 {
        msgs = std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect();
        if until(&msgs) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    msgs
}

#[tokio::test]
async fn the_fallback_initialize_announces_the_newest_legacy_revision() {
    if !support::servers_available("the_fallback_initialize_announces_the_newest_legacy_revision") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // server-everything speaks revisions up to 2025-11-25: the `server/discover` probe
    // fails, and the `initialize` that follows must name a revision that has one.
    let log = dir.path().join("probe.jsonl");
    let set = McpToolset::connect(support::everything_logged(&log))
        .await
        .unwrap();
    let msgs = wire(&log, |m| m.iter().any(|m| m["method"] == "initialize")).await;
    let methods: Vec<&str> = msgs.iter().filter_map(|m| m["method"].as_str()).collect();
    assert_eq!(methods[..2], ["server/discover", "initialize"], "{msgs:?}");
    let init = msgs.iter().find(|m| m["method"] == "initialize").unwrap();
    assert_eq!(init["params"]["protocolVersion"], "2025-11-25", "{init}");
    set.close().await;

    // A pinned legacy revision skips the probe and announces itself.
    let log = dir.path().join("pinned.jsonl");
    let set = McpToolset::connect(support::everything_logged(&log).protocol_version("2025-06-18"))
        .await
        .unwrap();
    assert!(!set.tools().is_empty());
    let msgs = wire(&log, |m| m.iter().any(|m| m["method"] == "initialize")).await;
    assert_eq!(msgs[0]["method"], "initialize", "{msgs:?}");
    assert_eq!(msgs[0]["params"]["protocolVersion"], "2025-06-18");
    set.close().await;

    // A revision the client does not know is refused before anything starts.
    let e = McpToolset::connect(support::everything().protocol_version("2099-01-01"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("2099-01-01"), "{e}");
}
