//! Approvals where the approvers are, with the real parts: mail through a real SMTP
//! server (aiosmtpd, capturing what reins sends) whose link is followed in headless
//! Chromium, and Slack buttons whose requests are signed by Slack's official SDK
//! (`slack_sdk`), whose block models also parse every message reins posts to a
//! loopback stand-in for Slack's Web API. `approvals/slack.rs` holds the Slack test.
//!
//! The email confirmation page's screenshot replaces `docs/screenshots/email-confirm.png`
//! when `REINS_WRITE_SCREENSHOTS=1` asks. Without Chromium or the venv the tests fail
//! under `CI=true` and report themselves SKIPPED elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use support::*;

#[allow(dead_code)]
#[path = "browser/harness.rs"]
mod browser;
use browser::*;

#[path = "approvals/harness.rs"]
mod harness;
use harness::*;

#[path = "approvals/slack.rs"]
mod slack;

/// The agent of these tests: the shared one, and `delete_file` approvals expire after
/// `ttl` when given.
fn agent_with_ttl(
    store: std::sync::Arc<dyn reins_memory::MemoryStore>,
    ran: &Ran,
    ttl: Option<Duration>,
) -> reins_agent::Agent {
    let mut b = reins_agent::Agent::builder()
        .name("TestAgent")
        .model(reins_model::ScriptedModel::from_fn(respond))
        .toolkit(toolkit(ran))
        .store_arc(store)
        .session_lease(Duration::from_secs(3))
        .tool_lease(Duration::from_secs(3));
    if let Some(ttl) = ttl {
        b = b.approval_ttl("delete_file", ttl);
    }
    b.build().unwrap()
}

/// Changes one character of the link's signed claims.
fn tamper(link: &str) -> String {
    let (head, token) = link.rsplit_once('/').unwrap();
    let mut chars: Vec<char> = token.chars().collect();
    let i = chars.len() / 4;
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    format!("{head}/{}", chars.into_iter().collect::<String>())
}

async fn status_of(s: &TestServer, session: &str) -> String {
    let (_, v) = s
        .get(ADMIN, &format!("/v1/sessions/{}", enc(session)))
        .await;
    v["status"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_links_decide_once_in_a_real_browser() {
    let Some(python) = python_or_skip("email_links_decide_once_in_a_real_browser") else {
        return;
    };
    let Some((chromium, chromedriver)) =
        chromium_or_skip("email_links_decide_once_in_a_real_browser")
    else {
        return;
    };
    let shots = Shots::new();
    let smtp = SmtpSink::start(&python);
    let s = approvals_server(Some(smtp.port), None, |store, ran| {
        agent_with_ttl(store, ran, None)
    })
    .await;

    // A call to send_email waits: ana and rita (both may decide on it) get a mail.
    pause(&s, "alice/mail-1", "mail bob@example.com").await;
    let mut mails = [smtp.next(), smtp.next()];
    mails.sort_by_key(|m| m["to"][0].as_str().unwrap().to_owned());
    assert_eq!(mails[0]["to"], json!(["ana@corp.test"]), "{mails:?}");
    assert_eq!(mails[1]["to"], json!(["rita@corp.test"]), "{mails:?}");
    let body = mails[0]["body"].as_str().unwrap();
    assert!(
        body.contains("send_email") && body.contains("bob@example.com"),
        "{body}"
    );
    assert!(
        mails[0]["subject"].as_str().unwrap().contains("send_email"),
        "{mails:?}"
    );
    let (ana_link, rita_link) = (link_in(&mails[0]), link_in(&mails[1]));
    assert!(ana_link.starts_with(&s.base), "{ana_link}");

    // A mail scanner fetches the link: the page shows, nothing is decided.
    let scanned = s.client.get(&ana_link).send().await.unwrap();
    assert_eq!(scanned.status(), 200);
    assert_eq!(
        scanned.headers()["referrer-policy"],
        "no-referrer",
        "the token does not leak to other sites"
    );
    let html = scanned.text().await.unwrap();
    assert!(
        html.contains("bob@example.com") && html.contains("Approve"),
        "{html}"
    );
    assert!(s.ran().is_empty());
    assert_eq!(status_of(&s, "alice/mail-1").await, "paused");

    // The inbox card says who was told, how, and that the mail went out; "Assigned to
    // me" lists it for ana.
    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;
    c.goto(&format!("{}/#token={ANA}", s.base)).await.unwrap();
    let notified = wait_text(
        &c,
        ".req-card[data-session=\"alice/mail-1\"] .notified",
        |t| t.contains("email → ana, rita · delivered"),
    )
    .await;
    assert!(notified.starts_with("Notified:"), "{notified}");
    c.find(Locator::Css("#assigned-me"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "#inbox", |t| t.contains("send_email")).await;

    // Ana follows the link: the confirmation page, then Approve.
    c.goto(&ana_link).await.unwrap();
    wait_text(&c, "#confirm h1", |t| t.contains("send_email")).await;
    wait_text(&c, "#for", |t| t == "ana").await;
    wait_text(&c, "#args", |t| t.contains("\"to\": \"bob@example.com\"")).await;
    shots.take(&c, "email-confirm.png").await;
    c.find(Locator::Css("#approve"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "#outcome h1", |t| t == "Approved").await;
    eventually("the tool ran", || s.ran() == ["mail:bob@example.com"]).await;

    // The audit trail says who, and that it came by email.
    let (_, trail) = s.get(ADMIN, "/v1/sessions/alice%2Fmail-1/decisions").await;
    let applied: Vec<&Value> = trail["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["verdict"] == "applied")
        .collect();
    assert_eq!(applied.len(), 1, "{trail}");
    assert_eq!(applied[0]["decision"], "approve");
    assert_eq!(applied[0]["actor"]["principal"], "ana");
    assert_eq!(applied[0]["actor"]["metadata"]["via"], "email");

    // The same link again: used; nothing runs again.
    c.goto(&ana_link).await.unwrap();
    wait_text(&c, "#outcome h1", |t| t == "This link was used").await;
    let again = s
        .client
        .post(&ana_link)
        .form(&[("action", "approve")])
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409);
    // Rita's link for the same call: decided already, by ana.
    c.goto(&rita_link).await.unwrap();
    wait_text(&c, "#outcome h1", |t| t == "Already decided").await;
    wait_text(&c, "#detail", |t| t.contains("approve by ana")).await;
    // A tampered link: refused before anything is read.
    c.goto(&tamper(&ana_link)).await.unwrap();
    wait_text(&c, "#outcome h1", |t| t == "This link is not valid").await;
    let forged = s
        .client
        .post(tamper(&rita_link))
        .form(&[("action", "approve")])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 400);
    assert_eq!(s.ran(), ["mail:bob@example.com"], "nothing ran twice");

    // Two presses of one link at once (a double click, a retried POST): one decides,
    // the other is told it was decided; the tool runs once.
    pause(&s, "alice/mail-2", "mail carol@example.com").await;
    let link = [smtp.next(), smtp.next()]
        .into_iter()
        .find(|m| m["to"][0] == "ana@corp.test")
        .map(|m| link_in(&m))
        .unwrap();
    let press = || s.client.post(&link).form(&[("action", "approve")]).send();
    let (a, b) = tokio::join!(press(), press());
    let mut codes = [a.unwrap().status().as_u16(), b.unwrap().status().as_u16()];
    codes.sort_unstable();
    assert_eq!(codes[0], 200, "{codes:?}");
    assert_eq!(codes[1], 409, "{codes:?}");
    eventually("the second call ran once", || {
        s.ran() == ["mail:bob@example.com", "mail:carol@example.com"]
    })
    .await;

    // Rejecting through a link: nothing runs; the note reaches the model.
    pause(&s, "alice/mail-3", "mail eve@example.com").await;
    let link = [smtp.next(), smtp.next()]
        .into_iter()
        .find(|m| m["to"][0] == "rita@corp.test")
        .map(|m| link_in(&m))
        .unwrap();
    c.goto(&link).await.unwrap();
    c.find(Locator::Css("#note"))
        .await
        .unwrap()
        .send_keys("not to eve")
        .await
        .unwrap();
    c.find(Locator::Css("#reject"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "#outcome h1", |t| t == "Rejected").await;
    let (_, trail) = s.get(ADMIN, "/v1/sessions/alice%2Fmail-3/decisions").await;
    let rec = &trail["decisions"][0];
    assert_eq!(rec["decision"], "reject", "{trail}");
    assert_eq!(rec["actor"]["principal"], "rita");
    assert_eq!(rec["actor"]["metadata"]["via"], "email");
    assert_eq!(rec["note"], "not to eve");
    assert_eq!(s.ran().len(), 2);
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_link_decides_nothing() {
    let Some(python) = python_or_skip("an_expired_link_decides_nothing") else {
        return;
    };
    let smtp = SmtpSink::start(&python);
    let s = approvals_server(Some(smtp.port), None, |store, ran| {
        agent_with_ttl(store, ran, Some(Duration::from_secs(2)))
    })
    .await;
    // delete_file: only ana may decide (rita approves send_email only), and the
    // approval expires in 2 s: the link with it.
    pause(&s, "alice/del", "delete a.txt").await;
    let mail = smtp.next();
    assert_eq!(mail["to"], json!(["ana@corp.test"]));
    assert!(
        mail["body"].as_str().unwrap().contains("Expires:"),
        "{mail}"
    );
    assert!(
        smtp.any_within(Duration::from_millis(500)).is_none(),
        "rita may not decide on delete_file: no mail to her"
    );
    let link = link_in(&mail);
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let page = s.client.get(&link).send().await.unwrap();
    assert_eq!(page.status(), 410);
    assert!(page.text().await.unwrap().contains("This link expired"));
    let post = s
        .client
        .post(&link)
        .form(&[("action", "approve")])
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 410);
    assert!(s.ran().is_empty());
    let (_, trail) = s.get(ADMIN, "/v1/sessions/alice%2Fdel/decisions").await;
    assert_eq!(trail["decisions"], json!([]), "nothing was decided");
}

/// A link to a call that a new message closed: no one decided on it, and nothing waits
/// for it any more (410, the page says so), whether the page is opened or its form
/// posted; nothing is decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_to_a_call_a_new_message_closed_says_nothing_waits() {
    let Some(python) = python_or_skip("a_link_to_a_call_a_new_message_closed_says_nothing_waits")
    else {
        return;
    };
    let smtp = SmtpSink::start(&python);
    let s = approvals_server(Some(smtp.port), None, |store, ran| {
        agent_with_ttl(store, ran, None)
    })
    .await;
    // delete_file: ana is mailed.
    pause(&s, "alice/closed", "delete a.txt").await;
    let link = link_in(&smtp.next());
    // Alice moves on before anyone decides: the call is closed.
    let (st, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fclosed/runs",
            json!({"message": "never mind"}),
        )
        .await;
    assert_eq!(
        (st, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );

    let page = s.client.get(&link).send().await.unwrap();
    assert_eq!(page.status(), 410);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("Nothing waits for this any more")
            && html.contains("closed by a new message in the session"),
        "{html}"
    );
    let post = s
        .client
        .post(&link)
        .form(&[("action", "approve")])
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 410);
    assert!(
        post.text()
            .await
            .unwrap()
            .contains("Nothing waits for this any more")
    );
    assert!(s.ran().is_empty());
    let (_, trail) = s.get(ADMIN, "/v1/sessions/alice%2Fclosed/decisions").await;
    let by_ana = trail["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["actor"]["principal"] == "ana" && d["verdict"] == "applied")
        .count();
    assert_eq!(by_ana, 0, "nothing was decided through the link: {trail}");
}

/// A clock the test moves: the real time plus an offset. It counts how often it was
/// read: the sweep reads it once as it starts.
#[derive(Default)]
struct TestClock {
    offset: std::sync::Mutex<chrono::Duration>,
    reads: std::sync::atomic::AtomicUsize,
}

impl reins_server::Clock for TestClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        chrono::Utc::now() + *self.offset.lock().unwrap()
    }
}

impl TestClock {
    fn advance_to(&self, minutes: i64) {
        *self.offset.lock().unwrap() = chrono::Duration::minutes(minutes);
    }

    /// Returns once `n` more sweeps started (each one after the last one ended).
    async fn sweeps(&self, n: usize) {
        let reads = || self.reads.load(std::sync::atomic::Ordering::SeqCst);
        let until = reads() + n;
        let start = Instant::now();
        while reads() < until {
            assert!(start.elapsed() < Duration::from_secs(30), "no sweep ran");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The ids of the notices of `kind` about `session` in `s`'s outbox.
async fn notice_ids(s: &TestServer, session: &str, kind: &str) -> BTreeSet<String> {
    let store = s.agent.store();
    let mut ids: BTreeSet<String> = store
        .unrouted_notices(10_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|n| n.session.as_deref() == Some(session) && n.kind.as_str() == kind)
        .map(|n| n.id)
        .collect();
    let filter = reins_memory::DeliveryFilter::all().session(session);
    ids.extend(
        store
            .deliveries(&filter)
            .await
            .unwrap()
            .into_iter()
            .filter(|d| d.notice.kind.as_str() == kind)
            .map(|d| d.notice.id),
    );
    ids
}

/// `id` is a UUIDv7.
fn assert_uuid_v7(id: &str) {
    let uuid = uuid::Uuid::parse_str(id).unwrap_or_else(|e| panic!("`{id}`: {e}"));
    assert_eq!(uuid.get_version(), Some(uuid::Version::SortRand), "{id}");
}

/// Escalation and expiry on a clock the test moves: a send_email call waiting 10
/// minutes is escalated to rita (mailed once, however many sweeps look at it) and left
/// waiting after an hour; a delete_file call waiting 30 minutes is rejected with a
/// note, audited `via: expiry`, and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_calls_escalate_then_expire_on_a_controlled_clock() {
    use reins_server::{ExpiryAction, WaitPolicy, Waiting};
    let Some(python) = python_or_skip("waiting_calls_escalate_then_expire") else {
        return;
    };
    let smtp = SmtpSink::start(&python);
    let clock = std::sync::Arc::new(TestClock::default());
    let waiting = Waiting::new()
        .every(Duration::from_millis(100))
        .clock(clock.clone())
        .tool(
            "send_email",
            WaitPolicy::new()
                .escalate_after(Duration::from_secs(600), ["rita"])
                .expire_after(Duration::from_secs(3600), ExpiryAction::LeaveWaiting),
        )
        .tool(
            "delete_file",
            WaitPolicy::new().expire_after(
                Duration::from_secs(1800),
                ExpiryAction::reject("nobody answered within 30 minutes"),
            ),
        );
    let s = approvals_server_with(
        Some(smtp.port),
        None,
        |store, ran| agent_with_ttl(store, ran, None),
        // The terminal channel takes every notice: each shows as a delivery.
        |server| {
            server
                .waiting(waiting)
                .channel(reins_server::notify::TerminalChannel::new())
        },
    )
    .await;

    pause(&s, "alice/mail", "mail bob@example.com").await;
    let first = [smtp.next(), smtp.next()];
    assert!(
        first
            .iter()
            .all(|m| !m["subject"].as_str().unwrap().is_empty())
    );
    pause(&s, "alice/del", "delete a.txt").await;
    assert_eq!(smtp.next()["to"], json!(["ana@corp.test"]));
    assert!(smtp.any_within(Duration::from_millis(500)).is_none());

    // 11 minutes on: the mail call is escalated to rita, once.
    clock.advance_to(11);
    let escalated = smtp.next();
    assert_eq!(escalated["to"], json!(["rita@corp.test"]), "{escalated}");
    assert!(link_in(&escalated).contains("/inbox/email/"));
    // Two more sweeps: each finds the call overdue again; the outbox keeps one notice,
    // whose id is a UUIDv7.
    clock.sweeps(2).await;
    let escalations = notice_ids(&s, "alice/mail", "requirement.escalated").await;
    assert_eq!(escalations.len(), 1, "{escalations:?}");
    escalations.iter().for_each(|id| assert_uuid_v7(id));
    assert!(
        smtp.any_within(Duration::from_millis(600)).is_none(),
        "escalated once, however many sweeps"
    );
    assert_eq!(status_of(&s, "alice/del").await, "paused");
    // The inbox says who was told, and lists the call as assigned to rita.
    let (st, page) = s.get(RITA, "/v1/requirements?assigned=me").await;
    assert_eq!(st, 200, "{page}");
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "rita decides on send_email only: {page}");
    let notified = items[0]["notified"].as_array().unwrap();
    let escalation = notified
        .iter()
        .find(|n| n["notice"] == "requirement.escalated" && n["channel"] == "email")
        .unwrap_or_else(|| panic!("{page}"));
    assert_eq!(escalation["channel"], "email");
    assert_eq!(escalation["to"], json!(["rita"]));
    assert_eq!(escalation["state"], "delivered");
    let first = notified
        .iter()
        .find(|n| n["notice"] == "requirement.waiting" && n["channel"] == "email")
        .unwrap();
    assert_eq!(first["to"], json!(["ana", "rita"]));
    let (_, mine) = s.get(ANA, "/v1/requirements?assigned=me").await;
    assert_eq!(mine["items"].as_array().unwrap().len(), 2, "{mine}");
    // The deliveries of both sessions are read at once; each item shows its own.
    for item in mine["items"].as_array().unwrap() {
        let notices: Vec<&str> = item["notified"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["notice"].as_str().unwrap())
            .collect();
        let escalated = notices.contains(&"requirement.escalated");
        match item["session_id"].as_str().unwrap() {
            "alice/mail" => assert!(escalated, "{item}"),
            "alice/del" => assert!(!escalated && !notices.is_empty(), "{item}"),
            other => panic!("{other}: {mine}"),
        }
    }
    let (_, theirs) = s.get(ADMIN, "/v1/requirements?assigned=me").await;
    assert_eq!(theirs["items"], json!([]), "nothing was sent to ops");
    let (st, _) = s.get(ANA, "/v1/requirements?assigned=everyone").await;
    assert_eq!(st, 400);

    // 31 minutes: the delete is rejected by expiry; nothing runs.
    clock.advance_to(31);
    let start = Instant::now();
    while status_of(&s, "alice/del").await == "paused" {
        assert!(start.elapsed() < Duration::from_secs(30), "never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let expiries = notice_ids(&s, "alice/del", "requirement.expired").await;
    assert_eq!(expiries.len(), 1, "{expiries:?}");
    expiries.iter().for_each(|id| assert_uuid_v7(id));
    let (_, trail) = s.get(ADMIN, "/v1/sessions/alice%2Fdel/decisions").await;
    let rec = &trail["decisions"][0];
    assert_eq!(rec["decision"], "reject", "{trail}");
    assert_eq!(rec["verdict"], "applied");
    assert_eq!(rec["actor"]["principal"], "reins");
    assert_eq!(rec["actor"]["metadata"]["via"], "expiry");
    assert_eq!(rec["note"], "nobody answered within 30 minutes");
    assert!(s.ran().is_empty());

    // An hour: the mail call is left waiting (only a notice says it is overdue).
    // Every sweep from now on finds it expired: one notice all the same.
    clock.advance_to(61);
    clock.sweeps(3).await;
    let expiries = notice_ids(&s, "alice/mail", "requirement.expired").await;
    assert_eq!(expiries.len(), 1, "{expiries:?}");
    expiries.iter().for_each(|id| assert_uuid_v7(id));
    assert_eq!(status_of(&s, "alice/mail").await, "paused");
    let (_, trail) = s.get(ADMIN, "/v1/sessions/alice%2Fmail/decisions").await;
    assert_eq!(trail["decisions"], json!([]));
    assert!(s.ran().is_empty());
}

/// The email links without a server: a program runs its agent, its own dispatcher with
/// the `email` channel, and its own axum app with the links' routes mounted. The mail
/// reaches the SMTP sink; the link's page shows the call and decides nothing; its form
/// decides as the approver (audited `via: email`), the tool runs once, and the link
/// works once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_links_decide_in_a_program_without_a_server() {
    use futures::StreamExt;
    use reins_agent::port::Sessions;

    let Some(python) = python_or_skip("email_links_decide_in_a_program_without_a_server") else {
        return;
    };
    let smtp = SmtpSink::start(&python);
    let store: std::sync::Arc<dyn reins_memory::MemoryStore> =
        std::sync::Arc::new(reins_memory::InMemoryStore::new());
    let ran: Ran = std::sync::Arc::default();
    let agent = agent_with_ttl(store.clone(), &ran, None);
    let sessions: std::sync::Arc<dyn Sessions> = std::sync::Arc::new(agent.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let email = reins_server::EmailApprovals::builder()
        .smtp_url(format!("smtp://127.0.0.1:{}", smtp.port))
        .from("reins <approvals@reins.test>")
        .base_url(&base)
        .secret(LINK_SECRET)
        .approver("ana", "Ana <ana@corp.test>")
        .build()
        .unwrap();
    let _dispatching = reins_server::notify::Dispatcher::new(store)
        .channel(email.notify_channel(sessions.clone(), auth()))
        .options(
            reins_server::notify::NotifyOptions::default()
                .poll_interval(Duration::from_millis(100)),
        )
        .spawn()
        .unwrap();
    let app = axum::Router::new()
        .route(
            "/mine",
            axum::routing::get(|| async { "the program's own route" }),
        )
        .merge(email.router(sessions.clone(), auth()));
    let served = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();

    let session = agent.session("alice/own-mail").await.unwrap();
    let out = session
        .send(reins_message::Msg::user("delete x.txt"))
        .await
        .unwrap();
    assert_eq!(out.status, reins_agent::RunStatus::Paused);
    let mail = smtp.next();
    let link = link_in(&mail);
    assert!(link.starts_with(&format!("{base}/inbox/email/")), "{link}");

    // The page decides nothing.
    let page = client.get(&link).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("delete_file"));
    assert!(ran.lock().unwrap().is_empty());

    let mut watch = session.watch().await.unwrap();
    let res = client
        .post(&link)
        .form(&[("action", "approve")])
        .send()
        .await
        .unwrap();
    assert_eq!(
        res.status(),
        200,
        "{}",
        res.text().await.unwrap_or_default()
    );
    loop {
        let view = watch
            .next()
            .await
            .expect("the store's feed closed")
            .unwrap();
        if view.outcome() == Some(reins_agent::RunStatus::Completed) {
            break;
        }
    }
    assert_eq!(*ran.lock().unwrap(), ["delete:x.txt"]);
    let trail = sessions.audit("alice/own-mail").await.unwrap();
    let actor = trail[0].actor.as_ref().unwrap();
    assert_eq!(actor.principal, "ana");
    assert_eq!(actor.metadata.as_ref().unwrap()["via"], "email");

    // Used: refused, nothing runs again.
    let again = client
        .post(&link)
        .form(&[("action", "approve")])
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409);
    assert_eq!(*ran.lock().unwrap(), ["delete:x.txt"]);
    served.abort();
}
