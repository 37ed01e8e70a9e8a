//! A throwaway PostgreSQL cluster for the tests: a temp directory, a free loopback
//! port, stopped (and deleted) when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A running cluster; stopping happens on drop.
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    as_postgres_user: bool,
}

impl Cluster {
    /// Starts a cluster when PostgreSQL binaries are installed. Without them: `Ok(None)`
    /// (tests then report themselves skipped), or an error when `required` (CI).
    pub fn start_if_available(required: bool) -> Result<Option<Self>, String> {
        if let Ok(url) = std::env::var("REINS_TEST_POSTGRES_URL") {
            eprintln!("xtask: using REINS_TEST_POSTGRES_URL from the environment ({url})");
            return Ok(None);
        }
        let Some(bin) = find_bin_dir() else {
            let msg = "PostgreSQL binaries (initdb, pg_ctl) not found: the PostgreSQL tests \
                       will report themselves SKIPPED (install the `postgresql` package to run them)";
            if required {
                return Err(format!("{msg}; CI requires them"));
            }
            eprintln!("xtask: {msg}");
            return Ok(None);
        };
        let cluster = Self::start(bin)?;
        Ok(Some(cluster))
    }

    /// Starts a cluster of its own, whatever the environment says (the benchmarks);
    /// an error when PostgreSQL is not installed.
    pub fn start_fresh() -> Result<Self, String> {
        let bin = find_bin_dir().ok_or(
            "PostgreSQL binaries (initdb, pg_ctl) not found: install the `postgresql` package \
             (or set REINS_BENCH_POSTGRES_URL)",
        )?;
        Self::start(bin)
    }

    fn start(bin: PathBuf) -> Result<Self, String> {
        let as_postgres_user = is_root();
        let dir = std::env::temp_dir().join(format!("reins-pg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let port = free_port()?;
        let cluster = Self {
            bin,
            dir,
            port,
            as_postgres_user,
        };
        if as_postgres_user {
            crate::run(
                Command::new("chown")
                    .args(["-R", "postgres:postgres"])
                    .arg(&cluster.dir),
            )?;
        }
        let data = cluster.dir.join("data");
        cluster.pg(
            "initdb",
            &[
                "-D",
                path_str(&data)?,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )?;
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off -c max_connections=200",
            cluster.port,
            path_str(&cluster.dir)?
        );
        let log = cluster.dir.join("server.log");
        cluster.pg(
            "pg_ctl",
            &[
                "-D",
                path_str(&data)?,
                "-l",
                path_str(&log)?,
                "-o",
                &opts,
                "-w",
                "-t",
                "60",
                "start",
            ],
        )?;
        wait_for_port(cluster.port, Duration::from_secs(30))?;
        // The cluster is now up; `Drop` stops it from here on.
        let url = cluster.url();
        eprintln!("xtask: PostgreSQL test cluster running at {url}");
        Ok(cluster)
    }

    /// The connection URL for the tests.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn pg(&self, tool: &str, args: &[&str]) -> Result<(), String> {
        let exe = self.bin.join(tool);
        let mut cmd = if self.as_postgres_user {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        cmd.args(args).current_dir(&self.dir);
        crate::run(&mut cmd)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        if let Some(d) = data.to_str() {
            let _ = self.pg("pg_ctl", &["-D", d, "-m", "immediate", "-w", "stop"]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn path_str(p: &Path) -> Result<&str, String> {
    p.to_str()
        .ok_or_else(|| format!("path is not UTF-8: {}", p.display()))
}

fn find_bin_dir() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Ok(dirs) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<PathBuf> = dirs.flatten().map(|d| d.path().join("bin")).collect();
        versions.sort();
        versions.reverse();
        candidates.extend(versions);
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    candidates
        .into_iter()
        .find(|d| d.join("initdb").is_file() && d.join("pg_ctl").is_file())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

fn wait_for_port(port: u16, limit: Duration) -> Result<(), String> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "PostgreSQL did not listen on 127.0.0.1:{port} within {limit:?}"
    ))
}
