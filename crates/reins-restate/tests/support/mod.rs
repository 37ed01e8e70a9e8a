//! A real restate-server and the reins demo service as a real child process, each on
//! free loopback ports, with their data in a temporary directory; both killed on drop.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod http;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use reins_memory::{MemoryStore, SessionState, SqliteStore};
use reins_restate::{LocalRestate, RestateClient};
use tokio::process::{Child, Command};

/// Waits until a process listens on loopback `port` (the service a test started; its
/// `log` says why when it does not), at most `within`, against a process that never
/// starts.
pub async fn wait_until_listening(port: u16, within: Duration, log: &std::path::Path) {
    let deadline = Instant::now() + within;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the service on port {port} did not listen:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One restate-server at a time: the machine running the tests may be small.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The restate-server binary, or `None` (and a loud line) when it is not installed and
/// CI is not set. Under CI a missing binary fails the test.
pub fn restate_binary() -> Option<PathBuf> {
    match LocalRestate::find_binary() {
        Some(b) => Some(b),
        None if std::env::var_os("CI").is_some() => panic!(
            "restate-server is not installed: run `npm ci --ignore-scripts --prefix crates/reins-restate/tests/restate` \
             (or set REINS_RESTATE_SERVER)"
        ),
        None => {
            eprintln!(
                "SKIPPED: restate-server is not installed (npm ci --ignore-scripts --prefix crates/reins-restate/tests/restate)"
            );
            None
        }
    }
}

pub struct Service {
    child: Option<Child>,
    pub port: u16,
    db: PathBuf,
    outbox: PathBuf,
    log: PathBuf,
    extra: Vec<String>,
}

impl Service {
    /// The outbox's lines.
    pub fn outbox(&self) -> Vec<String> {
        std::fs::read_to_string(&self.outbox)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// How many outbox lines start with `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        self.outbox()
            .iter()
            .filter(|l| l.starts_with(prefix))
            .count()
    }

    /// Waits until an outbox line starts with `prefix`.
    pub async fn wait_for_line(&self, prefix: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.count(prefix) == 0 {
            assert!(
                Instant::now() < deadline,
                "no `{prefix}` line in the outbox: {:?}\nservice log:\n{}",
                self.outbox(),
                self.service_log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn service_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The session as the reins store holds it (the record of messages and decisions).
    pub async fn stored(&self, session: &str) -> SessionState {
        let store = SqliteStore::open(&self.db).await.unwrap();
        store.load_session(session).await.unwrap()
    }

    async fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_reins-restate-demo"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--db")
            .arg(&self.db)
            .arg("--outbox")
            .arg(&self.outbox)
            .args(&self.extra)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        self.child = Some(child);
        wait_until_listening(self.port, Duration::from_secs(20), &self.log).await;
    }

    /// kill -9.
    pub async fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().await.unwrap();
        }
    }

    pub async fn restart(&mut self) {
        self.kill9().await;
        self.spawn().await;
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

pub struct Harness {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    pub restate: LocalRestate,
    pub service: Service,
    /// More service processes on the same store, behind one address with the first
    /// ([`Harness::start_cluster`]).
    pub others: Vec<Service>,
    pub client: RestateClient,
    pub dir: tempfile::TempDir,
    proxy: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(p) = self.proxy.take() {
            p.abort();
        }
    }
}

/// A TCP proxy on a free loopback port that hands each new connection to the next
/// backend that accepts it (round robin): several service processes behind one
/// deployment address, as a load balancer puts them.
async fn round_robin(backends: Vec<u16>) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let mut next = 0usize;
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                return;
            };
            let start = next;
            next += 1;
            let backends = backends.clone();
            tokio::spawn(async move {
                for k in 0..backends.len() {
                    let port = backends[(start + k) % backends.len()];
                    if let Ok(mut out) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                        return;
                    }
                }
            });
        }
    });
    (port, task)
}

impl Harness {
    /// Starts both processes and registers the service; `None` when restate-server is
    /// not installed (outside CI).
    pub async fn start(extra: &[&str]) -> Option<Self> {
        Self::start_cluster(1, extra, "").await
    }

    /// `n` service processes (named p0, p1, ...) on one store behind one address, and a
    /// restate-server with `restate_config` appended to its configuration.
    pub async fn start_cluster(n: usize, extra: &[&str], restate_config: &str) -> Option<Self> {
        let binary = restate_binary()?;
        let serial = SERIAL.lock().await;
        let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        Some(Self::start_locked(serial, binary, n, &extra, restate_config).await)
    }

    /// One service process, with `k` loopback listeners bound first (under the same
    /// lock as the ports of restate-server, so no other test takes them meanwhile) for
    /// servers the service is told of: `extra` makes its flags from their URLs.
    pub async fn start_with_listeners(
        k: usize,
        extra: impl FnOnce(&[String]) -> Vec<String>,
    ) -> Option<(Self, Vec<tokio::net::TcpListener>)> {
        let binary = restate_binary()?;
        let serial = SERIAL.lock().await;
        let mut listeners = Vec::new();
        let mut urls = Vec::new();
        for _ in 0..k {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            urls.push(format!("http://{}", l.local_addr().unwrap()));
            listeners.push(l);
        }
        let h = Self::start_locked(serial, binary, 1, &extra(&urls), "").await;
        Some((h, listeners))
    }

    async fn start_locked(
        serial: tokio::sync::MutexGuard<'static, ()>,
        binary: PathBuf,
        n: usize,
        extra: &[String],
        restate_config: &str,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let restate = LocalRestate::start_with(binary, dir.path().join("restate"), restate_config)
            .await
            .unwrap();
        let mut services = Vec::new();
        for i in 0..n {
            let mut extra = extra.to_vec();
            extra.extend(["--name".to_owned(), format!("p{i}")]);
            let mut service = Service {
                child: None,
                port: reins_restate::local::free_port().unwrap(),
                db: dir.path().join("reins.sqlite"),
                outbox: dir.path().join("outbox.txt"),
                log: dir.path().join(format!("service-p{i}.log")),
                extra,
            };
            service.spawn().await;
            services.push(service);
        }
        let (url, proxy) = if n == 1 {
            (services[0].url(), None)
        } else {
            let (port, task) = round_robin(services.iter().map(|s| s.port).collect()).await;
            (format!("http://127.0.0.1:{port}"), Some(task))
        };
        restate.register(&url).await.unwrap();
        let client = RestateClient::new(restate.ingress_url());
        let service = services.remove(0);
        Self {
            _serial: serial,
            restate,
            service,
            others: services,
            client,
            dir,
            proxy,
        }
    }

    /// The session's audit trail.
    pub async fn decisions(&self, session: &str) -> Vec<reins_memory::DecisionEntry> {
        let store = SqliteStore::open(&self.service.db).await.unwrap();
        store.decisions(session).await.unwrap()
    }
}

/// A three-node restate-server cluster on loopback (replicated log and metadata: one
/// node may fail), the demo service as a child process, and a client of node 0's
/// ingress.
pub struct ClusterHarness {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    pub cluster: reins_restate::LocalCluster,
    pub service: Service,
    pub client: RestateClient,
    pub dir: tempfile::TempDir,
}

impl ClusterHarness {
    /// Starts the cluster and the service and registers it; `None` when restate-server
    /// is not installed (outside CI).
    pub async fn start(extra: &[&str]) -> Option<Self> {
        let binary = restate_binary()?;
        let serial = SERIAL.lock().await;
        let dir = tempfile::tempdir().unwrap();
        let cluster = reins_restate::LocalCluster::start_with(
            binary,
            dir.path().join("restate"),
            3,
            CLUSTER_CONFIG,
        )
        .await
        .unwrap();
        let mut service = Service {
            child: None,
            port: reins_restate::local::free_port().unwrap(),
            db: dir.path().join("reins.sqlite"),
            outbox: dir.path().join("outbox.txt"),
            log: dir.path().join("service.log"),
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
        };
        service.spawn().await;
        cluster.register(&service.url()).await.unwrap();
        let client = RestateClient::new(cluster.ingress_url(0));
        Some(Self {
            _serial: serial,
            cluster,
            service,
            client,
            dir,
        })
    }

    /// The node that leads the cluster's one partition (see [`cluster_leader`]).
    pub fn leader(&self) -> Option<usize> {
        cluster_leader(&self.cluster)
    }
}

/// The configuration of a test cluster: one partition, so that every session's turn
/// runs on its leader, which announces itself in its log.
pub const CLUSTER_CONFIG: &str = "default-num-partitions = 1\n\
     log-filter = \"warn,restate_worker::partition::leadership=info\"\n";

/// The node that leads a test cluster's one partition (every session's turn runs
/// there): the one that became leader with the highest epoch, as the nodes' logs say.
/// `None` before any did.
pub fn cluster_leader(cluster: &reins_restate::LocalCluster) -> Option<usize> {
    (0..cluster.len())
        .filter_map(|i| {
            let log = std::fs::read_to_string(cluster.node(i).log_path()).ok()?;
            let epoch = log
                .lines()
                .filter_map(|l| l.split("became Leader of epoch e").nth(1))
                .filter_map(|rest| {
                    rest.split(|c: char| !c.is_ascii_digit())
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .max()?;
            Some((epoch, i))
        })
        .max()
        .map(|(_, i)| i)
}

/// The service's outbox, log and store, read through the harness.
impl std::ops::Deref for Harness {
    type Target = Service;
    fn deref(&self) -> &Service {
        &self.service
    }
}

/// The service's outbox, log and store, read through the cluster's harness.
impl std::ops::Deref for ClusterHarness {
    type Target = Service;
    fn deref(&self) -> &Service {
        &self.service
    }
}
