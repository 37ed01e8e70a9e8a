//! The store conformance suite: the same checks for every backend.
//!
//! Each case takes two handles to one store (`a`, `b`): for SQL backends they are
//! separate pools, so races between them are races between connections. Every case
//! uses session ids of its own, so cases can run in parallel against one database.

use std::time::Duration;

use reins_memory::{
    Commit, Error, MemoryStore, RequirementRecord, RunStateData, sanitize_after_interrupt,
};
use reins_message::{ContentBlock, Msg, ToolResult, ToolUse, new_id};
use serde_json::json;

mod coordination;
mod evidence;
mod filters;
mod grants;
mod outbox;
mod pending;
// Used through `conformance_tests!`, which names every case under this module.
#[allow(unused_imports)]
pub use coordination::*;
#[allow(unused_imports)]
pub use evidence::*;
#[allow(unused_imports)]
pub use filters::*;
#[allow(unused_imports)]
pub use grants::*;
#[allow(unused_imports)]
pub use outbox::*;
#[allow(unused_imports)]
pub use pending::*;

/// Generates one `#[tokio::test]` per conformance case. `$factory` is an async fn
/// returning `Option<(S, S, Guard)>` (None = skipped).
#[macro_export]
macro_rules! conformance_tests {
    ($factory:path) => {
        $crate::conformance_tests!(@cases $factory;
            open_creates_and_load_finds,
            commits_append_in_order,
            stale_commit_conflicts,
            empty_commit_writes_nothing,
            commit_to_missing_session_fails,
            remove_and_replace_by_id,
            failed_commit_changes_nothing,
            duplicate_message_id_is_refused,
            requirements_and_decisions,
            run_state_round_trips,
            list_and_delete,
            heads_are_sessions_without_their_transcripts,
            ledger_lifecycle,
            expired_lease,
            concurrent_claims_have_one_winner,
            concurrent_takeovers_have_one_winner,
            concurrent_commits_have_one_winner,
            session_lock,
            lock_reads_the_version,
            commit_releases_the_lock,
            commit_takes_the_lock,
            concurrent_lock_taking_commits_have_one_winner,
            repaired_turn_persists,
            version_reads_without_loading,
            decision_log_is_append_only,
            interrupt_requests_live_on_the_lock,
            changes_reach_other_handles,
            grants_lifecycle,
            concurrent_revokes_have_one_winner,
            notices_ride_with_their_commit,
            deliveries_are_leased_logged_and_redelivered,
            pending_requirements_are_listed_newest_first_by_keyset,
            session_heads_are_paged_by_activity,
            session_heads_are_filtered_by_phase,
            phase_pages_are_stable_while_sessions_are_added,
            deliveries_are_listed_for_several_sessions,
            evidence_chain_rides_with_decisions_and_ledger_outcomes,
            concurrent_writers_keep_one_chain,
        );
    };
    (@cases $factory:path; $($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let Some((a, b, _guard)) = $factory().await else { return };
            $crate::support::conformance::$name(&a, &b).await;
        }
    )*};
}

pub(super) fn sid(case: &str) -> String {
    format!("{case}/{}", new_id())
}

pub(super) fn tool_use_msg(ids: &[&str]) -> Msg {
    let mut m = Msg::assistant("working");
    for id in ids {
        m.content.push(ContentBlock::ToolUse(ToolUse::new(
            *id,
            "delete_file",
            json!({ "path": format!("{id}.txt") }),
        )));
    }
    m
}

pub(super) const MIN: Duration = Duration::from_secs(60);

pub async fn open_creates_and_load_finds<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("open");
    assert!(
        matches!(a.load_session(&id).await, Err(Error::SessionNotFound { id: ref x }) if *x == id)
    );
    let s = a.open_session(&id).await.unwrap();
    assert_eq!((s.id.as_str(), s.version), (id.as_str(), 0));
    assert!(s.messages.is_empty() && s.requirements.is_empty() && s.run_state.is_none());
    let again = b.open_session(&id).await.unwrap();
    assert_eq!(again.version, 0);
    assert_eq!(b.load_session(&id).await.unwrap().id, id);
}

pub async fn commits_append_in_order<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("append");
    let s = a.open_session(&id).await.unwrap();
    let m1 = Msg::user("one");
    let m2 = tool_use_msg(&["c1"]);
    let v1 = a
        .commit(
            &id,
            Commit::at(s.version).append(m1.clone()).append(m2.clone()),
        )
        .await
        .unwrap();
    assert_eq!(v1, 1);
    let m3 = Msg::tool_results([ToolResult::success("c1", "delete_file", "ok")]);
    let v2 = b
        .commit(&id, Commit::at(v1).append(m3.clone()))
        .await
        .unwrap();
    assert_eq!(v2, 2);
    let loaded = a.load_session(&id).await.unwrap();
    assert_eq!(loaded.version, 2);
    assert_eq!(loaded.messages, vec![m1, m2, m3]);
    assert!(loaded.updated_at >= loaded.created_at);
    let summary = a
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.id == id)
        .unwrap();
    assert_eq!((summary.version, summary.message_count), (2, 3));
    assert!(!summary.has_open_requirements);
}

pub async fn stale_commit_conflicts<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("conflict");
    a.open_session(&id).await.unwrap();
    a.commit(&id, Commit::at(0).append(Msg::user("first")))
        .await
        .unwrap();
    let err = b
        .commit(&id, Commit::at(0).append(Msg::user("stale")))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Conflict { ref session, expected: 0, actual: 1 } if *session == id),
        "{err}"
    );
    let s = a.load_session(&id).await.unwrap();
    assert_eq!(s.version, 1);
    assert_eq!(s.messages.len(), 1);
    assert_eq!(s.messages[0].text(), "first");
}

pub async fn empty_commit_writes_nothing<S: MemoryStore>(a: &S, _b: &S) {
    let id = sid("empty");
    a.open_session(&id).await.unwrap();
    assert_eq!(a.commit(&id, Commit::at(0)).await.unwrap(), 0);
    assert_eq!(a.load_session(&id).await.unwrap().version, 0);
    assert!(matches!(
        a.commit(&id, Commit::at(7)).await,
        Err(Error::Conflict {
            expected: 7,
            actual: 0,
            ..
        })
    ));
}

pub async fn commit_to_missing_session_fails<S: MemoryStore>(a: &S, _b: &S) {
    let id = sid("missing");
    let err = a
        .commit(&id, Commit::at(0).append(Msg::user("x")))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SessionNotFound { .. }), "{err}");
    assert!(matches!(
        a.load_session(&id).await,
        Err(Error::SessionNotFound { .. })
    ));
}

pub async fn remove_and_replace_by_id<S: MemoryStore>(a: &S, _b: &S) {
    let id = sid("remove");
    a.open_session(&id).await.unwrap();
    let ms: Vec<Msg> = (0..4).map(|i| Msg::assistant(format!("m{i}"))).collect();
    let v = a
        .commit(&id, Commit::at(0).append_all(ms.clone()))
        .await
        .unwrap();
    let edited = Msg::assistant("m1 edited").with_id(ms[1].id.clone());
    let tail = Msg::user("tail");
    let v = a
        .commit(
            &id,
            Commit::at(v)
                .remove(ms[2].id.clone())
                .replace(edited.clone())
                .append(tail.clone()),
        )
        .await
        .unwrap();
    let s = a.load_session(&id).await.unwrap();
    assert_eq!(
        s.messages,
        vec![ms[0].clone(), edited, ms[3].clone(), tail.clone()]
    );
    // remove + append the same id in one commit moves a message to the end
    a.commit(
        &id,
        Commit::at(v).remove(ms[0].id.clone()).append(ms[0].clone()),
    )
    .await
    .unwrap();
    let s = a.load_session(&id).await.unwrap();
    assert_eq!(s.messages.last(), Some(&ms[0]));
    assert_eq!(s.messages.len(), 4);
    let summary = a
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.id == id)
        .unwrap();
    assert_eq!(summary.message_count, 4);
}

pub async fn failed_commit_changes_nothing<S: MemoryStore>(a: &S, _b: &S) {
    let id = sid("atomic");
    a.open_session(&id).await.unwrap();
    let m = Msg::user("keep me");
    a.commit(
        &id,
        Commit::at(0)
            .append(m.clone())
            .add_requirement(RequirementRecord::new("r1", "confirmation", json!({}))),
    )
    .await
    .unwrap();
    let before = a.load_session(&id).await.unwrap();
    let attempts = [
        Commit::at(1)
            .append(Msg::user("new"))
            .remove("no-such-message"),
        Commit::at(1)
            .append(Msg::user("new"))
            .replace(Msg::user("x")),
        Commit::at(1)
            .append(Msg::user("new"))
            .run_state(Some(json!({"step": 2})))
            .decide("no-such-requirement", json!("approve")),
        Commit::at(1)
            .remove(m.id.clone())
            .decide("r1", json!(1))
            .decide("r1", json!(2)),
        Commit::at(1)
            .clear_requirements()
            .add_requirement(RequirementRecord::new("r2", "k", json!(null)))
            .add_requirement(RequirementRecord::new("r2", "k", json!(null))),
    ];
    let mut errors = Vec::new();
    for c in attempts {
        errors.push(a.commit(&id, c).await.unwrap_err());
    }
    assert!(matches!(errors[0], Error::MessageNotFound { ref id, .. } if id == "no-such-message"));
    assert!(matches!(errors[1], Error::MessageNotFound { .. }));
    assert!(
        matches!(errors[2], Error::RequirementNotFound { ref id, .. } if id == "no-such-requirement")
    );
    assert!(matches!(errors[3], Error::RequirementAlreadyDecided { ref id, .. } if id == "r1"));
    assert!(matches!(errors[4], Error::DuplicateRequirement { ref id, .. } if id == "r2"));
    for e in &errors {
        assert!(
            e.to_string().contains(&id),
            "error does not name the session: {e}"
        );
    }
    let after = a.load_session(&id).await.unwrap();
    assert_eq!(after, before);
}

pub async fn duplicate_message_id_is_refused<S: MemoryStore>(a: &S, _b: &S) {
    let id = sid("dupmsg");
    a.open_session(&id).await.unwrap();
    let m = Msg::user("once");
    a.commit(&id, Commit::at(0).append(m.clone()))
        .await
        .unwrap();
    let err = a
        .commit(
            &id,
            Commit::at(1).append(Msg::user("other")).append(m.clone()),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::DuplicateMessage { id: ref x, .. } if *x == m.id),
        "{err}"
    );
    let err = a
        .commit(
            &id,
            Commit::at(1)
                .append(m.clone().with_id("z"))
                .append(Msg::user("z").with_id("z")),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DuplicateMessage { .. }), "{err}");
    let s = a.load_session(&id).await.unwrap();
    assert_eq!((s.version, s.messages.len()), (1, 1));
}

pub async fn requirements_and_decisions<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("req");
    a.open_session(&id).await.unwrap();
    let r1 = RequirementRecord::new("c1", "confirmation", json!({ "tool": "delete_file" }));
    let r2 = RequirementRecord::new("c2", "user_input", json!({ "fields": ["name"] }))
        .with_expiry(chrono::Utc::now() + chrono::Duration::hours(1));
    let v = a
        .commit(
            &id,
            Commit::at(0)
                .add_requirement(r1.clone())
                .add_requirement(r2.clone()),
        )
        .await
        .unwrap();
    let s = b.load_session(&id).await.unwrap();
    assert_eq!(s.requirements, vec![r1.clone(), r2.clone()]);
    assert!(
        b.list_sessions()
            .await
            .unwrap()
            .iter()
            .any(|x| x.id == id && x.has_open_requirements)
    );

    let v = b
        .commit(&id, Commit::at(v).decide("c1", json!({ "approve": true })))
        .await
        .unwrap();
    let s = a.load_session(&id).await.unwrap();
    assert_eq!(s.requirements[0].decision, Some(json!({ "approve": true })));
    assert!(s.requirements[0].decided_at.is_some());
    assert_eq!(s.open_requirements().count(), 1);

    // a decided requirement may be raised again (replaced); an open one may not
    let v = a
        .commit(&id, Commit::at(v).add_requirement(r1.clone()))
        .await
        .unwrap();
    assert!(matches!(
        a.commit(&id, Commit::at(v).add_requirement(r2.clone()))
            .await,
        Err(Error::DuplicateRequirement { .. })
    ));
    let s = a.load_session(&id).await.unwrap();
    assert_eq!(s.open_requirements().count(), 2);

    // clear first, then add, in one commit
    let r3 = RequirementRecord::new("c3", "external", json!(null));
    let v = a
        .commit(
            &id,
            Commit::at(v)
                .clear_requirements()
                .add_requirement(r3.clone()),
        )
        .await
        .unwrap();
    let s = a.load_session(&id).await.unwrap();
    assert_eq!(s.requirements, vec![r3]);
    let v = a
        .commit(&id, Commit::at(v).clear_requirements())
        .await
        .unwrap();
    assert_eq!(v, 5);
    assert!(
        a.list_sessions()
            .await
            .unwrap()
            .iter()
            .any(|x| x.id == id && !x.has_open_requirements)
    );
}

pub async fn run_state_round_trips<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("runstate");
    a.open_session(&id).await.unwrap();
    let blob = json!({ "phase": "acting", "pending": ["c1", "c2"], "n": 3 });
    let v = a
        .commit(&id, Commit::at(0).run_state(Some(blob.clone())))
        .await
        .unwrap();
    assert_eq!(
        b.load_session(&id).await.unwrap().run_state,
        Some(blob.clone())
    );
    let v = a
        .commit(&id, Commit::at(v).append(Msg::user("x")))
        .await
        .unwrap();
    assert_eq!(b.load_session(&id).await.unwrap().run_state, Some(blob));
    let v = a.commit(&id, Commit::at(v).run_state(None)).await.unwrap();
    assert_eq!(b.load_session(&id).await.unwrap().run_state, None);

    // A typed state (as a run commits it) reads back as its JSON, in field order or
    // not; committing the same state again changes nothing a reader sees.
    #[derive(Debug, PartialEq, serde::Serialize)]
    struct Typed {
        phase: &'static str,
        slots: Vec<serde_json::Value>,
    }
    let typed = std::sync::Arc::new(Typed {
        phase: "paused",
        slots: vec![json!({"id": "c1", "args": {"to": "a@example.com"}})],
    });
    let expected =
        json!({"phase": "paused", "slots": [{"id": "c1", "args": {"to": "a@example.com"}}]});
    let v = a
        .commit(
            &id,
            Commit::at(v).run_state_data(Some(RunStateData::typed(typed.clone()))),
        )
        .await
        .unwrap();
    assert_eq!(
        b.load_session(&id).await.unwrap().run_state,
        Some(expected.clone())
    );
    a.commit(
        &id,
        Commit::at(v).run_state_data(Some(RunStateData::typed(typed))),
    )
    .await
    .unwrap();
    assert_eq!(b.load_session(&id).await.unwrap().run_state, Some(expected));
}

pub async fn list_and_delete<S: MemoryStore>(a: &S, b: &S) {
    let base = sid("list");
    let ids = [format!("{base}/b"), format!("{base}/a")];
    for id in &ids {
        a.open_session(id).await.unwrap();
    }
    a.commit(&ids[0], Commit::at(0).append(Msg::user("x")))
        .await
        .unwrap();
    a.claim(&ids[0], "c1", "fp", MIN, false).await.unwrap();
    assert!(a.try_lock_session(&ids[0], "me", MIN).await.unwrap());
    let listed: Vec<_> = b
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.id.starts_with(&base))
        .collect();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].id, ids[1], "sessions are listed by id");
    assert_eq!(listed[1].message_count, 1);

    b.delete_session(&ids[0]).await.unwrap();
    b.delete_session(&ids[0]).await.unwrap();
    assert!(matches!(
        a.load_session(&ids[0]).await,
        Err(Error::SessionNotFound { .. })
    ));
    assert!(a.ledger_entry(&ids[0], "c1").await.unwrap().is_none());
    assert!(a.try_lock_session(&ids[0], "other", MIN).await.unwrap());
    assert_eq!(a.open_session(&ids[0]).await.unwrap().version, 0);
    assert!(a.load_session(&ids[1]).await.is_ok());
}

/// `list_session_heads` agrees with `load_session` on everything but the messages (and
/// the decided requirements), and with `list_sessions` on which sessions exist.
pub async fn heads_are_sessions_without_their_transcripts<S: MemoryStore>(a: &S, b: &S) {
    let base = sid("heads");
    let (idle, paused, empty) = (
        format!("{base}/idle"),
        format!("{base}/paused"),
        format!("{base}/empty"),
    );
    for id in [&idle, &paused, &empty] {
        a.open_session(id).await.unwrap();
    }
    a.commit(
        &idle,
        Commit::at(0)
            .append(Msg::user("hi"))
            .append(Msg::assistant("hello"))
            .run_state(Some(json!({ "phase": "done" }))),
    )
    .await
    .unwrap();
    let r1 = RequirementRecord::new("c1", "confirmation", json!({ "tool": "delete_file" }));
    let r2 = RequirementRecord::new("c2", "external", json!({ "tool": "send_email" }));
    let v = a
        .commit(
            &paused,
            Commit::at(0)
                .append(tool_use_msg(&["c1", "c2"]))
                .add_requirement(r1)
                .add_requirement(r2.clone())
                .run_state(Some(json!({ "phase": "paused" }))),
        )
        .await
        .unwrap();
    // A decided requirement is not in the head.
    a.commit(
        &paused,
        Commit::at(v).decide("c1", json!({ "approve": true })),
    )
    .await
    .unwrap();

    let heads: Vec<_> = b
        .list_session_heads()
        .await
        .unwrap()
        .into_iter()
        .filter(|h| h.id.starts_with(&base))
        .collect();
    let ids: Vec<&str> = heads.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(
        ids,
        [empty.as_str(), idle.as_str(), paused.as_str()],
        "by id"
    );
    for h in &heads {
        let full = b.load_session(&h.id).await.unwrap();
        assert_eq!(h.version, full.version, "{}", h.id);
        assert_eq!(h.message_count, full.messages.len() as u64, "{}", h.id);
        assert_eq!(h.run_state, full.run_state, "{}", h.id);
        assert_eq!(h.updated_at, full.updated_at, "{}", h.id);
        assert_eq!(h.created_at, full.created_at, "{}", h.id);
        let open: Vec<_> = full.open_requirements().cloned().collect();
        assert_eq!(h.open_requirements, open, "{}", h.id);
        assert_eq!(reins_memory::SessionHead::of(full), h.clone());
    }
    assert_eq!(heads[2].open_requirements.len(), 1);
    assert_eq!(heads[2].open_requirements[0].id, r2.id);
    assert!(heads[0].open_requirements.is_empty() && heads[0].run_state.is_none());
    let state = heads[2].clone().into_state();
    assert!(state.messages.is_empty());
    assert_eq!(state.open_requirements().count(), 1);

    // A deleted session leaves the list.
    b.delete_session(&paused).await.unwrap();
    assert!(
        !a.list_session_heads()
            .await
            .unwrap()
            .iter()
            .any(|h| h.id == paused)
    );
}

pub(super) const ITERATIONS: usize = 40;

pub async fn concurrent_commits_have_one_winner<S: MemoryStore + Clone>(a: &S, b: &S) {
    let id = sid("commits");
    a.open_session(&id).await.unwrap();
    for i in 0..ITERATIONS {
        let version = i as u64;
        let mut tasks = Vec::new();
        for k in 0..2 {
            let store = if k == 0 { a.clone() } else { b.clone() };
            let id = id.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .commit(
                        &id,
                        Commit::at(version).append(Msg::user(format!("{i}-{k}"))),
                    )
                    .await
            }));
        }
        let mut ok = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(v) => {
                    assert_eq!(v, version + 1);
                    ok += 1;
                }
                Err(Error::Conflict { .. }) => {}
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        assert_eq!(
            ok, 1,
            "iteration {i}: {ok} writers committed on the same version"
        );
    }
    let s = a.load_session(&id).await.unwrap();
    assert_eq!(
        (s.version, s.messages.len()),
        (ITERATIONS as u64, ITERATIONS)
    );
}

pub async fn repaired_turn_persists<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("repair");
    a.open_session(&id).await.unwrap();
    let mut history = Vec::new();
    for i in 0..50 {
        history.push(Msg::user(format!("q{i}")));
        history.push(tool_use_msg(&[&format!("old{i}")]));
        history.push(Msg::tool_results([ToolResult::success(
            format!("old{i}"),
            "delete_file",
            "ok",
        )]));
        history.push(Msg::assistant(format!("a{i}")));
    }
    history.push(Msg::user("clean up"));
    history.push(tool_use_msg(&["n1", "n2"]));
    history.push(Msg::tool_results([ToolResult::success(
        "n1",
        "delete_file",
        "ok",
    )]));
    history.push(Msg::assistant("partial").with_metadata(reins_memory::PARTIAL_KEY, json!(true)));
    let v = a
        .commit(&id, Commit::at(0).append_all(history.clone()))
        .await
        .unwrap();

    let stored = b.load_session(&id).await.unwrap();
    assert_eq!(stored.messages, history);
    let (repaired, report) = sanitize_after_interrupt(&stored.messages);
    assert_eq!(report.synthesized, vec!["n2"]);
    let commit = Commit::rewrite(v, &stored.messages, &repaired);
    assert_eq!(
        commit.remove.len(),
        1,
        "only the current turn's tail is rewritten"
    );
    b.commit(&id, commit).await.unwrap();
    let after = a.load_session(&id).await.unwrap();
    assert_eq!(after.messages, repaired);
    assert!(reins_memory::pending_tool_uses(&after.messages).is_empty());
}

pub async fn version_reads_without_loading<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("version");
    assert_eq!(a.session_version(&id).await.unwrap(), None);
    a.open_session(&id).await.unwrap();
    assert_eq!(b.session_version(&id).await.unwrap(), Some(0));
    let v = a
        .commit(&id, Commit::at(0).append(Msg::user("hi")))
        .await
        .unwrap();
    assert_eq!(b.session_version(&id).await.unwrap(), Some(v));
    // An empty or failed commit leaves the version alone.
    a.commit(&id, Commit::at(v)).await.unwrap();
    a.commit(&id, Commit::at(0).append(Msg::user("stale")))
        .await
        .unwrap_err();
    assert_eq!(b.session_version(&id).await.unwrap(), Some(v));
}
