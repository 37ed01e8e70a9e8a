//! Crash safety: an agent runs a tool-heavy conversation in a child process (this
//! test binary, re-executed) and is killed with SIGKILL at many points — while the
//! model streams, between the ledger claim and finish of a tool, right after the
//! finish, in the middle of a store write, while paused, and at random moments. After every kill the parent
//! opens the store with a fresh connection and checks the guarantees (the store
//! wrapper forwards `commit_takes_lock`/`commit_releases_lock`, so runs take the lock
//! with their first commit and release it with their last, as on the bare store):
//!
//! - the session loads, and `sanitize_for_request` makes it provider-valid;
//! - every message acknowledged to the caller before the kill is stored;
//! - a tool call the ledger records as finished is never run again, and no
//!   side-effecting tool ever runs twice;
//! - a call killed mid-run ends `Unknown` (or, declared idempotent, is run again);
//! - a call killed mid-run whose tool can tell (`send_mail`, whose far end is a
//!   loopback mail API that dedupes by idempotency key) is reconciled: it ends
//!   `Success` — found by its key, or run again when the API never saw it — and the
//!   API delivers each message exactly once;
//! - the next process resumes the session, and the conversation completes.
//!
//! The short version runs in `cargo xtask test`; `REINS_LONG=1` does hundreds of kills.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use reins_agent::run::Phase;
use reins_agent::{Agent, AgentError, Decision, RunState, RunStatus};
use reins_memory::{
    Claim, Commit, LedgerEntry, LedgerState, MemoryStore, SessionState, SessionSummary,
};
use reins_message::{Msg, Role, ToolOutcome, ToolResult};
use reins_model::{ChatModel, ChatRequest, ChatStream, ScriptedModel, ScriptedResponse};
use reins_tool::{ToolContext, ToolError, ToolPolicy, Toolkit};
use serde_json::json;
use support::mail_api::{MailApi, MailClient};
use support::*;

/// User turns per session; each turn is five model steps and six tool calls.
const TURNS: usize = 3;
/// The tool that may run again after a crash.
const IDEMPOTENT: &str = "fetch";
/// The tool whose far end dedupes by idempotency key, and which reconciles.
const MAIL: &str = "send_mail";

// ----- the child ---------------------------------------------------------------------

#[path = "crash/child.rs"]
mod child;
use child::*;

/// The child: drives the session from wherever it is to the end of the script,
/// printing `ACK <id>` for every message a call returned, and markers for the
/// parent to kill at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the crash harness in a child process"]
async fn crash_child() {
    let spec = StoreSpec::from_env();
    let log = PathBuf::from(std::env::var("REINS_CRASH_LOG").unwrap());
    let sid = std::env::var("REINS_CRASH_SESSION").unwrap();
    let mail_url = std::env::var("REINS_CRASH_MAIL").unwrap();
    let raw = spec.open().await;
    let model = ScriptedModel::from_fn(script)
        .with_latency(Duration::from_millis(5))
        .with_chunk_size(12)
        .with_recording(false);
    let agent = Agent::builder()
        .name("CrashAgent")
        .model(MarkedModel(model))
        .toolkit(crash_toolkit(&log, &mail_url))
        .store(MarkedStore(raw.clone()))
        .session_lease(Duration::from_millis(200))
        .tool_lease(Duration::from_millis(600))
        .build()
        .unwrap();
    tell_parent("READY");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "the child made no progress");
        let state = raw.open_session(&sid).await.unwrap();
        let users = state
            .messages
            .iter()
            .filter(|m| m.role == Role::User)
            .count();
        let session = agent.session(&sid).await.unwrap();
        let result = match run_phase(&state) {
            Some(Phase::Paused) => {
                tell_parent("PAUSED");
                tokio::time::sleep(Duration::from_millis(fastrand::u64(5..60))).await;
                let ds = session
                    .requirements()
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|r| Decision::approve(r.id).by("crash-test"))
                    .collect::<Vec<_>>();
                if ds.is_empty() {
                    session.resume().await
                } else {
                    session.resolve(ds).await
                }
            }
            Some(Phase::Reasoning | Phase::Acting | Phase::Summarizing) => {
                tell_parent("RESUME");
                session.resume().await
            }
            _ if users >= TURNS => {
                tell_parent("ALL-DONE");
                return;
            }
            _ => {
                let msg = Msg::user(format!("turn {}", users + 1));
                tell_parent(&format!("SEND {}", msg.id));
                let id = msg.id.clone();
                let r = session.send(msg).await;
                if r.is_ok() {
                    tell_parent(&format!("ACK {id}"));
                }
                r
            }
        };
        drop(session);
        match result {
            Ok(out) => {
                if !out.message.content.is_empty() {
                    tell_parent(&format!("ACK {}", out.message.id));
                }
                assert_ne!(out.status, RunStatus::Cancelled);
            }
            // The dead process's session lock or tool lease has not run out yet.
            Err(AgentError::SessionBusy { .. } | AgentError::ToolInFlight { .. }) => {
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            Err(e) => panic!("child failed: {e}"),
        }
    }
}

// ----- the parent --------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum KillAt {
    Streaming,
    ToolRunning,
    /// While `send_mail` runs, before or after its API call.
    MailSending,
    StoreWrite,
    /// Right after the ledger recorded a tool's result, before the run stores it.
    ToolFinished,
    Paused,
    Random,
}

const KILL_POINTS: [KillAt; 7] = [
    KillAt::Streaming,
    KillAt::ToolRunning,
    KillAt::MailSending,
    KillAt::StoreWrite,
    KillAt::ToolFinished,
    KillAt::Paused,
    KillAt::Random,
];

#[derive(Default, Debug)]
struct Tally {
    kills: BTreeMap<String, usize>,
    runs_finished_unkilled: usize,
    invariants: usize,
    sessions_completed: usize,
    unknown_checked: usize,
    idempotent_reruns: usize,
    /// Child processes started.
    runs: usize,
    /// `send_mail` calls killed mid-run: unknown until reconciled.
    mail_unknown_before: usize,
    /// `send_mail` calls still `Unknown` at the end.
    mail_unknown_after: usize,
    /// Reconcile verdicts on `send_mail` (from the audit trail).
    mail_happened: usize,
    mail_not_run: usize,
    mail_cannot_tell: usize,
    /// Messages the mail API delivered, and tool use ids it delivered more than once.
    mails_delivered: usize,
    double_effects: usize,
}

/// What the parent knows about one session across its processes.
#[derive(Default)]
struct Track {
    acked: Vec<String>,
    /// Tool use ids the ledger showed finished, with the executions seen then.
    finished: HashMap<String, usize>,
    /// Tool use ids (and tool names) whose call was killed mid-run.
    interrupted: HashMap<String, String>,
}

struct Child {
    proc: std::process::Child,
    lines: mpsc::Receiver<String>,
}

fn spawn_child(spec: &StoreSpec, log: &Path, sid: &str, stderr: &Path, mail: &str) -> Child {
    let mut cmd = child_test("crash_child");
    for (k, v) in spec.env() {
        cmd.env(k, v);
    }
    let mut proc = cmd
        .env("REINS_CRASH_LOG", log)
        .env("REINS_CRASH_SESSION", sid)
        .env("REINS_CRASH_MAIL", mail)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .unwrap();
    let lines = read_lines(proc.stdout.take().unwrap());
    Child { proc, lines }
}

/// Whether `line` is the moment to kill for `at` (`count` counts matching lines).
fn is_target(at: KillAt, line: &str, count: &mut usize, nth: usize) -> bool {
    let hit = match at {
        KillAt::Streaming => line.starts_with("STREAM "),
        KillAt::ToolRunning => line.starts_with("TOOL-BEGIN "),
        KillAt::MailSending => line.starts_with(&format!("TOOL-BEGIN {MAIL} ")),
        KillAt::StoreWrite => line.starts_with("STORE-BEGIN "),
        KillAt::ToolFinished => line == "STORE-END finish",
        KillAt::Paused => line == "PAUSED",
        KillAt::Random => false,
    };
    if hit {
        *count += 1;
    }
    // A session sends one email per turn: the first one will do.
    hit && (*count >= nth || at == KillAt::MailSending)
}

/// Runs one child and kills it at `at`. Returns the lines it printed and where it
/// was killed (`None`: it finished first).
fn run_and_kill(
    spec: &StoreSpec,
    log: &Path,
    sid: &str,
    stderr: &Path,
    mail: &str,
    at: Option<KillAt>,
) -> (Vec<String>, Option<String>) {
    let mut child = spawn_child(spec, log, sid, stderr, mail);
    let started = Instant::now();
    let random_after = Duration::from_millis(fastrand::u64(30..400));
    let nth = fastrand::usize(1..6);
    let mut count = 0;
    let mut lines = Vec::new();
    let mut killed = None;
    let limit = Duration::from_secs(60);
    loop {
        let wait = match at {
            Some(KillAt::Random) => random_after
                .saturating_sub(started.elapsed())
                .max(Duration::from_millis(1)),
            _ => Duration::from_millis(200),
        };
        match child.lines.recv_timeout(wait) {
            Ok(line) => {
                let hit = at.is_some_and(|a| is_target(a, &line, &mut count, nth));
                let last = line.clone();
                lines.push(line);
                if hit {
                    child.proc.kill().unwrap();
                    killed = Some(format!("{:?} ({last})", at.unwrap()));
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if at == Some(KillAt::Random) && started.elapsed() >= random_after {
                    child.proc.kill().unwrap();
                    let last = lines.last().cloned().unwrap_or_default();
                    killed = Some(format!("Random (after {last})"));
                    break;
                }
                assert!(
                    started.elapsed() < limit,
                    "the child hung; its stderr:\n{}",
                    std::fs::read_to_string(stderr).unwrap_or_default()
                );
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // Everything the child printed before it died is in the pipe: read it all.
    while let Ok(line) = child.lines.recv_timeout(Duration::from_secs(30)) {
        lines.push(line);
    }
    let status = child.proc.wait().unwrap();
    if killed.is_none() {
        assert!(
            status.success(),
            "the child failed: {status}; stdout:\n{}\nstderr:\n{}",
            lines.join("\n"),
            std::fs::read_to_string(stderr).unwrap_or_default()
        );
    }
    (lines, killed)
}

/// Executions per tool use id, from the side-effect log.
fn begins(log: &Path) -> HashMap<String, (usize, String)> {
    let mut out: HashMap<String, (usize, String)> = HashMap::new();
    for line in effects(log) {
        let mut parts = line.split(' ');
        if parts.next() == Some("BEGIN") {
            let id = parts.next().unwrap().to_owned();
            let name = parts.next().unwrap().to_owned();
            out.entry(id).or_insert((0, name)).0 += 1;
        }
    }
    out
}

/// Deliveries per tool use id of session `sid` (`uses`), from the mail API.
fn deliveries_by_use(
    api: &MailApi,
    sid: &str,
    uses: &HashMap<String, String>,
) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for d in api.deliveries() {
        if d.session == sid && uses.contains_key(&d.tool_use_id) {
            *out.entry(d.tool_use_id).or_insert(0) += 1;
        }
    }
    out
}

/// The checks after a kill, with a fresh store connection.
async fn check_after_kill(
    spec: &StoreSpec,
    log: &Path,
    sid: &str,
    api: &MailApi,
    track: &mut Track,
    tally: &mut Tally,
) {
    let store = spec.open().await;
    let state = match store.load_session(sid).await {
        Ok(s) => s,
        Err(reins_memory::Error::SessionNotFound { .. }) => {
            assert!(
                track.acked.is_empty(),
                "session {sid} is gone though {} messages were acknowledged",
                track.acked.len()
            );
            tally.invariants += 1;
            return;
        }
        Err(e) => panic!("session {sid} does not load after a kill: {e}"),
    };
    tally.invariants += 1; // it loads

    let (repaired, _) = reins_memory::sanitize_for_request(&state.messages);
    assert_valid(&repaired);
    tally.invariants += 1; // it repairs to provider-valid

    let ids: HashSet<&str> = state.messages.iter().map(|m| m.id.as_str()).collect();
    for a in &track.acked {
        assert!(ids.contains(a.as_str()), "acknowledged message {a} is lost");
        tally.invariants += 1;
    }

    let runs = begins(log);
    let uses: HashMap<String, String> = state
        .messages
        .iter()
        .flat_map(|m| m.tool_uses())
        .map(|u| (u.id.clone(), u.name.clone()))
        .collect();
    for (id, (n, name)) in &runs {
        assert!(
            uses.contains_key(id),
            "{name} ran as {id}, which no stored assistant message asked for"
        );
        // `send_mail` may start again when its tool found the first attempt never
        // reached the API; the API's deliveries are what count for it.
        if name != IDEMPOTENT && name != MAIL {
            assert_eq!(*n, 1, "{name} {id} ran {n} times");
        }
        tally.invariants += 1;
    }
    for (id, n) in deliveries_by_use(api, sid, &uses) {
        assert!(n <= 1, "the mail API delivered {id} {n} times");
        tally.invariants += 1;
    }
    for (id, name) in &uses {
        let ran = runs.get(id).map_or(0, |r| r.0);
        if let Some(before) = track.finished.get(id) {
            assert_eq!(ran, *before, "{name} {id} ran again after it finished");
            tally.invariants += 1;
            continue;
        }
        match store.ledger_entry(sid, id).await.unwrap() {
            Some(e) if e.state == LedgerState::Finished => {
                track.finished.insert(id.clone(), ran);
            }
            Some(_) => {
                track.interrupted.insert(id.clone(), name.clone());
            }
            None => {}
        }
    }
}

/// The checks once a process has driven the session to its end.
async fn check_completed(
    spec: &StoreSpec,
    log: &Path,
    sid: &str,
    api: &MailApi,
    track: &Track,
    tally: &mut Tally,
) {
    let store = spec.open().await;
    let state = store.load_session(sid).await.unwrap();
    assert_valid(&state.messages);
    tally.invariants += 1;
    let users = state
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .count();
    assert_eq!(users, TURNS);
    let last = state.messages.last().unwrap();
    assert!(
        last.text().starts_with(&format!("Turn {TURNS} complete")),
        "the conversation did not complete: {}",
        last.text()
    );
    tally.invariants += 1;
    let ids: HashSet<&str> = state.messages.iter().map(|m| m.id.as_str()).collect();
    for a in &track.acked {
        assert!(ids.contains(a.as_str()), "acknowledged message {a} is lost");
    }
    let outcomes = outcomes(&state.messages);
    let runs = begins(log);
    // Every tool use has its result; nothing side-effecting ran twice.
    for u in state.messages.iter().flat_map(|m| m.tool_uses()) {
        assert!(outcomes.contains_key(&u.id), "{} has no result", u.id);
        let ran = runs.get(&u.id).map_or(0, |r| r.0);
        if u.name != IDEMPOTENT && u.name != MAIL {
            assert!(ran <= 1, "{} {} ran {ran} times", u.name, u.id);
        }
        if u.name == MAIL && outcomes[&u.id] == ToolOutcome::Unknown {
            tally.mail_unknown_after += 1;
        }
        if let Some(before) = track.finished.get(&u.id) {
            assert_eq!(ran, *before, "{} ran again after it finished", u.id);
        }
        tally.invariants += 1;
    }
    // Exactly once at the far end: every email the conversation sent was delivered
    // once (the API dedupes by key, and the key is the same in every process).
    let uses: HashMap<String, String> = state
        .messages
        .iter()
        .flat_map(|m| m.tool_uses())
        .map(|u| (u.id.clone(), u.name.clone()))
        .collect();
    let delivered = deliveries_by_use(api, sid, &uses);
    for (id, name) in &uses {
        if name == MAIL && outcomes[id] == ToolOutcome::Success {
            assert_eq!(
                delivered.get(id),
                Some(&1),
                "{id} succeeded but was not delivered once"
            );
        }
    }
    tally.mails_delivered += delivered.values().sum::<usize>();
    tally.double_effects += delivered.values().filter(|n| **n > 1).count();
    for e in store.decisions(sid).await.unwrap() {
        let r = &e.record;
        if r["kind"] == "reconcile" && r["tool_name"] == MAIL {
            match r["decision"].as_str() {
                Some("happened") => tally.mail_happened += 1,
                Some("not_run") => tally.mail_not_run += 1,
                _ => tally.mail_cannot_tell += 1,
            }
        }
    }
    for (id, name) in &track.interrupted {
        let outcome = &outcomes[id];
        if name == MAIL {
            // The tool can tell: found by its key, or run again when the API never
            // saw it. Never left unknown.
            assert_eq!(
                *outcome,
                ToolOutcome::Success,
                "{id} was killed mid-run and not reconciled: {}",
                result_text(&state.messages, id)
            );
            tally.mail_unknown_before += 1;
        } else if name == IDEMPOTENT {
            assert_eq!(
                *outcome,
                ToolOutcome::Success,
                "idempotent {id} was not run again"
            );
            tally.idempotent_reruns += 1;
        } else {
            assert_eq!(
                *outcome,
                ToolOutcome::Unknown,
                "{name} {id} was killed mid-run but is {outcome:?}"
            );
            assert!(result_text(&state.messages, id).contains("outcome unknown"));
        }
        tally.unknown_checked += 1;
        tally.invariants += 1;
    }
    tally.sessions_completed += 1;
}

async fn crash_harness(spec: &StoreSpec, dir: &Path, api: &MailApi, kills_wanted: usize) -> Tally {
    let mut tally = Tally::default();
    let kills_per_session = 6;
    let mut point = fastrand::usize(0..KILL_POINTS.len());
    let mut session_no = 0;
    let stderr = dir.join(format!("child-{}.stderr", spec.label()));
    let mut total_kills = 0;
    while total_kills < kills_wanted {
        session_no += 1;
        let sid = format!("crash-{}-{session_no}", spec.label());
        let log = dir.join(format!("{sid}.log"));
        let mut track = Track::default();
        let mut kills_here = 0;
        while kills_here < kills_per_session && total_kills < kills_wanted {
            // The point advances only once a kill landed there, so every point is hit.
            let at = KILL_POINTS[point % KILL_POINTS.len()];
            let (lines, killed) = run_and_kill(spec, &log, &sid, &stderr, &api.url, Some(at));
            tally.runs += 1;
            for l in &lines {
                if let Some(id) = l.strip_prefix("ACK ") {
                    track.acked.push(id.to_owned());
                }
            }
            let Some(where_) = killed else {
                // The child reached the end before the kill point.
                tally.runs_finished_unkilled += 1;
                break;
            };
            point += 1;
            let bucket = where_.split(' ').next().unwrap_or_default().to_owned();
            *tally.kills.entry(bucket).or_default() += 1;
            kills_here += 1;
            total_kills += 1;
            check_after_kill(spec, &log, &sid, api, &mut track, &mut tally).await;
        }
        // A last process, not killed, drives the session to its end.
        let (lines, killed) = run_and_kill(spec, &log, &sid, &stderr, &api.url, None);
        tally.runs += 1;
        assert!(killed.is_none());
        assert!(lines.iter().any(|l| l == "ALL-DONE"), "{lines:?}");
        for l in &lines {
            if let Some(id) = l.strip_prefix("ACK ") {
                track.acked.push(id.to_owned());
            }
        }
        check_after_kill(spec, &log, &sid, api, &mut track, &mut tally).await;
        check_completed(spec, &log, &sid, api, &track, &mut tally).await;
    }
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_any_point_loses_nothing_and_runs_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (sqlite_kills, pg_kills) = if is_long() { (250, 150) } else { (12, 8) };
    // The far end of `send_mail`, shared by every child (on a thread of its own: this
    // test's runtime threads block while they wait for a child's lines).
    let api = MailApi::start_in_thread();
    for spec in harness_stores(dir.path(), "crash") {
        let kills = match spec {
            StoreSpec::Sqlite(_) => sqlite_kills,
            StoreSpec::Postgres { .. } => pg_kills,
        };
        let started = Instant::now();
        let tally = crash_harness(&spec, dir.path(), &api, kills).await;
        let total: usize = tally.kills.values().sum();
        println!(
            "crash harness [{}]: {} runs, {total} kills {:?}; {} invariants checked; {} sessions \
             resumed to completion; {} calls killed mid-run checked ({} idempotent re-runs); \
             {} children finished before their kill point; {:.1}s",
            spec.label(),
            tally.runs,
            tally.kills,
            tally.invariants,
            tally.sessions_completed,
            tally.unknown_checked,
            tally.idempotent_reruns,
            tally.runs_finished_unkilled,
            started.elapsed().as_secs_f64()
        );
        println!(
            "exactly once [{}]: send_mail killed mid-run (unknown before reconcile): {}; \
             reconcile verdicts: {} happened, {} not run (then run again), {} cannot tell; \
             unknown after reconcile: {}; emails delivered: {}; double effects: {}",
            spec.label(),
            tally.mail_unknown_before,
            tally.mail_happened,
            tally.mail_not_run,
            tally.mail_cannot_tell,
            tally.mail_unknown_after,
            tally.mails_delivered,
            tally.double_effects
        );
        assert_eq!(total, kills);
        for p in KILL_POINTS {
            assert!(
                tally.kills.contains_key(&format!("{p:?}")),
                "no kill landed at {p:?}: {:?}",
                tally.kills
            );
        }
        assert!(
            tally.mail_unknown_before > 0,
            "no send_mail call was killed mid-run"
        );
        assert_eq!(
            tally.mail_unknown_after, 0,
            "a call its tool can reconcile stayed unknown"
        );
        assert_eq!(tally.mail_cannot_tell, 0);
        assert_eq!(tally.double_effects, 0, "an email was delivered twice");
    }
}
