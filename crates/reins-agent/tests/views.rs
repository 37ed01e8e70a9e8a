//! Sessions always see the store: two workers (two `Agent`s on one store, in this
//! process and in two processes) on one session. A handle kept open across another
//! worker's pause, resolution, new pause and expiry reads what the store holds; a
//! `resume()` on a stale view is refused and runs nothing; every decision is in the
//! audit trail with its actor; watchers and remote interrupts reach across workers.
//!
//! Every scenario runs on the in-memory store (two agents sharing it), SQLite (two
//! pools on one file) and PostgreSQL (two pools; fails under `CI=true` without a
//! server, reported SKIPPED elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reins_agent::{
    Actor, Agent, AgentError, Decision, RunEvent, RunStatus, Session, Verdict, ViewToken,
};
use reins_memory::{InMemoryStore, MemoryStore};
use reins_message::{Msg, ToolOutcome};
use reins_model::ScriptedModel;
use reins_tool::ToolPolicy;
use serde_json::json;
use support::*;

type Store = SharedStore;

fn worker(store: &Store, model: ScriptedModel, counter: &Counter) -> reins_agent::AgentBuilder {
    agent(model, toolkit(counter, ToolPolicy::confirm())).store_arc(store.clone())
}

fn ids(reqs: &[reins_agent::Requirement]) -> Vec<String> {
    reqs.iter().map(|r| r.id.clone()).collect()
}

/// B holds one handle open while A pauses, A resolves, A pauses again: B's reads are
/// right every time, B's `resume()` on a stale view is refused (nothing runs), and it
/// succeeds after B reads again. The audit trail has every decision once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_held_open_sees_the_other_workers_pauses_and_never_widens_consent() {
    for (label, sa, sb, _keep) in store_pairs("views").await {
        let sid = format!("views-{}", reins_message::new_id());
        let counter = Counter::default();
        let a = worker(
            &sa,
            ScriptedModel::new([
                call("c1", "delete_file", json!({"path": "a.txt"})),
                call(
                    "c2",
                    "send_email",
                    json!({"to": "ops", "body": "a.txt is gone"}),
                ),
            ]),
            &counter,
        )
        .build()
        .unwrap();
        let b = worker(&sb, ScriptedModel::new([text("all done")]), &counter)
            .build()
            .unwrap();

        // B opens first: nothing pending.
        let hb = b.session(&sid).await.unwrap();
        assert!(!hb.current_view().is_paused(), "{label}");

        // A pauses on c1.
        let out = a
            .session(&sid)
            .await
            .unwrap()
            .send(Msg::user("delete a.txt, then tell ops"))
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Paused, "{label}");

        // B's stale (empty) view: resume is refused, nothing runs.
        let err = hb.resume().await.unwrap_err();
        match &err {
            AgentError::StaleView { seen, pending } => {
                assert!(seen.is_empty(), "{label}");
                assert_eq!(ids(pending), ["c1"], "{label}");
            }
            other => panic!("{label}: expected StaleView, got {other}"),
        }
        assert_eq!(counter.total(), 0, "{label}");

        // B reads: the store's truth.
        assert!(hb.is_paused().await.unwrap(), "{label}");
        assert_eq!(ids(&hb.requirements().await.unwrap()), ["c1"], "{label}");
        let msgs = hb.messages().await.unwrap();
        assert_eq!(msgs.len(), 2, "{label}: B sees A's turn");
        let seen_c1 = hb.current_view();
        assert_eq!(seen_c1.requirement_ids(), ["c1"]);

        // A approves c1 as alice; the model asks for c2: a new pause B has not seen.
        let ha = a.session(&sid).await.unwrap().as_actor(Actor::new("alice"));
        let out = ha.resolve(vec![Decision::approve("c1")]).await.unwrap();
        assert_eq!(out.status, RunStatus::Paused, "{label}");
        assert_eq!(ids(&out.requirements), ["c2"], "{label}");
        assert_eq!(counter.count("delete_file"), 1, "{label}");

        // B still shows c1: resume is refused, c2 does not run.
        let err = hb.resume().await.unwrap_err();
        assert!(
            matches!(&err, AgentError::StaleView { seen, pending } if seen == &["c1"] && ids(pending) == ["c2"]),
            "{label}: {err}"
        );
        // A decision naming c1 cannot land on c2.
        let err = hb.resolve(vec![Decision::approve("c1")]).await.unwrap_err();
        // (It names the decision that took effect on c1: alice's approval.)
        assert!(
            matches!(err, AgentError::AlreadyDecided { ref id, ref decided } if id == "c1" && decided.by.as_deref() == Some("alice")),
            "{label}: {err}"
        );
        // A pinned view from before c2 existed cannot approve c2.
        let err = hb
            .resolve(vec![Decision::approve("c2")])
            .at(&seen_c1)
            .await
            .unwrap_err();
        assert!(
            matches!(err, AgentError::StaleView { .. }),
            "{label}: {err}"
        );
        assert_eq!(counter.count("send_email"), 0, "{label}: consent bypassed");

        // B reads again and approves what it now sees, as bob.
        assert_eq!(ids(&hb.requirements().await.unwrap()), ["c2"], "{label}");
        let out = hb.as_actor(Actor::new("bob")).resume().await.unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(counter.count("send_email"), 1, "{label}");
        assert!(!hb.is_paused().await.unwrap(), "{label}");
        // And A's handle, which did not run the last step, reads it too.
        assert_eq!(ha.messages().await.unwrap(), hb.messages().await.unwrap());
        assert_valid(&hb.messages().await.unwrap());

        // The audit trail: each decision exactly once, with its actor.
        let trail = ha.decisions().await.unwrap();
        let applied: Vec<(String, String)> = trail
            .iter()
            .filter(|r| r.verdict == Verdict::Applied)
            .map(|r| {
                (
                    r.requirement_id.clone(),
                    r.actor.as_ref().unwrap().principal.clone(),
                )
            })
            .collect();
        assert_eq!(
            applied,
            [("c1".into(), "alice".into()), ("c2".into(), "bob".into())],
            "{label}: {trail:#?}"
        );
        let refused: Vec<(&str, &str)> = trail
            .iter()
            .filter_map(|r| match &r.verdict {
                Verdict::Refused { reason, .. } => {
                    Some((r.requirement_id.as_str(), reason.as_str()))
                }
                Verdict::Applied => None,
            })
            .collect();
        assert_eq!(
            refused,
            [
                ("c1", "stale_view"),
                ("c1", "stale_view"),
                ("c1", "already_decided"),
                ("c2", "stale_view")
            ],
            "{label}: {trail:#?}"
        );
        assert_eq!(
            trail.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (1..=6).collect::<Vec<_>>()
        );
        assert_eq!(trail[1].shown_input, json!({"path": "a.txt"}));
    }
}

/// A handle held open across an expiry reads the expired requirement; deciding on it is
/// refused, recorded, and changes nothing; a new message moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_is_seen_refused_and_recorded_across_workers() {
    for (label, sa, sb, _keep) in store_pairs("expiry").await {
        let sid = format!("expiry-{}", reins_message::new_id());
        let counter = Counter::default();
        let a = worker(
            &sa,
            ScriptedModel::new([call("e1", "delete_file", json!({"path": "x"}))]),
            &counter,
        )
        .requirement_ttl(Duration::from_secs(1))
        .build()
        .unwrap();
        let b = worker(&sb, ScriptedModel::new([text("ok, moving on")]), &counter)
            .requirement_ttl(Duration::from_secs(1))
            .build()
            .unwrap();
        let hb = b.session(&sid).await.unwrap().as_actor(Actor::new("carol"));
        a.session(&sid)
            .await
            .unwrap()
            .send(Msg::user("delete x"))
            .await
            .unwrap();
        let reqs = hb.requirements().await.unwrap();
        assert_eq!(ids(&reqs), ["e1"], "{label}");
        let version_before = hb.view().await.unwrap().version;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(reqs[0].is_expired(chrono::Utc::now()));
        let err = hb.resolve(vec![Decision::approve("e1")]).await.unwrap_err();
        assert!(
            matches!(err, AgentError::RequirementExpired { .. }),
            "{label}: {err}"
        );
        assert_eq!(counter.total(), 0, "{label}");
        // Refusals do not move the session: other views stay valid.
        let view = hb.view().await.unwrap();
        assert_eq!(view.version, version_before, "{label}");
        assert!(view.paused);
        let trail = hb.decisions().await.unwrap();
        assert_eq!(trail.len(), 1, "{label}");
        assert!(
            matches!(&trail[0].verdict, Verdict::Refused { reason, .. } if reason == "expired"),
            "{label}: {trail:?}"
        );
        assert_eq!(trail[0].actor, Some(Actor::new("carol")));
        // A new message closes it (recorded as a rejection by the message).
        let out = hb.send(Msg::user("never mind")).await.unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        let trail = hb.decisions().await.unwrap();
        assert_eq!(trail.len(), 2);
        assert_eq!(
            (trail[1].decision.as_str(), trail[1].via.as_str()),
            ("reject", "message")
        );
        assert_valid(&hb.messages().await.unwrap());
    }
}

/// Partial decisions by one worker make another worker's view stale; a pinned token
/// (the form reins-server passes through HTTP) behaves like a handle's view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_decisions_elsewhere_make_a_view_stale() {
    for (label, sa, sb, _keep) in store_pairs("partial").await {
        let sid = format!("partial-{}", reins_message::new_id());
        let counter = Counter::default();
        let two = reins_model::ScriptedResponse::tool_call_with_id(
            "p1",
            "delete_file",
            json!({"path": "1"}),
        )
        .then_tool_call("send_email", json!({"to": "x", "body": "y"}));
        let a = worker(&sa, ScriptedModel::new([two]), &counter)
            .build()
            .unwrap();
        let b = worker(&sb, ScriptedModel::new([text("both done")]), &counter)
            .build()
            .unwrap();
        let out = a
            .session(&sid)
            .await
            .unwrap()
            .send(Msg::user("two things"))
            .await
            .unwrap();
        assert_eq!(out.requirements.len(), 2, "{label}");
        let second = out.requirements[1].id.clone();
        let token: ViewToken = b.session(&sid).await.unwrap().view().await.unwrap().token;
        // The token survives a trip through text, as over HTTP.
        let token: ViewToken = token.to_string().parse().unwrap();
        // A approves only p1: it runs; the other stays pending.
        let out = a
            .session(&sid)
            .await
            .unwrap()
            .resolve(vec![Decision::approve("p1")])
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Paused, "{label}");
        assert_eq!(counter.count("delete_file"), 1);
        let hb = b.session(&sid).await.unwrap();
        let err = hb.resume().at(&token).await.unwrap_err();
        assert!(
            matches!(&err, AgentError::StaleView { pending, .. } if ids(pending) == [second.clone()]),
            "{label}: {err}"
        );
        assert_eq!(counter.count("send_email"), 0, "{label}");
        // A fresh view names exactly what is pending: resolving on it works.
        let fresh = hb.view().await.unwrap();
        let out = hb
            .resolve(vec![Decision::approve(second.clone())])
            .at(&fresh.token)
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(counter.count("send_email"), 1, "{label}");
    }
}

/// A watcher learns of a pause and a resolution made by another worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_sees_another_workers_pause_and_resolution() {
    for (label, sa, sb, _keep) in store_pairs("watch").await {
        let sid = format!("watch-{}", reins_message::new_id());
        let counter = Counter::default();
        let a = worker(
            &sa,
            ScriptedModel::new([
                call("w1", "delete_file", json!({"path": "w"})),
                text("gone"),
            ]),
            &counter,
        )
        .build()
        .unwrap();
        let b = worker(&sb, ScriptedModel::new([]), &counter)
            .build()
            .unwrap();
        let mut watch = b.session(&sid).await.unwrap().watch().await.unwrap();
        let first = watch.next().await.unwrap().unwrap();
        assert!(!first.paused, "{label}");
        let ha = a.session(&sid).await.unwrap();
        ha.send(Msg::user("delete w")).await.unwrap();
        let paused = next_matching(&mut watch, |v| v.paused, label).await;
        assert_eq!(ids(&paused.requirements), ["w1"], "{label}");
        ha.resume().await.unwrap();
        let done = next_matching(
            &mut watch,
            |v| !v.paused && v.version > paused.version,
            label,
        )
        .await;
        assert!(done.requirements.is_empty(), "{label}");
    }
}

async fn next_matching(
    watch: &mut reins_agent::SessionWatch,
    want: impl Fn(&reins_agent::SessionView) -> bool,
    label: &str,
) -> reins_agent::SessionView {
    // Liveness bound only (a loaded machine passes): the notice must arrive.
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let v = watch.next().await.expect("the watch ended").unwrap();
            if want(&v) {
                return v;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{label}: the watcher never saw the change"))
}

/// An interrupt requested through one worker stops a run executing on another: the
/// running tool is cancelled and reported `Interrupted`, the run ends `Cancelled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_requested_elsewhere_stops_the_run() {
    for (label, sa, sb, _keep) in store_pairs("interrupt").await {
        let sid = format!("interrupt-{}", reins_message::new_id());
        let counter = Counter::default();
        let a = worker(
            &sa,
            ScriptedModel::new([call("s1", "slow", json!({"ms": 60_000}))]),
            &counter,
        )
        .interrupt_grace(Duration::from_millis(200))
        .build()
        .unwrap();
        let b = worker(&sb, ScriptedModel::new([]), &counter)
            .build()
            .unwrap();
        let hb = b.session(&sid).await.unwrap();
        // Nothing runs yet: nothing to interrupt, and nothing lingers for later runs.
        assert!(!hb.request_interrupt().await.unwrap(), "{label}");
        let mut run = a
            .session(&sid)
            .await
            .unwrap()
            .send(Msg::user("take your time"))
            .start()
            .await
            .unwrap();
        loop {
            match run.next_event().await {
                Some(RunEvent::ToolExecutionStarted { .. }) => break,
                Some(_) => {}
                None => panic!("{label}: the run ended before the tool started"),
            }
        }
        // The tool's body is running (it records itself first thing).
        while counter.count("slow") == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(hb.request_interrupt().await.unwrap(), "{label}");
        let out = tokio::time::timeout(Duration::from_secs(30), run.wait())
            .await
            .unwrap_or_else(|_| panic!("{label}: the run never noticed the interrupt"))
            .unwrap();
        assert_eq!(out.status, RunStatus::Cancelled, "{label}");
        let msgs = hb.messages().await.unwrap();
        assert_eq!(outcomes(&msgs)["s1"], ToolOutcome::Interrupted, "{label}");
        assert_valid(&msgs);
    }
}

// ----- two processes -----------------------------------------------------------------

/// The child worker: holds one handle open and answers the parent's commands on stdin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by two_processes_a_held_handle_follows_the_other_process in a child process"]
async fn views_child() {
    use tokio::io::AsyncBufReadExt;
    let spec = StoreSpec::from_env();
    let sid = std::env::var("REINS_VIEWS_SESSION").unwrap();
    let counter = Counter::default();
    let b = agent(
        ScriptedModel::new([text("done")]),
        toolkit(&counter, ToolPolicy::confirm()),
    )
    .store_arc(spec.open().await)
    .build()
    .unwrap();
    let hb = b.session(&sid).await.unwrap().as_actor(Actor::new("child"));
    tell_parent("READY");
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(cmd) = lines.next_line().await.unwrap() {
        let reply = match cmd.as_str() {
            "read" => {
                let paused = hb.is_paused().await.unwrap();
                let reqs = ids(&hb.requirements().await.unwrap()).join(",");
                let n = hb.messages().await.unwrap().len();
                format!("READ {paused} [{reqs}] {n}")
            }
            "resume" => match hb.resume().await {
                Ok(out) => format!("RESUME {:?} tools={}", out.status, counter.total()),
                Err(AgentError::StaleView { pending, .. }) => {
                    format!(
                        "RESUME StaleView [{}] tools={}",
                        ids(&pending).join(","),
                        counter.total()
                    )
                }
                Err(e) => format!("RESUME ERROR {e}"),
            },
            "exit" => break,
            other => format!("UNKNOWN {other}"),
        };
        tell_parent(&reply);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_a_held_handle_follows_the_other_process() {
    let dir = tempfile::tempdir().unwrap();
    for spec in harness_stores(dir.path(), "views2p") {
        let label = spec.label();
        let sid = format!("twoproc-{}", reins_message::new_id());
        let counter = Counter::default();
        let store = spec.open().await;
        store.open_session(&sid).await.unwrap();
        let a = worker(
            &store,
            ScriptedModel::new([
                call("t1", "delete_file", json!({"path": "one"})),
                call("t2", "delete_file", json!({"path": "two"})),
            ]),
            &counter,
        )
        .build()
        .unwrap();
        let mut cmd = child_test("views_child");
        for (k, v) in spec.env() {
            cmd.env(k, v);
        }
        let mut child = cmd
            .env("REINS_VIEWS_SESSION", &sid)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let lines = read_lines(child.stdout.take().unwrap());
        let mut stdin = child.stdin.take().unwrap();
        let mut ask = |cmd: &str, prefix: &str| -> String {
            use std::io::Write;
            if !cmd.is_empty() {
                writeln!(stdin, "{cmd}").unwrap();
                stdin.flush().unwrap();
            }
            loop {
                let l = lines
                    .recv_timeout(Duration::from_secs(60))
                    .unwrap_or_else(|e| panic!("{label}: child said nothing for {prefix}: {e}"));
                if l.starts_with(prefix) {
                    return l;
                }
            }
        };
        ask("", "READY");
        // The child's handle is open; this process pauses the session.
        let ha = a.session(&sid).await.unwrap();
        ha.send(Msg::user("delete one and two")).await.unwrap();
        // The child's stale view is refused; then it reads A's pause.
        assert_eq!(
            ask("resume", "RESUME"),
            "RESUME StaleView [t1] tools=0",
            "{label}"
        );
        assert_eq!(ask("read", "READ"), "READ true [t1] 2", "{label}");
        // This process resolves t1 and pauses on t2: the child's view {t1} is stale.
        ha.resolve(vec![Decision::approve("t1")]).await.unwrap();
        assert_eq!(counter.count("delete_file"), 1);
        assert_eq!(
            ask("resume", "RESUME"),
            "RESUME StaleView [t2] tools=0",
            "{label}"
        );
        assert_eq!(ask("read", "READ"), "READ true [t2] 4", "{label}");
        // Now the child approves what it saw; this process reads the result.
        assert_eq!(
            ask("resume", "RESUME"),
            "RESUME Completed tools=1",
            "{label}"
        );
        assert!(!ha.is_paused().await.unwrap(), "{label}");
        let msgs = ha.messages().await.unwrap();
        assert_eq!(msgs.len(), 6, "{label}");
        assert_valid(&msgs);
        let trail = ha.decisions().await.unwrap();
        let applied: Vec<String> = trail
            .iter()
            .filter(|r| r.verdict == Verdict::Applied)
            .map(|r| {
                format!(
                    "{}:{}",
                    r.requirement_id,
                    r.actor.as_ref().map_or("-", |a| a.principal.as_str())
                )
            })
            .collect();
        assert_eq!(applied, ["t1:-", "t2:child"], "{label}");
        ask("exit", "");
        let _ = child.wait();
    }
}

// ----- property: interleavings of two workers ------------------------------------------

mod interleavings {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{HashMap, HashSet};

    /// Any object: the tools only log that they ran.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct AnyArgs {}

    /// A model that always has something to say: a user message gets one or two gated
    /// tool calls with fresh ids; tool results get a final answer or one more call.
    fn endless_model() -> ScriptedModel {
        ScriptedModel::from_fn(|req| {
            let last = req.messages.last();
            let n = req.messages.len();
            let fresh = || format!("u{}", reins_message::new_id());
            let after_user = last.is_some_and(|m| m.role == reins_message::Role::User);
            if after_user || n % 3 == 0 {
                let r = reins_model::ScriptedResponse::tool_call_with_id(
                    fresh(),
                    "delete_file",
                    json!({"path": format!("f{n}")}),
                );
                if n % 2 == 0 {
                    r.then_tool_call("send_email", json!({"to": "ops", "body": format!("b{n}")}))
                } else {
                    r
                }
            } else {
                reins_model::ScriptedResponse::text("done")
            }
        })
    }

    #[derive(Debug, Clone)]
    enum Op {
        Read,
        Call,
        Resume,
        ResolveFirst { approve: bool },
        Interleave,
    }

    fn op() -> impl Strategy<Value = (bool, Op)> {
        (
            any::<bool>(),
            prop_oneof![
                3 => Just(Op::Read),
                1 => Just(Op::Call),
                3 => Just(Op::Resume),
                3 => any::<bool>().prop_map(|approve| Op::ResolveFirst { approve }),
                1 => Just(Op::Interleave),
            ],
        )
    }

    /// What each tool call saw: which worker's shown set it was approved from.
    struct World {
        handles: [Session; 2],
        /// The requirement ids each worker was last shown.
        shown: [Vec<String>; 2],
        executed: Arc<std::sync::Mutex<Vec<String>>>,
    }

    async fn step(w: &mut World, who: usize, op: &Op) -> Result<(), TestCaseError> {
        let h = w.handles[who].clone();
        let before: HashSet<String> = w.executed.lock().unwrap().iter().cloned().collect();
        let shown = w.shown[who].clone();
        let result = match op {
            Op::Read => {
                w.shown[who] = ids(&h.requirements().await.unwrap());
                return Ok(());
            }
            Op::Call => h.send(Msg::user("go on")).await,
            Op::Resume => h.resume().await,
            Op::ResolveFirst { approve } => {
                let Some(id) = shown.first().cloned() else {
                    return Ok(());
                };
                let d = if *approve {
                    Decision::approve(id)
                } else {
                    Decision::reject(id, "no")
                };
                h.resolve(vec![d]).await
            }
            Op::Interleave => {
                let other = w.handles[1 - who].clone();
                let (x, y) = tokio::join!(h.resume(), other.resume());
                let shown_other = w.shown[1 - who].clone();
                for (r, k) in [(x, who), (y, 1 - who)] {
                    if let Ok(out) = r {
                        w.shown[k] = ids(&out.requirements);
                    }
                }
                let now: Vec<String> = w.executed.lock().unwrap().clone();
                let allowed: HashSet<&String> = shown.iter().chain(&shown_other).collect();
                for id in now.iter().filter(|id| !before.contains(*id)) {
                    prop_assert!(
                        allowed.contains(id),
                        "{id} ran though neither worker was shown it"
                    );
                }
                return Ok(());
            }
        };
        // Whatever ran during this op was approved from what this worker was shown.
        let now: Vec<String> = w.executed.lock().unwrap().clone();
        for id in now.iter().filter(|id| !before.contains(*id)) {
            prop_assert!(
                shown.contains(id),
                "{id} ran on worker {who}'s {op:?} though it was shown {shown:?}"
            );
        }
        match result {
            Ok(out) => w.shown[who] = ids(&out.requirements),
            Err(
                AgentError::StaleView { .. }
                | AgentError::NothingToResume { .. }
                | AgentError::UnknownRequirement { .. }
                | AgentError::AlreadyDecided { .. }
                | AgentError::SessionBusy { .. }
                | AgentError::InvalidInput(_),
            ) => {}
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
        Ok(())
    }

    async fn scenario(store: Store, ops: Vec<(bool, Op)>) -> Result<(), TestCaseError> {
        let executed: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let make = |who: &str| {
            let mut tools = reins_tool::Toolkit::new();
            for name in ["delete_file", "send_email"] {
                let log = executed.clone();
                tools
                    .add(
                        reins_tool::Toolkit::function(
                            name,
                            "a side effect",
                            move |_args: AnyArgs, ctx: reins_tool::ToolContext| {
                                let log = log.clone();
                                async move {
                                    log.lock().unwrap().push(ctx.tool_use_id.clone());
                                    Ok::<_, reins_tool::ToolError>("ok".to_owned())
                                }
                            },
                        )
                        .policy(ToolPolicy::confirm()),
                    )
                    .unwrap();
            }
            Agent::builder()
                .name(who)
                .model(endless_model())
                .toolkit(tools)
                .store_arc(store.clone())
                .build()
                .unwrap()
        };
        let (a, b) = (make("A"), make("B"));
        let sid = format!("prop-{}", reins_message::new_id());
        let ha = a.session(&sid).await.unwrap();
        let hb = b.session(&sid).await.unwrap();
        let first = ha.send(Msg::user("start")).await.unwrap();
        let mut w = World {
            handles: [ha.clone(), hb],
            shown: [ids(&first.requirements), Vec::new()],
            executed: executed.clone(),
        };
        for (who, op) in &ops {
            step(&mut w, usize::from(*who), op).await?;
        }
        // No tool ran twice.
        let ran = executed.lock().unwrap().clone();
        let unique: HashSet<&String> = ran.iter().collect();
        prop_assert_eq!(unique.len(), ran.len(), "a tool ran twice: {:?}", ran);
        // The stored transcript is provider-valid once the calls still pending get
        // their results (which is what answering them appends).
        let mut msgs = ha.messages().await.unwrap();
        let pending = ha.requirements().await.unwrap();
        if !pending.is_empty() {
            msgs.push(Msg::tool_results(pending.iter().map(|r| {
                reins_message::ToolResult::rejected(&r.id, &r.tool_use.name, None)
            })));
        }
        assert_valid(&msgs);
        // Every executed call has exactly one applied approval in the audit trail.
        let trail = ha.decisions().await.unwrap();
        let mut approvals: HashMap<&str, usize> = HashMap::new();
        for r in &trail {
            if r.verdict == Verdict::Applied && r.decision == "approve" {
                *approvals.entry(r.requirement_id.as_str()).or_default() += 1;
            }
        }
        for id in &ran {
            prop_assert_eq!(
                approvals.get(id.as_str()),
                Some(&1),
                "{} in {:?}",
                id,
                trail
            );
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn two_workers_never_run_what_they_were_not_shown(ops in proptest::collection::vec(op(), 1..24)) {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(scenario(Arc::new(InMemoryStore::new()), ops))?;
        }

        #[test]
        fn the_same_holds_on_sqlite(ops in proptest::collection::vec(op(), 1..16)) {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            let dir = tempfile::tempdir().unwrap();
            rt.block_on(async {
                let store: Store = Arc::new(reins_memory::SqliteStore::open(dir.path().join("p.db")).await.unwrap());
                scenario(store, ops).await
            })?;
        }
    }
}
