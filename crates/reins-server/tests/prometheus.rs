//! `/metrics` scraped by a real Prometheus (Debian's `prometheus` package; `.ci/run`
//! installs it): a config written to a temp dir, loopback only, a one-second scrape
//! interval. After two calls pause and one is approved by another principal,
//! Prometheus's own HTTP API returns the pending-requirements gauge and the
//! approval-wait histogram; the exposition carries no session ids.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// The `prometheus` binary; a missing one fails under CI and is reported otherwise.
fn prometheus_binary() -> Option<&'static str> {
    let found = std::process::Command::new("prometheus")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some("prometheus");
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "prometheus is not installed: apt-get install prometheus"
    );
    eprintln!("SKIPPED: prometheus is not installed (apt-get install prometheus)");
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One instant-vector query: the value of the series matching `query`, if any.
async fn query(client: &reqwest::Client, prom: &str, query: &str) -> Option<f64> {
    let res = client
        .get(format!("{prom}/api/v1/query"))
        .query(&[("query", query)])
        .send()
        .await
        .ok()?;
    let body: Value = res.json().await.ok()?;
    let v = body["data"]["result"][0]["value"][1].as_str()?;
    v.parse().ok()
}

/// Waits until `query` returns `want` (Prometheus scrapes every second).
async fn until(client: &reqwest::Client, prom: &str, q: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = query(client, prom, q).await;
        if got == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "`{q}` is {got:?}, not {want}, after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn pause(s: &TestServer, session: &str, text: &str) -> String {
    let (st, out) = s
        .post(
            ALICE,
            &format!("/v1/sessions/{}/runs", enc(session)),
            json!({"message": text}),
        )
        .await;
    assert_eq!((st, out["status"].as_str()), (200, Some("paused")), "{out}");
    out["requirements"][0]["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_pending_gauge_and_the_approval_wait() {
    let Some(bin) = prometheus_binary() else {
        return;
    };
    let s = start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: reins\n    metrics_path: /metrics\n    static_configs:\n      - targets: ['{}']\n",
            s.addr
        ),
    )
    .unwrap();
    let port = free_port();
    let mut prom = tokio::process::Command::new(bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();

    // Two calls wait for a person.
    let first = pause(&s, "alice/m1", "delete a.txt").await;
    pause(&s, "alice/m2", "delete b.txt").await;
    until(
        &client,
        &base,
        r#"sum(reins_requirements_pending{tool="delete_file"})"#,
        2.0,
    )
    .await;
    // One is approved by another principal after waiting over a second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (st, out) = s
        .post(
            ANA,
            "/v1/sessions/alice%2Fm1/decisions",
            json!({"decisions": [{"requirement_id": first, "action": "approve"}]}),
        )
        .await;
    assert_eq!(
        (st, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );
    until(
        &client,
        &base,
        r#"sum(reins_requirements_pending{tool="delete_file"})"#,
        1.0,
    )
    .await;
    until(
        &client,
        &base,
        r#"reins_approval_wait_seconds_count{door="api"}"#,
        1.0,
    )
    .await;
    let waited = query(
        &client,
        &base,
        r#"reins_approval_wait_seconds_sum{door="api"}"#,
    )
    .await
    .unwrap();
    assert!((1.0..60.0).contains(&waited), "waited {waited} s");
    // Under two seconds: the +Inf bucket has it, the 1-second bucket does not.
    until(
        &client,
        &base,
        r#"reins_approval_wait_seconds_bucket{door="api",le="1"}"#,
        0.0,
    )
    .await;
    until(
        &client,
        &base,
        r#"reins_decisions_total{door="api",verdict="approve"}"#,
        1.0,
    )
    .await;
    until(&client, &base, r#"reins_runs_total{status="paused"}"#, 2.0).await;
    until(
        &client,
        &base,
        r#"reins_runs_total{status="completed"}"#,
        1.0,
    )
    .await;
    until(
        &client,
        &base,
        r#"reins_tool_calls_total{tool="delete_file",outcome="success"}"#,
        1.0,
    )
    .await;

    // The exposition itself: no session ids, no principals.
    let text = reqwest::get(s.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("reins_store_call_duration_seconds"), "{text}");
    assert!(
        !text.contains("alice") && !text.contains("m1") && !text.contains("ana"),
        "{text}"
    );
    prom.kill().await.unwrap();
}
