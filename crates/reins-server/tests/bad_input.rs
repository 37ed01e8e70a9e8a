//! Bad input: malformed and mistyped bodies, unknown ids, oversized bodies, clients
//! that send slowly, an SSE client that never reads. Every refusal is a JSON error
//! with the right status, and a refused request changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn raw(s: &TestServer, path: &str, content_type: Option<&str>, body: &str) -> (u16, Value) {
    let mut req = s
        .client
        .post(s.url(path))
        .bearer_auth(ADMIN)
        .body(body.to_owned());
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let res = req.send().await.unwrap();
    let st = res.status().as_u16();
    (st, res.json().await.unwrap_or(Value::Null))
}

async fn paused(s: &TestServer, session: &str) -> (String, Value) {
    let (st, out) = s
        .post(
            ALICE,
            &format!("/v1/sessions/{}/runs", enc(session)),
            json!({"message": "delete x.txt"}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    let (_, view) = s
        .get(ADMIN, &format!("/v1/sessions/{}", enc(session)))
        .await;
    (
        out["requirements"][0]["id"].as_str().unwrap().to_owned(),
        view,
    )
}

#[tokio::test]
async fn malformed_and_mistyped_bodies_are_400_and_change_nothing() {
    let s = start().await;
    let (rid, before) = paused(&s, "alice/bad").await;
    let j = Some("application/json");
    let cases: Vec<(&str, Option<&str>, String)> = vec![
        (
            "/v1/sessions/alice%2Fbad/runs",
            j,
            "{\"message\": ".to_owned(),
        ),
        (
            "/v1/sessions/alice%2Fbad/runs",
            j,
            "{\"message\": 5}".to_owned(),
        ),
        (
            "/v1/sessions/alice%2Fbad/runs",
            j,
            "{\"message\": \"hi\", \"extra\": 1}".to_owned(),
        ),
        (
            "/v1/sessions/alice%2Fbad/runs",
            None,
            "{\"message\": \"hi\"}".to_owned(),
        ),
        ("/v1/sessions/alice%2Fbad/runs", j, "[]".to_owned()),
        (
            "/v1/sessions/alice%2Fbad/decisions",
            j,
            "{\"decisions\": {}}".to_owned(),
        ),
        (
            "/v1/sessions/alice%2Fbad/decisions",
            j,
            json!({"decisions": [{"requirement_id": rid, "action": "maybe"}]}).to_string(),
        ),
        (
            "/v1/sessions/alice%2Fbad/decisions",
            j,
            json!({"decisions": [{"requirement_id": 7, "action": "approve"}]}).to_string(),
        ),
    ];
    for (path, ct, body) in cases {
        let (st, err) = raw(&s, path, ct, &body).await;
        assert_eq!(st, 400, "{body}: {err}");
        assert_eq!(err["error"]["code"], "bad_body", "{body}: {err}");
        assert!(!err["error"]["message"].as_str().unwrap().is_empty());
    }
    // A bad view token is a bad request too.
    let (st, err) = s
        .post(ADMIN, "/v1/sessions/alice%2Fbad/decisions", json!({"view_token": "nope", "decisions": [{"requirement_id": rid, "action": "approve"}]}))
        .await;
    assert_eq!(st, 400, "{err}");
    let (_, after) = s.get(ADMIN, "/v1/sessions/alice%2Fbad").await;
    assert_eq!(before, after);
    assert!(s.ran().is_empty());
}

#[tokio::test]
async fn invalid_decisions_are_422_and_change_nothing() {
    let s = start().await;
    let (rid, before) = paused(&s, "alice/inv").await;
    let path = "/v1/sessions/alice%2Finv/decisions";
    for d in [
        json!({"decisions": []}),
        json!({"decisions": [{"requirement_id": rid, "action": "approve", "note": "why"}]}),
        json!({"decisions": [{"requirement_id": rid, "action": "approve", "edited_args": [1]}]}),
        json!({"decisions": [{"requirement_id": rid, "action": "input", "values": {"a": 1}}]}),
        json!({"decisions": [{"requirement_id": rid, "action": "external_result", "output": "x"}]}),
        json!({"decisions": [{"requirement_id": rid, "action": "reject", "values": {}}]}),
        json!({"decisions": [{"requirement_id": rid, "action": "approve"}, {"requirement_id": rid, "action": "reject"}]}),
    ] {
        let (st, err) = s.post(ADMIN, path, d.clone()).await;
        assert_eq!(st, 422, "{d}: {err}");
        let (_, after) = s.get(ADMIN, "/v1/sessions/alice%2Finv").await;
        assert_eq!(before, after, "{d} changed the session");
    }
    assert!(s.ran().is_empty());
}

#[tokio::test]
async fn unknown_ids_are_404() {
    let s = start().await;
    let (_, before) = paused(&s, "alice/unk").await;
    let (st, err) = s.get(ADMIN, "/v1/sessions/alice%2Fnobody").await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{err}"
    );
    let (st, _) = s.get(ADMIN, "/v1/sessions/alice%2Fnobody/decisions").await;
    assert_eq!(st, 404);
    let (st, _) = s.get(ADMIN, "/v1/sessions/alice%2Fnobody/events").await;
    assert_eq!(st, 404);
    let (st, _) = s
        .post(ADMIN, "/v1/sessions/alice%2Fnobody/interrupt", json!({}))
        .await;
    assert_eq!(st, 404);
    let (st, _) = s
        .post(
            ADMIN,
            "/v1/sessions/alice%2Fnobody/decisions",
            json!({"decisions": [{"requirement_id": "x", "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 404);
    // Reading an unknown session does not create it.
    let (st, _) = s.get(ADMIN, "/v1/sessions/alice%2Fnobody").await;
    assert_eq!(st, 404);
    let (st, err) = s
        .post(
            ADMIN,
            "/v1/sessions/alice%2Funk/decisions",
            json!({"decisions": [{"requirement_id": "call_nope", "action": "approve"}]}),
        )
        .await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (404, Some("unknown_requirement")),
        "{err}"
    );
    let (_, after) = s.get(ADMIN, "/v1/sessions/alice%2Funk").await;
    assert_eq!(before, after);
    let (st, err) = s.get(ADMIN, "/v1/no/such/thing").await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let res = s
        .client
        .delete(s.url("/v1/requirements"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 405);
    let err: Value = res.json().await.unwrap();
    assert_eq!(err["error"]["code"], "method_not_allowed");
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let s = start_with(|srv| srv.body_limit(1024)).await;
    let big = json!({"message": "x".repeat(4096)}).to_string();
    let (st, err) = raw(
        &s,
        "/v1/sessions/alice%2Fbig/runs",
        Some("application/json"),
        &big,
    )
    .await;
    assert_eq!(st, 413, "{err}");
    assert_eq!(err["error"]["code"], "payload_too_large");
    // Chunked (no Content-Length): refused as it streams in.
    let chunks: Vec<Result<String, std::io::Error>> =
        (0..16).map(|_| Ok("x".repeat(512))).collect();
    let res = s
        .client
        .post(s.url("/v1/sessions/alice%2Fbig/runs"))
        .bearer_auth(ADMIN)
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 413);
    // Nothing was created.
    let (st, _) = s.get(ADMIN, "/v1/sessions/alice%2Fbig").await;
    assert_eq!(st, 404);
}

#[tokio::test]
async fn a_client_that_sends_its_body_slowly_is_cut_off() {
    let s = start_with(|srv| {
        srv.body_timeout(Duration::from_millis(300))
            .request_timeout(Duration::from_secs(5))
    })
    .await;
    let mut sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let head = format!(
        "POST /v1/sessions/alice%2Fslowloris/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"mess"
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    // ...and then nothing. The server answers and closes; it does not wait forever.
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), sock.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server kept waiting for the body");
    let text = String::from_utf8_lossy(&answer);
    assert!(
        text.starts_with("HTTP/1.1 408") || text.starts_with("HTTP/1.1 400"),
        "{text}"
    );
    // The server still serves others.
    let (st, _) = s.get("", "/healthz").await;
    assert_eq!(st, 200);
    let (st, _) = s.get(ADMIN, "/v1/sessions/alice%2Fslowloris").await;
    assert_eq!(st, 404);
}

#[tokio::test]
async fn an_sse_client_that_never_reads_does_not_hold_up_runs() {
    let s = start().await;
    // Create the session, then subscribe with a raw socket that never reads.
    let (st, _) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fflood/runs",
            json!({"message": "hi"}),
        )
        .await;
    assert_eq!(st, 200);
    let mut sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let req = format!(
        "GET /v1/sessions/alice%2Fflood/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\n\r\n"
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    // Runs that publish thousands of events (the model streams 4 characters at a time).
    let long = "y".repeat(4000);
    for _ in 0..10 {
        let (st, out) = s
            .post(
                ALICE,
                "/v1/sessions/alice%2Fflood/runs",
                json!({"message": long}),
            )
            .await;
        assert_eq!(st, 200);
        assert_eq!(out["status"], "completed");
    }
    // A reader that does read still gets a consistent picture.
    let res = s
        .client
        .get(s.url("/v1/sessions/alice%2Fflood/events"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(res);
    let first = reader.next().await.unwrap();
    assert_eq!(first.event, "state");
    assert_eq!(first.data["status"], "idle");
    drop(sock);
}
