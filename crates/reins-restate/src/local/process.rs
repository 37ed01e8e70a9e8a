//! The restate-server process of a [`LocalRestate`](super::LocalRestate), tied to the
//! life of the process that started it, and found again after a crash.
//!
//! Two mechanisms, because either alone leaves a gap:
//!
//! - **A pid file** in the data directory, checked at every start: a restate-server
//!   still running on that directory (its command line names the directory's
//!   configuration file) was left by a run that died before it could stop it — a
//!   `kill -9`, a crash — and holds the directory's locks, so it is killed and waited
//!   for. This works whatever died and in what order, on every Unix, and never touches
//!   a process that is not ours (a reused pid does not name our configuration).
//! - **A parent-death signal** on Linux (`setpriv --pdeathsig KILL`, util-linux): the
//!   kernel kills restate-server the moment the process that started it dies, so a
//!   killed service does not leave a 250 MiB server behind until the next start. The
//!   signal fires when the *thread* that started the child exits, so the child is
//!   started from a thread of its own that lives exactly as long as the child (it
//!   waits for it), never from an async worker thread that may end earlier. Where
//!   `setpriv` is missing (or on other systems) the pid file still recovers the next
//!   start.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// How a child ended, as the waiting thread saw it.
type Exit = Option<Result<ExitStatus, String>>;

/// A running restate-server (or one that has just ended).
#[derive(Debug)]
pub(super) struct ServerProcess {
    pid: u32,
    exit: watch::Receiver<Exit>,
}

impl ServerProcess {
    /// Starts `binary` with `args`, its output appended to `log`, from a thread that
    /// waits for it (see the module docs).
    pub(super) fn spawn(binary: &Path, args: &[&std::ffi::OsStr], log: File) -> io::Result<Self> {
        let mut cmd = match death_signal_wrapper() {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let (pid_tx, pid_rx) = std::sync::mpsc::sync_channel(1);
        let (exit_tx, exit_rx) = watch::channel(None);
        std::thread::Builder::new()
            .name("restate-server".to_owned())
            .spawn(move || match cmd.spawn() {
                Err(e) => {
                    let _ = pid_tx.send(Err(e));
                }
                Ok(mut child) => {
                    let _ = pid_tx.send(Ok(child.id()));
                    let status = child.wait().map_err(|e| e.to_string());
                    let _ = exit_tx.send(Some(status));
                }
            })?;
        let pid = pid_rx
            .recv()
            .map_err(|_| io::Error::other("the thread starting restate-server stopped"))??;
        Ok(Self { pid, exit: exit_rx })
    }

    pub(super) fn pid(&self) -> u32 {
        self.pid
    }

    /// How it ended, once it has.
    pub(super) fn try_exit(&self) -> Exit {
        self.exit.borrow().clone()
    }

    /// Waits until it ends.
    pub(super) async fn wait(&mut self) -> Result<ExitStatus, String> {
        match self.exit.wait_for(Option::is_some).await {
            Ok(exit) => exit
                .clone()
                .unwrap_or_else(|| Err("no exit status".to_owned())),
            Err(_) => Err("the thread waiting for restate-server stopped".to_owned()),
        }
    }

    /// SIGKILL, unless it has ended already (then its pid may be another process's).
    pub(super) fn kill(&self) -> io::Result<()> {
        if self.try_exit().is_some() {
            return Ok(());
        }
        kill(self.pid)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// `setpriv` when it is on the `PATH` and takes `--pdeathsig` (Linux only; checked
/// once per process).
fn death_signal_wrapper() -> Option<&'static Path> {
    static WRAPPER: OnceLock<Option<PathBuf>> = OnceLock::new();
    WRAPPER
        .get_or_init(|| {
            if !cfg!(target_os = "linux") {
                return None;
            }
            let path = std::env::var_os("PATH")?;
            let setpriv = std::env::split_paths(&path)
                .map(|d| d.join("setpriv"))
                .find(|p| p.is_file())?;
            let works = Command::new(&setpriv)
                .args(["--pdeathsig", "KILL", "--", "true"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            works.then_some(setpriv)
        })
        .as_deref()
}

/// The pid file of the restate-server running on `dir`.
pub(super) fn pid_file(dir: &Path) -> PathBuf {
    dir.join("restate-server.pid")
}

/// Stops the restate-server a killed run left running on `dir`: the pid in `dir`'s pid
/// file, when that process's command line names `config`; waits (up to 10 s) until it
/// is gone. Returns its pid when there was one. A pid file naming a process that is
/// gone, or someone else's, is removed.
///
/// # Errors
/// When the process cannot be signalled or does not end within 10 s.
pub(super) fn stop_stale(dir: &Path, config: &Path) -> io::Result<Option<u32>> {
    let file = pid_file(dir);
    let Ok(text) = std::fs::read_to_string(&file) else {
        return Ok(None);
    };
    let pid = text.trim().parse::<u32>().ok();
    let stale = pid.filter(|&pid| runs_with(pid, config));
    if let Some(pid) = stale {
        kill(pid)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while runs_with(pid, config) {
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "the restate-server left running by an earlier run (pid {pid}) did not stop"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    std::fs::remove_file(&file)?;
    Ok(stale)
}

/// Whether process `pid` runs (not a zombie) with `config` on its command line.
fn runs_with(pid: u32, config: &Path) -> bool {
    let needle = config.to_string_lossy();
    command_line(pid).is_some_and(|c| c.contains(needle.as_ref()))
}

/// A process's command line (empty for a zombie), or `None` when there is no such
/// process or it cannot be read: `/proc` where there is one, else `ps`.
fn command_line(pid: u32) -> Option<String> {
    if Path::new("/proc/self").exists() {
        let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        return Some(String::from_utf8_lossy(&raw).replace('\0', " "));
    }
    let out = Command::new("ps")
        .args(["-o", "command=", "-p", &pid.to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(unix)]
fn kill(pid: u32) -> io::Result<()> {
    let raw = i32::try_from(pid).map_err(|_| io::Error::other(format!("bad pid {pid}")))?;
    let pid = rustix::process::Pid::from_raw(raw)
        .ok_or_else(|| io::Error::other(format!("bad pid {pid}")))?;
    match rustix::process::kill_process(pid, rustix::process::Signal::KILL) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(not(unix))]
fn kill(pid: u32) -> io::Result<()> {
    let status = Command::new("taskkill")
        .args(["/F", "/PID", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("taskkill /PID {pid}: {status}")))
    }
}

#[cfg(all(test, target_os = "linux"))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A process whose command line names `config` (as restate-server's names its
    /// configuration file), standing in for one a killed run left behind.
    fn stand_in(config: &Path) -> std::process::Child {
        // `read` is built in: the shell waits on its stdin (kept open by the `Child`)
        // and starts no process of its own that could outlive it.
        let child = Command::new("sh")
            .arg("-c")
            .arg("read _")
            .arg(config)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Until it has exec'd, its command line is this test's.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !runs_with(child.id(), config) {
            assert!(Instant::now() < deadline, "the stand-in did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
        child
    }

    #[test]
    fn a_server_left_on_the_directory_is_stopped_and_its_pid_file_removed() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("restate.toml");
        let mut left = stand_in(&config);
        std::fs::write(pid_file(dir.path()), format!("{}\n", left.id())).unwrap();
        let stopped = stop_stale(dir.path(), &config).unwrap();
        assert_eq!(stopped, Some(left.id()));
        assert!(left.wait().unwrap().code().is_none(), "killed by a signal");
        assert!(!pid_file(dir.path()).exists());
        // Nothing to stop the next time.
        assert_eq!(stop_stale(dir.path(), &config).unwrap(), None);
    }

    #[test]
    fn a_pid_that_names_another_process_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("restate.toml");
        // Running, but with another directory's configuration.
        let other = dir.path().join("other.toml");
        let mut someone = stand_in(&other);
        std::fs::write(pid_file(dir.path()), format!("{}\n", someone.id())).unwrap();
        assert_eq!(stop_stale(dir.path(), &config).unwrap(), None);
        assert!(someone.try_wait().unwrap().is_none(), "still running");
        assert!(!pid_file(dir.path()).exists());
        someone.kill().unwrap();
        someone.wait().unwrap();
        // A pid file with no process behind it, or garbage.
        std::fs::write(pid_file(dir.path()), "not a pid").unwrap();
        assert_eq!(stop_stale(dir.path(), &config).unwrap(), None);
    }
}
