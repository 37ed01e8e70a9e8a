//! The Tasks extension across two server instances on one store: a task created on
//! A is answered and cancelled through B and read on both; a task decided in the
//! inbox (reins's own decision API, as reins-server's inbox calls it) completes for
//! the MCP client. On PostgreSQL when `REINS_TEST_POSTGRES_URL` is set (`cargo xtask
//! test` sets it; required under `CI=true`), and always on one shared SQLite file.
//! The client is a raw JSON-RPC client written from the spec (tests/client/tasks.mjs):
//! the published TypeScript SDK does not speak this extension yet.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::Arc;

use reins_agent::{Actor, Decision};
use reins_memory::MemoryStore;
use support::*;

async fn flow(a: Arc<dyn MemoryStore>, b: Arc<dyn MemoryStore>, label: &str) {
    let (ran_a, ran_b) = (Ran::default(), Ran::default());
    let agent_a = agent(a, &ran_a);
    let agent_b = agent(b, &ran_b);
    let http_a = serve_http(server(agent_a.clone())).await;
    let http_b = serve_http(server(agent_b.clone())).await;

    let out = run_client("tasks.mjs", &["flow", &http_a.url, &http_b.url], &[]).await;
    assert_eq!(out["withoutExtension"], "complete", "{label}: {out}");
    assert_eq!(out["created"]["resultType"], "task", "{label}: {out}");
    assert_eq!(out["created"]["status"], "working");
    assert_eq!(out["created"]["pollIntervalMs"], 100);
    let id = out["created"]["taskId"].as_str().unwrap();
    assert!(id.starts_with("mcp/alice/"), "{id}");
    assert_eq!(
        out["waitingOnB"]["status"], "input_required",
        "{label}: {out}"
    );
    assert!(
        out["waitingOnB"]["message"]
            .as_str()
            .unwrap()
            .contains("t.txt")
    );
    assert_eq!(out["foreign"]["code"], -32602, "{label}: {out}");
    assert!(out["update"]["result"].is_object(), "{label}: {out}");
    assert_eq!(out["doneOnA"]["status"], "completed", "{label}: {out}");
    assert!(
        out["doneOnA"]["text"]
            .as_str()
            .unwrap()
            .contains("deleted t.txt")
    );
    assert_eq!(out["doneOnB"]["status"], "completed");
    assert_eq!(out["workingBeforeCancel"], "working", "{label}: {out}");
    assert!(out["cancel"]["result"].is_object(), "{label}: {out}");
    assert_eq!(out["cancelled"]["status"], "cancelled", "{label}: {out}");
    assert_eq!(out["unknown"]["code"], -32602, "{label}: {out}");
    // The approved delete ran once, on B (which resolved it).
    let deletes: Vec<String> = ran_a
        .all()
        .into_iter()
        .chain(ran_b.all())
        .filter(|r| r.starts_with("delete:"))
        .collect();
    assert_eq!(deletes, ["delete:t.txt"], "{label}");
    assert!(
        ran_a.all().contains(&"slow-stopped:s.txt".to_owned()),
        "{label}: {:?}",
        ran_a.all()
    );

    // A task decided in the inbox (another worker, a person's decision) completes.
    let out = run_client(
        "tasks.mjs",
        &["start", &http_a.url, "delete inbox.txt"],
        &[],
    )
    .await;
    assert_eq!(out["status"], "input_required", "{label}: {out}");
    let id = out["taskId"].as_str().unwrap();
    let session = agent_b
        .session(id)
        .await
        .unwrap()
        .as_actor(Actor::new("carol@inbox"));
    let pending = session.requirements().await.unwrap();
    assert_eq!(pending.len(), 1);
    session
        .resolve(vec![Decision::approve(&pending[0].id).by("carol@inbox")])
        .await
        .unwrap();
    let out = run_client("tasks.mjs", &["get", &http_a.url, id], &[]).await;
    assert_eq!(out["status"], "completed", "{label}: {out}");
    assert!(out["text"].as_str().unwrap().contains("deleted inbox.txt"));
    let audit = session.decisions().await.unwrap();
    assert_eq!(
        audit.last().unwrap().actor.as_ref().unwrap().principal,
        "carol@inbox"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_seen_from_two_instances_on_sqlite() {
    if !have_node("a_task_seen_from_two_instances_on_sqlite") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let a = reins_memory::SqliteStore::open(&path).await.unwrap();
    let b = reins_memory::SqliteStore::open(&path).await.unwrap();
    flow(Arc::new(a), Arc::new(b), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_seen_from_two_instances_on_postgres() {
    let Some(url) = std::env::var("REINS_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            std::env::var("CI").is_err(),
            "REINS_TEST_POSTGRES_URL is not set under CI: run through `cargo xtask test`"
        );
        eprintln!(
            "SKIPPED a_task_seen_from_two_instances_on_postgres: REINS_TEST_POSTGRES_URL is not set (use `cargo xtask test -p reins-mcp-server`)"
        );
        return;
    };
    if !have_node("a_task_seen_from_two_instances_on_postgres") {
        return;
    }
    let schema = format!("reins_mcp_{}", reins_message::new_id().replace('-', ""));
    let open = || async {
        reins_memory::PostgresStore::connect_with(
            &url,
            reins_memory::PostgresOptions::default()
                .schema(schema.clone())
                .max_connections(4),
        )
        .await
        .unwrap()
    };
    let a = open().await;
    let b = open().await;
    flow(Arc::new(a), Arc::new(b), "postgres").await;
}
