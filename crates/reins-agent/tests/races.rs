//! Races: two processes resume the same paused session at the same moment, many
//! times, on SQLite and PostgreSQL — the approved tool runs exactly once each time.
//! And in one process, concurrent calls on one session are refused with
//! `SessionBusy` and never interleave.
//!
//! Each round, the parent pauses a fresh session on a `Confirm` tool and writes a
//! start file holding a moment a little in the future; two long-lived child processes
//! (this test binary, re-executed) wait for the file, sleep until that moment, and
//! call `resume()`. The tool appends a line to a side-effect log (fsync'd); the
//! parent counts lines. 20 rounds by default, 200 with `REINS_LONG=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reins_agent::{Agent, AgentError, RunStatus};
use reins_message::{Msg, Role, ToolOutcome};
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_tool::{ToolContext, ToolError, ToolPolicy, Toolkit};
use serde_json::json;
use support::*;
use tokio::sync::Notify;

fn deploy_toolkit(log: Option<PathBuf>) -> Toolkit {
    let mut t = Toolkit::new();
    t.add(
        Toolkit::function(
            "deploy",
            "Deploy (needs approval)",
            move |a: PathArgs, ctx: ToolContext| {
                let log = log.clone();
                async move {
                    let log = log.ok_or_else(|| {
                        ToolError::Failed("the parent never runs the tool".into())
                    })?;
                    log_effect(
                        &log,
                        &format!(
                            "RUN {} {} pid={}",
                            ctx.session_id,
                            a.path,
                            std::process::id()
                        ),
                    );
                    Ok::<_, ToolError>(format!("deployed {}", a.path))
                }
            },
        )
        .policy(ToolPolicy::confirm()),
    )
    .unwrap();
    t
}

fn race_model() -> ScriptedModel {
    ScriptedModel::from_fn(|req| {
        let after_tools = req.messages.last().is_some_and(|m| m.role == Role::Tool);
        if after_tools {
            ScriptedResponse::text("deployed, once")
        } else {
            ScriptedResponse::tool_call_with_id("d1", "deploy", json!({"path": "build-42"}))
        }
    })
    .with_recording(false)
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// A child: for each round, waits for the start file, sleeps until the moment it
/// names, resumes the round's session and reports how that went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the race harness in a child process"]
async fn race_child() {
    let spec = StoreSpec::from_env();
    let dir = PathBuf::from(std::env::var("REINS_RACE_DIR").unwrap());
    let rounds: usize = std::env::var("REINS_RACE_ROUNDS").unwrap().parse().unwrap();
    let agent = Agent::builder()
        .model(race_model())
        .toolkit(deploy_toolkit(Some(dir.join("effects.log"))))
        .store_arc(spec.open().await)
        .build()
        .unwrap();
    tell_parent("READY");
    for round in 0..rounds {
        let go = dir.join(format!("go-{round}"));
        let at: u128 = loop {
            if let Ok(s) = std::fs::read_to_string(&go) {
                if let Ok(t) = s.trim().parse() {
                    break t;
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        // Open the session before the start moment, so both race on the resume itself.
        let session = agent.session(&format!("race-{round}")).await.unwrap();
        let wait = at.saturating_sub(now_ms());
        tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap())).await;
        let verdict = match session.resume().await {
            Ok(out) => format!("{:?}", out.status),
            Err(AgentError::SessionBusy { .. }) => "SessionBusy".to_owned(),
            Err(AgentError::NothingToResume { .. }) => "NothingToResume".to_owned(),
            Err(AgentError::StaleView { .. }) => "StaleView".to_owned(),
            Err(AgentError::ToolInFlight { .. }) => "ToolInFlight".to_owned(),
            Err(e) => format!("ERROR {e}"),
        };
        tell_parent(&format!("ROUND {round} {verdict}"));
    }
}

struct RaceChild {
    proc: std::process::Child,
    lines: mpsc::Receiver<String>,
}

fn spawn(spec: &StoreSpec, dir: &Path, rounds: usize, n: usize) -> RaceChild {
    let mut cmd = child_test("race_child");
    for (k, v) in spec.env() {
        cmd.env(k, v);
    }
    let mut proc = cmd
        .env("REINS_RACE_DIR", dir)
        .env("REINS_RACE_ROUNDS", rounds.to_string())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join(format!("child-{n}.stderr"))).unwrap())
        .spawn()
        .unwrap();
    let lines = read_lines(proc.stdout.take().unwrap());
    RaceChild { proc, lines }
}

fn next_line(c: &RaceChild, prefix: &str, dir: &Path, n: usize) -> String {
    let limit = Instant::now() + Duration::from_secs(60);
    loop {
        let left = limit.saturating_duration_since(Instant::now());
        match c.lines.recv_timeout(left) {
            Ok(l) if l.starts_with(prefix) => return l,
            Ok(_) => {}
            Err(e) => panic!(
                "child {n} said nothing starting with {prefix:?} ({e}); stderr:\n{}",
                std::fs::read_to_string(dir.join(format!("child-{n}.stderr"))).unwrap_or_default()
            ),
        }
    }
}

async fn race_harness(spec: &StoreSpec, dir: &Path, rounds: usize) -> BTreeMap<String, usize> {
    std::fs::create_dir_all(dir).unwrap();
    let log = dir.join("effects.log");
    // The parent pauses each round's session; it never runs the tool.
    let parent = Agent::builder()
        .model(race_model())
        .toolkit(deploy_toolkit(None))
        .store_arc(spec.open().await)
        .build()
        .unwrap();
    let children = [spawn(spec, dir, rounds, 0), spawn(spec, dir, rounds, 1)];
    for (n, c) in children.iter().enumerate() {
        next_line(c, "READY", dir, n);
    }
    let mut verdicts = BTreeMap::new();
    for round in 0..rounds {
        let sid = format!("race-{round}");
        let out = parent
            .session(&sid)
            .await
            .unwrap()
            .send(Msg::user("deploy build 42"))
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Paused);
        // Start in 30 ms: both children are polling for the file every millisecond.
        let go = dir.join(format!("go-{round}"));
        let tmp = dir.join(format!("go-{round}.tmp"));
        std::fs::write(&tmp, (now_ms() + 30).to_string()).unwrap();
        std::fs::rename(&tmp, &go).unwrap();
        let mut completed = 0;
        for (n, c) in children.iter().enumerate() {
            let line = next_line(c, &format!("ROUND {round} "), dir, n);
            let verdict = line.splitn(3, ' ').nth(2).unwrap().to_owned();
            assert!(
                ["Completed", "SessionBusy", "NothingToResume", "StaleView"]
                    .contains(&verdict.as_str()),
                "round {round} on {}: child {n} got {verdict}",
                spec.label()
            );
            completed += usize::from(verdict == "Completed");
            *verdicts.entry(verdict).or_insert(0) += 1;
        }
        let runs = effects(&log)
            .iter()
            .filter(|l| l.starts_with(&format!("RUN {sid} ")))
            .count();
        assert_eq!(
            runs,
            1,
            "round {round} on {}: the approved tool ran {runs} times",
            spec.label()
        );
        assert_eq!(completed, 1, "round {round}: exactly one resume completes");
        let state = spec.open().await.load_session(&sid).await.unwrap();
        assert_valid(&state.messages);
        assert_eq!(outcomes(&state.messages)["d1"], ToolOutcome::Success);
        assert_eq!(state.messages.last().unwrap().text(), "deployed, once");
    }
    for c in children {
        let mut proc = c.proc;
        assert!(proc.wait().unwrap().success());
    }
    verdicts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_resuming_one_pause_run_the_tool_once() {
    let dir = tempfile::tempdir().unwrap();
    let rounds = if is_long() { 200 } else { 20 };
    for spec in harness_stores(dir.path(), "races") {
        let started = Instant::now();
        let verdicts = race_harness(&spec, &dir.path().join(spec.label()), rounds).await;
        println!(
            "race harness [{}]: {rounds} rounds of two processes resuming at once; \
             the tool ran exactly once each time; resume outcomes {verdicts:?}; {:.1}s",
            spec.label(),
            started.elapsed().as_secs_f64()
        );
    }
}

// ----- one process ---------------------------------------------------------------------

/// A model that answers each user message with `re: <text>`, slowly.
fn echo_model() -> ScriptedModel {
    ScriptedModel::from_fn(|req| {
        let last = req
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(Msg::text)
            .unwrap_or_default();
        ScriptedResponse::text(format!("re: {last}"))
    })
    .with_latency(Duration::from_millis(3))
    .with_chunk_size(2)
    .with_recording(false)
}

/// Every assistant message answers the user message right before it.
fn assert_not_interleaved(messages: &[Msg]) {
    assert_eq!(messages.len() % 2, 0, "{messages:#?}");
    for pair in messages.chunks(2) {
        assert_eq!(pair[0].role, Role::User);
        assert_eq!(pair[1].role, Role::Assistant);
        assert_eq!(pair[1].text(), format!("re: {}", pair[0].text()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_on_one_session_are_busy_and_never_interleave() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreSpec::Sqlite(dir.path().join("busy.db")).open().await;
    // Two agents (two lock owners) on one store, and many tasks on each.
    let agents = [
        Agent::builder()
            .model(echo_model())
            .store_arc(store.clone())
            .build()
            .unwrap(),
        Agent::builder()
            .model(echo_model())
            .store_arc(store.clone())
            .build()
            .unwrap(),
    ];
    let mut tasks = Vec::new();
    for t in 0..16 {
        let agent = agents[t % 2].clone();
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut busy) = (0, 0);
            for i in 0..15 {
                let s = agent.session("shared").await.unwrap();
                match s.send(Msg::user(format!("task {t} message {i}"))).await {
                    Ok(out) => {
                        assert_eq!(out.status, RunStatus::Completed);
                        assert_eq!(out.message.text(), format!("re: task {t} message {i}"));
                        ok += 1;
                    }
                    Err(AgentError::SessionBusy { session }) => {
                        assert_eq!(session, "shared");
                        busy += 1;
                    }
                    Err(e) => panic!("unexpected {e}"),
                }
                tokio::task::yield_now().await;
            }
            (ok, busy)
        }));
    }
    let (mut ok, mut busy) = (0, 0);
    for t in tasks {
        let (o, b) = t.await.unwrap();
        ok += o;
        busy += b;
    }
    assert!(ok > 0 && busy > 0, "ok={ok} busy={busy}");
    let state = store.load_session("shared").await.unwrap();
    assert_eq!(
        state.messages.len(),
        ok * 2,
        "every accepted call is stored"
    );
    assert_not_interleaved(&state.messages);
    println!("one session, 16 tasks x 15 calls: {ok} ran, {busy} refused with SessionBusy");
}

#[tokio::test]
async fn a_second_start_while_a_run_streams_is_busy_and_leaves_it_untouched() {
    let agent = Agent::builder()
        .model(echo_model().with_latency(Duration::from_millis(100)))
        .build()
        .unwrap();
    let s = agent.session("one").await.unwrap();
    let run = s.send(Msg::user("first")).start().await.unwrap();
    for attempt in 0..5 {
        let other = agent.session("one").await.unwrap();
        let err = other
            .send(Msg::user(format!("intruder {attempt}")))
            .start()
            .await
            .unwrap_err();
        assert!(matches!(err, AgentError::SessionBusy { .. }), "{err}");
        assert!(matches!(
            other.resume().await,
            Err(AgentError::SessionBusy { .. })
        ));
    }
    assert_eq!(run.wait().await.unwrap().message.text(), "re: first");
    let msgs = s.messages().await.unwrap();
    assert_eq!(msgs.len(), 2);
    assert_not_interleaved(&msgs);
}

/// Counts the model calls in flight across agents: two at once means two runs of the
/// one session overlapped.
struct Exclusive {
    inner: ScriptedModel,
    in_flight: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    overlaps: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait::async_trait]
impl reins_model::ChatModel for Exclusive {
    fn model_name(&self) -> &str {
        "exclusive"
    }
    async fn stream(
        &self,
        req: reins_model::ChatRequest,
    ) -> reins_model::Result<reins_model::ChatStream> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.in_flight.fetch_add(1, SeqCst) != 0 {
            self.overlaps.fetch_add(1, SeqCst);
        }
        // Keep the call in flight for a moment, then let the stream play out.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let out = self.inner.stream(req).await;
        self.in_flight.fetch_sub(1, SeqCst);
        out
    }
}

/// Two agent instances (two lock owners, two caches) on one store, each holding its
/// session handle open across calls, so that every call after the other instance wrote
/// starts on a warm but stale cache: its first commit (which would take the lock)
/// conflicts, and it takes the lock the usual way and reloads. Each call is a tool-call
/// run. Never two runs at once, every accepted call stored whole and in order, each
/// tool run once per accepted call, and nothing but success or `SessionBusy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_with_stale_caches_never_run_at_once_and_lose_nothing() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let dir = tempfile::tempdir().unwrap();
    let calls_per_task = if is_long() { 60 } else { 12 };
    for spec in harness_stores(dir.path(), "stale") {
        let store = spec.open().await;
        let (in_flight, overlaps) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let tool_runs = Arc::new(AtomicUsize::new(0));
        let agent = |n: usize| {
            let runs = tool_runs.clone();
            let mut t = Toolkit::new();
            t.add(Toolkit::function(
                "note",
                "Note something",
                move |a: PathArgs, _ctx: ToolContext| {
                    let runs = runs.clone();
                    async move {
                        runs.fetch_add(1, SeqCst);
                        Ok::<_, ToolError>(format!("noted {}", a.path))
                    }
                },
            ))
            .unwrap();
            let model = ScriptedModel::from_fn(|req| {
                let last = req.messages.iter().rev().find(|m| m.role == Role::User);
                let text = last.map(Msg::text).unwrap_or_default();
                if req.messages.last().is_some_and(|m| m.role == Role::Tool) {
                    ScriptedResponse::text(format!("re: {text}"))
                } else {
                    ScriptedResponse::tool_call("note", json!({ "path": text }))
                }
            })
            .with_chunk_size(4)
            .with_recording(false);
            Agent::builder()
                .name(format!("instance-{n}"))
                .model(Exclusive {
                    inner: model,
                    in_flight: in_flight.clone(),
                    overlaps: overlaps.clone(),
                })
                .toolkit(t)
                .store_arc(store.clone())
                .build()
                .unwrap()
        };
        let agents = [agent(0), agent(1)];
        let mut tasks = Vec::new();
        for t in 0..6 {
            let agent = agents[t % 2].clone();
            tasks.push(tokio::spawn(async move {
                let s = agent.session("shared").await.unwrap();
                let (mut ok, mut busy) = (0, 0);
                for i in 0..calls_per_task {
                    match s.send(Msg::user(format!("task {t} message {i}"))).await {
                        Ok(out) => {
                            assert_eq!(out.status, RunStatus::Completed);
                            assert_eq!(out.message.text(), format!("re: task {t} message {i}"));
                            ok += 1;
                        }
                        Err(AgentError::SessionBusy { .. }) => busy += 1,
                        Err(e) => panic!("unexpected {e}"),
                    }
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(0..12))).await;
                }
                (ok, busy)
            }));
        }
        let (mut ok, mut busy) = (0, 0);
        for t in tasks {
            let (o, b) = t.await.unwrap();
            ok += o;
            busy += b;
        }
        assert_eq!(
            overlaps.load(SeqCst),
            0,
            "two runs of one session overlapped"
        );
        assert!(ok > 0, "nothing ran");
        assert_eq!(tool_runs.load(SeqCst), ok, "one tool run per accepted call");
        let state = store.load_session("shared").await.unwrap();
        assert_eq!(
            state.messages.len(),
            ok * 4,
            "every accepted call is stored whole"
        );
        for turn in state.messages.chunks(4) {
            let roles: Vec<Role> = turn.iter().map(|m| m.role).collect();
            assert_eq!(
                roles,
                [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
            );
            assert_eq!(turn[3].text(), format!("re: {}", turn[0].text()));
            let tool_use = turn[1].tool_uses().next().unwrap();
            assert_eq!(tool_use.input["path"], turn[0].text());
        }
        println!(
            "[{}] two instances, 6 tasks x {calls_per_task} calls on one session: {ok} ran, {busy} refused with SessionBusy, 0 overlaps",
            spec.label()
        );
    }
}

/// A `slow_search` tool that says when it has started and then waits until released.
fn blocking_search(entered: Arc<Notify>, release: Arc<Notify>) -> Toolkit {
    let mut t = Toolkit::new();
    t.add(Toolkit::function(
        "slow_search",
        "Search (slowly)",
        move |a: QueryArgs, _ctx: ToolContext| {
            let (entered, release) = (entered.clone(), release.clone());
            async move {
                entered.notify_one();
                release.notified().await;
                Ok::<_, ToolError>(format!("found {}", a.query))
            }
        },
    ))
    .unwrap();
    t
}

/// `search …` calls `slow_search` (call id `s1`), then says `searched`; anything else
/// is echoed.
fn search_model() -> ScriptedModel {
    ScriptedModel::from_fn(|req| {
        let last = req.messages.last();
        if last.is_some_and(|m| m.role == Role::Tool) {
            return ScriptedResponse::text("searched");
        }
        let text = last.map(Msg::text).unwrap_or_default();
        match text.strip_prefix("search ") {
            Some(q) => {
                ScriptedResponse::tool_call_with_id("s1", "slow_search", json!({ "query": q }))
            }
            None => ScriptedResponse::text(format!("echo: {text}")),
        }
    })
    .with_recording(false)
}

/// A run started with `.start()` whose session handle is dropped (as a server does once
/// the run is under way) still holds its session while its tool runs: a new message on a
/// new handle of the same agent is refused with `SessionBusy` — awaited or started —
/// the first run finishes normally, and the refused message is nowhere in the store.
/// On the in-memory store, SQLite and (when configured) PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_while_a_tool_runs_is_busy_even_after_the_starting_handle_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let mut stores: Vec<(&str, Arc<dyn reins_memory::MemoryStore>)> =
        vec![("memory", Arc::new(reins_memory::InMemoryStore::new()))];
    for spec in harness_stores(dir.path(), "busy_tool") {
        stores.push((spec.label(), spec.open().await));
    }
    for (label, store) in stores {
        let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let agent = Agent::builder()
            .model(search_model())
            .toolkit(blocking_search(entered.clone(), release.clone()))
            .store_arc(store.clone())
            .build()
            .unwrap();
        let run = {
            let s = agent.session("busy").await.unwrap();
            s.send(Msg::user("search rust")).start().await.unwrap()
        };
        tokio::time::timeout(Duration::from_secs(10), entered.notified())
            .await
            .unwrap_or_else(|_| panic!("[{label}] the tool never started"));
        let other = agent.session("busy").await.unwrap();
        let started = other.send(Msg::user("hi")).start().await;
        assert!(
            matches!(started, Err(AgentError::SessionBusy { .. })),
            "[{label}] a started message while a tool runs: {:?}",
            started.map(|_| "accepted")
        );
        let awaited = other.send(Msg::user("hi")).await;
        assert!(
            matches!(awaited, Err(AgentError::SessionBusy { .. })),
            "[{label}] an awaited message while a tool runs: {awaited:?}"
        );
        assert!(
            matches!(other.resume().await, Err(AgentError::SessionBusy { .. })),
            "[{label}] a resume while a tool runs"
        );
        drop(other);
        release.notify_one();
        let out = run.wait().await.unwrap();
        assert_eq!(out.status, RunStatus::Completed, "[{label}]");
        assert_eq!(out.message.text(), "searched", "[{label}]");
        let stored = store.load_session("busy").await.unwrap();
        let roles: Vec<Role> = stored.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::User, Role::Assistant, Role::Tool, Role::Assistant],
            "[{label}] {:#?}",
            stored.messages
        );
        assert_eq!(
            result_text(&stored.messages, "s1"),
            "found rust",
            "[{label}]"
        );
        // Once the run has ended, the same message is taken.
        let s = agent.session("busy").await.unwrap();
        let out = s.send(Msg::user("hi")).await.unwrap();
        assert_eq!(out.message.text(), "echo: hi", "[{label}]");
        assert_eq!(s.messages().await.unwrap().len(), 6, "[{label}]");
    }
}
