//! `cargo xtask conformance`: the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`, pinned in
//! `crates/reins-mcp-server/tests/conformance/package-lock.json` with the Node.js 22
//! it runs on) against reins, both ways:
//!
//! - **server**: the SafeAgent demo served with `serve --mcp http` (reins-mcp-server),
//! - **client**: `crates/reins-mcp/examples/conformance_client.rs` (reins-mcp), which the
//!   suite starts once per scenario against its own test server.
//!
//! With `--restate`, the server suites run against `serve --restate --mcp http` (the
//! same door, its sessions run by a local restate-server) and are judged against the
//! baseline's server entries: the door answers the same on either driver.
//!
//! Each suite writes a `checks.json` per scenario; a scenario fails when one of its
//! checks is a `FAILURE` (and, for the client, when the program did not finish: it
//! prints [`CLIENT_DONE`] last). Every failure must be excused by an entry of
//! `baseline.txt` (the scenarios and checks that do not apply to reins, each with its
//! reason), and every entry must still excuse something, so the baseline stays honest.
//! `cargo xtask ci` runs it after the tests.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::json;

/// What the client example prints as its last line when every step went through.
pub(crate) const CLIENT_DONE: &str = "conformance_client: done";

/// Which side of reins a run tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Role {
    Server,
    Client,
}

impl Role {
    fn label(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
        }
    }
}

/// One invocation of the suite.
struct Suite {
    role: Role,
    /// The package folder under node_modules (an npm alias of one suite version).
    package: &'static str,
    /// What it covers, for the table.
    what: &'static str,
    args: &'static [&'static str],
}

const SUITES: &[Suite] = &[
    Suite {
        role: Role::Server,
        package: "conformance-2025-11-25",
        what: "active scenarios (2025-11-25)",
        args: &[],
    },
    Suite {
        role: Role::Server,
        package: "conformance-2026-07-28",
        what: "all scenarios, each at its own revision",
        args: &["--suite", "all"],
    },
    Suite {
        role: Role::Server,
        package: "conformance-2026-07-28",
        what: "all scenarios at 2026-07-28",
        args: &["--suite", "all", "--spec-version", "2026-07-28"],
    },
    Suite {
        role: Role::Client,
        package: "conformance-2025-11-25",
        what: "all scenarios (2025-11-25)",
        args: &["--suite", "all"],
    },
    Suite {
        role: Role::Client,
        package: "conformance-2026-07-28",
        what: "all scenarios, each at its own revision",
        args: &["--suite", "all"],
    },
    Suite {
        role: Role::Client,
        package: "conformance-2026-07-28",
        what: "all scenarios at 2026-07-28",
        args: &["--suite", "all", "--spec-version", "2026-07-28"],
    },
];

/// One scenario's result in one run: its failing checks, and how many passed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Scenario {
    pub(crate) name: String,
    pub(crate) passed: usize,
    pub(crate) failed: Vec<String>,
}

/// One excused scenario (`check: None`) or check, and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub(crate) role: Role,
    pub(crate) scenario: String,
    pub(crate) check: Option<String>,
    pub(crate) reason: String,
    pub(crate) line: usize,
}

/// Reads `baseline.txt`: `<server|client> <scenario>[:<check-id>] <reason>` per line,
/// `#` comments and blank lines ignored. A reason is required.
pub(crate) fn parse_baseline(text: &str) -> Result<Vec<Entry>, String> {
    let mut out: Vec<Entry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let n = i + 1;
        let mut parts = line.splitn(3, char::is_whitespace);
        let role = match parts.next() {
            Some("server") => Role::Server,
            Some("client") => Role::Client,
            other => {
                return Err(format!(
                    "baseline line {n}: starts with {other:?}; expected `server` or `client`"
                ));
            }
        };
        let target = parts.next().unwrap_or_default();
        let reason = parts.next().unwrap_or_default().trim();
        if target.is_empty() || reason.is_empty() {
            return Err(format!(
                "baseline line {n}: `{line}` needs a scenario and the reason it does not apply"
            ));
        }
        let (scenario, check) = match target.split_once(':') {
            Some((s, c)) => (s.to_owned(), Some(c.to_owned())),
            None => (target.to_owned(), None),
        };
        if out
            .iter()
            .any(|e| e.role == role && e.scenario == scenario && e.check == check)
        {
            return Err(format!("baseline line {n}: `{target}` is listed twice"));
        }
        out.push(Entry {
            role,
            scenario,
            check,
            reason: reason.to_owned(),
            line: n,
        });
    }
    for e in &out {
        if e.check.is_some()
            && out
                .iter()
                .any(|w| w.role == e.role && w.scenario == e.scenario && w.check.is_none())
        {
            return Err(format!(
                "baseline line {}: `{}` is excused as a whole already; drop the per-check entry",
                e.line, e.scenario
            ));
        }
    }
    Ok(out)
}

/// What a set of runs means against the baseline.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Verdict {
    /// `role scenario: check` failures no entry excuses.
    pub(crate) unexpected: Vec<String>,
    /// Entries that excused nothing in any run (the scenario passes now, or never ran).
    pub(crate) stale: Vec<String>,
}

/// Compares every run's scenarios with the baseline.
pub(crate) fn judge(runs: &[(Role, Vec<Scenario>)], baseline: &[Entry]) -> Verdict {
    let mut used = vec![false; baseline.len()];
    let mut v = Verdict::default();
    for (role, scenarios) in runs {
        for s in scenarios {
            if s.failed.is_empty() {
                continue;
            }
            let whole = baseline
                .iter()
                .position(|e| e.role == *role && e.scenario == s.name && e.check.is_none());
            if let Some(i) = whole {
                used[i] = true;
                continue;
            }
            for check in &s.failed {
                let entry = baseline.iter().position(|e| {
                    e.role == *role && e.scenario == s.name && e.check.as_deref() == Some(check)
                });
                match entry {
                    Some(i) => used[i] = true,
                    None => v
                        .unexpected
                        .push(format!("{} {}: {check}", role.label(), s.name)),
                }
            }
        }
    }
    v.unexpected.sort();
    v.unexpected.dedup();
    for (e, used) in baseline.iter().zip(used) {
        if !used {
            let target = match &e.check {
                Some(c) => format!("{}:{c}", e.scenario),
                None => e.scenario.clone(),
            };
            v.stale.push(format!(
                "baseline line {}: {} {target} excused nothing (it passes now, or no suite ran it)",
                e.line,
                e.role.label()
            ));
        }
    }
    v
}

/// A result folder's scenario name: `server-tools-list-2026-11-27T06-41-54-447Z` →
/// `tools-list` (the suite adds a `server-` prefix and a timestamp).
pub(crate) fn scenario_name(folder: &str, role: Role) -> String {
    let stamp = 25; // -YYYY-MM-DDTHH-MM-SS-mmmZ
    let name = if folder.len() > stamp
        && folder.ends_with('Z')
        && folder.as_bytes()[folder.len() - stamp] == b'-'
        && folder[folder.len() - stamp + 1..]
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '-' | 'T' | 'Z'))
    {
        &folder[..folder.len() - stamp]
    } else {
        folder
    };
    match role {
        Role::Server => name.strip_prefix("server-").unwrap_or(name).to_owned(),
        Role::Client => name.to_owned(),
    }
}

/// Every scenario under a run's output folder (client scenarios such as `auth/...`
/// sit one folder deeper).
fn read_results(dir: &Path, role: Role) -> Result<Vec<Scenario>, String> {
    fn walk(dir: &Path, prefix: &str, role: Role, out: &mut Vec<Scenario>) -> Result<(), String> {
        let entries =
            std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            let folder = entry.file_name().to_string_lossy().into_owned();
            let checks = path.join("checks.json");
            if !checks.is_file() {
                walk(&path, &format!("{prefix}{folder}/"), role, out)?;
                continue;
            }
            let text = std::fs::read_to_string(&checks)
                .map_err(|e| format!("cannot read {}: {e}", checks.display()))?;
            let objs = json::parse_objects(&text)
                .map_err(|e| format!("{}: not the suite's format: {e}", checks.display()))?;
            let mut s = Scenario {
                name: format!("{prefix}{}", scenario_name(&folder, role)),
                passed: 0,
                failed: Vec::new(),
            };
            for o in &objs {
                let id = o.get("id").and_then(json::Value::as_str).unwrap_or("?");
                match o.get("status").and_then(json::Value::as_str) {
                    Some("SUCCESS") => s.passed += 1,
                    Some("FAILURE") => s.failed.push(id.to_owned()),
                    _ => {}
                }
            }
            if role == Role::Client {
                let stdout = std::fs::read_to_string(path.join("stdout.txt")).unwrap_or_default();
                if stdout.lines().any(|l| l.trim() == CLIENT_DONE) {
                    s.passed += 1;
                } else {
                    s.failed.push("client-completed".to_owned());
                }
            }
            out.push(s);
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, "", role, &mut out)?;
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The checkout (the parent of xtask's manifest folder).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn suite_dir() -> PathBuf {
    root().join("crates/reins-mcp-server/tests/conformance")
}

/// The version of an installed suite package.
fn version_of(package: &str) -> String {
    let path = suite_dir()
        .join("node_modules")
        .join(package)
        .join("package.json");
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| json::json_string(&t, "version"))
        .unwrap_or_else(|| "?".to_owned())
}

/// The demo's `serve --mcp http` on a free loopback port, stopped when dropped.
struct Served {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first of four consecutive free loopback ports (restate-server's ingress, admin
/// and node, and the agent's endpoint), below Linux's ephemeral range so that other
/// processes' outgoing connections do not take them meanwhile.
fn restate_ports() -> Result<u16, String> {
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default()
        ^ std::process::id();
    for i in 0..400u32 {
        let base = 20_000 + u16::try_from((seed.wrapping_add(i * 37)) % 12_000).unwrap_or(0);
        if (base..base + 4).all(free) {
            return Ok(base);
        }
    }
    Err("no four consecutive free loopback ports for restate-server".to_owned())
}

fn start_server(serve: &Path, work: &Path, restate: bool) -> Result<Served, String> {
    let log = work.join("serve.log");
    let stderr = std::fs::File::create(&log).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(serve);
    if restate {
        cmd.args([
            "--restate",
            "--restate-ports",
            &restate_ports()?.to_string(),
        ]);
    }
    cmd.args(["--mcp", "http", "--port", "0", "--data-dir"])
        .arg(work.join("data"))
        // The offline model, whatever keys this shell has.
        .env_remove("DASHSCOPE_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", serve.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut served = Served {
        child,
        url: String::new(),
        log,
    };
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.map_err(|e| e.to_string())?;
        if let Some(rest) = line.strip_prefix("mcp:") {
            served.url = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
            // Keep reading what it prints, so its stdout stays open.
            std::thread::spawn(move || lines.for_each(drop));
            return Ok(served);
        }
    }
    let log = std::fs::read_to_string(&served.log).unwrap_or_default();
    Err(format!(
        "`serve --mcp http` ended before printing its MCP URL:\n{log}"
    ))
}

fn build() -> Result<(PathBuf, PathBuf), String> {
    // The same features as `cargo xtask test`, so the test build is reused.
    crate::run(crate::cargo().current_dir(root()).args([
        "build",
        "--workspace",
        "--all-features",
        "--bin",
        "serve",
        "--example",
        "conformance_client",
    ]))?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    let debug = if target.is_absolute() {
        target.join("debug")
    } else {
        root().join(target).join("debug")
    };
    Ok((
        debug.join("serve"),
        debug.join("examples").join("conformance_client"),
    ))
}

/// `cargo xtask conformance [--restate]`.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut restate = false;
    for a in args {
        match a.as_str() {
            "--help" | "-h" => {
                crate::say(HELP);
                return Ok(());
            }
            "--restate" => restate = true,
            _ => return Err(format!("conformance: unknown argument `{a}`\n\n{HELP}")),
        }
    }
    let dir = suite_dir();
    let node = dir.join("node_modules/.bin/node");
    let installed = SUITES.iter().all(|s| {
        dir.join("node_modules")
            .join(s.package)
            .join("dist/index.js")
            .is_file()
    });
    if !node.is_file() || !installed {
        return Err(format!(
            "the MCP conformance suite is not installed; run\n  npm ci --no-audit --no-fund --prefix {}",
            dir.display()
        ));
    }
    let baseline_path = dir.join("baseline.txt");
    let mut baseline = parse_baseline(
        &std::fs::read_to_string(&baseline_path)
            .map_err(|e| format!("cannot read {}: {e}", baseline_path.display()))?,
    )?;
    if restate {
        // Only the server suites run: the client's entries excuse nothing here.
        baseline.retain(|e| e.role == Role::Server);
    }
    let (serve, client) = match (
        std::env::var_os("REINS_CONFORMANCE_SERVE"),
        std::env::var_os("REINS_CONFORMANCE_CLIENT"),
    ) {
        (Some(s), Some(c)) => (PathBuf::from(s), PathBuf::from(c)),
        _ => build()?,
    };
    let work = std::env::temp_dir().join(format!("reins-conformance-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let result = run_suites(&node, &serve, &client, &work, &baseline, restate);
    if std::env::var_os("REINS_CONFORMANCE_KEEP").is_some() {
        eprintln!("conformance: results kept in {}", work.display());
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    result
}

fn run_suites(
    node: &Path,
    serve: &Path,
    client: &Path,
    work: &Path,
    baseline: &[Entry],
    restate: bool,
) -> Result<(), String> {
    let started = Instant::now();
    let served = start_server(serve, work, restate)?;
    let on = if restate {
        " (sessions on Restate)"
    } else {
        ""
    };
    eprintln!("conformance: reins serves MCP at {}{on}", served.url);
    let mut runs = Vec::new();
    let mut table = Vec::new();
    for (i, suite) in SUITES.iter().enumerate() {
        if restate && suite.role == Role::Client {
            continue;
        }
        let out = work.join(format!("run-{i}"));
        let index = suite_dir()
            .join("node_modules")
            .join(suite.package)
            .join("dist/index.js");
        let mut cmd = Command::new(node);
        cmd.arg(index).arg(suite.role.label());
        match suite.role {
            Role::Server => cmd.args(["--url", &served.url]),
            Role::Client => cmd.arg("--command").arg(client),
        };
        cmd.args(suite.args).arg("-o").arg(&out);
        let t = Instant::now();
        // The suite's own exit code counts every failure, baselined or not: the
        // verdict is ours, from its checks.json files.
        let output = cmd
            .output()
            .map_err(|e| format!("cannot run the conformance suite: {e}"))?;
        let scenarios = read_results(&out, suite.role).map_err(|e| {
            format!(
                "{e}\nthe suite said:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
        if scenarios.is_empty() {
            return Err(format!(
                "the {} suite ran no scenario:\n{}{}",
                suite.role.label(),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let failed = scenarios.iter().filter(|s| !s.failed.is_empty()).count();
        let checks_ok: usize = scenarios.iter().map(|s| s.passed).sum();
        let checks_failed: usize = scenarios.iter().map(|s| s.failed.len()).sum();
        table.push(format!(
            "| {} | {} {} | {} | {}/{} | {}/{} | {:.1} s |",
            suite.role.label(),
            version_of(suite.package),
            suite.what,
            scenarios.len(),
            scenarios.len() - failed,
            failed,
            checks_ok,
            checks_failed,
            t.elapsed().as_secs_f64()
        ));
        runs.push((suite.role, scenarios));
    }
    drop(served);
    println!(
        "\n| side | suite | scenarios | passed/failed | checks passed/failed | time |\n|---|---|---|---|---|---|"
    );
    for row in &table {
        println!("{row}");
    }
    let verdict = judge(&runs, baseline);
    println!(
        "\n{} baseline entries; whole run {:.1} s",
        baseline.len(),
        started.elapsed().as_secs_f64()
    );
    if verdict.unexpected.is_empty() && verdict.stale.is_empty() {
        println!("conformance: every failure is in the baseline, and every entry is still needed");
        return Ok(());
    }
    let mut msg = String::new();
    if !verdict.unexpected.is_empty() {
        msg.push_str(
            "failures the baseline does not excuse (fix them, or add them with a reason):\n",
        );
        for u in &verdict.unexpected {
            msg.push_str(&format!("  {u}\n"));
        }
    }
    if !verdict.stale.is_empty() {
        msg.push_str("baseline entries to remove:\n");
        for s in &verdict.stale {
            msg.push_str(&format!("  {s}\n"));
        }
    }
    Err(msg)
}

const HELP: &str = "usage: cargo xtask conformance [--restate]

Runs the official MCP conformance suite (npm @modelcontextprotocol/conformance, the
2025-11-25 release and the 2026-07-28 alpha, on the Node.js 22 from npm; install with
`npm ci --prefix crates/reins-mcp-server/tests/conformance`) against the demo agent's
`serve --mcp http` (server scenarios) and crates/reins-mcp/examples/conformance_client.rs
(client scenarios). Prints passed/failed per suite; fails on a failure that
crates/reins-mcp-server/tests/conformance/baseline.txt does not list, and on a listed
entry that no longer fails.

--restate runs the server suites against `serve --restate --mcp http` instead: the same
MCP door with its sessions on a local restate-server (installed with
`npm ci --ignore-scripts --prefix crates/reins-restate/tests/restate`), judged against
the baseline's server entries.

REINS_CONFORMANCE_KEEP=1 keeps the suite's result folders (checks.json per scenario);
REINS_CONFORMANCE_SERVE=PATH with REINS_CONFORMANCE_CLIENT=PATH runs those builds of
the two programs instead of building them.";

#[cfg(test)]
mod tests {
    use super::*;

    fn s(name: &str, failed: &[&str]) -> Scenario {
        Scenario {
            name: name.to_owned(),
            passed: 1,
            failed: failed.iter().map(|f| (*f).to_owned()).collect(),
        }
    }

    const BASELINE: &str = "# why each does not apply
server tools-call-image  the reference server's fixed tool
server server-stateless:sep-2575-missing-capability-http-400 needs a diagnostic tool

client auth/metadata-default OAuth is not supported
";

    #[test]
    fn the_baseline_needs_a_role_a_scenario_and_a_reason() {
        let b = parse_baseline(BASELINE).unwrap();
        assert_eq!(b.len(), 3);
        assert_eq!(b[1].scenario, "server-stateless");
        assert_eq!(
            b[1].check.as_deref(),
            Some("sep-2575-missing-capability-http-400")
        );
        assert_eq!(b[2].role, Role::Client);
        assert_eq!(b[2].line, 5);
        assert!(parse_baseline("server tools-list").is_err());
        assert!(parse_baseline("proxy tools-list because").is_err());
        assert!(parse_baseline("server a why\nserver a again").is_err());
        assert!(parse_baseline("server a why\nserver a:check why").is_err());
    }

    #[test]
    fn a_failure_outside_the_baseline_and_a_stale_entry_both_fail() {
        let b = parse_baseline(BASELINE).unwrap();
        let runs = vec![
            (
                Role::Server,
                vec![
                    s("tools-call-image", &["tools-call-image"]),
                    s(
                        "server-stateless",
                        &["sep-2575-missing-capability-http-400", "sep-2575-new"],
                    ),
                    s("tools-list", &[]),
                ],
            ),
            (Role::Client, vec![s("auth/metadata-default", &[])]),
        ];
        let v = judge(&runs, &b);
        assert_eq!(v.unexpected, ["server server-stateless: sep-2575-new"]);
        assert_eq!(v.stale.len(), 1, "{:?}", v.stale);
        assert!(
            v.stale[0].contains("auth/metadata-default"),
            "{:?}",
            v.stale
        );

        // An entry is needed when it excuses a failure in any run.
        let runs = vec![
            (Role::Server, vec![s("tools-call-image", &["x"])]),
            (
                Role::Server,
                vec![s(
                    "server-stateless",
                    &["sep-2575-missing-capability-http-400"],
                )],
            ),
            (Role::Client, vec![s("auth/metadata-default", &["a", "b"])]),
        ];
        assert_eq!(judge(&runs, &b), Verdict::default());
    }

    #[test]
    fn result_folders_name_their_scenario() {
        assert_eq!(
            scenario_name("server-tools-list-2026-11-27T06-41-54-447Z", Role::Server),
            "tools-list"
        );
        assert_eq!(
            scenario_name("metadata-default-2026-11-27T06-48-14-821Z", Role::Client),
            "metadata-default"
        );
        assert_eq!(scenario_name("sse-retry", Role::Client), "sse-retry");
    }
}
