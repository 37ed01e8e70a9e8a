//! Crash tests of consent rules and sub-agents on Restate: the agents of
//! `reins_agent::testing` (the same the behaviour suite runs), served by a process of
//! their own — this test binary started again as `scenario_service` — which the
//! tests kill with `kill -9` and start again on the same port, against a real
//! restate-server (from npm).
//!
//! - a quorum of two, the service killed between the two approvals: the second
//!   approval, after the restart, completes the quorum and the tool runs once;
//! - a sub-agent's pause, the service killed while the child is paused: after the
//!   restart, the approval at the parent runs the child's tool once and both complete.
//!
//! Each also runs on a three-node restate-server cluster on loopback (replicated log
//! and metadata), where the node the sessions' turns run on (the partition's leader)
//! is killed with the service: the other nodes take the approvals.
//!
//! Fails under `CI=true` when restate-server is not installed; elsewhere it is
//! reported SKIPPED.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use reins_agent::run::Phase;
use reins_agent::testing::{Scenario, TOOL};
use reins_agent::{Decision, RunStatus};
use reins_memory::{MemoryStore, SqliteStore};
use reins_message::Msg;
use reins_restate::{LocalCluster, LocalRestate, RestateClient, SessionObject, TurnRequest};
use tokio::process::{Child, Command};

const SETTLE: Duration = Duration::from_secs(30);

/// One restate-server at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// The service process: the scenario's agent as the session object, until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by the crash tests as the service process"]
async fn scenario_service() {
    let scenario = Scenario::from_name(&env("REINS_SCENARIO")).unwrap();
    let store: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(env("REINS_DB")).await.unwrap());
    let agent = scenario
        .agent(store, Path::new(&env("REINS_OUTBOX")))
        .unwrap();
    let listener = tokio::net::TcpListener::bind(env("REINS_LISTEN"))
        .await
        .unwrap();
    reins_restate::serve(SessionObject::new(agent).unwrap(), listener).await;
}

/// A restate-server, the scenario's service process (killed and started again by
/// the tests) and a client of the ingress.
/// One restate-server, or a cluster of three.
enum Server {
    One(LocalRestate),
    Cluster(LocalCluster),
}

struct Deployment {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    server: Server,
    service: Option<Child>,
    scenario: Scenario,
    port: u16,
    client: RestateClient,
    db: PathBuf,
    outbox: PathBuf,
    log: PathBuf,
    kills: usize,
    _dir: tempfile::TempDir,
}

impl Deployment {
    /// The scenario's service on one restate-server, or (`cluster`) on three.
    async fn start(scenario: Scenario, cluster: bool) -> Option<Self> {
        let binary = support::restate_binary()?;
        let serial = SERIAL.lock().await;
        let dir = tempfile::tempdir().unwrap();
        let server = if cluster {
            Server::Cluster(
                LocalCluster::start_with(
                    binary,
                    dir.path().join("restate"),
                    3,
                    support::CLUSTER_CONFIG,
                )
                .await
                .unwrap(),
            )
        } else {
            Server::One(
                LocalRestate::start_with(binary, dir.path().join("restate"), "")
                    .await
                    .unwrap(),
            )
        };
        let (db, outbox, log) = (
            dir.path().join("reins.sqlite"),
            dir.path().join("outbox.txt"),
            dir.path().join("service.log"),
        );
        drop(SqliteStore::open(&db).await.unwrap());
        let port = reins_restate::local::free_port().unwrap();
        let client = RestateClient::new(match &server {
            Server::One(r) => r.ingress_url(),
            Server::Cluster(c) => c.ingress_url(0),
        });
        let mut d = Self {
            _serial: serial,
            server,
            service: None,
            scenario,
            port,
            client,
            db,
            outbox,
            log,
            kills: 0,
            _dir: dir,
        };
        d.spawn().await;
        let uri = format!("http://127.0.0.1:{port}");
        match &d.server {
            Server::One(r) => r.register(&uri).await.unwrap(),
            Server::Cluster(c) => c.register(&uri).await.unwrap(),
        }
        Some(d)
    }

    /// On a cluster, `kill -9` of the node the sessions' turns run on (the partition's
    /// leader); the client goes to another node's ingress. Nothing on one server.
    async fn kill_the_leader(&mut self) {
        let Server::Cluster(c) = &mut self.server else {
            return;
        };
        let leader = support::cluster_leader(c).expect("a node leads the partition");
        self.client = RestateClient::new(c.ingress_url((leader + 1) % c.len()));
        c.kill(leader).await.unwrap();
        self.kills += 1;
    }

    async fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["scenario_service", "--exact", "--ignored", "--nocapture"])
            .env("REINS_SCENARIO", self.scenario.name())
            .env("REINS_DB", &self.db)
            .env("REINS_OUTBOX", &self.outbox)
            .env("REINS_LISTEN", format!("127.0.0.1:{}", self.port))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        self.service = Some(child);
        support::wait_until_listening(self.port, SETTLE, &self.log).await;
    }

    /// `kill -9` of the service process, then the same service again on its port.
    async fn kill_and_restart(&mut self) {
        if let Some(mut c) = self.service.take() {
            c.kill().await.unwrap();
            self.kills += 1;
        }
        self.spawn().await;
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How many times `send_email` ran in `session` (and its child sessions).
    fn runs(&self, session: &str) -> usize {
        let mark = format!(" {session}/");
        std::fs::read_to_string(&self.outbox)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(TOOL) && l.contains(&mark))
            .count()
    }

    async fn settled(&self, session: &str, after: u64) -> reins_agent::SessionView {
        self.client
            .wait_settled(session, after, SETTLE)
            .await
            .unwrap_or_else(|e| panic!("{session}: {e}\n{}", self.log()))
    }

    async fn send(&self, session: &str, text: &str) -> reins_agent::SessionView {
        let s = self
            .client
            .submit(session, &TurnRequest::message(Msg::user(text)), None)
            .await
            .unwrap();
        self.settled(session, s.version).await
    }

    async fn approve(&self, session: &str, id: &str, by: &str) -> reins_agent::SessionView {
        let view = self.client.view(session).await.unwrap();
        let s = self
            .client
            .decide(
                session,
                vec![Decision::approve(id).by(by)],
                Some(view.token),
                None,
            )
            .await
            .unwrap_or_else(|e| panic!("{by}'s approval was refused: {e}\n{}", self.log()));
        self.settled(session, s.version).await
    }

    /// An approval that does not complete the quorum: the session stays paused at the
    /// version that stored it.
    async fn approve_partly(&self, session: &str, id: &str, by: &str) -> reins_agent::SessionView {
        let view = self.client.view(session).await.unwrap();
        let s = self
            .client
            .decide(
                session,
                vec![Decision::approve(id).by(by)],
                Some(view.token),
                None,
            )
            .await
            .unwrap_or_else(|e| panic!("{by}'s approval was refused: {e}\n{}", self.log()));
        self.settled(session, s.version - 1).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_of_two_survives_a_kill_between_the_approvals_and_runs_once() {
    quorum_survives_a_kill(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_quorum_survives_its_node_killed_between_the_approvals() {
    quorum_survives_a_kill(true).await;
}

async fn quorum_survives_a_kill(cluster: bool) {
    let Some(mut d) = Deployment::start(Scenario::Quorum, cluster).await else {
        return;
    };
    let v = d.send("q1", "email carol@example.com").await;
    assert!(v.paused, "{v:?}\n{}", d.log());
    let id = v.requirements[0].id.clone();
    let v = d.approve_partly("q1", &id, "ana").await;
    assert!(v.paused, "one approval of two must leave it paused: {v:?}");
    assert_eq!(d.runs("q1"), 0);

    d.kill_the_leader().await;
    d.kill_and_restart().await;
    let v = d.client.view("q1").await.unwrap();
    assert!(v.paused, "{v:?}");
    assert_eq!(
        v.requirements[0].quorum.as_ref().map(|q| q.approvals.len()),
        Some(1),
        "the first approval is kept across the kill: {v:?}"
    );
    let v = d.approve("q1", &id, "ben").await;
    assert_eq!(
        v.phase,
        Phase::Finished(RunStatus::Completed),
        "{v:?}\n{}",
        d.log()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(d.runs("q1"), 1, "the tool runs exactly once");
    assert_eq!(d.kills, if cluster { 2 } else { 1 });
    eprintln!(
        "quorum crash test: {} kill(s), {} run(s)",
        d.kills,
        d.runs("q1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_pause_survives_a_kill_and_the_approval_runs_the_childs_tool_once() {
    subagent_survives_a_kill(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_subagents_pause_survives_its_node_killed() {
    subagent_survives_a_kill(true).await;
}

async fn subagent_survives_a_kill(cluster: bool) {
    let Some(mut d) = Deployment::start(Scenario::SubAgent, cluster).await else {
        return;
    };
    let v = d.send("n1", "delegate email carol@example.com").await;
    assert!(v.paused, "{v:?}\n{}", d.log());
    let r = v.requirements[0].clone();
    assert_eq!(r.path.len(), 2, "{r:?}");
    let child = reins_agent::child_session_id("n1", &r.path[0]);
    assert!(d.client.view(&child).await.unwrap().paused);
    assert_eq!(d.runs("n1"), 0);

    d.kill_the_leader().await;
    d.kill_and_restart().await;
    let v = d.approve("n1", &r.id, "ana").await;
    assert_eq!(
        v.phase,
        Phase::Finished(RunStatus::Completed),
        "{v:?}\n{}",
        d.log()
    );
    let cv = d.client.view(&child).await.unwrap();
    assert_eq!(cv.phase, Phase::Finished(RunStatus::Completed), "{cv:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(d.runs("n1"), 1, "the child's tool runs exactly once");
    assert_eq!(d.kills, if cluster { 2 } else { 1 });
    eprintln!(
        "sub-agent crash test: {} kill(s), {} run(s)",
        d.kills,
        d.runs("n1")
    );
}
