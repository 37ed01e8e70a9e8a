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
        // Arrays where the schema has objects: never read as the fields in order.
        (
            "/v1/sessions/alice%2Fbad/runs",
            j,
            json!(["delete y.txt"]).to_string(),
        ),
        (
            "/v1/sessions/alice%2Fbad/decisions",
            j,
            json!({"decisions": [[rid, "approve"]]}).to_string(),
        ),
        ("/v1/grants", j, json!(["delete_file"]).to_string()),
        (
            "/v1/grants",
            j,
            json!({"tool": "delete_file", "conditions": [["/path", "equals", "x"]]}).to_string(),
        ),
        (
            "/v1/webhooks",
            j,
            json!(["http://127.0.0.1:9/x"]).to_string(),
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
    let (_, grants) = s.get(ADMIN, "/v1/grants").await;
    assert_eq!(grants["grants"], json!([]), "{grants}");
    let (_, hooks) = s.get(ADMIN, "/v1/webhooks").await;
    assert_eq!(hooks["webhooks"], json!([]), "{hooks}");
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

/// Reads from a raw socket until `done` says the answer is complete, the peer closes
/// (or resets) the connection, or `limit` runs out; what was read, and whether the
/// connection ended.
async fn read_until(
    sock: &mut tokio::net::tcp::OwnedReadHalf,
    limit: Duration,
    done: impl Fn(&str) -> bool,
) -> (String, bool) {
    let deadline = tokio::time::Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, sock.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
            Ok(Ok(0) | Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => {
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got);
                if done(&text) {
                    return (text.into_owned(), false);
                }
            }
        }
    }
}

#[tokio::test]
async fn a_client_that_sends_its_headers_slowly_is_disconnected() {
    let s = start_with(|srv| srv.header_timeout(Duration::from_secs(2))).await;
    // Slowloris: a header byte per second; the whole head would take about 60 s.
    let sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let (mut rd, mut wr) = sock.into_split();
    let head = format!("GET /v1/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\n\r\n");
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = sent.clone();
    let writer = tokio::spawn(async move {
        for b in head.bytes() {
            if wr.write_all(&[b]).await.is_err() {
                return;
            }
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let started = std::time::Instant::now();
    let (answer, closed) = read_until(&mut rd, Duration::from_secs(20), |_| false).await;
    let took = started.elapsed();
    assert!(closed, "the connection was not closed within 20 s");
    assert!(
        took < Duration::from_secs(8),
        "closed only after {took:?} (header timeout 2 s)"
    );
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    assert!(sent.load(std::sync::atomic::Ordering::Relaxed) < 20);
    writer.abort();

    // A connection that sends nothing at all is closed too.
    let sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let (mut rd, _wr) = sock.into_split();
    let (_, closed) = read_until(&mut rd, Duration::from_secs(20), |_| false).await;
    assert!(closed, "an idle connection was kept open");

    // Others are served meanwhile.
    let (st, me) = s.get(ADMIN, "/v1/me").await;
    assert_eq!(st, 200, "{me}");
}

#[tokio::test]
async fn a_client_that_trickles_its_body_gets_408_and_changes_nothing() {
    // Each byte arrives well within the idle gap allowed by `body_timeout`, but the
    // whole body would take 20 s: it must arrive within `body_timeout` in total.
    let s = start_with(|srv| {
        srv.body_timeout(Duration::from_secs(1))
            .request_timeout(Duration::from_secs(60))
    })
    .await;
    let body = json!({"message": "x".repeat(80)}).to_string();
    let sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let (mut rd, mut wr) = sock.into_split();
    let head = format!(
        "POST /v1/sessions/alice%2Ftrickle/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    wr.write_all(head.as_bytes()).await.unwrap();
    let writer = tokio::spawn(async move {
        for b in body.bytes() {
            if wr.write_all(&[b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let started = std::time::Instant::now();
    let (answer, _) = read_until(&mut rd, Duration::from_secs(20), |t| {
        t.contains("\r\n\r\n") && t.ends_with('}')
    })
    .await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains(r#""code":"timeout""#), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(10));
    writer.abort();
    let (st, _) = s.get(ADMIN, "/v1/sessions/alice%2Ftrickle").await;
    assert_eq!(st, 404);
}

#[tokio::test]
async fn sse_streams_outlive_every_timeout() {
    let s = start_with(|srv| {
        srv.header_timeout(Duration::from_secs(1))
            .body_timeout(Duration::from_secs(1))
            .request_timeout(Duration::from_secs(1))
            .keep_alive(Duration::from_secs(60))
    })
    .await;
    let (st, _) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Flong/runs",
            json!({"message": "hi"}),
        )
        .await;
    assert_eq!(st, 200);
    let res = s
        .client
        .get(s.url("/v1/sessions/alice%2Flong/events"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    let mut events = SseReader::new(res);
    assert_eq!(events.next().await.unwrap().event, "state");
    // Silent for three times every timeout (no keep-alive comments either)...
    tokio::time::sleep(Duration::from_secs(3)).await;
    // ...and still delivering.
    let (st, _) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Flong/runs",
            json!({"message": "still there?"}),
        )
        .await;
    assert_eq!(st, 200);
    let seen = events.until("output").await;
    assert_eq!(
        seen.last().unwrap().data["output"]["status"],
        "completed",
        "{seen:?}"
    );
    // A streamed run that lasts longer than the request timeout is not cut either.
    let res = s
        .client
        .post(s.url("/v1/sessions/alice%2Flong/runs?stream=true"))
        .bearer_auth(ALICE)
        .json(&json!({"message": "slow things"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut run = SseReader::new(res);
    run.until("tool_execution_started").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (st, _) = s
        .post(ALICE, "/v1/sessions/alice%2Flong/interrupt", json!({}))
        .await;
    assert_eq!(st, 202);
    let rest = run.until("output").await;
    assert_eq!(rest.last().unwrap().data["output"]["status"], "cancelled");
}
