//! The notification keys beyond those of the first tests: a webhook's `tools`,
//! `session_prefix` and `description`; `on_expiry = "leave_waiting"`; email's
//! `base_url`, `link_ttl`, SMTP login (`smtp.username`, `smtp.password`) against
//! aiosmtpd requiring AUTH, and an escalation mailed; Slack's `inbox_url` and
//! `api_base`. Each shown on what the server sends.

use std::time::Instant;

use super::*;

/// Whether CI runs this (the harness fails there instead of skipping).
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

#[allow(dead_code)]
#[path = "../approvals/harness.rs"]
mod harness;
use harness::*;

/// `notifications.webhooks.<name>.tools`, `.session_prefix` and `.description`: of
/// three waiting calls, the filtered subscriber is sent only the one about its tool in
/// its sessions (a subscriber without filters, routed with it, is sent all three), and
/// the API shows what the file says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhooks_tools_session_prefix_and_description_from_the_file() {
    let test = "a_webhooks_tools_session_prefix_and_description_from_the_file";
    let Some(receiver) = Receiver::start(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"

[store]
sqlite = "reins.db"

[auth.tokens.ops]
roles = ["admin"]
token = {{ env = "OPS" }}

[auth.tokens.alice]
roles = ["user"]
token = {{ env = "ALICE" }}

[notifications.webhooks.all]
url = "{hook}"
secret = {{ env = "HOOK" }}
event_types = ["requirement.waiting"]

[notifications.webhooks.filtered]
url = "{hook}"
secret = {{ env = "HOOK" }}
event_types = ["requirement.waiting"]
tools = ["delete_file"]
session_prefix = "alice/hooked-"
description = "deletes in the hooked sessions"
"#,
        hook = receiver.url,
    );
    let s = serve_config(
        &text,
        dir,
        &[("OPS", ADMIN), ("ALICE", ALICE), ("HOOK", SECRET)],
    )
    .await;
    let (st, hook) = s.get(ADMIN, "/v1/webhooks/wh_config_filtered").await;
    assert_eq!(st, 200, "{hook}");
    assert_eq!(hook["description"], "deletes in the hooked sessions");
    assert_eq!(hook["tools"], json!(["delete_file"]));
    assert_eq!(hook["session_prefix"], "alice/hooked-");

    for (session, message) in [
        ("alice/other-1", "delete a.txt"),
        ("alice/hooked-1", "mail bob@example.com"),
        ("alice/hooked-2", "delete b.txt"),
    ] {
        let out = run(&s, ALICE, session, message).await;
        assert_eq!(out["status"], "paused", "{out}");
        // The subscriber without filters hears of each: the notice has been routed.
        receiver.wait_for("requirement.waiting", session).await;
    }
    let (st, list) = s
        .get(ADMIN, "/v1/webhooks/wh_config_filtered/deliveries")
        .await;
    assert_eq!(st, 200, "{list}");
    let sessions: Vec<&str> = list["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["notice"]["session"].as_str().unwrap())
        .collect();
    assert_eq!(sessions, ["alice/hooked-2"], "{list}");
    let (_, all) = s.get(ADMIN, "/v1/webhooks/wh_config_all/deliveries").await;
    assert_eq!(all["deliveries"].as_array().unwrap().len(), 3, "{all}");
}

/// `notifications.waiting.<tool>.on_expiry = "leave_waiting"`: once the call waited
/// longer than `expire_after`, a verified `requirement.expired` notice says so, and
/// the call still waits — nothing is decided until a person approves it, and then
/// the tool runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_call_left_waiting_from_the_file() {
    let Some(receiver) = Receiver::start("an_expired_call_left_waiting_from_the_file") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"

[store]
sqlite = "reins.db"

[auth.tokens.ops]
roles = ["admin"]
token = {{ env = "OPS" }}

[auth.tokens.alice]
roles = ["user"]
token = {{ env = "ALICE" }}

[notifications]
sweep_interval = "100ms"

[notifications.waiting.delete_file]
expire_after = "300ms"
on_expiry = "leave_waiting"

[notifications.webhooks.ops]
url = "{hook}"
secret = {{ env = "HOOK" }}
event_types = ["requirement.expired"]
"#,
        hook = receiver.url,
    );
    let s = serve_config(
        &text,
        dir,
        &[("OPS", ADMIN), ("ALICE", ALICE), ("HOOK", SECRET)],
    )
    .await;
    let out = run(&s, ALICE, "alice/late-1", "delete a.txt").await;
    assert_eq!(out["status"], "paused", "{out}");
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let expired = receiver
        .wait_for("requirement.expired", "alice/late-1")
        .await;
    assert_eq!(expired["data"]["requirement"], rid.as_str(), "{expired}");
    let (_, trail) = s.get(ADMIN, "/v1/sessions/alice%2Flate-1/decisions").await;
    assert_eq!(trail["decisions"], json!([]), "{trail}");
    let (st, out) = s
        .post(
            ADMIN,
            "/v1/sessions/alice%2Flate-1/decisions",
            json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(s.ran(), ["delete:a.txt"]);
}

/// `notifications.email.base_url` (the links start with it, not with
/// `server.public_url`), `link_ttl` (a link of a call without expiry answers 410 once
/// its second is over; the default is a day), an escalation (`escalate_to`) mailed,
/// `smtp.username` and `smtp.password` (the
/// SMTP server takes mail only after that login; the name and password need escaping
/// in the URL lettre reads); `notifications.slack.inbox_url` (Edit opens it) and
/// `api_base` (the stand-in for Slack's Web API gets the message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_login_link_ttl_base_url_and_slack_inbox_url_from_the_file() {
    let test = "email_login_link_ttl_base_url_and_slack_inbox_url_from_the_file";
    let Some(python) = python_or_skip(test) else {
        return;
    };
    let (user, password) = ("re ins@corp", "p@ss w/rd:1");
    let smtp = SmtpSink::start_with_login(&python, user, password);
    let stub = SlackStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let text = format!(
        r#"
[server]
public_url = "https://public.reins.test"

[store]
sqlite = "reins.db"

[auth.tokens.alice]
roles = ["user"]
token = {{ env = "ALICE" }}

[auth.tokens.ana]
roles = ["approver"]
token = {{ env = "ANA" }}

[notifications]
sweep_interval = "100ms"

[notifications.waiting.delete_file]
escalate_after = "300ms"
escalate_to = ["ana"]

[notifications.email]
from = "reins <approvals@reins.test>"
link_secret = {{ env = "LINK_SECRET" }}
base_url = "{base}"
link_ttl = "1s"
approvers = {{ ana = "ana@corp.test" }}

[notifications.email.smtp]
host = "127.0.0.1"
port = {port}
tls = "none"
username = "{user}"
password = {{ env = "SMTP_PASSWORD" }}

[notifications.slack]
bot_token = {{ env = "SLACK_BOT_TOKEN" }}
signing_secret = {{ env = "SLACK_SIGNING_SECRET" }}
channel = "C0APPROVALS"
api_base = "{api}"
inbox_url = "https://inbox.reins.test/app"
"#,
        port = smtp.port,
        api = stub.base,
    );
    let env = vars(&[
        ("ALICE", ALICE),
        ("ANA", ANA),
        ("LINK_SECRET", LINK_SECRET),
        ("SMTP_PASSWORD", password),
        ("SLACK_BOT_TOKEN", "xoxb-test-token"),
        ("SLACK_SIGNING_SECRET", SIGNING_SECRET),
    ]);
    let config = Config::from_str_with_env(&text, dir.path(), env).unwrap();
    assert!(!config.redacted().contains(password));
    let setup = config.setup().await.unwrap();
    let ran = Ran::default();
    let agent = agent_with(setup.store().cloned().unwrap(), &ran, |b| setup.agent(b));
    let server = setup.server(agent.clone()).await.unwrap();
    let s = serve_on(listener, server, agent, ran, Some(dir));

    let (st, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fttl-1/runs",
            json!({"message": "delete a.txt"}),
        )
        .await;
    assert_eq!((st, out["status"].as_str()), (200, Some("paused")), "{out}");
    // Two mails to ana, each sent after the file's login: the call waiting, and its
    // escalation to her (`escalate_to`) once it waited 300 ms.
    let mails = [smtp.next(), smtp.next()];
    for mail in &mails {
        assert_eq!(mail["login"], user, "{mail}");
        assert_eq!(mail["to"], json!(["ana@corp.test"]), "{mail}");
        assert_eq!(mail["from"], "approvals@reins.test", "{mail}");
    }
    let link = link_in(&mails[0]);
    assert!(link.starts_with(&format!("{base}/inbox/email/")), "{link}");
    // Slack: posted through `api_base`, with Edit opening `inbox_url`.
    let posted = stub.wait_for("chat.postMessage", 1).await.remove(0);
    assert!(
        posted["body"]
            .to_string()
            .contains("https://inbox.reins.test/app/?session=alice%2Fttl-1"),
        "{posted}"
    );
    // Not a wait for something to happen: the link's second must be over.
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let page = s.client.get(&link).send().await.unwrap();
    assert_eq!(page.status(), 410);
    let post = s
        .client
        .post(&link)
        .form(&[("action", "approve")])
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 410);
    assert!(s.ran().is_empty());
}

/// `[notifications.delivery]`: with `max_attempts = 1` and a short back-off, a
/// delivery to a subscriber nobody answers is dead after its one attempt (with the
/// defaults it would wait a second and try again, eight times); a key out of range is
/// refused at its line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_options_from_the_file() {
    // A loopback port nothing listens on: every attempt is refused at once.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"

[store]
sqlite = "reins.db"

[auth.tokens.ops]
roles = ["admin"]
token = {{ env = "OPS" }}

[auth.tokens.alice]
roles = ["user"]
token = {{ env = "ALICE" }}

[notifications.delivery]
max_attempts = 1
backoff = "10ms"
max_backoff = "20ms"
lease = "5s"
poll_interval = "50ms"
batch = 4

[notifications.webhooks.gone]
url = "http://127.0.0.1:{closed}/hook"
secret = {{ env = "HOOK" }}
event_types = ["requirement.waiting"]
"#
    );
    let bad = text.replace("max_backoff = \"20ms\"", "max_backoff = \"5ms\"");
    let err = Config::from_str_with_env(
        &bad,
        dir.path(),
        vars(&[("OPS", ADMIN), ("ALICE", ALICE), ("HOOK", SECRET)]),
    )
    .and_then(|c| c.check())
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("notifications.delivery.max_backoff") && err.contains("below the first"),
        "{err}"
    );
    let s = serve_config(
        &text,
        dir,
        &[("OPS", ADMIN), ("ALICE", ALICE), ("HOOK", SECRET)],
    )
    .await;
    let out = run(&s, ALICE, "alice/gone-1", "delete a.txt").await;
    assert_eq!(out["status"], "paused", "{out}");
    let started = Instant::now();
    let delivery = loop {
        let (st, list) = s.get(ADMIN, "/v1/webhooks/wh_config_gone/deliveries").await;
        assert_eq!(st, 200, "{list}");
        if let Some(d) = list["deliveries"]
            .as_array()
            .and_then(|l| l.first())
            .filter(|d| d["state"] != "pending")
        {
            break d.clone();
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the delivery never settled: {list}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(delivery["state"], "dead", "{delivery}");
    assert_eq!(delivery["attempts"], 1, "{delivery}");
}
