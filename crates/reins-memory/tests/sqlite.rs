//! The conformance suite against `SqliteStore` (two stores on one database file), plus
//! SQLite-specific checks: corrupt rows, schema versions, durability, `:memory:`.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use reins_memory::{
    Commit, Durability, Error, MemoryStore, SQLITE_SCHEMA_VERSION, SqliteOptions, SqliteStore,
};
use reins_message::Msg;
use tempfile::TempDir;

async fn stores() -> Option<(SqliteStore, SqliteStore, TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reins.db");
    let a = SqliteStore::open(&path).await.unwrap();
    let b = SqliteStore::open_with(&path, SqliteOptions::default().durability(Durability::Full))
        .await
        .unwrap();
    Some((a, b, dir))
}

conformance_tests!(stores);

/// Runs SQL on one of the store's own connections.
async fn exec(store: &SqliteStore, sql: &'static str) {
    store
        .with_connection(move |c| c.execute_batch(sql))
        .await
        .unwrap();
}

async fn count(store: &SqliteStore, sql: &'static str) -> i64 {
    store
        .with_connection(move |c| c.query_row(sql, [], |r| r.get(0)))
        .await
        .unwrap()
}

#[tokio::test]
async fn in_memory_store_passes_a_round_trip() {
    let store = SqliteStore::open(":memory:").await.unwrap();
    store.open_session("s").await.unwrap();
    store
        .commit("s", Commit::at(0).append(Msg::user("hi")))
        .await
        .unwrap();
    // the single connection keeps the database alive between calls
    assert_eq!(store.load_session("s").await.unwrap().messages.len(), 1);
    assert_eq!(store.schema_version().await.unwrap(), SQLITE_SCHEMA_VERSION);
}

#[tokio::test]
async fn sessions_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reins.db");
    let m = Msg::user("remember me");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store.open_session("s").await.unwrap();
        store
            .commit("s", Commit::at(0).append(m.clone()))
            .await
            .unwrap();
        store.close().await;
    }
    let store = SqliteStore::open(&path).await.unwrap();
    let s = store.load_session("s").await.unwrap();
    assert_eq!((s.version, s.messages), (1, vec![m]));
    let mode: String = store
        .with_connection(|c| c.query_row("PRAGMA journal_mode", [], |r| r.get(0)))
        .await
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn corrupt_message_row_is_named() {
    let store = SqliteStore::in_memory().await.unwrap();
    store.open_session("s").await.unwrap();
    let good = Msg::user("fine");
    store
        .commit("s", Commit::at(0).append(good.clone()))
        .await
        .unwrap();
    exec(&store, "INSERT INTO reins_messages (session_id, seq, id, body) VALUES ('s', 1, 'bad-1', '{\"id\":\"bad-1\",\"role\":\"robot\",\"content\":[],\"created_at\":\"2026-01-01T00:00:00Z\"}')").await;
    let err = store.load_session("s").await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, Error::Corrupt { ref session, .. } if session == "s"),
        "{text}"
    );
    assert!(
        text.contains("seq 1") && text.contains("bad-1") && text.contains("role"),
        "{text}"
    );
    // a commit on the session still works and changes nothing else
    let rows = count(
        &store,
        "SELECT COUNT(*) FROM reins_messages WHERE session_id = 's'",
    )
    .await;
    assert_eq!(rows, 2);
}

#[tokio::test]
async fn corrupt_ledger_and_run_state_rows_are_named() {
    let store = SqliteStore::in_memory().await.unwrap();
    store.open_session("s").await.unwrap();
    exec(
        &store,
        "UPDATE reins_sessions SET run_state = '{not json' WHERE id = 's'",
    )
    .await;
    let err = store.load_session("s").await.unwrap_err();
    assert!(err.to_string().contains("run_state"), "{err}");

    store
        .claim("s", "c1", "fp", std::time::Duration::from_secs(60), false)
        .await
        .unwrap();
    exec(
        &store,
        "UPDATE reins_ledger SET state = 'exploded' WHERE tool_use_id = 'c1'",
    )
    .await;
    let err = store.ledger_entry("s", "c1").await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }));
    assert!(err.to_string().contains("ledger row `c1`") && err.to_string().contains("exploded"));
}

#[tokio::test]
async fn newer_schema_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reins.db");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store.open_session("s").await.unwrap();
        exec(
            &store,
            "INSERT INTO reins_schema_version (version) VALUES (99)",
        )
        .await;
        store.close().await;
    }
    let err = SqliteStore::open(&path).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::UnsupportedSchema {
                found: 99,
                supported: SQLITE_SCHEMA_VERSION
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("99"));
    // nothing was changed: the version rows and the session are as they were
    let conn = rusqlite::Connection::open(&path).unwrap();
    let versions: Vec<i64> = conn
        .prepare("SELECT version FROM reins_schema_version ORDER BY version")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        versions,
        (1..=SQLITE_SCHEMA_VERSION).chain([99]).collect::<Vec<_>>()
    );
    let sessions: i64 = conn
        .query_row("SELECT COUNT(*) FROM reins_sessions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(sessions, 1);
}

#[tokio::test]
async fn missing_database_without_create_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = SqliteOptions::default();
    opts.create_if_missing = false;
    let err = SqliteStore::open_with(dir.path().join("absent.db"), opts)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Database(_)), "{err}");
}

#[tokio::test]
async fn a_version_1_database_is_migrated_and_keeps_its_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reins.db");
    {
        // A database as reins wrote it before the decision log existed.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE reins_schema_version (version INTEGER NOT NULL);
             INSERT INTO reins_schema_version (version) VALUES (1);",
        )
        .unwrap();
        conn.execute_batch(include_str!("../src/sql/sqlite/schema.sql"))
            .unwrap();
        conn.execute_batch(
            "INSERT INTO reins_sessions VALUES ('old', 3, 0, 0, NULL, \
             '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z');
             INSERT INTO reins_session_locks VALUES ('old', 'w', 0);",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), SQLITE_SCHEMA_VERSION);
    assert_eq!(store.session_version("old").await.unwrap(), Some(3));
    assert!(store.decisions("old").await.unwrap().is_empty());
    store
        .append_decisions(
            "old",
            vec![reins_memory::DecisionEntry::new(
                "r1",
                serde_json::json!({"verdict": "refused"}),
            )],
        )
        .await
        .unwrap();
    assert_eq!(store.decisions("old").await.unwrap().len(), 1);
    // The old lock row got the new column with its default.
    assert!(store.interrupt_requests("w").await.unwrap().is_empty());
}

#[tokio::test]
async fn a_version_4_database_gets_its_open_requirements_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reins.db");
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
        // A database as reins wrote it before the pending-requirements index.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE reins_schema_version (version INTEGER NOT NULL);
             INSERT INTO reins_schema_version (version) VALUES (4);",
        )
        .unwrap();
        for sql in [
            include_str!("../src/sql/sqlite/schema.sql"),
            include_str!("../src/sql/sqlite/schema_v2.sql"),
            include_str!("../src/sql/sqlite/schema_v3.sql"),
            include_str!("../src/sql/sqlite/schema_v4.sql"),
        ] {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute(
            "INSERT INTO reins_sessions VALUES ('old', 1, 0, 0, NULL, \
             '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z')",
            [],
        )
        .unwrap();
        for (seq, r) in [(1, &decided), (2, &open)] {
            conn.execute(
                "INSERT INTO reins_requirements VALUES ('old', ?1, ?2, ?3, ?4)",
                rusqlite::params![r.id, seq, r.is_open(), serde_json::to_string(r).unwrap()],
            )
            .unwrap();
        }
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), SQLITE_SCHEMA_VERSION);
    let page = store
        .pending_requirements(&reins_memory::PendingFilter::first(10))
        .await
        .unwrap();
    assert_eq!(page.len(), 1, "{page:?}");
    assert_eq!(page[0], reins_memory::PendingRequirement::of("old", &open));
    assert_eq!(page[0].tool.as_deref(), Some("send_email"));
    // And the tool index finds it too.
    let by_tool = reins_memory::PendingFilter {
        tools: Some(vec!["send_email".to_owned()]),
        ..reins_memory::PendingFilter::first(10)
    };
    assert_eq!(store.pending_requirements(&by_tool).await.unwrap(), page);
}

#[tokio::test]
async fn a_version_6_database_starts_its_chains_at_the_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reins.db");
    {
        // A database as reins wrote it before the evidence chain, with a decision.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE reins_schema_version (version INTEGER NOT NULL);
             INSERT INTO reins_schema_version (version) VALUES (6);",
        )
        .unwrap();
        for sql in [
            include_str!("../src/sql/sqlite/schema.sql"),
            include_str!("../src/sql/sqlite/schema_v2.sql"),
            include_str!("../src/sql/sqlite/schema_v3.sql"),
            include_str!("../src/sql/sqlite/schema_v4.sql"),
            include_str!("../src/sql/sqlite/schema_v5.sql"),
            include_str!("../src/sql/sqlite/schema_v6.sql"),
        ] {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute_batch(
            "INSERT INTO reins_sessions VALUES ('old', 1, 0, 0, NULL, \
             '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z');
             INSERT INTO reins_decisions (session_id, requirement_id, at, record) \
             VALUES ('old', 'r0', '2026-01-01T00:00:00.000000Z', '{\"decision\":\"approve\"}');",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), SQLITE_SCHEMA_VERSION);
    // What was recorded before stays in the decision log, not in the chain.
    assert_eq!(store.decisions("old").await.unwrap().len(), 1);
    assert!(store.evidence("old").await.unwrap().is_empty());
    store.record_evidence(true);
    store
        .append_decisions(
            "old",
            vec![reins_memory::DecisionEntry::new(
                "r1",
                serde_json::json!({"verdict": "refused"}),
            )],
        )
        .await
        .unwrap();
    let chain = store.evidence("old").await.unwrap();
    assert_eq!(chain.len(), 1);
    assert_eq!(
        (chain[0].seq, chain[0].prev.as_str()),
        (1, reins_evidence::GENESIS)
    );
}
