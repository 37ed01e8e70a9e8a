//! `Sessions::subscribe` on the Restate driver: a door holding `Relayed` over a
//! `RestateClient` follows the sessions a real restate-server and a service process of
//! their own run (this test binary started again as `subscribe_service`), on a second
//! handle of the SQLite file the service commits to — so every change reaches the door
//! through polling, unnamed. It hears the requirement a run waits on, then the approval
//! that cleared it at a higher version; a scoped subscription hears only its sessions.
//!
//! Fails under `CI=true` when restate-server is not installed; elsewhere it is
//! reported SKIPPED.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reins_agent::port::{
    Decide, Relayed, SessionChange, SessionEvent, SessionEvents, Sessions, Watch,
};
use reins_agent::{Actor, Agent, Decision, RunInput, RunStatus, Submission};
use reins_memory::{MemoryStore, SqliteStore};
use reins_message::{Msg, Role};
use reins_model::{ChatRequest, ScriptedModel, ScriptedResponse};
use reins_restate::{LocalRestate, RestateClient, SessionObject};
use reins_tool::{ToolError, ToolPolicy, Toolkit};
use serde_json::json;
use tokio::process::Command;

/// How long the test waits for an event before it fails (an event that comes returns
/// at once).
const FAIL_AFTER: Duration = Duration::from_secs(60);

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// The file.
    path: String,
}

/// `delete X` → a confirmed `delete_file` call; a tool result → `done`; anything else
/// → `hello`.
fn respond(req: &ChatRequest) -> ScriptedResponse {
    let last = req.messages.last().unwrap();
    if last.role == Role::Tool {
        return ScriptedResponse::text("done");
    }
    match last.text().strip_prefix("delete ") {
        Some(path) => {
            ScriptedResponse::tool_call_with_id("call_1", "delete_file", json!({"path": path}))
        }
        None => ScriptedResponse::text("hello"),
    }
}

/// The agent: what the service runs, and the door's configuration.
fn agent(store: Arc<dyn MemoryStore>) -> Agent {
    let mut tools = Toolkit::new();
    tools
        .add(
            Toolkit::function("delete_file", "Delete a file", |a: PathArgs, _ctx| async move {
                Ok::<_, ToolError>(format!("deleted {}", a.path))
            })
            .policy(ToolPolicy::confirm()),
        )
        .unwrap();
    Agent::builder()
        .name("Ops")
        .model(ScriptedModel::from_fn(respond))
        .toolkit(tools)
        .store_arc(store)
        .build()
        .unwrap()
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// The service process: the agent as the session object, until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by subscribe_on_restate as the service process"]
async fn subscribe_service() {
    let store: Arc<dyn MemoryStore> =
        Arc::new(SqliteStore::open(env("REINS_SUBSCRIBE_DB")).await.unwrap());
    let object = SessionObject::new(agent(store)).unwrap();
    let listener = tokio::net::TcpListener::bind(env("REINS_SUBSCRIBE_LISTEN"))
        .await
        .unwrap();
    reins_restate::serve(object, listener).await;
}

/// The next event of `events` that `pick` accepts.
async fn next_matching<T>(
    events: &mut SessionEvents,
    mut pick: impl FnMut(&SessionEvent) -> Option<T>,
) -> T {
    let wait = async {
        loop {
            let ev = events.next().await.expect("the subscription ended");
            if let Some(t) = pick(&ev) {
                return t;
            }
        }
    };
    tokio::time::timeout(FAIL_AFTER, wait)
        .await
        .unwrap_or_else(|_| panic!("no such event within {FAIL_AFTER:?}"))
}

/// The change of `session` that `ok` accepts.
fn change_of(
    session: &'static str,
    ok: impl Fn(&SessionChange) -> bool,
) -> impl FnMut(&SessionEvent) -> Option<Arc<SessionChange>> {
    move |ev| match ev {
        SessionEvent::Changed(c) if c.session == session && ok(c) => Some(c.clone()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_on_restate() {
    let Some(binary) = support::restate_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let restate = LocalRestate::start_with(binary, dir.path().join("restate"), "")
        .await
        .unwrap();
    let (db, log) = (
        dir.path().join("reins.sqlite"),
        dir.path().join("service.log"),
    );
    // The store exists (and is migrated) before either process opens it.
    let store: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(&db).await.unwrap());
    let port = reins_restate::local::free_port().unwrap();
    let out = std::fs::File::create(&log).unwrap();
    let _service = Command::new(std::env::current_exe().unwrap())
        .args(["subscribe_service", "--exact", "--ignored", "--nocapture"])
        .env("REINS_SUBSCRIBE_DB", &db)
        .env("REINS_SUBSCRIBE_LISTEN", format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    support::wait_until_listening(port, Duration::from_secs(30), &log).await;
    restate
        .register(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap();
    let client = RestateClient::new(restate.ingress_url());
    let sessions: Arc<dyn Sessions> = Arc::new(Relayed::new(agent(store), Arc::new(client)));

    let mut one = sessions.subscribe(Watch::session("t/1")).await.unwrap();
    let mut others = sessions.subscribe(Watch::prefix("u/")).await.unwrap();

    // A tool call that needs approval, run by the service: the door hears it wait.
    let input = Submission::new(RunInput::Message(Msg::user("delete a.txt")));
    let out = sessions
        .start("t/1", input)
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let paused_at = sessions.read("t/1", false).await.unwrap().view.version;
    let waiting = next_matching(
        &mut one,
        change_of("t/1", |c| {
            c.open_requirements
                .iter()
                .map(|r| r.id.as_str())
                .eq(["call_1"])
        }),
    )
    .await;
    assert_eq!(
        waiting.open_requirements[0].tool.as_deref(),
        Some("delete_file")
    );
    assert!(waiting.version <= paused_at);

    // The approval: the session waits for nobody, at a higher version.
    let decide = Decide::new(Actor::new("ana"), vec![Decision::approve("call_1")]);
    let out = sessions
        .decide("t/1", decide)
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(out.message.text(), "done");
    let done = sessions.read("t/1", false).await.unwrap();
    let cleared = next_matching(
        &mut one,
        change_of("t/1", |c| c.version >= done.view.version),
    )
    .await;
    assert!(
        !cleared.is_waiting() && cleared.version > paused_at,
        "{cleared:?}"
    );

    // Another session: the `u/` subscription's first event is it (it heard nothing
    // of t/1).
    let input = Submission::new(RunInput::Message(Msg::user("hi")));
    sessions
        .start("u/1", input)
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    let first = next_matching(&mut others, |ev| Some(ev.clone())).await;
    assert_eq!(first.session(), Some("u/1"), "{first:?}");
}
