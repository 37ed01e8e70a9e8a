//! The Tasks extension across two server instances on one store: a task created on
//! A is answered and cancelled through B and read on both; a task decided in the
//! inbox (the session port's decision path, as reins-server's inbox calls it) completes
//! for the MCP client ([`support::tasks_flow`]; tests/drivers.rs runs it on Restate).
//! On PostgreSQL when `REINS_TEST_POSTGRES_URL` is set (`cargo xtask test` sets it;
//! required under `CI=true`), and always on one shared SQLite file.
//! The client is a raw JSON-RPC client written from the spec (tests/client/tasks.mjs):
//! the published TypeScript SDK does not speak this extension yet.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::Arc;

use reins_memory::MemoryStore;
use support::*;

/// Two instances of the door on one store (two agents on the local driver), and the
/// Tasks flow through them.
async fn flow(a: Arc<dyn MemoryStore>, b: Arc<dyn MemoryStore>, label: &str) {
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::file(dir.path().join("ran.txt"));
    let (agent_a, agent_b) = (agent(a, &ran), agent(b, &ran));
    tasks_flow(Arc::new(agent_a), Arc::new(agent_b), &ran, label).await;
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

/// A task whose session is stored before its first message (a driver running the
/// session elsewhere stores it first; an instance that did not start it reads it then)
/// is working, not unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_stored_before_its_first_message_is_working() {
    if !have_node("a_task_stored_before_its_first_message_is_working") {
        return;
    }
    let (_dir, store) = sqlite_store().await;
    let id = format!("mcp/alice/{}", reins_message::new_id());
    store.open_session(&id).await.unwrap();
    let http = serve_http(server(agent(store, &Ran::default()))).await;
    let out = run_client("tasks.mjs", &["peek", &http.url, &id], &[]).await;
    assert_eq!(out["status"], "working", "{out}");
    // One that is not stored at all is unknown.
    let out = run_client("tasks.mjs", &["peek", &http.url, "mcp/alice/nope"], &[]).await;
    assert_eq!(out["error"]["code"], -32602, "{out}");
}
