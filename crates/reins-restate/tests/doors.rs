//! reins-server's approval doors written once and run on both drivers, each with its
//! real client: Slack buttons (interactions signed by Slack's `slack_sdk`), the email
//! link (mail through a real SMTP server, aiosmtpd), the inbox in headless Chromium,
//! and A2A with `a2a-sdk`. On the local driver the server's agent runs the sessions;
//! on Restate a real restate-server and the test agent's session object in a process
//! of its own run them, and the server fronts the deployment (`Server::backend` with
//! a `RestateClient`), as `reins serve --restate` does.
//!
//! The clients and the server's test agent are reins-server's (its `tests/support`,
//! `tests/approvals`, `tests/browser` and `tests/a2a` helpers, shared through
//! `#[path]`: a test-only edge, as in tests/server.rs). Without restate-server,
//! Chromium or a venv the tests fail under `CI=true` and report themselves SKIPPED
//! elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

// reins-server's test agent, tokens and server helpers (the A2A harness reads them as
// `crate::support`).
#[path = "../../reins-server/tests/support/mod.rs"]
mod support;

#[allow(dead_code)]
#[path = "../../reins-server/tests/browser/harness.rs"]
mod browser;

#[allow(dead_code)]
#[path = "../../reins-server/tests/approvals/harness.rs"]
mod approvals;

#[allow(dead_code)]
#[path = "../../reins-server/tests/a2a/harness.rs"]
mod a2a;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use approvals::*;
use browser::*;
use fantoccini::{Client, ClientBuilder, Locator};
use reins_server::Server;
use serde_json::{Value, json};
use support::*;

/// The Restate deployment of the door tests, with what its service process runs.
mod door {
    use std::path::PathBuf;
    use std::sync::Arc;

    use reins_memory::MemoryStore;

    #[path = "deployment.rs"]
    pub mod restate;

    /// What the tools did: in this process (`tools`) or, for the service process of
    /// a deployment, in the file it writes ([`Ran::file`]).
    #[derive(Clone, Default)]
    pub struct Ran {
        pub tools: crate::support::Ran,
        file: Option<PathBuf>,
    }

    impl Ran {
        /// What the tools of another process ran, one line each in `path`.
        pub fn file(path: impl Into<PathBuf>) -> Self {
            Self {
                tools: crate::support::Ran::default(),
                file: Some(path.into()),
            }
        }

        /// What ran so far.
        pub fn all(&self) -> Vec<String> {
            match &self.file {
                Some(path) => std::fs::read_to_string(path)
                    .unwrap_or_default()
                    .lines()
                    .map(str::to_owned)
                    .collect(),
                None => self.tools.lock().unwrap().clone(),
            }
        }

        /// How often `what` ran.
        pub fn count(&self, what: &str) -> usize {
            self.all().iter().filter(|r| *r == what).count()
        }
    }

    /// reins-server's test agent; in the service process (a [`Ran::file`]) its tools
    /// also write what they did to the file.
    pub fn agent(store: Arc<dyn MemoryStore>, ran: &Ran) -> reins_agent::Agent {
        if let Some(path) = &ran.file {
            crate::support::record_to_file(path);
        }
        crate::support::agent(store, &ran.tools)
    }
}

/// The service process of the Restate deployments (started by
/// [`door::restate::Deployment`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by the Restate scenarios as the service process"]
async fn door_service() {
    door::restate::service().await;
}

/// Which driver runs the sessions.
#[derive(Clone, Copy, Debug)]
enum Driver {
    Local,
    Restate,
}

/// reins-server with the approval doors over one driver, and what its tools ran.
struct Door {
    s: TestServer,
    ran: door::Ran,
    deployment: Option<door::restate::Deployment>,
    _dir: tempfile::TempDir,
}

impl Door {
    /// reins-server on `driver` with email approvals (mail to `smtp_port`) and Slack
    /// approvals (to `slack_api`) when given; `None` when restate-server is not
    /// installed (outside CI).
    async fn start(
        driver: Driver,
        test: &str,
        smtp_port: Option<u16>,
        slack_api: Option<&str>,
    ) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let deployment = match driver {
            Driver::Local => None,
            Driver::Restate => {
                let binary = door::restate::restate_binary(test)?;
                Some(door::restate::Deployment::start(binary, dir.path(), "door_service").await)
            }
        };
        // On Restate, the store the service commits to: the server's agent is its
        // configuration and reads from it; its tools never run here.
        let store = reins_memory::SqliteStore::open(dir.path().join("sessions.db"))
            .await
            .unwrap();
        let here = door::Ran::default();
        let agent = support::agent(Arc::new(store), &here.tools);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = match &deployment {
            Some(d) => Server::new(reins_agent::Relayed::new(
                agent.clone(),
                Arc::new(reins_restate::RestateClient::new(d.ingress())),
            )),
            None => Server::new(agent.clone()),
        };
        let server = approval_doors(server, &base, smtp_port, slack_api);
        let s = serve_on(listener, server, agent, here.tools.clone(), None);
        let ran = deployment.as_ref().map_or(here, |d| d.ran.clone());
        Some(Self {
            s,
            ran,
            deployment,
            _dir: dir,
        })
    }

    /// The service process's log on Restate (for a failure's message).
    fn log(&self) -> String {
        self.deployment
            .as_ref()
            .map(door::restate::Deployment::log)
            .unwrap_or_default()
    }

    /// Waits (30 s at most) until `what` ran once.
    async fn ran_once(&self, what: &str) {
        let start = Instant::now();
        while self.ran.count(what) == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{what} did not run within 30 s; ran {:?}\n{}",
                self.ran.all(),
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(self.ran.count(what), 1, "{:?}", self.ran.all());
    }

    /// The session's audit trail (`GET /v1/sessions/{id}/decisions`).
    async fn trail(&self, session: &str) -> Vec<Value> {
        let (status, trail) = self
            .s
            .get(ADMIN, &format!("/v1/sessions/{}/decisions", enc(session)))
            .await;
        assert_eq!(status, 200, "{trail}");
        trail["decisions"].as_array().unwrap().clone()
    }

    async fn stop(self) {
        if let Some(d) = self.deployment {
            d.stop().await;
        }
    }
}

/// Slack: ana approves with a signed button press (the call runs once, the message
/// says who); ops presses Approve late: told it was decided by ana, nothing runs
/// again, and the refusal is in the audit trail.
async fn slack(driver: Driver) {
    let test = format!("slack_on_{driver:?}");
    let Some(python) = python_or_skip(&test) else {
        return;
    };
    let stub = SlackStub::start().await;
    let Some(d) = Door::start(driver, &test, None, Some(&stub.base)).await else {
        return;
    };
    let session = "alice/slack";
    pause(&d.s, session, "delete x.txt").await;
    let posted = stub.wait_for("chat.postMessage", 1).await.remove(0);
    let (st, out) = send(
        &d.s,
        &python,
        SIGNING_SECRET,
        now(),
        &press("U_ANA", "approve", &posted),
    )
    .await;
    assert_eq!(st, 200, "{out}\n{}", d.log());
    d.ran_once("delete:x.txt").await;
    let update = stub.wait_for("chat.update", 1).await.remove(0);
    let text = update["body"]["text"].as_str().unwrap();
    assert!(text.contains("Approved by *ana*"), "{text}");

    // A late second approver.
    let (st, out) = send(
        &d.s,
        &python,
        SIGNING_SECRET,
        now(),
        &press("U_OPS", "approve", &posted),
    )
    .await;
    assert_eq!(st, 200, "{out}");
    let update = stub.wait_for("chat.update", 2).await.remove(1);
    let text = update["body"]["text"].as_str().unwrap();
    assert!(
        text.contains("Already decided") && text.contains("by *ana*"),
        "{text}"
    );
    assert_eq!(d.ran.count("delete:x.txt"), 1, "{:?}", d.ran.all());

    let trail = d.trail(session).await;
    let applied: Vec<&Value> = trail.iter().filter(|r| r["verdict"] == "applied").collect();
    assert_eq!(applied.len(), 1, "{trail:#?}");
    assert_eq!(applied[0]["actor"]["principal"], "ana");
    assert_eq!(applied[0]["actor"]["metadata"]["via"], "slack");
    assert!(
        trail.iter().any(|r| r["verdict"] == "refused"
            && r["reason"] == "already_decided"
            && r["actor"]["principal"] == "ops"
            && r["actor"]["metadata"]["via"] == "slack"),
        "the late approver is audited: {trail:#?}"
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_on_the_local_driver() {
    slack(Driver::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_on_restate() {
    slack(Driver::Restate).await;
}

/// The email link: ana and rita are mailed; ana's link's form approves (the call runs
/// once, audited `via: email`); her link used again and rita's link after the
/// decision are told it was decided, and nothing runs again.
async fn email(driver: Driver) {
    let test = format!("email_on_{driver:?}");
    let Some(python) = python_or_skip(&test) else {
        return;
    };
    let smtp = SmtpSink::start(&python);
    let Some(d) = Door::start(driver, &test, Some(smtp.port), None).await else {
        return;
    };
    let session = "alice/mail";
    pause(&d.s, session, "mail bob@example.com").await;
    let mut mails = [smtp.next(), smtp.next()];
    mails.sort_by_key(|m| m["to"][0].as_str().unwrap().to_owned());
    assert_eq!(mails[0]["to"], json!(["ana@corp.test"]), "{mails:?}");
    assert_eq!(mails[1]["to"], json!(["rita@corp.test"]), "{mails:?}");
    let (ana, rita) = (link_in(&mails[0]), link_in(&mails[1]));

    // The page shows the call; opening it decides nothing.
    let page = d.s.client.get(&ana).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("bob@example.com") && html.contains("Approve"),
        "{html}"
    );
    assert!(d.ran.all().is_empty());

    // The form's Approve.
    let form = |link: &str| {
        d.s.client
            .post(link.to_owned())
            .form(&[("action", "approve")])
            .send()
    };
    let approved = form(&ana).await.unwrap();
    let status = approved.status().as_u16();
    let html = approved.text().await.unwrap();
    assert_eq!(status, 200, "{html}\n{}", d.log());
    assert!(html.contains("Approved"), "{html}");
    d.ran_once("mail:bob@example.com").await;

    // Used after the call was decided: ana's link again, rita's link.
    let again = form(&ana).await.unwrap();
    assert_eq!(again.status(), 409);
    let page = d.s.client.get(&rita).send().await.unwrap();
    let html = page.text().await.unwrap();
    assert!(
        html.contains("Already decided") && html.contains("approve by ana"),
        "{html}"
    );
    let late = form(&rita).await.unwrap();
    assert_eq!(late.status(), 409);
    assert_eq!(d.ran.count("mail:bob@example.com"), 1, "{:?}", d.ran.all());

    let trail = d.trail(session).await;
    let applied: Vec<&Value> = trail.iter().filter(|r| r["verdict"] == "applied").collect();
    assert_eq!(applied.len(), 1, "{trail:#?}");
    assert_eq!(applied[0]["decision"], "approve");
    assert_eq!(applied[0]["actor"]["principal"], "ana");
    assert_eq!(applied[0]["actor"]["metadata"]["via"], "email");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_on_the_local_driver() {
    email(Driver::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_on_restate() {
    email(Driver::Restate).await;
}

/// The inbox in headless Chromium: a pause made through the API shows as a card; ana
/// approves it there; the card says so, the result shows in the session view, and
/// the call ran once.
async fn inbox(driver: Driver) {
    let test = format!("inbox_on_{driver:?}");
    let Some((chromium, chromedriver)) = chromium_or_skip(&test) else {
        return;
    };
    let Some(d) = Door::start(driver, &test, None, None).await else {
        return;
    };
    let rid = pause(&d.s, "alice/web", "delete inbox.txt").await;
    let webdriver = start_driver(&chromedriver);
    let c: Client = browser(&webdriver, &chromium).await;
    c.goto(&format!("{}/#token={ANA}", d.s.base)).await.unwrap();
    c.wait()
        .for_element(Locator::Css(&card(&rid)))
        .await
        .unwrap();
    c.find(Locator::Css(&format!("{} .approve", card(&rid))))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, &format!("{} .status", card(&rid)), |t| {
        t.contains("Approved by ana")
    })
    .await;
    wait_text(&c, "#transcript", |t| t.contains("deleted inbox.txt")).await;
    d.ran_once("delete:inbox.txt").await;
    c.close().await.unwrap();
    let trail = d.trail("alice/web").await;
    assert!(
        trail
            .iter()
            .any(|r| r["verdict"] == "applied" && r["actor"]["principal"] == "ana"),
        "{trail:#?}"
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_on_the_local_driver() {
    inbox(Driver::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_on_restate() {
    inbox(Driver::Restate).await;
}

/// A2A with a2a-sdk (`tests/a2a/doors.py` in reins-server): a message that pauses, the
/// same message again (its task), the approval (completed), the decision message again
/// (its task); the call ran once, approved by carol through A2A.
async fn a2a_task(driver: Driver) {
    let test = format!("a2a_on_{driver:?}");
    let Some(python) = a2a::client_available(&test) else {
        return;
    };
    let Some(d) = Door::start(driver, &test, None, None).await else {
        return;
    };
    let report = a2a::run_client(&python, "doors.py", &d.s, &d.s, &[("A2A_TOKEN", CAROL)]).await;
    assert!(
        report["answer"]
            .as_str()
            .unwrap()
            .contains("deleted a2a.txt"),
        "{report}\n{}",
        d.log()
    );
    d.ran_once("delete:a2a.txt").await;
    let trail = d.trail(report["context"].as_str().unwrap()).await;
    let applied: Vec<&Value> = trail.iter().filter(|r| r["verdict"] == "applied").collect();
    assert_eq!(applied.len(), 1, "{trail:#?}");
    assert_eq!(applied[0]["actor"]["principal"], "carol");
    assert_eq!(applied[0]["actor"]["metadata"]["via"], "a2a");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_on_the_local_driver() {
    a2a_task(Driver::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_on_restate() {
    a2a_task(Driver::Restate).await;
}
