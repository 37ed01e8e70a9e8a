//! Portable pauses: a paused session exported as versioned JSON, imported into another
//! store, and resumed; unknown and newer versions are refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use reins_agent::{Decision, RunStatus, SNAPSHOT_SCHEMA_VERSION, SessionSnapshot};
use reins_memory::{InMemoryStore, SqliteStore};
use reins_message::Msg;
use reins_model::ScriptedModel;
use reins_tool::ToolPolicy;
use serde_json::json;
use support::*;

async fn paused_snapshot() -> SessionSnapshot {
    let counter = Counter::default();
    let model = ScriptedModel::new([call("call_1", "delete_file", json!({"path": "temp.txt"}))]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::confirm()))
        .build()
        .unwrap();
    let s = agent.session("export-me").await.unwrap();
    s.send(Msg::user("delete temp.txt")).await.unwrap();
    s.snapshot().await.unwrap()
}

#[tokio::test]
async fn snapshot_format_is_stable() {
    let snap = paused_snapshot().await;
    assert_eq!(snap.schema_version, SNAPSHOT_SCHEMA_VERSION);
    let value = serde_json::to_value(&snap).unwrap();
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!(value, {
        ".exported_at" => "[time]",
        ".messages[].id" => "[id]",
        ".messages[].created_at" => "[time]",
        ".run_state.last_call.answer" => "[id]",
        ".run_state.slots[].status.requirement.created_at" => "[time]",
        ".requirements[].created_at" => "[time]",
    });
}

#[tokio::test]
async fn a_paused_session_moves_to_another_store_and_resumes() {
    let snap = paused_snapshot().await;
    let json = snap.to_json().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("import.db"))
        .await
        .unwrap();
    let counter = Counter::default();
    let agent = agent(
        ScriptedModel::new([text("deleted")]),
        toolkit(&counter, ToolPolicy::confirm()),
    )
    .store(store)
    .build()
    .unwrap();
    let session = agent
        .restore(SessionSnapshot::from_json(&json).unwrap())
        .await
        .unwrap();
    assert!(session.is_paused().await.unwrap());
    assert_eq!(session.requirements().await.unwrap()[0].id, "call_1");
    let out = session
        .resolve(vec![Decision::approve("call_1")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("delete_file"), 1);
    // Importing over an existing session is refused.
    let err = agent
        .restore(SessionSnapshot::from_json(&json).unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(err, reins_agent::AgentError::SessionExists { ref session } if session == &snap_id(&json)),
        "{err}"
    );
}

fn snap_id(json: &str) -> String {
    SessionSnapshot::from_json(json).unwrap().session_id
}

#[tokio::test]
async fn an_import_over_a_session_with_only_a_run_state_is_refused_and_writes_nothing() {
    use reins_memory::{Commit, MemoryStore};
    let snap = paused_snapshot().await;
    let store = std::sync::Arc::new(InMemoryStore::new());
    // A session whose turn stored its run state and no message yet.
    let existing = store.open_session(&snap.session_id).await.unwrap();
    let state = json!({"phase": "reasoning"});
    store
        .commit(
            &snap.session_id,
            Commit::at(existing.version).run_state(Some(state.clone())),
        )
        .await
        .unwrap();
    let before = store.load_session(&snap.session_id).await.unwrap();
    let agent = reins_agent::Agent::builder()
        .model(ScriptedModel::new([]))
        .store_arc(store.clone())
        .build()
        .unwrap();
    let err = agent.restore(snap.clone()).await.unwrap_err();
    assert!(
        matches!(err, reins_agent::AgentError::SessionExists { ref session } if *session == snap.session_id),
        "{err}"
    );
    let after = store.load_session(&snap.session_id).await.unwrap();
    assert_eq!(after.version, before.version);
    assert!(after.messages.is_empty());
    assert_eq!(after.run_state, Some(state));
}

#[tokio::test]
async fn unknown_newer_and_broken_snapshots_are_refused() {
    let snap = paused_snapshot().await;
    let mut value = serde_json::to_value(&snap).unwrap();
    value["schema_version"] = json!(SNAPSHOT_SCHEMA_VERSION + 1);
    let err = SessionSnapshot::from_value(value.clone())
        .unwrap_err()
        .to_string();
    assert!(err.contains("newer"), "{err}");
    value["schema_version"] = json!(0);
    assert!(
        SessionSnapshot::from_value(value.clone())
            .unwrap_err()
            .to_string()
            .contains("not a known version")
    );
    value.as_object_mut().unwrap().remove("schema_version");
    assert!(
        SessionSnapshot::from_value(value)
            .unwrap_err()
            .to_string()
            .contains("schema_version")
    );
    assert!(SessionSnapshot::from_json("{not json").is_err());
    let mut bad = serde_json::to_value(&snap).unwrap();
    bad["messages"][0]["role"] = json!("robot");
    let err = SessionSnapshot::from_value(bad).unwrap_err().to_string();
    assert!(err.contains("messages[0].role"), "{err}");
    // A reused tool use id is refused at import.
    let mut dup = snap.clone();
    let copy = dup.messages[1].clone().with_id("another");
    dup.messages.push(copy);
    let agent0 = reins_agent::Agent::builder()
        .model(ScriptedModel::new([]))
        .build()
        .unwrap();
    let err = agent0.restore(dup).await.unwrap_err().to_string();
    assert!(err.contains("reused id `call_1`"), "{err}");
    // Nothing was written anywhere by the failed reads.
    let agent = reins_agent::Agent::builder()
        .model(ScriptedModel::new([]))
        .store(InMemoryStore::new())
        .build()
        .unwrap();
    assert!(agent.store().list_sessions().await.unwrap().is_empty());
}

/// A snapshot written by reins 0.1 (schema version 1), checked in: every later reins
/// must keep reading it (or migrate it).
#[tokio::test]
async fn the_checked_in_v1_snapshot_still_loads_and_resumes() {
    let json = include_str!("golden/paused_v1.json");
    assert!(json.contains("\"schema_version\": 1"));
    let snap = SessionSnapshot::from_json(json).unwrap();
    // Read as version 1, migrated: an empty audit trail.
    assert_eq!(snap.schema_version, SNAPSHOT_SCHEMA_VERSION);
    assert!(snap.decisions.is_empty());
    let counter = Counter::default();
    let agent = agent(
        ScriptedModel::new([text("deleted")]),
        toolkit(&counter, ToolPolicy::confirm()),
    )
    .build()
    .unwrap();
    let s = agent.restore(snap).await.unwrap();
    assert_eq!(s.id(), "export-me");
    let out = s
        .resolve(vec![Decision::reject("call_1", "keep it")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.total(), 0);
    assert_valid(&s.messages().await.unwrap());
}

/// Version 2 carries the audit trail: a decision made before the export is in the
/// snapshot, and in the importing store's trail after `restore`.
#[tokio::test]
async fn the_audit_trail_travels_with_the_snapshot() {
    let counter = Counter::default();
    let model = ScriptedModel::new([
        call("call_0", "delete_file", json!({"path": "a.txt"})),
        call("call_1", "delete_file", json!({"path": "b.txt"})),
    ]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::confirm()))
        .build()
        .unwrap();
    let s = agent.session("audited").await.unwrap();
    s.send(Msg::user("delete a then b")).await.unwrap();
    let out = s
        .as_actor(reins_agent::Actor::new("alice").with_metadata(json!({"ip": "127.0.0.1"})))
        .resolve(vec![Decision::reject("call_0", "not a.txt")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let snap = s.snapshot().await.unwrap();
    assert_eq!(snap.decisions.len(), 1);
    let value = serde_json::to_value(&snap.decisions).unwrap();
    let _sorted = sorted_maps();
    insta::assert_json_snapshot!("audit_trail_v2", value, {
        "[].at" => "[time]",
    });

    // The checked-in v2 file is this format; it loads and keeps its trail. Regenerate
    // it (only when the format changes on purpose) with REINS_WRITE_GOLDEN=1.
    if std::env::var_os("REINS_WRITE_GOLDEN").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/paused_v2.json");
        std::fs::write(path, snap.to_json().unwrap() + "\n").unwrap();
    }
    let golden = SessionSnapshot::from_json(include_str!("golden/paused_v2.json")).unwrap();
    assert_eq!(golden.schema_version, 2);
    assert_eq!(
        golden.decisions[0].actor.as_ref().unwrap().principal,
        "alice"
    );
    // Import elsewhere: the trail is in the new store.
    let other = reins_agent::Agent::builder()
        .model(ScriptedModel::new([]))
        .build()
        .unwrap();
    let restored = other.restore(snap).await.unwrap();
    let trail = restored.decisions().await.unwrap();
    assert_eq!(trail.len(), 1);
    assert_eq!(trail[0].requirement_id, "call_0");
    assert_eq!(trail[0].decision, "reject");
    assert_eq!(trail[0].note.as_deref(), Some("not a.txt"));
    assert_eq!(
        trail[0].actor.as_ref().unwrap().metadata,
        Some(json!({"ip": "127.0.0.1"}))
    );
}

/// Snapshots with object keys sorted: they pin the content, not the order serde_json
/// keeps keys in (insertion order when a dependency turns on `preserve_order`).
fn sorted_maps() -> insta::internals::SettingsBindDropGuard {
    let mut settings = insta::Settings::clone_current();
    settings.set_sort_maps(true);
    settings.bind_to_scope()
}
