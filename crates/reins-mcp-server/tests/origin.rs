//! The streamable HTTP endpoint refuses foreign browser origins (the transport's
//! security rule against DNS rebinding): over real HTTP on a loopback port, a request
//! with a loopback `Host` but `Origin: http://evil.example.com` gets 403 and changes
//! nothing (no session, no tool run, a paused session keeps its version), while
//! requests without `Origin`, from loopback origins, or from a configured origin run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use reins_memory::MemoryStore;
use serde_json::{Value, json};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 request on a fresh connection; the status and the body as text.
async fn send(port: u16, method: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut req = format!(
        "{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("the server did not finish its answer in 30 s")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text}"));
    (status, text)
}

/// A revision 2026-07-28 `tools/call` (stateless: everything in the request), with
/// this `Origin` when given. The client declares no elicitation, so a pause comes
/// back as a result naming the session.
async fn call(port: u16, origin: Option<&str>, args: Value) -> (u16, String) {
    let body = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {
            "name": "files", "arguments": args,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": { "name": "origin-test", "version": "1" },
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }
    })
    .to_string();
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Authorization", "Bearer token-alice"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "files"),
    ];
    if let Some(o) = origin {
        headers.push(("Origin", o));
    }
    send(port, "POST", &headers, &body).await
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches("/mcp").parse().ok())
        .unwrap()
}

/// The session id in a tools/call answer's structured content.
fn session_in(answer: &str) -> String {
    let at = answer.find("\"session\":\"").expect(answer) + "\"session\":\"".len();
    answer[at..].split('"').next().unwrap().to_owned()
}

async fn session_ids(store: &Arc<dyn MemoryStore>) -> Vec<String> {
    let mut ids: Vec<String> = store
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_origin_is_refused_and_changes_nothing() {
    let (_dir, store) = sqlite_store().await;
    let ran = Ran::default();
    let http = serve_http(server(agent(store.clone(), &ran))).await;
    let port = port_of(&http.url);

    // A session paused on a confirmation, started by a program (no Origin).
    let (status, answer) = call(port, None, json!({ "message": "delete a.txt" })).await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.contains("\\\"paused\\\"") || answer.contains("paused"),
        "{answer}"
    );
    let paused = session_in(&answer);
    let version = store.session_version(&paused).await.unwrap();
    let before = session_ids(&store).await;

    // A page on evil.example.com that rebound its name to 127.0.0.1: a new run, a
    // message to the paused session, both at once (the second caller too).
    let evil = "http://evil.example.com";
    let (a, b) = tokio::join!(
        call(port, Some(evil), json!({ "message": "hello" })),
        call(
            port,
            Some(evil),
            json!({ "message": "delete b.txt", "session": paused })
        ),
    );
    for (status, answer) in [a, b] {
        assert_eq!(status, 403, "{answer}");
        assert!(answer.contains("Origin"), "{answer}");
    }
    // Origins that only look local, `null` (sandboxed frames, file://), and an
    // https page on another host are refused the same way.
    for origin in [
        "http://127.0.0.1.evil.example.com",
        "http://localhost.evil.example.com:8080",
        "null",
        "https://evil.example.com",
    ] {
        let (status, answer) = call(port, Some(origin), json!({ "message": "hello" })).await;
        assert_eq!(status, 403, "{origin}: {answer}");
    }
    // Every door of the endpoint: the legacy handshake, the SSE stream, the session end.
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": { "name": "origin-test", "version": "1" } }
    })
    .to_string();
    let legacy = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Authorization", "Bearer token-alice"),
        ("Origin", evil),
    ];
    assert_eq!(send(port, "POST", &legacy, &init).await.0, 403);
    assert_eq!(send(port, "GET", &legacy, "").await.0, 403);
    assert_eq!(send(port, "DELETE", &legacy, "").await.0, 403);

    // Nothing ran and nothing was stored.
    assert!(ran.all().is_empty(), "{:?}", ran.all());
    assert_eq!(session_ids(&store).await, before);
    assert_eq!(store.session_version(&paused).await.unwrap(), version);

    // Programs (no Origin) and pages on this machine still get through.
    for origin in [
        None,
        Some(format!("http://127.0.0.1:{port}")),
        Some("http://localhost:5173".to_owned()),
        Some("http://[::1]:8080".to_owned()),
    ] {
        let (status, answer) = call(port, origin.as_deref(), json!({ "message": "hello" })).await;
        assert_eq!(status, 200, "{origin:?}: {answer}");
        assert!(answer.contains("echo: hello"), "{origin:?}: {answer}");
    }
    assert_eq!(session_ids(&store).await.len(), before.len() + 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_origins_are_allowed_and_only_those() {
    let (_dir, store) = sqlite_store().await;
    let ran = Ran::default();
    let server = reins_mcp_server::McpAgentServer::builder(agent(store.clone(), &ran))
        .signing_key(*KEY)
        .allowed_origins(["https://app.example.com:443"])
        .build()
        .unwrap();
    let http = serve_http(server).await;
    let port = port_of(&http.url);
    let (status, answer) = call(
        port,
        Some("https://app.example.com"),
        json!({ "message": "hello" }),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    for origin in [
        "https://app.example.com:8443",
        "http://app.example.com",
        "https://app.example.com.evil.example.com",
    ] {
        let (status, answer) = call(port, Some(origin), json!({ "message": "hello" })).await;
        assert_eq!(status, 403, "{origin}: {answer}");
    }
    assert_eq!(session_ids(&store).await.len(), 1);
}
