//! The conformance suite against `PostgresStore` (two pools on one server), plus
//! PostgreSQL-specific checks. Needs `REINS_TEST_POSTGRES_URL`; without it the tests
//! fail under `CI=true` and report themselves skipped elsewhere.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use reins_memory::{
    Commit, Error, MemoryStore, POSTGRES_SCHEMA_VERSION, PostgresOptions, PostgresStore,
};
use reins_message::{Msg, new_id};

const URL_VAR: &str = "REINS_TEST_POSTGRES_URL";

/// The server URL, or `None` (after saying so loudly) when the tests must skip.
fn url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "{URL_VAR} is not set, but CI=true: the PostgreSQL conformance suite must run in CI \
                     (run it through `cargo xtask test`, which starts a throwaway server)"
                );
            }
            eprintln!(
                "SKIPPED: PostgreSQL store tests: {URL_VAR} is not set (run `cargo xtask test`, or point it at a scratch server)"
            );
            None
        }
    }
}

fn options() -> PostgresOptions {
    PostgresOptions::default().max_connections(6)
}

async fn stores() -> Option<(PostgresStore, PostgresStore, ())> {
    let url = url()?;
    let a = PostgresStore::connect_with(&url, options()).await.unwrap();
    let b = PostgresStore::connect_with(&url, options()).await.unwrap();
    Some((a, b, ()))
}

/// A store in a schema of its own, for tests that damage the database.
async fn private_store() -> Option<(PostgresStore, String, String)> {
    let url = url()?;
    let schema = format!("reins_test_{}", new_id().replace('-', ""));
    let store = PostgresStore::connect_with(&url, options().schema(schema.clone()))
        .await
        .unwrap();
    Some((store, url, schema))
}

conformance_tests!(stores);

#[tokio::test]
async fn corrupt_message_row_is_named() {
    let Some((store, _, _)) = private_store().await else {
        return;
    };
    store.open_session("s").await.unwrap();
    store
        .commit("s", Commit::at(0).append(Msg::user("fine")))
        .await
        .unwrap();
    sqlx::query("INSERT INTO reins_messages (session_id, seq, id, body) VALUES ('s', 1, 'bad-1', '{\"id\": \"bad-1\", \"role\": \"robot\"}')")
        .execute(store.pool())
        .await
        .unwrap();
    let err = store.load_session("s").await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, Error::Corrupt { ref session, .. } if session == "s"),
        "{text}"
    );
    assert!(text.contains("seq 1") && text.contains("bad-1"), "{text}");
}

#[tokio::test]
async fn newer_schema_is_refused_and_left_alone() {
    let Some((store, url, schema)) = private_store().await else {
        return;
    };
    assert_eq!(
        store.schema_version().await.unwrap(),
        POSTGRES_SCHEMA_VERSION
    );
    store.open_session("s").await.unwrap();
    sqlx::query("INSERT INTO reins_schema_version (version) VALUES (99)")
        .execute(store.pool())
        .await
        .unwrap();
    let err = PostgresStore::connect_with(&url, options().schema(schema.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::UnsupportedSchema {
                found: 99,
                supported: POSTGRES_SCHEMA_VERSION
            }
        ),
        "{err}"
    );
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM reins_schema_version ORDER BY version")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(
        versions,
        (1..=POSTGRES_SCHEMA_VERSION)
            .chain([99])
            .collect::<Vec<_>>()
    );
    assert!(store.load_session("s").await.is_ok());
    sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(store.pool())
        .await
        .unwrap();
}

#[tokio::test]
async fn bad_schema_name_is_refused() {
    let Some(url) = url() else { return };
    let err = PostgresStore::connect_with(&url, options().schema("x\"; DROP TABLE y; --"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("schema name"), "{err}");
}

#[tokio::test]
async fn workers_racing_to_migrate_a_fresh_schema_all_succeed() {
    let Some(url) = url() else { return };
    let schema = format!("reins_test_{}", new_id().replace('-', ""));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (url, schema) = (url.clone(), schema.clone());
        tasks.push(tokio::spawn(async move {
            PostgresStore::connect_with(&url, options().schema(schema)).await
        }));
    }
    for t in tasks {
        let store = t.await.unwrap().unwrap();
        assert_eq!(
            store.schema_version().await.unwrap(),
            POSTGRES_SCHEMA_VERSION
        );
    }
}

#[tokio::test]
async fn a_long_schema_name_still_gets_a_change_feed() {
    let Some(url) = url() else { return };
    let schema = format!(
        // Padded: a short process id must not make the name short.
        "reins_long_schema_name_for_the_change_channel_{:08}",
        std::process::id()
    );
    assert!(schema.len() > 49);
    let opts = || PostgresOptions::default().schema(schema.clone());
    let a = PostgresStore::connect_with(&url, opts()).await.unwrap();
    let b = PostgresStore::connect_with(&url, opts()).await.unwrap();
    a.open_session("s").await.unwrap();
    let mut feed = a.changes().await.unwrap();
    b.commit("s", Commit::at(0).append(Msg::user("hi")))
        .await
        .unwrap();
    let got = tokio::time::timeout(std::time::Duration::from_secs(20), feed.recv()).await;
    assert!(matches!(got, Ok(Ok(_))), "{got:?}");
}

/// A pooled connection the server closed (a restart, a proxy's idle cut) is noticed by
/// the ping made once it has been idle for `ping_when_idle_for`, and replaced: the next
/// store call works.
#[tokio::test]
async fn a_connection_closed_by_the_server_is_replaced_after_idling() {
    let Some(url) = url() else {
        return;
    };
    let schema = format!("reins_test_{}", new_id().replace('-', ""));
    let options = PostgresOptions::default()
        .max_connections(1)
        .schema(schema)
        .ping_when_idle_for(std::time::Duration::from_millis(50));
    let store = PostgresStore::connect_with(&url, options).await.unwrap();
    store.open_session("s").await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(store.pool())
        .await
        .unwrap();
    // Another connection ends the pool's only one.
    let killer = PostgresStore::connect(&url).await.unwrap();
    let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(killer.pool())
        .await
        .unwrap();
    assert!(ended, "the pool's connection should have been terminated");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(store.session_version("s").await.unwrap(), Some(0));
    let again: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_ne!(again, pid, "a new connection replaces the closed one");
}

#[tokio::test]
async fn a_version_4_schema_gets_its_open_requirements_indexed() {
    use sqlx::Connection;
    let Some(url) = url() else { return };
    let schema = format!("reins_test_{}", new_id().replace('-', ""));
    let mut open = reins_memory::RequirementRecord::new(
        "call_1",
        "confirmation",
        serde_json::json!({"tool_use": {"id": "call_1", "name": "send_email", "input": {}}}),
    );
    open.created_at = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00.123456789Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let mut decided = open.clone();
    decided.id = "call_0".to_owned();
    decided.decision = Some(serde_json::json!({"approve": true}));
    {
        // A schema as reins wrote it before the pending-requirements index.
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        let mut script = format!(
            "CREATE SCHEMA \"{schema}\"; SET search_path TO \"{schema}\"; \
             CREATE TABLE reins_schema_version (version BIGINT NOT NULL); \
             INSERT INTO reins_schema_version (version) VALUES (1), (2), (3), (4);"
        );
        for sql in [
            include_str!("../src/sql/postgres/schema.sql"),
            include_str!("../src/sql/postgres/schema_v2.sql"),
            include_str!("../src/sql/postgres/schema_v3.sql"),
            include_str!("../src/sql/postgres/schema_v4.sql"),
        ] {
            script.push_str(sql);
        }
        script.push_str("INSERT INTO reins_sessions VALUES ('old', 1, 0, 0, NULL, now(), now());");
        for r in [&decided, &open] {
            script.push_str(&format!(
                "INSERT INTO reins_requirements (session_id, id, is_open, body) VALUES ('old', '{}', {}, '{}');",
                r.id,
                r.is_open(),
                serde_json::to_string(r).unwrap()
            ));
        }
        sqlx::raw_sql(&script).execute(&mut conn).await.unwrap();
    }
    let store = PostgresStore::connect_with(&url, options().schema(schema.clone()))
        .await
        .unwrap();
    assert_eq!(
        store.schema_version().await.unwrap(),
        POSTGRES_SCHEMA_VERSION
    );
    let page = store
        .pending_requirements(&reins_memory::PendingFilter::first(10))
        .await
        .unwrap();
    assert_eq!(
        page,
        vec![reins_memory::PendingRequirement::of("old", &open)]
    );
    let by_tool = reins_memory::PendingFilter {
        tools: Some(vec!["send_email".to_owned()]),
        ..reins_memory::PendingFilter::first(10)
    };
    assert_eq!(store.pending_requirements(&by_tool).await.unwrap(), page);
    sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(store.pool())
        .await
        .unwrap();
}
