//! [`LocalRestate`]: a restate-server process on loopback, for tests, demos and
//! `cargo xtask serve --restate`. Production deployments run restate-server their own
//! way; nothing else in this crate needs this module.
//!
//! The server is tied to the process that started it and found again after a crash:
//! on Linux it is started under util-linux's `setpriv --pdeathsig KILL` (from a thread
//! that lives as long as it does), so it dies with its parent; and its pid is kept in
//! `restate-server.pid` in the data directory, so that a start finds a server a killed
//! run left behind (its command line names this directory's configuration), kills it
//! and waits for it, before it starts a new one. A rerun after a `kill -9` of either
//! process starts on the same data and, with [`LocalRestate::start_on`], the same
//! ports.

mod process;

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use process::ServerProcess;

/// The npm package (per platform) that carries the restate-server binary.
fn platform_package() -> Option<&'static str> {
    match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => Some("restate-server-linux-x64"),
        ("linux", "aarch64") => Some("restate-server-linux-arm64"),
        ("macos", "x86_64") => Some("restate-server-darwin-x64"),
        ("macos", "aarch64") => Some("restate-server-darwin-arm64"),
        _ => None,
    }
}

/// The loopback ports of a [`LocalRestate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestatePorts {
    /// The ingress, where sessions are called.
    pub ingress: u16,
    /// The admin API (deployments, invocations).
    pub admin: u16,
    /// The node's own port (its internal RPC).
    pub node: u16,
}

impl RestatePorts {
    /// Three ports free on 127.0.0.1 right now.
    ///
    /// # Errors
    /// When no port can be bound.
    pub fn free() -> Result<Self> {
        Ok(Self {
            ingress: free_port()?,
            admin: free_port()?,
            node: free_port()?,
        })
    }
}

/// A restate-server process with its admin, ingress and node ports on 127.0.0.1,
/// telemetry off, its data in a directory of the caller's. Killed when dropped, and
/// when the process that started it dies (Linux, with util-linux's `setpriv`); one
/// that a killed run left on the same directory is stopped before a new one starts
/// (see the module docs).
#[derive(Debug)]
pub struct LocalRestate {
    child: Option<ServerProcess>,
    binary: PathBuf,
    dir: PathBuf,
    ports: RestatePorts,
    extra: String,
    /// Its place in a [`LocalCluster`] (`None`: a node on its own).
    member: Option<Member>,
}

/// A node's place in a [`LocalCluster`].
#[derive(Debug, Clone)]
struct Member {
    /// Its index (node 0 provisions the cluster).
    index: usize,
    /// Every node's node port, in order.
    nodes: Vec<u16>,
}

impl LocalRestate {
    /// Where the restate-server binary is: `$REINS_RESTATE_SERVER`, else the npm
    /// package installed under this crate's `tests/restate` (`npm ci --prefix
    /// crates/reins-restate/tests/restate`). `None` when neither exists.
    pub fn find_binary() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("REINS_RESTATE_SERVER") {
            let p = PathBuf::from(p);
            return p.is_file().then_some(p);
        }
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/restate/node_modules/@restatedev")
            .join(platform_package()?)
            .join("bin/restate-server");
        p.is_file().then_some(p)
    }

    /// Starts restate-server with its data under `dir` on free loopback ports, and
    /// waits until its admin API and ingress answer.
    ///
    /// # Errors
    /// [`Error::Server`] when it does not start or answer within 30 s.
    pub async fn start(binary: impl Into<PathBuf>, dir: impl Into<PathBuf>) -> Result<Self> {
        Self::start_with(binary, dir, "").await
    }

    /// [`LocalRestate::start`] with more configuration: `extra` is TOML added to the
    /// configuration file — keys before its first table header go to the root table
    /// (e.g. `"disable-prometheus = true\n"`), whole sections after it (e.g.
    /// `"[worker.invoker]\nhttp2-streams-per-connection-limit = 4\n"`).
    /// The sections this file writes itself (`[admin]`, `[ingress]`, `[bifrost]`,
    /// `[bifrost.local]`, `[worker.storage]`, `[log-server]`, `[metadata-server]`)
    /// cannot be repeated in `extra`.
    ///
    /// # Errors
    /// As [`LocalRestate::start`].
    pub async fn start_with(
        binary: impl Into<PathBuf>,
        dir: impl Into<PathBuf>,
        extra: &str,
    ) -> Result<Self> {
        let (binary, dir) = (binary.into(), dir.into());
        let mut attempts = 0;
        loop {
            let mut me =
                Self::prepare(binary.clone(), dir.clone(), RestatePorts::free()?, extra).await?;
            match me.spawn().await {
                Ok(()) => return Ok(me),
                // A port that was free a moment ago was taken by someone else (a busy
                // machine): the server exits at once. Other free ports, twice more.
                Err(e) if attempts < 2 && me.exited() => {
                    attempts += 1;
                    tracing::warn!(error = %e, "restate-server exited at start; trying other free ports");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts restate-server on these ports, with its data under `dir` and `extra`
    /// appended to its configuration (as [`LocalRestate::start_with`]). Started again
    /// on the same directory and ports after any crash, it finds its data (sessions,
    /// paused turns, the deployments registered) as it was: first it stops a
    /// restate-server that a killed run left running on `dir`.
    ///
    /// # Errors
    /// [`Error::Server`] when a port is taken, or the server does not start or answer
    /// within 30 s.
    pub async fn start_on(
        binary: impl Into<PathBuf>,
        dir: impl Into<PathBuf>,
        ports: RestatePorts,
        extra: &str,
    ) -> Result<Self> {
        let mut me = Self::prepare(binary.into(), dir.into(), ports, extra).await?;
        me.spawn().await?;
        Ok(me)
    }

    /// The server on `dir` and `ports`, not started yet; a server a killed run left on
    /// `dir` is stopped.
    async fn prepare(
        binary: PathBuf,
        dir: PathBuf,
        ports: RestatePorts,
        extra: &str,
    ) -> Result<Self> {
        std::fs::create_dir_all(&dir)?;
        // Absolute, so that the configuration path on its command line names it
        // whatever the working directory.
        let dir = std::fs::canonicalize(&dir)?;
        let me = Self {
            child: None,
            binary,
            dir,
            ports,
            extra: extra.to_owned(),
            member: None,
        };
        let (dir, config) = (me.dir.clone(), me.config_path());
        let stale = tokio::task::spawn_blocking(move || process::stop_stale(&dir, &config))
            .await
            .map_err(|e| Error::Server(format!("checking for a stale restate-server: {e}")))??;
        if let Some(pid) = stale {
            tracing::warn!(pid, dir = %me.dir.display(), "stopped a restate-server an earlier run left running");
        }
        Ok(me)
    }

    /// Whether the server process has ended.
    fn exited(&self) -> bool {
        self.child.as_ref().is_some_and(|c| c.try_exit().is_some())
    }

    /// The ingress (where sessions are called), e.g. `http://127.0.0.1:8080`.
    pub fn ingress_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.ingress)
    }

    /// The admin API (deployments, invocations), e.g. `http://127.0.0.1:9070`.
    pub fn admin_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.admin)
    }

    /// Its ports.
    pub fn ports(&self) -> RestatePorts {
        self.ports
    }

    /// The server process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child
            .as_ref()
            .filter(|c| c.try_exit().is_none())
            .map(ServerProcess::pid)
    }

    /// Waits until the server process ends (a crash, a kill from outside); its exit
    /// status. Pending forever after [`LocalRestate::kill`].
    ///
    /// # Errors
    /// [`Error::Server`] when its status cannot be read.
    pub async fn wait(&mut self) -> Result<ExitStatus> {
        match self.child.as_mut() {
            Some(child) => child.wait().await.map_err(Error::Server),
            None => std::future::pending().await,
        }
    }

    fn config_path(&self) -> PathBuf {
        self.dir.join("restate.toml")
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("restate-server.log")
    }

    fn config(&self) -> String {
        if let Some(member) = &self.member {
            return self.cluster_config(member);
        }
        let data = self.dir.join("data");
        let (root, sections) = split_root(&self.extra);
        format!(
            r#"# Written by reins-restate's LocalRestate.
node-name = "reins-local"
base-dir = "{data}"
listen-mode = "tcp"
disable-telemetry = true
default-num-partitions = 4
rocksdb-total-memory-size = "256 MiB"
log-filter = "warn,restate=warn"
log-disable-ansi-codes = true
bind-address = "127.0.0.1:{node}"
advertised-address = "http://127.0.0.1:{node}/"
# One node: no Prometheus endpoint, no trace spans, no RocksDB counters (measured:
# about a fifth of restate-server's CPU per run, docs/restate.md "Benchmark").
disable-prometheus = true
tracing-filter = "off"
rocksdb-perf-level = "disable"
{root}
[admin]
bind-address = "127.0.0.1:{admin}"
disable-web-ui = true

[ingress]
bind-address = "127.0.0.1:{ingress}"

# One node: the log is a local RocksDB log (written and synced as before), not a
# replicated log served by the node to itself over its own network stack.
[bifrost]
default-provider = "local"

[worker.storage]
rocksdb-disable-statistics = true

[bifrost.local]
rocksdb-disable-statistics = true

[log-server]
rocksdb-disable-statistics = true

[metadata-server]
rocksdb-disable-statistics = true

{sections}"#,
            data = data.display(),
            node = self.ports.node,
            admin = self.ports.admin,
            ingress = self.ports.ingress,
        )
    }

    /// The configuration of node `member.index` of a [`LocalCluster`]: every role on
    /// every node, the replicated log and metadata (replication 2: one node may fail),
    /// node 0 provisioning the cluster.
    fn cluster_config(&self, member: &Member) -> String {
        let data = self.dir.join("data");
        let (root, sections) = split_root(&self.extra);
        let mut defaults = String::new();
        if !root.contains("default-num-partitions") {
            defaults.push_str("default-num-partitions = 4\n");
        }
        if !root.contains("log-filter") {
            defaults.push_str("log-filter = \"warn,restate=warn\"\n");
        }
        let peers = member
            .nodes
            .iter()
            .map(|p| format!("\"http://127.0.0.1:{p}/\""))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            r#"# Written by reins-restate's LocalCluster.
node-name = "reins-n{index}"
cluster-name = "reins-local-cluster"
auto-provision = {provision}
default-replication = 2
base-dir = "{data}"
listen-mode = "tcp"
disable-telemetry = true
rocksdb-total-memory-size = "256 MiB"
log-disable-ansi-codes = true
bind-address = "127.0.0.1:{node}"
advertised-address = "http://127.0.0.1:{node}/"
disable-prometheus = true
tracing-filter = "off"
rocksdb-perf-level = "disable"
{defaults}{root}
[admin]
bind-address = "127.0.0.1:{admin}"
disable-web-ui = true

[ingress]
bind-address = "127.0.0.1:{ingress}"

[bifrost]
default-provider = "replicated"

[metadata-server]
type = "replicated"

[metadata-client]
type = "replicated"
addresses = [{peers}]

{sections}"#,
            index = member.index,
            provision = member.index == 0,
            data = data.display(),
            node = self.ports.node,
            admin = self.ports.admin,
            ingress = self.ports.ingress,
        )
    }

    async fn spawn(&mut self) -> Result<()> {
        self.launch().await?;
        self.ready().await
    }

    /// Starts the process (its ports free), without waiting for it to answer.
    async fn launch(&mut self) -> Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        // A server killed a moment ago (with its parent, or by `kill`) may still hold
        // its ports while the kernel tears it down: a taken port is tried again for 5 s.
        let deadline = Instant::now() + Duration::from_secs(5);
        for (what, port) in [
            ("ingress", self.ports.ingress),
            ("admin", self.ports.admin),
            ("node", self.ports.node),
        ] {
            while let Err(e) = std::net::TcpListener::bind(("127.0.0.1", port)) {
                if Instant::now() > deadline {
                    return Err(Error::Server(format!(
                        "cannot use 127.0.0.1:{port} for restate-server's {what} port: {e}"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let config = self.config_path();
        std::fs::write(&config, self.config())?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let args = [
            "--no-logo".as_ref(),
            "--config-file".as_ref(),
            config.as_os_str(),
        ];
        let child = ServerProcess::spawn(&self.binary, &args, log)
            .map_err(|e| Error::Server(format!("cannot start {}: {e}", self.binary.display())))?;
        std::fs::write(process::pid_file(&self.dir), format!("{}\n", child.pid()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits until its admin API and ingress answer (30 s at most).
    async fn ready(&mut self) -> Result<()> {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        let health = [
            format!("{}/health", self.admin_url()),
            format!("{}/restate/health", self.ingress_url()),
        ];
        for url in &health {
            loop {
                if let Some(exit) = self.child.as_ref().and_then(ServerProcess::try_exit) {
                    let status = match exit {
                        Ok(s) => s.to_string(),
                        Err(e) => e,
                    };
                    return Err(Error::Server(format!(
                        "restate-server exited ({status}); see {}",
                        self.log_path().display()
                    )));
                }
                if let Ok(r) = http.get(url).send().await
                    && r.status().is_success()
                {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(Error::Server(format!(
                        "{url} did not answer within 30 s; see {}",
                        self.log_path().display()
                    )));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    ///
    /// # Errors
    /// When the process cannot be signalled.
    pub async fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            let _ = child.wait().await;
            let _ = std::fs::remove_file(process::pid_file(&self.dir));
        }
        Ok(())
    }

    /// Starts the server again on the same ports and data (after [`LocalRestate::kill`]).
    ///
    /// # Errors
    /// As [`LocalRestate::start`].
    pub async fn restart(&mut self) -> Result<()> {
        self.kill().await?;
        self.spawn().await
    }

    /// Registers (or re-registers) the deployment at `uri` (a reins session service's
    /// endpoint, e.g. `http://127.0.0.1:9080`) with the admin API.
    ///
    /// # Errors
    /// [`Error::Status`] when the admin API refuses it (unreachable endpoint, an
    /// incompatible change without `force`).
    pub async fn register(&self, uri: &str) -> Result<()> {
        let resp = reqwest::Client::new()
            .post(format!("{}/deployments", self.admin_url()))
            .json(&serde_json::json!({"uri": uri, "force": true}))
            .send()
            .await?;
        let status = resp.status();
        if !status.is_success() {
            return Err(Error::Status {
                status: status.as_u16(),
                body: resp.text().await.unwrap_or_default(),
            });
        }
        Ok(())
    }
}

/// Several restate-server nodes on loopback forming one cluster: every node runs every
/// role (metadata server, admin, worker, ingress, log server), the log and
/// the metadata are replicated (on two nodes: the cluster goes on when one node
/// fails), and node 0 provisions the cluster. Each node is a [`LocalRestate`] with
/// its own ports and data directory under the cluster's; they are killed when
/// dropped. For tests of what survives a node's crash, and for trying reins on a
/// cluster (docs/restate.md, "A cluster").
#[derive(Debug)]
pub struct LocalCluster {
    nodes: Vec<LocalRestate>,
}

impl LocalCluster {
    /// Starts `n` nodes (at least 3: with replication 2, one node may fail) with their
    /// data under `dir/n0`, `dir/n1`, ... on free loopback ports, and waits until
    /// every node's admin API and ingress answer. Four partitions.
    ///
    /// # Errors
    /// [`Error::Server`] when a node does not start or answer within 30 s.
    pub async fn start(
        binary: impl Into<PathBuf>,
        dir: impl Into<PathBuf>,
        n: usize,
    ) -> Result<Self> {
        Self::start_with(binary, dir, n, "").await
    }

    /// [`LocalCluster::start`] with more configuration for every node, as
    /// [`LocalRestate::start_with`] takes it (`default-num-partitions` and
    /// `log-filter` may be set here; the cluster's own settings may not).
    ///
    /// # Errors
    /// As [`LocalCluster::start`].
    pub async fn start_with(
        binary: impl Into<PathBuf>,
        dir: impl Into<PathBuf>,
        n: usize,
        extra: &str,
    ) -> Result<Self> {
        let (binary, dir) = (binary.into(), dir.into());
        let mut attempts = 0;
        loop {
            let ports = (0..n)
                .map(|_| RestatePorts::free())
                .collect::<Result<Vec<_>>>()?;
            let nodes: Vec<u16> = ports.iter().map(|p| p.node).collect();
            let mut cluster = Self { nodes: Vec::new() };
            for (index, p) in ports.into_iter().enumerate() {
                let mut node =
                    LocalRestate::prepare(binary.clone(), dir.join(format!("n{index}")), p, extra)
                        .await?;
                node.member = Some(Member {
                    index,
                    nodes: nodes.clone(),
                });
                cluster.nodes.push(node);
            }
            match cluster.launch_all().await {
                Ok(()) => return Ok(cluster),
                // A port that was free a moment ago was taken by someone else.
                Err(e) if attempts < 2 && cluster.nodes.iter().any(LocalRestate::exited) => {
                    attempts += 1;
                    tracing::warn!(error = %e, "a restate-server node exited at start; trying other free ports");
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn launch_all(&mut self) -> Result<()> {
        for node in &mut self.nodes {
            node.launch().await?;
        }
        for node in &mut self.nodes {
            node.ready().await?;
        }
        Ok(())
    }

    /// Node `i`.
    ///
    /// # Panics
    /// When there is no node `i`.
    pub fn node(&self, i: usize) -> &LocalRestate {
        &self.nodes[i]
    }

    /// How many nodes it has.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether it has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`'s ingress (every node takes calls).
    ///
    /// # Panics
    /// When there is no node `i`.
    pub fn ingress_url(&self, i: usize) -> String {
        self.nodes[i].ingress_url()
    }

    /// Kills node `i` at once (SIGKILL), as a crash would.
    ///
    /// # Errors
    /// When the process cannot be signalled.
    ///
    /// # Panics
    /// When there is no node `i`.
    pub async fn kill(&mut self, i: usize) -> Result<()> {
        self.nodes[i].kill().await
    }

    /// Starts node `i` again on its ports and data (after [`LocalCluster::kill`]): it
    /// rejoins the cluster.
    ///
    /// # Errors
    /// As [`LocalCluster::start`].
    ///
    /// # Panics
    /// When there is no node `i`.
    pub async fn restart(&mut self, i: usize) -> Result<()> {
        self.nodes[i].restart().await
    }

    /// Registers (or re-registers) the deployment at `uri` through the first node that
    /// runs.
    ///
    /// # Errors
    /// As [`LocalRestate::register`].
    pub async fn register(&self, uri: &str) -> Result<()> {
        let node = self
            .nodes
            .iter()
            .find(|n| n.pid().is_some())
            .ok_or_else(|| Error::Server("no node of the cluster runs".to_owned()))?;
        node.register(uri).await
    }
}

/// `extra` split where its first table header starts: the keys of the root table, and
/// the sections after them.
fn split_root(extra: &str) -> (&str, &str) {
    let mut at = 0;
    for line in extra.split_inclusive('\n') {
        if line.trim_start().starts_with('[') {
            break;
        }
        at += line.len();
    }
    extra.split_at(at)
}

/// A port free on 127.0.0.1 right now.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::split_root;

    #[test]
    fn extra_keys_before_the_first_header_go_to_the_root_table() {
        let extra = "disable-prometheus = true\n# note\n[worker.invoker]\nx = 1\n";
        assert_eq!(
            split_root(extra),
            (
                "disable-prometheus = true\n# note\n",
                "[worker.invoker]\nx = 1\n"
            )
        );
        assert_eq!(split_root("[a]\nb = 1"), ("", "[a]\nb = 1"));
        assert_eq!(split_root("a = 1"), ("a = 1", ""));
        assert_eq!(split_root(""), ("", ""));
    }
}
