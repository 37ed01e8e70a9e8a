//! A door on Restate (shared by the door crates' driver tests through `#[path]`;
//! the module that includes it gives `Ran` and the test `agent`): a real restate-server (installed under
//! crates/reins-restate/tests/restate/node_modules by .ci/run) and the test agent's
//! session object served by this test binary started again as a process of its own
//! (an ignored test is its entry point), both on loopback and killed on drop; the door
//! follows the runs through `Relayed` over a `RestateClient`, on the store the service
//! commits to. `REINS_DOOR_SERVICE_LOG` sets the service's `RUST_LOG` (default
//! `warn`); its log is in the failure messages.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reins_agent::port::{Relayed, Sessions};
use reins_memory::{MemoryStore, SqliteStore};
use reins_restate::{LocalRestate, RestateClient, SessionObject};
use tokio::process::{Child, Command};

// The crate that includes this file gives the test agent and its `Ran` beside it.
use super::{Ran, agent};

/// The environment the service process reads: its store, its listener, its ran file.
const DB: &str = "REINS_DOOR_SERVICE_DB";
const LISTEN: &str = "REINS_DOOR_SERVICE_LISTEN";
const RAN: &str = "REINS_DOOR_SERVICE_RAN";

/// One restate-server at a time in a test binary: the machine may be small.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The restate-server binary; `None` (and a loud line) when it is not installed
/// outside CI. Under `CI=true` a missing binary fails the test.
pub fn restate_binary(test: &str) -> Option<PathBuf> {
    if let Some(b) = LocalRestate::find_binary() {
        return Some(b);
    }
    let why = format!(
        "{test}: restate-server is not installed: run `npm ci --no-audit --no-fund --ignore-scripts --prefix crates/reins-restate/tests/restate` (or set REINS_RESTATE_SERVER)"
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    eprintln!("SKIPPED {why}");
    None
}

/// The service process's body (call it from an ignored test named `entry`): the
/// test agent as the Restate session object, until killed.
pub async fn service() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let store: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(var(DB)).await.unwrap());
    let ran = Ran::file(var(RAN));
    let object = SessionObject::new(agent(store, &ran)).unwrap();
    let listener = tokio::net::TcpListener::bind(var(LISTEN)).await.unwrap();
    reins_restate::serve(object, listener).await;
}

/// A restate-server, the service process and the port over them.
pub struct Deployment {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    _restate: LocalRestate,
    service: Child,
    /// The port a door holds: `Relayed` over the deployment's client.
    pub sessions: Arc<dyn Sessions>,
    /// What the service's tools ran.
    pub ran: Ran,
    db: PathBuf,
    ingress: String,
    log: PathBuf,
}

impl Deployment {
    /// Starts restate-server and `entry` (an ignored test of this binary that calls
    /// [`service`]) with their data under `dir`, and registers the service.
    pub async fn start(binary: PathBuf, dir: &Path, entry: &str) -> Self {
        let serial = SERIAL.lock().await;
        let restate = LocalRestate::start_with(binary, dir.join("restate"), "")
            .await
            .unwrap();
        let db = dir.join("sessions.db");
        let ran = dir.join("ran.txt");
        let log = dir.join("service.log");
        // The store exists (and is migrated) before either process opens it.
        let store: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(&db).await.unwrap());
        let port = reins_restate::local::free_port().unwrap();
        let out = std::fs::File::create(&log).unwrap();
        let service = Command::new(std::env::current_exe().unwrap())
            .args([entry, "--exact", "--ignored", "--nocapture"])
            .env(DB, &db)
            .env(RAN, &ran)
            .env(LISTEN, format!("127.0.0.1:{port}"))
            .env(
                "RUST_LOG",
                std::env::var("REINS_DOOR_SERVICE_LOG").unwrap_or_else(|_| "warn".to_owned()),
            )
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "the service process did not listen:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        restate
            .register(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap();
        // The agent here is configuration (its card) and its store; the service's
        // processes run the sessions.
        let config = agent(store, &Ran::default());
        let client = RestateClient::new(restate.ingress_url());
        let sessions: Arc<dyn Sessions> = Arc::new(Relayed::new(config, Arc::new(client)));
        let ingress = restate.ingress_url();
        Self {
            _serial: serial,
            _restate: restate,
            service,
            sessions,
            ran: Ran::file(ran),
            db,
            ingress,
            log,
        }
    }

    /// Another door instance's port over the same deployment and store (its own
    /// client, store handle and live events).
    pub async fn second_port(&self) -> Arc<dyn Sessions> {
        let store: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(&self.db).await.unwrap());
        let config = agent(store, &Ran::default());
        let client = RestateClient::new(self.ingress.clone());
        Arc::new(Relayed::new(config, Arc::new(client)))
    }

    /// The deployment's ingress URL (for a door that makes its own client).
    pub fn ingress(&self) -> &str {
        &self.ingress
    }

    /// The service process's log (for a failure's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops the service process.
    pub async fn stop(mut self) {
        let _ = self.service.kill().await;
    }
}
