//! One front end, two backends: the same `SessionBackend` contract holds for the local
//! driver (an `Agent` in this process) and for sessions on Restate (a `RestateClient`
//! in front of a real restate-server and the demo service as a child process).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reins_agent::run::Phase;
use reins_agent::{
    Agent, AgentError, Decision, RunInput, RunStatus, SessionBackend, Submission, ViewToken,
};
use reins_memory::MemoryStore;
use reins_message::Msg;
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_tool::{ToolError, ToolPolicy, Toolkit};
use serde_json::json;

/// Reads the session until it is past version `after` and not running.
async fn settle(b: &dyn SessionBackend, session: &str, after: u64) -> reins_agent::SessionView {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(v) = b.view(session).await
            && v.version > after
            && !matches!(
                v.phase,
                Phase::Reasoning | Phase::Acting | Phase::Summarizing
            )
        {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "session {session} did not settle"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn decide(id: &str, view: Option<ViewToken>) -> Submission {
    let mut s = Submission::new(RunInput::Decisions(vec![Decision::approve(id)]));
    s.view = view;
    s
}

/// The contract: unknown session, a pause, a stale view refused, an approval that runs
/// the tool once, a decision for nothing pending refused, a replay that runs nothing.
/// Each view the backend shows is the one `reins_agent::stored_view` computes from
/// what `store` holds (the one computation of a session's view).
async fn contract(
    b: &dyn SessionBackend,
    store: &Arc<dyn MemoryStore>,
    session: &str,
    runs: impl Fn() -> usize,
) {
    let same_view = |v: reins_agent::SessionView| async move {
        let stored = store.load_session(session).await.unwrap();
        let computed = reins_agent::stored_view(store, stored).await.unwrap();
        assert_eq!(v, computed);
    };
    assert!(matches!(
        b.view("nobody").await,
        Err(AgentError::Store(
            reins_memory::Error::SessionNotFound { .. }
        ))
    ));
    assert!(matches!(
        b.submit("nobody", decide("call_1", None)).await,
        Err(AgentError::Store(
            reins_memory::Error::SessionNotFound { .. }
        ))
    ));

    let mut first = Submission::new(RunInput::Message(Msg::user("delete x.txt")));
    first.idempotency_key = Some(format!("{session}-1"));
    b.submit(session, first).await.unwrap();
    let view = settle(b, session, 0).await;
    assert!(view.paused, "{view:?}");
    same_view(view.clone()).await;
    assert_eq!(view.requirements.len(), 1);
    let id = view.requirements[0].id.clone();

    let stale = ViewToken::new(true, ["call_other"]);
    match b.submit(session, decide(&id, Some(stale))).await {
        Err(AgentError::StaleView { seen, pending }) => {
            assert_eq!(seen, ["call_other"]);
            assert_eq!(pending, view.requirements);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(runs(), 0);

    let mut approve = decide(&id, Some(view.token.clone()));
    approve.actor = Some(reins_agent::Actor::new("ana"));
    b.submit(session, approve).await.unwrap();
    let end = settle(b, session, view.version).await;
    assert_eq!(end.phase, Phase::Finished(RunStatus::Completed));
    same_view(end).await;
    assert_eq!(runs(), 1);

    // The same decision again (a late second approver): refused, nothing runs, and
    // both drivers say which decision answered it and who made it (the audit trail).
    // The turn's invocation may still be closing when the store shows the run finished:
    // a submit in that instant is refused as busy, and is tried again (bounded).
    let mut again = b.submit(session, decide(&id, None)).await;
    for _ in 0..50 {
        if !matches!(again, Err(AgentError::SessionBusy { .. })) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        again = b.submit(session, decide(&id, None)).await;
    }
    match again {
        Err(AgentError::AlreadyDecided { id: got, decided }) => {
            assert_eq!(got, id);
            assert_eq!(decided.decision, "approve");
            assert_eq!(decided.by.as_deref(), Some("ana"));
        }
        other => panic!("{other:?}"),
    }
    // On the stale view too (the view it was shown is gone): the same answer.
    let late = b
        .submit(session, decide(&id, Some(view.token.clone())))
        .await;
    assert!(
        matches!(late, Err(AgentError::AlreadyDecided { .. })),
        "{late:?}"
    );
    assert!(!b.interrupt(session).await.unwrap());
    assert_eq!(runs(), 1);

    // A replay with the backend's own agent: the recorded call is served, none runs;
    // each turn goes to the listener, and an unknown session is refused.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let report = b.replay(session, Some(tx)).await.unwrap();
    assert_eq!(report.source, session);
    assert_eq!(report.turns.len(), 1, "{report:?}");
    assert_eq!(report.turns[0].served, ["delete_file"], "{report:?}");
    assert!(report.matches(), "{report:?}");
    assert_eq!(rx.recv().await.as_ref(), Some(&report.turns[0]));
    assert!(matches!(
        b.replay("nobody", None).await,
        Err(AgentError::Store(
            reins_memory::Error::SessionNotFound { .. }
        ))
    ));
    assert_eq!(runs(), 1);
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct DeleteArgs {
    /// The file.
    #[allow(dead_code)]
    path: String,
}

#[tokio::test]
async fn the_local_driver_keeps_the_backend_contract() {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&runs);
    let mut tools = Toolkit::new();
    tools
        .add(
            Toolkit::function(
                "delete_file",
                "Delete a file",
                move |_a: DeleteArgs, _ctx| {
                    let r = Arc::clone(&r);
                    async move {
                        r.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, ToolError>("deleted")
                    }
                },
            )
            .policy(ToolPolicy::confirm()),
        )
        .unwrap();
    // The run, then its replay (the same answers).
    let call =
        || ScriptedResponse::tool_call_with_id("call_1", "delete_file", json!({"path": "x.txt"}));
    let model = ScriptedModel::new([
        call(),
        ScriptedResponse::text("done"),
        call(),
        ScriptedResponse::text("done"),
    ]);
    let agent = Agent::builder()
        .model(model)
        .toolkit(tools)
        .build()
        .unwrap();
    let store = agent.store().clone();
    contract(&agent, &store, "local-1", || runs.load(Ordering::SeqCst)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restate_deployment_keeps_the_backend_contract() {
    let Some(h) = support::Harness::start(&[]).await else {
        return;
    };
    let backend: Arc<dyn SessionBackend> = Arc::new(h.client.clone());
    let store: Arc<dyn MemoryStore> = Arc::new(
        reins_memory::SqliteStore::open(h.dir.path().join("reins.sqlite"))
            .await
            .unwrap(),
    );
    contract(&backend, &store, "restate-1", || {
        h.count("delete_file start")
    })
    .await;
}
