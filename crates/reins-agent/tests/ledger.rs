//! At-most-once execution and durable pauses: the ledger, two agents on one SQLite
//! file, a simulated crash between claim and finish, and a resume in another process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reins_agent::{Agent, AgentError, Decision, RunStatus};
use reins_memory::{MemoryStore, SqliteStore};
use reins_message::{Msg, ToolOutcome};
use reins_model::ScriptedModel;
use reins_tool::ToolPolicy;
use serde_json::json;
use support::*;

fn script() -> ScriptedModel {
    ScriptedModel::new([
        call("c1", "delete_file", json!({"path": "a.txt"})),
        text("done"),
    ])
}

async fn sqlite(path: &Path) -> Arc<dyn MemoryStore> {
    Arc::new(SqliteStore::open(path).await.unwrap())
}

#[tokio::test]
async fn a_pause_survives_dropping_everything() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("reins.db");
    let counter = Counter::default();
    {
        let agent = agent(script(), toolkit(&counter, ToolPolicy::confirm()))
            .store_arc(sqlite(&db).await)
            .build()
            .unwrap();
        let out = agent
            .session("durable")
            .await
            .unwrap()
            .send(Msg::user("delete a.txt"))
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Paused);
    }
    // A new agent on the same file, with a model that only knows the rest of the story.
    let model = ScriptedModel::new([text("done")]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::confirm()))
        .store_arc(sqlite(&db).await)
        .build()
        .unwrap();
    let session = agent.session("durable").await.unwrap();
    assert!(session.is_paused().await.unwrap());
    assert_eq!(session.requirements().await.unwrap()[0].id, "c1");
    let out = session
        .resolve(vec![Decision::approve("c1")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("delete_file"), 1);
}

#[tokio::test]
async fn resuming_from_two_agents_at_once_runs_the_tool_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("race.db");
    let store_a = sqlite(&db).await;
    let store_b = sqlite(&db).await;
    for round in 0..20 {
        let counter = Counter::default();
        let sid = format!("race-{round}");
        let a = agent(script(), toolkit(&counter, ToolPolicy::confirm()))
            .store_arc(store_a.clone())
            .build()
            .unwrap();
        a.session(&sid)
            .await
            .unwrap()
            .send(Msg::user("delete"))
            .await
            .unwrap();
        let b = agent(
            ScriptedModel::new([text("done")]),
            toolkit(&counter, ToolPolicy::confirm()),
        )
        .store_arc(store_b.clone())
        .build()
        .unwrap();
        let a2 = agent(
            ScriptedModel::new([text("done")]),
            toolkit(&counter, ToolPolicy::confirm()),
        )
        .store_arc(store_a.clone())
        .build()
        .unwrap();
        let (sa, sb) = (
            a2.session(&sid).await.unwrap(),
            b.session(&sid).await.unwrap(),
        );
        let (ra, rb) = tokio::join!(sa.resume(), sb.resume());
        let ok = [&ra, &rb].iter().filter(|r| r.is_ok()).count();
        assert!(ok >= 1, "round {round}: {ra:?} {rb:?}");
        for r in [&ra, &rb] {
            if let Err(e) = r {
                assert!(
                    matches!(
                        e,
                        AgentError::SessionBusy { .. }
                            | AgentError::NothingToResume { .. }
                            | AgentError::StaleView { .. }
                            | AgentError::Store(_)
                    ),
                    "round {round}: unexpected {e}"
                );
            }
        }
        assert_eq!(counter.count("delete_file"), 1, "round {round}");
    }
}

#[tokio::test]
async fn resuming_twice_in_a_row_runs_the_tool_once() {
    let counter = Counter::default();
    let agent = agent(script(), toolkit(&counter, ToolPolicy::confirm()))
        .build()
        .unwrap();
    let s = agent.session("twice").await.unwrap();
    s.send(Msg::user("delete")).await.unwrap();
    s.resume().await.unwrap();
    assert!(s.resume().await.is_err());
    assert_eq!(counter.count("delete_file"), 1);
}

/// A crash between claim and finish: another worker claimed the call (its lease has
/// run out) and never finished it. The resume must not run it again.
#[tokio::test]
async fn a_claim_that_was_never_finished_becomes_unknown() {
    let counter = Counter::default();
    let agent = agent(script(), toolkit(&counter, ToolPolicy::confirm()))
        .build()
        .unwrap();
    let s = agent.session("crash").await.unwrap();
    s.send(Msg::user("delete")).await.unwrap();
    let fp = reins_memory::fingerprint(&json!({"path": "a.txt"}));
    let claim = agent
        .store()
        .claim("crash", "c1", &fp, Duration::from_millis(1), false)
        .await
        .unwrap();
    assert!(matches!(claim, reins_memory::Claim::Granted));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let out = s.resume().await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("delete_file"), 0, "never run twice");
    let msgs = s.messages().await.unwrap();
    assert_eq!(outcomes(&msgs)["c1"], ToolOutcome::Unknown);
    assert!(result_text(&msgs, "c1").contains("unknown"));
}

#[tokio::test]
async fn an_idempotent_tool_is_run_again_after_a_crash() {
    let counter = Counter::default();
    let mut tools = reins_tool::Toolkit::new();
    let c = counter.clone();
    tools
        .add(
            reins_tool::Toolkit::function(
                "delete_file",
                "Delete a file",
                move |a: PathArgs, _ctx| {
                    let c = c.clone();
                    async move {
                        c.record("delete_file", json!({"path": a.path}));
                        Ok::<_, reins_tool::ToolError>("deleted".to_owned())
                    }
                },
            )
            .policy(ToolPolicy::confirm().idempotent(true)),
        )
        .unwrap();
    let agent = agent(script(), tools).build().unwrap();
    let s = agent.session("crash-idem").await.unwrap();
    s.send(Msg::user("delete")).await.unwrap();
    let fp = reins_memory::fingerprint(&json!({"path": "a.txt"}));
    agent
        .store()
        .claim("crash-idem", "c1", &fp, Duration::from_millis(1), false)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let out = s.resume().await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("delete_file"), 1);
    assert_eq!(
        outcomes(&s.messages().await.unwrap())["c1"],
        ToolOutcome::Success
    );
}

#[tokio::test]
async fn a_finished_call_reuses_its_recorded_result() {
    let counter = Counter::default();
    let agent = agent(script(), toolkit(&counter, ToolPolicy::confirm()))
        .build()
        .unwrap();
    let s = agent.session("reuse").await.unwrap();
    s.send(Msg::user("delete")).await.unwrap();
    // Another worker ran and recorded it, then died before the transcript was written.
    let fp = reins_memory::fingerprint(&json!({"path": "a.txt"}));
    let store = agent.store();
    store
        .claim("reuse", "c1", &fp, Duration::from_secs(60), false)
        .await
        .unwrap();
    store
        .finish(
            "reuse",
            "c1",
            &reins_message::ToolResult::success("c1", "delete_file", "deleted by worker 2"),
        )
        .await
        .unwrap();
    s.resume().await.unwrap();
    assert_eq!(counter.count("delete_file"), 0);
    assert_eq!(
        result_text(&s.messages().await.unwrap(), "c1"),
        "deleted by worker 2"
    );
}

#[tokio::test]
async fn a_second_call_while_one_runs_is_busy_and_many_sessions_run_in_parallel() {
    let model = ScriptedModel::from_fn(|_| reins_model::ScriptedResponse::text("ok"))
        .with_latency(Duration::from_millis(200));
    let agent = Agent::builder().model(model).build().unwrap();
    let s = agent.session("busy").await.unwrap();
    let run = s.send(Msg::user("one")).start().await.unwrap();
    let again = agent.session("busy").await.unwrap();
    assert!(matches!(
        again.send(Msg::user("two")).await,
        Err(AgentError::SessionBusy { .. })
    ));
    assert_eq!(run.wait().await.unwrap().status, RunStatus::Completed);

    let mut tasks = Vec::new();
    for i in 0..50 {
        let agent = agent.clone();
        tasks.push(tokio::spawn(async move {
            agent
                .session(&format!("p{i}"))
                .await
                .unwrap()
                .send(Msg::user("hi"))
                .await
                .unwrap()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().status, RunStatus::Completed);
    }
}

/// The second half of `resume_in_another_process`, run in a child process by that
/// test (ignored on its own: it needs the paused session the parent made).
#[tokio::test]
#[ignore = "run by resume_in_another_process in a child process"]
async fn child_process_resume() {
    let db =
        std::env::var("REINS_CHILD_DB").expect("REINS_CHILD_DB: run by resume_in_another_process");
    let log = std::env::var("REINS_CHILD_LOG").unwrap();
    let mut tools = reins_tool::Toolkit::new();
    tools
        .add(
            reins_tool::Toolkit::function(
                "delete_file",
                "Delete a file",
                move |a: PathArgs, _ctx| {
                    let log = log.clone();
                    async move {
                        use std::io::Write;
                        let mut f = std::fs::OpenOptions::new()
                            .append(true)
                            .create(true)
                            .open(&log)
                            .unwrap();
                        writeln!(f, "deleted {}", a.path).unwrap();
                        Ok::<_, reins_tool::ToolError>("deleted".to_owned())
                    }
                },
            )
            .policy(ToolPolicy::confirm()),
        )
        .unwrap();
    let agent = agent(ScriptedModel::new([text("done in the child")]), tools)
        .store_arc(sqlite(Path::new(&db)).await)
        .build()
        .unwrap();
    let out = agent
        .session("cross")
        .await
        .unwrap()
        .resolve(vec![Decision::approve("c1")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    println!("CHILD-OK {}", out.message.text());
}

#[tokio::test]
async fn resume_in_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cross.db");
    let log = dir.path().join("side-effects.log");
    let counter = Counter::default();
    {
        let agent = agent(script(), toolkit(&counter, ToolPolicy::confirm()))
            .store_arc(sqlite(&db).await)
            .build()
            .unwrap();
        let out = agent
            .session("cross")
            .await
            .unwrap()
            .send(Msg::user("delete a.txt"))
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Paused);
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "child_process_resume",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("REINS_CHILD_DB", &db)
        .env("REINS_CHILD_LOG", &log)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("CHILD-OK done in the child"), "{stdout}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "deleted a.txt\n");
    // Back in this process, the session shows the completed run.
    let store = sqlite(&db).await;
    let state = store.load_session("cross").await.unwrap();
    assert_valid(&state.messages);
    assert_eq!(state.messages.last().unwrap().text(), "done in the child");
    assert_eq!(counter.total(), 0);
}
