//! reins → reins over A2A on loopback: a local agent whose tool is a remote reins
//! agent (reins-server's A2A endpoint). The remote pause pauses the local run with a
//! requirement naming the remote agent; the local decision goes back as the follow-up
//! message; and a decision that reaches a process where the call is not live (a
//! restart) never sends the original message again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_agent::{Agent, Decision, RequirementKind, RunStatus};
use reins_memory::MemoryStore;
use reins_message::{Msg, Role};
use reins_model::{ChatRequest, ScriptedModel, ScriptedResponse};
use reins_server::{AccessRole, Auth, Principal, Server};
use reins_tool::{ToolError, ToolPolicy, Toolkit};
use serde_json::json;

const REMOTE_TOKEN: &str = "local-agent-token";

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// The file.
    path: String,
}

/// The remote reins agent: `delete X` asks for confirmation; results are summarised.
fn remote_agent(store: Arc<dyn MemoryStore>, ran: Arc<Mutex<Vec<String>>>) -> Agent {
    let mut t = Toolkit::new();
    t.add(
        Toolkit::function("delete_file", "Delete a file", move |a: PathArgs, _ctx| {
            let ran = ran.clone();
            async move {
                ran.lock().unwrap().push(format!("delete:{}", a.path));
                Ok::<_, ToolError>(format!("deleted {}", a.path))
            }
        })
        .policy(ToolPolicy::confirm()),
    )
    .unwrap();
    let model = ScriptedModel::from_fn(|req: &ChatRequest| {
        let last = req
            .messages
            .iter()
            .rev()
            .find(|m| m.role != Role::System)
            .unwrap();
        if last.role == Role::Tool {
            let r: Vec<String> = last.tool_results_iter().map(|r| r.text()).collect();
            return ScriptedResponse::text(format!("remote: {}", r.join("; ")));
        }
        let text = last.text();
        match text.strip_prefix("delete ") {
            Some(path) => ScriptedResponse::tool_call("delete_file", json!({"path": path})),
            None => ScriptedResponse::text(format!("remote echo: {text}")),
        }
    });
    Agent::builder()
        .name("Billing")
        .model(model)
        .toolkit(t)
        .store_arc(store)
        .build()
        .unwrap()
}

/// The local agent: every user message goes to the remote agent; its answer is
/// summarised.
fn local_agent(store: Arc<dyn MemoryStore>, remote: &str) -> Agent {
    let mut t = Toolkit::new();
    t.add_dynamic(
        reins_a2a::A2aAgent::new("billing", remote)
            .bearer(REMOTE_TOKEN)
            .timeout(Duration::from_secs(20))
            .tool()
            .unwrap(),
    )
    .unwrap();
    let model = ScriptedModel::from_fn(|req: &ChatRequest| {
        let last = req
            .messages
            .iter()
            .rev()
            .find(|m| m.role != Role::System)
            .unwrap();
        if last.role == Role::Tool {
            let r: Vec<String> = last
                .tool_results_iter()
                .map(|r| format!("{:?} {}", r.outcome, r.text()))
                .collect();
            return ScriptedResponse::text(format!("local: {}", r.join("; ")));
        }
        ScriptedResponse::tool_call("billing", json!({"message": last.text()}))
    });
    Agent::builder()
        .name("Local")
        .model(model)
        .toolkit(t)
        .store_arc(store)
        .session_lease(Duration::from_secs(2))
        .tool_lease(Duration::from_secs(2))
        .build()
        .unwrap()
}

struct Remote {
    base: String,
    store: Arc<dyn MemoryStore>,
    ran: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn sqlite(dir: &tempfile::TempDir, name: &str) -> Arc<dyn MemoryStore> {
    Arc::new(
        reins_memory::SqliteStore::open(dir.path().join(name))
            .await
            .unwrap(),
    )
}

async fn remote() -> Remote {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir, "remote.db").await;
    let ran: Arc<Mutex<Vec<String>>> = Arc::default();
    let auth = Auth::new().token(
        REMOTE_TOKEN,
        Principal::new("local-agent", [AccessRole::User, AccessRole::Approver]),
    );
    let server = Server::new(remote_agent(store.clone(), ran.clone())).auth(auth);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = server.serve(listener).await;
    });
    Remote {
        base,
        store,
        ran,
        task,
        _dir: dir,
    }
}

/// How many messages the remote agent was ever sent (user messages in its store).
async fn remote_messages(r: &Remote) -> usize {
    let mut n = 0;
    for s in r.store.list_sessions().await.unwrap() {
        let st = r.store.load_session(&s.id).await.unwrap();
        n += st.messages.iter().filter(|m| m.role == Role::User).count();
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_pause_is_decided_locally_and_sent_back() {
    let r = remote().await;
    let dir = tempfile::tempdir().unwrap();
    let local = local_agent(sqlite(&dir, "local.db").await, &r.base);
    let session = local.session("me/1").await.unwrap();

    let out = session.send(Msg::user("delete a.txt")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let req = &out.requirements[0];
    assert!(matches!(req.kind, RequirementKind::UserInput { .. }));
    assert!(
        req.reason.contains("remote agent `billing`") && req.reason.contains("delete_file"),
        "{}",
        req.reason
    );
    assert!(r.ran.lock().unwrap().is_empty(), "nothing ran remotely yet");

    let out = session
        .resolve(vec![Decision::input(
            req.id.clone(),
            json!({"approve": true}),
        )])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed, "{out:?}");
    assert!(
        out.message.text().contains("deleted a.txt"),
        "{}",
        out.message.text()
    );
    assert_eq!(*r.ran.lock().unwrap(), ["delete:a.txt"]);
    assert_eq!(remote_messages(&r).await, 1);

    // A rejection goes back too: the remote call is not run, and says why.
    let out = session.send(Msg::user("delete b.txt")).await.unwrap();
    let req = &out.requirements[0];
    let out = session
        .resolve(vec![Decision::input(
            req.id.clone(),
            json!({"approve": false, "note": "keep b"}),
        )])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert!(
        out.message.text().contains("keep b"),
        "{}",
        out.message.text()
    );
    assert_eq!(*r.ran.lock().unwrap(), ["delete:a.txt"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_after_a_restart_never_sends_the_message_twice() {
    let r = remote().await;
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir, "local.db").await;
    let first = local_agent(store.clone(), &r.base);
    let out = first
        .session("me/2")
        .await
        .unwrap()
        .send(Msg::user("delete c.txt"))
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let req_id = out.requirements[0].id.clone();
    assert_eq!(remote_messages(&r).await, 1);

    // "Another process": a new agent on the same store, where the call is not live.
    let second = local_agent(store, &r.base);
    let out = second
        .session("me/2")
        .await
        .unwrap()
        .resolve(vec![Decision::input(req_id, json!({"approve": true}))])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert!(
        out.message.text().contains("Unknown"),
        "{}",
        out.message.text()
    );
    // The original message was sent once, and nothing ran remotely.
    assert_eq!(remote_messages(&r).await, 1);
    assert!(r.ran.lock().unwrap().is_empty());
    drop(first);
}
