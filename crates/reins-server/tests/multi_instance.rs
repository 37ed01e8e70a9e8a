//! Two server processes on one PostgreSQL database (the URL comes from
//! `REINS_TEST_POSTGRES_URL`, which `cargo xtask test` sets after starting a throwaway
//! cluster): a run paused on A is decided on B; B's inbox learns of A's pause live, and
//! a session stream open on B sees A's committed steps, the pause and B's own run, then
//! resumes on A with `Last-Event-ID`; an
//! interrupt posted to B stops a run executing on A; after `kill -9` of A in the middle
//! of a tool, B recovers the session with an honest `unknown` outcome.
//!
//! The servers are this test binary run again as a child (`child_server` below); they
//! listen on loopback and exit when the test drops its end of their stdin.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

const CHILD_ENV: &str = "REINS_SERVER_TEST_CHILD_PG";
const PORT_FILE_ENV: &str = "REINS_SERVER_TEST_CHILD_PORT_FILE";

/// In a child process: serve until stdin closes. In the test run itself: nothing.
#[test]
fn child_server() {
    let (Ok(url), Ok(port_file)) = (std::env::var(CHILD_ENV), std::env::var(PORT_FILE_ENV)) else {
        return;
    };
    // The parent holds our stdin: when it goes away (or drops it), we stop.
    std::thread::spawn(|| {
        let mut sink = [0u8; 64];
        while std::io::stdin().read(&mut sink).is_ok_and(|n| n > 0) {}
        std::process::exit(0);
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let store = reins_memory::PostgresStore::connect(&url).await.unwrap();
        let ran: Ran = Arc::default();
        let agent = support::agent(Arc::new(store), &ran);
        let server = reins_server::Server::new(agent)
            .auth(auth())
            .poll_interval(Duration::from_millis(200));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        std::fs::write(&port_file, port.to_string()).unwrap();
        server.serve(listener).await.unwrap();
    });
}

/// A server process.
struct Instance {
    child: Child,
    base: String,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_instance(url: &str, dir: &std::path::Path, name: &str) -> Instance {
    let port_file = dir.join(format!("{name}.port"));
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["child_server", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, url)
        .env(PORT_FILE_ENV, &port_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let port = loop {
        if let Ok(p) = std::fs::read_to_string(&port_file)
            && let Ok(p) = p.trim().parse::<u16>()
        {
            break p;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{name} did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    Instance {
        child,
        base: format!("http://127.0.0.1:{port}"),
    }
}

async fn post(c: &reqwest::Client, url: String, token: &str, body: Value) -> (u16, Value) {
    let res = c
        .post(url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let st = res.status().as_u16();
    (st, res.json().await.unwrap_or(Value::Null))
}

async fn get(c: &reqwest::Client, url: String, token: &str) -> (u16, Value) {
    let res = c.get(url).bearer_auth(token).send().await.unwrap();
    let st = res.status().as_u16();
    (st, res.json().await.unwrap_or(Value::Null))
}

/// The messages of a session stream's `message` events.
fn messages_of(events: &[SseEvent]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.event == "message")
        .map(|e| e.data["message"].clone())
        .collect()
}

fn outcomes(view: &Value, tool: &str) -> Vec<String> {
    let mut out = Vec::new();
    for m in view["messages"].as_array().into_iter().flatten() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_result" && b["name"] == tool {
                out.push(b["outcome"]["status"].as_str().unwrap_or("").to_owned());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_sessions_on_postgres() {
    let Ok(url) = std::env::var("REINS_TEST_POSTGRES_URL") else {
        let msg = "REINS_TEST_POSTGRES_URL is not set (run `cargo xtask test`, which starts a throwaway PostgreSQL)";
        if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0") {
            panic!("{msg}; CI requires it");
        }
        eprintln!("\n!!! SKIPPED two_instances_share_sessions_on_postgres: {msg}\n");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_instance(&url, dir.path(), "a");
    let b = spawn_instance(&url, dir.path(), "b");
    let c = reqwest::Client::new();
    let tag = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let s1 = format!("alice/mi-{tag}-1");

    // B's inbox stream is open before A pauses.
    let res = c
        .get(format!("{}/v1/events", b.base))
        .bearer_auth(ANA)
        .send()
        .await
        .unwrap();
    let mut b_inbox = SseReader::new(res);
    assert_eq!(b_inbox.next().await.unwrap().event, "ready");

    // The session exists (a first exchange on A), and B's session stream is open
    // before the run that pauses.
    let (st, out) = post(
        &c,
        format!("{}/v1/sessions/{}/runs", a.base, enc(&s1)),
        ALICE,
        json!({"message": "hello"}),
    )
    .await;
    assert_eq!(st, 200, "{out}");
    let res = c
        .get(format!("{}/v1/sessions/{}/events", b.base, enc(&s1)))
        .bearer_auth(ANA)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut b_events = SseReader::new(res);
    let ev = b_events.next().await.unwrap();
    assert_eq!(
        (ev.event.as_str(), &ev.data["status"]),
        ("state", &json!("idle"))
    );

    // A run on A pauses.
    let (st, out) = post(
        &c,
        format!("{}/v1/sessions/{}/runs", a.base, enc(&s1)),
        ALICE,
        json!({"message": "delete shared.txt"}),
    )
    .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["status"], "paused");
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();

    // B's inbox hears of it, live, and lists it.
    loop {
        let ev = b_inbox.next().await.unwrap();
        if ev.event == "changed" && ev.data["session_id"] == s1.as_str() {
            break;
        }
    }
    let (_, inbox) = get(&c, format!("{}/v1/requirements", b.base), ANA).await;
    assert!(
        inbox["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["requirement_id"] == rid.as_str()),
        "{inbox}"
    );

    // B's session stream saw the steps A committed: the user's message, the tool
    // call, then the pause with its requirement.
    let mut before_pause = Vec::new();
    let paused_ev = loop {
        let ev = b_events.next().await.unwrap();
        if ev.event == "state" && ev.data["status"] == "paused" {
            break ev;
        }
        before_pause.push(ev);
    };
    let msgs = messages_of(&before_pause);
    assert_eq!(msgs.len(), 2, "{before_pause:?}");
    assert_eq!(msgs[0]["role"], "user");
    assert_eq!(msgs[0]["content"][0]["text"], "delete shared.txt");
    assert_eq!(msgs[1]["role"], "assistant");
    assert!(msgs[1].to_string().contains("delete_file"), "{}", msgs[1]);
    assert_eq!(paused_ev.data["requirements"][0]["id"], rid.as_str());
    let paused_at = paused_ev.id.clone().unwrap();

    // The decision posted to B resumes the run (B executes it).
    let (_, view) = get(&c, format!("{}/v1/sessions/{}", b.base, enc(&s1)), ANA).await;
    assert_eq!(view["status"], "paused");
    let (st, out) = post(
        &c,
        format!("{}/v1/sessions/{}/decisions", b.base, enc(&s1)),
        ANA,
        json!({"view_token": view["view_token"], "decisions": [{"requirement_id": rid, "action": "approve"}]}),
    )
    .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["status"], "completed");
    // B's stream, open all along, goes on with the tool's result and the answer.
    let mut after_pause = Vec::new();
    loop {
        let ev = b_events.next().await.unwrap();
        let done = ev.event == "state" && ev.data["status"] == "idle";
        after_pause.push(ev);
        if done {
            break;
        }
    }
    let msgs = messages_of(&after_pause);
    assert_eq!(msgs.len(), 2, "{after_pause:?}");
    assert!(msgs[0].to_string().contains("tool_result"), "{}", msgs[0]);
    assert_eq!(msgs[1]["role"], "assistant");
    drop(b_events);
    // Reconnecting to A with the last id B gave before the decision resumes there:
    // the same messages, then the current state.
    let res = c
        .get(format!("{}/v1/sessions/{}/events", a.base, enc(&s1)))
        .bearer_auth(ANA)
        .header("Last-Event-ID", &paused_at)
        .send()
        .await
        .unwrap();
    let mut a_events = SseReader::new(res);
    let resumed = a_events.until("state").await;
    assert_eq!(messages_of(&resumed), msgs, "{resumed:?}");
    assert_eq!(resumed.last().unwrap().data["status"], "idle");
    drop(a_events);

    // A sees the outcome; deciding again on A is refused.
    let (_, view) = get(&c, format!("{}/v1/sessions/{}", a.base, enc(&s1)), ANA).await;
    assert_eq!(view["status"], "idle");
    assert_eq!(outcomes(&view, "delete_file"), ["success"]);
    let (st, _) = post(
        &c,
        format!("{}/v1/sessions/{}/decisions", a.base, enc(&s1)),
        ANA,
        json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}),
    )
    .await;
    // A late decision: 409 already_decided, whatever the timing.
    assert_eq!(st, 409, "{st}");
    let (_, trail) = get(
        &c,
        format!("{}/v1/sessions/{}/decisions", a.base, enc(&s1)),
        ALICE,
    )
    .await;
    let applied: Vec<&Value> = trail["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["verdict"] == "applied")
        .collect();
    assert_eq!(applied.len(), 1, "{trail}");
    assert_eq!(applied[0]["actor"]["principal"], "ana");

    // An interrupt posted to B stops a run executing on A.
    let s2 = format!("alice/mi-{tag}-2");
    let res = c
        .post(format!(
            "{}/v1/sessions/{}/runs?stream=true",
            a.base,
            enc(&s2)
        ))
        .bearer_auth(ALICE)
        .json(&json!({"message": "slow shared"}))
        .send()
        .await
        .unwrap();
    let mut a_run = SseReader::new(res);
    a_run.until("tool_execution_started").await;
    let (st, ans) = post(
        &c,
        format!("{}/v1/sessions/{}/interrupt", b.base, enc(&s2)),
        ALICE,
        json!({}),
    )
    .await;
    assert_eq!(st, 202, "{ans}");
    assert_eq!(ans["delivered"], "stored");
    let rest = a_run.until("output").await;
    assert_eq!(rest.last().unwrap().data["output"]["status"], "cancelled");
    let (_, view) = get(&c, format!("{}/v1/sessions/{}", b.base, enc(&s2)), ALICE).await;
    let o = outcomes(&view, "slow_search");
    assert!(o == ["interrupted"] || o == ["cancelled"], "{o:?}");

    // kill -9 A in the middle of a tool: B recovers the session, honestly.
    let s3 = format!("alice/mi-{tag}-3");
    let res = c
        .post(format!(
            "{}/v1/sessions/{}/runs?stream=true",
            a.base,
            enc(&s3)
        ))
        .bearer_auth(ALICE)
        .json(&json!({"message": "slow doomed"}))
        .send()
        .await
        .unwrap();
    let mut a_run = SseReader::new(res);
    a_run.until("tool_execution_started").await;
    let mut a = a;
    a.child.kill().unwrap(); // SIGKILL
    a.child.wait().unwrap();
    drop(a_run);
    // B refuses while A's leases last, then takes over.
    let start = Instant::now();
    let out = loop {
        let (st, out) = post(
            &c,
            format!("{}/v1/sessions/{}/runs", b.base, enc(&s3)),
            ALICE,
            json!({"message": "what happened?"}),
        )
        .await;
        if st == 200 {
            break out;
        }
        assert_eq!(st, 409, "{out}");
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "B never recovered: {out}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(out["status"], "completed", "{out}");
    let (_, view) = get(&c, format!("{}/v1/sessions/{}", b.base, enc(&s3)), ALICE).await;
    assert_eq!(outcomes(&view, "slow_search"), ["unknown"], "{view}");
    assert_eq!(view["status"], "idle");
    drop(b);
}
