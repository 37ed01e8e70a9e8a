//! Email and Slack approvals switched on by `reins.toml` alone, with the real parts of
//! tests/approvals.rs: mail through aiosmtpd (plain SMTP, `tls = "none"`; the sink
//! takes no login), its link decides; a Slack button press signed by Slack's own SDK
//! (`slack_sdk`) against the signing secret the file names, to a loopback stand-in for
//! Slack's Web API. Each call runs once. Without the venv the test fails under
//! `CI=true` and reports itself SKIPPED elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reins_server::config::Config;
use serde_json::{Value, json};
use support::*;

/// Whether CI runs this (the harness fails there instead of skipping).
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

#[allow(dead_code)]
#[path = "approvals/harness.rs"]
mod harness;
use harness::*;

async fn pause(s: &TestServer, session: &str, message: &str) -> String {
    let (st, out) = s
        .post(
            ALICE,
            &format!("/v1/sessions/{}/runs", enc(session)),
            json!({"message": message}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["status"], "paused", "{out}");
    out["requirements"][0]["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_and_slack_from_the_file_decide_once() {
    let Some(python) = python_or_skip("email_and_slack_from_the_file_decide_once") else {
        return;
    };
    let smtp = SmtpSink::start(&python);
    let stub = SlackStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let text = format!(
        r#"
[server]
public_url = "{base}"

[store]
sqlite = "reins.db"

[auth.tokens.alice]
roles = ["user"]
token = {{ env = "ALICE" }}

[auth.tokens.ana]
roles = ["approver"]
token = {{ env = "ANA" }}

[notifications.email]
from = "reins <approvals@reins.test>"
link_secret = {{ env = "LINK_SECRET" }}
approvers = {{ ana = "Ana <ana@corp.test>" }}

[notifications.email.smtp]
host = "127.0.0.1"
port = {port}
tls = "none"

[notifications.slack]
bot_token = {{ env = "SLACK_BOT_TOKEN" }}
signing_secret = {{ env = "SLACK_SIGNING_SECRET" }}
channel = "C0APPROVALS"
api_base = "{api}"
users = {{ U_ANA = "ana" }}
"#,
        port = smtp.port,
        api = stub.base,
    );
    let env: Vec<(String, String)> = [
        ("ALICE", ALICE),
        ("ANA", ANA),
        ("LINK_SECRET", LINK_SECRET),
        ("SLACK_BOT_TOKEN", "xoxb-test-token"),
        ("SLACK_SIGNING_SECRET", SIGNING_SECRET),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    let config = Config::from_str_with_env(&text, dir.path(), env).unwrap();
    let shown = config.redacted();
    for secret in [LINK_SECRET, SIGNING_SECRET, "xoxb-test-token"] {
        assert!(!shown.contains(secret), "{shown}");
    }
    let setup = config.setup().await.unwrap();
    let ran = Ran::default();
    let agent = agent_with(setup.store().cloned().unwrap(), &ran, |b| setup.agent(b));
    let server = setup.server(agent.clone()).await.unwrap();
    let s = serve_on(listener, server, agent, ran, Some(dir));

    // Email: ana gets a mail; its link's form decides, once.
    pause(&s, "alice/mail-1", "mail bob@example.com").await;
    let mail = smtp.next();
    assert_eq!(mail["to"], json!(["ana@corp.test"]), "{mail}");
    let link = link_in(&mail);
    assert!(link.starts_with(&base), "{link}");
    let decide = || s.client.post(&link).form(&[("action", "approve")]).send();
    assert_eq!(decide().await.unwrap().status(), 200);
    eventually("the email approval ran the tool", || {
        s.ran() == ["mail:bob@example.com"]
    })
    .await;
    let again = decide().await.unwrap();
    assert_eq!(again.status(), 409, "a link decides once");
    assert_eq!(s.ran(), ["mail:bob@example.com"]);

    // Slack: the message is posted with the file's bot token; ana's button press,
    // signed by the SDK with the file's signing secret, decides, once.
    pause(&s, "alice/mail-2", "mail carol@example.com").await;
    let posted = stub
        .wait_for("chat.postMessage", 2)
        .await
        .into_iter()
        .find(|p| p["body"].to_string().contains("carol@example.com"))
        .unwrap();
    assert_eq!(posted["body"]["channel"], "C0APPROVALS", "{posted}");
    assert_eq!(posted["auth"], "Bearer xoxb-test-token", "{posted}");
    let approve = press("U_ANA", "approve", &posted);
    let (st, _) = send(&s, &python, "not the signing secret", now(), &approve).await;
    assert_eq!(st, 401);
    let (st, out) = send(&s, &python, SIGNING_SECRET, now(), &approve).await;
    assert_eq!(st, 200, "{out}");
    eventually("the Slack approval ran the tool", || s.ran().len() == 2).await;
    assert_eq!(s.ran(), ["mail:bob@example.com", "mail:carol@example.com"]);
    let (st, _) = send(&s, &python, SIGNING_SECRET, now(), &approve).await;
    assert_eq!(
        st, 200,
        "Slack gets an answer; the message says it was decided"
    );
    assert_eq!(s.ran(), ["mail:bob@example.com", "mail:carol@example.com"]);
}
