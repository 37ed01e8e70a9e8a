//! The streamable HTTP transport against an rmcp server on a loopback port.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use reins_mcp::{McpServer, McpToolset};
use reins_message::{ToolOutcome, ToolUse};
use reins_tool::{ExecOptions, ToolContext};
use serde_json::json;
use support::fault_server::{self, State};

#[tokio::test]
async fn tools_over_streamable_http_with_a_bearer_token() {
    let state = Arc::new(State::default());
    let (url, auth, stop) = fault_server::serve_http(state.clone()).await;
    let set = McpToolset::connect(
        McpServer::http("remote", &url)
            .bearer_token("t0ken")
            .header("X-Team", "reins")
            .trusted(true),
    )
    .await
    .unwrap();
    assert_eq!(set.tools().len(), 8);
    let tk = set.toolkit().unwrap();

    let call = ToolUse::new("call_1", "remote__echo", json!({ "text": "over http" }));
    let r = tk
        .execute(
            &call,
            ToolContext::new("s", &call.id),
            &ExecOptions::default(),
        )
        .await
        .into_result()
        .unwrap();
    assert_eq!(r.outcome, ToolOutcome::Success, "{}", r.text());
    assert_eq!(r.text(), "over http");
    assert!(auth.lock().unwrap().iter().all(|a| a == "Bearer t0ken"));
    assert!(!auth.lock().unwrap().is_empty());

    // An interrupt reaches the server as notifications/cancelled.
    let call = ToolUse::new("call_2", "remote__slow", json!({}));
    let token = tokio_util::sync::CancellationToken::new();
    let ctx = ToolContext::new("s", &call.id).with_cancel(token.clone());
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        token.cancel();
    });
    let r = tk
        .execute(&call, ctx, &ExecOptions::default())
        .await
        .into_result()
        .unwrap();
    stopper.await.unwrap();
    assert_eq!(r.outcome, ToolOutcome::Interrupted, "{}", r.text());
    for _ in 0..100 {
        if !state.cancelled().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(state.cancelled(), ["slow"]);
    stop.cancel();
}

#[tokio::test]
async fn an_unreachable_url_is_a_handshake_error() {
    // Bind and drop a listener: nothing listens on that port any more.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = McpToolset::connect(
        McpServer::http("nowhere", format!("http://127.0.0.1:{port}/mcp"))
            .connect_timeout(Duration::from_secs(10)),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("MCP server `nowhere`"), "{e}");
}
