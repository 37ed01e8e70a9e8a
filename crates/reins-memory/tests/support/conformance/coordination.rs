//! Conformance cases for what coordinates workers: the tool-call ledger, session
//! locks, the decision log, interrupt requests and change feeds.

use std::time::Duration;

use reins_memory::{
    Claim, Commit, DecisionEntry, Error, LedgerState, MemoryStore, RequirementRecord, SessionLock,
    fingerprint,
};
use reins_message::{Msg, ToolResult};
use serde_json::json;

use super::{ITERATIONS, MIN, sid};

pub async fn ledger_lifecycle<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("ledger");
    let fp = fingerprint(&json!({ "path": "temp.txt" }));
    assert!(a.ledger_entry(&id, "c1").await.unwrap().is_none());
    assert_eq!(
        a.claim(&id, "c1", &fp, MIN, false).await.unwrap(),
        Claim::Granted
    );
    let entry = b.ledger_entry(&id, "c1").await.unwrap().unwrap();
    assert_eq!(
        (entry.state, entry.attempts, entry.result),
        (LedgerState::Running, 1, None)
    );
    assert_eq!(entry.fingerprint, fp);
    assert!(entry.lease_until > chrono::Utc::now());
    match b.claim(&id, "c1", &fp, MIN, true).await.unwrap() {
        Claim::InFlight { lease_until } => assert_eq!(lease_until, entry.lease_until),
        other => panic!("expected InFlight, got {other:?}"),
    }
    let err = b
        .claim(&id, "c1", "other-fingerprint", MIN, true)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::FingerprintMismatch { ref tool_use_id, .. } if tool_use_id == "c1"),
        "{err}"
    );

    let result = ToolResult::success("c1", "delete_file", "deleted")
        .with_metadata("executed_input", json!({ "path": "temp.txt" }));
    a.finish(&id, "c1", &result).await.unwrap();
    b.finish(&id, "c1", &ToolResult::error("c1", "delete_file", "second"))
        .await
        .unwrap();
    assert_eq!(
        b.claim(&id, "c1", &fp, MIN, true).await.unwrap(),
        Claim::Finished(result.clone())
    );
    let entry = a.ledger_entry(&id, "c1").await.unwrap().unwrap();
    assert_eq!(
        (entry.state, entry.result),
        (LedgerState::Finished, Some(result))
    );

    let err = a
        .finish(&id, "never-claimed", &ToolResult::success("x", "t", ""))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LedgerEntryNotFound { .. }), "{err}");
    assert!(
        a.ledger_entry(&id, "never-claimed")
            .await
            .unwrap()
            .is_none()
    );
    // ledger entries are per session
    assert_eq!(
        a.claim(&format!("{id}-2"), "c1", "x", MIN, false)
            .await
            .unwrap(),
        Claim::Granted
    );
}

pub async fn expired_lease<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("expired");
    assert_eq!(
        a.claim(&id, "c1", "fp", Duration::ZERO, false)
            .await
            .unwrap(),
        Claim::Granted
    );
    assert_eq!(
        b.claim(&id, "c1", "fp", MIN, false).await.unwrap(),
        Claim::Expired
    );
    assert_eq!(
        b.ledger_entry(&id, "c1").await.unwrap().unwrap().attempts,
        1
    );
    assert_eq!(
        b.claim(&id, "c1", "fp", MIN, true).await.unwrap(),
        Claim::Granted
    );
    let entry = b.ledger_entry(&id, "c1").await.unwrap().unwrap();
    assert_eq!((entry.attempts, entry.state), (2, LedgerState::Running));
    assert!(matches!(
        a.claim(&id, "c1", "fp", MIN, true).await.unwrap(),
        Claim::InFlight { .. }
    ));
    // an expired call that finishes anyway keeps its result
    let r = ToolResult::success("c1", "t", "late but done");
    a.finish(&id, "c1", &r).await.unwrap();
    assert_eq!(
        a.claim(&id, "c1", "fp", MIN, true).await.unwrap(),
        Claim::Finished(r)
    );
}

/// Four callers, two on each handle, claim `tool` at once (takeover allowed): their
/// answers.
async fn racing_claims<S: MemoryStore + Clone>(a: &S, b: &S, id: &str, tool: &str) -> Vec<Claim> {
    let tasks: Vec<_> = (0..4)
        .map(|k| {
            let store = if k % 2 == 0 { a.clone() } else { b.clone() };
            let (id, tool) = (id.to_owned(), tool.to_owned());
            tokio::spawn(async move { store.claim(&id, &tool, "fp", MIN, true).await })
        })
        .collect();
    let mut answers = Vec::with_capacity(tasks.len());
    for t in tasks {
        answers.push(t.await.unwrap().unwrap());
    }
    answers
}

pub async fn concurrent_claims_have_one_winner<S: MemoryStore + Clone>(a: &S, b: &S) {
    let id = sid("race");
    for i in 0..ITERATIONS {
        let tool = format!("c{i}");
        let mut granted = 0;
        for answer in racing_claims(a, b, &id, &tool).await {
            match answer {
                Claim::Granted => granted += 1,
                Claim::InFlight { .. } => {}
                other => panic!("unexpected claim answer {other:?}"),
            }
        }
        assert_eq!(
            granted, 1,
            "iteration {i}: {granted} callers were granted the same call"
        );
    }
}

pub async fn concurrent_takeovers_have_one_winner<S: MemoryStore + Clone>(a: &S, b: &S) {
    let id = sid("takeover");
    for i in 0..ITERATIONS {
        let tool = format!("c{i}");
        assert_eq!(
            a.claim(&id, &tool, "fp", Duration::ZERO, false)
                .await
                .unwrap(),
            Claim::Granted
        );
        let mut granted = 0;
        for answer in racing_claims(a, b, &id, &tool).await {
            if answer == Claim::Granted {
                granted += 1;
            }
        }
        assert_eq!(
            granted, 1,
            "iteration {i}: {granted} callers took over the same call"
        );
        assert_eq!(
            a.ledger_entry(&id, &tool).await.unwrap().unwrap().attempts,
            2
        );
    }
}

pub async fn session_lock<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("lock");
    assert!(a.try_lock_session(&id, "worker-1", MIN).await.unwrap());
    assert!(!b.try_lock_session(&id, "worker-2", MIN).await.unwrap());
    assert!(
        a.try_lock_session(&id, "worker-1", MIN).await.unwrap(),
        "the owner renews"
    );
    b.unlock_session(&id, "worker-2").await.unwrap();
    assert!(
        !b.try_lock_session(&id, "worker-2", MIN).await.unwrap(),
        "only the owner unlocks"
    );
    a.unlock_session(&id, "worker-1").await.unwrap();
    assert!(
        b.try_lock_session(&id, "worker-2", Duration::ZERO)
            .await
            .unwrap()
    );
    assert!(
        a.try_lock_session(&id, "worker-1", MIN).await.unwrap(),
        "an expired lease is taken over"
    );
    assert!(!b.try_lock_session(&id, "worker-2", MIN).await.unwrap());
}

pub async fn lock_reads_the_version<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("lock-version");
    assert_eq!(
        a.try_lock_session_reading_version(&id, "w1", MIN)
            .await
            .unwrap(),
        SessionLock::Acquired { version: None },
        "no session yet"
    );
    a.unlock_session(&id, "w1").await.unwrap();
    let s = a.open_session(&id).await.unwrap();
    a.commit(&id, Commit::at(s.version).append(Msg::user("hi")))
        .await
        .unwrap();
    assert_eq!(
        b.try_lock_session_reading_version(&id, "w1", MIN)
            .await
            .unwrap(),
        SessionLock::Acquired { version: Some(1) }
    );
    assert_eq!(
        a.try_lock_session_reading_version(&id, "w2", MIN)
            .await
            .unwrap(),
        SessionLock::Busy,
        "another owner's live lock"
    );
    assert!(
        !a.try_lock_session(&id, "w2", MIN).await.unwrap(),
        "a busy answer changed nothing"
    );
    assert_eq!(
        a.try_lock_session_reading_version(&id, "w1", MIN)
            .await
            .unwrap(),
        SessionLock::Acquired { version: Some(1) },
        "the owner renews"
    );
}

/// Whether `owner` could take the lock now (and leaves it free again).
async fn lock_is_free<S: MemoryStore>(s: &S, id: &str, owner: &str) -> bool {
    let free = s.try_lock_session(id, owner, MIN).await.unwrap();
    if free {
        s.unlock_session(id, owner).await.unwrap();
    }
    free
}

pub async fn commit_releases_the_lock<S: MemoryStore>(a: &S, b: &S) {
    assert!(a.commit_releases_lock());
    let id = sid("commit-release");
    let v = a.open_session(&id).await.unwrap().version;
    assert!(a.try_lock_session(&id, "w1", MIN).await.unwrap());

    // Another owner's name releases nothing; the commit itself applies.
    let v = a
        .commit(
            &id,
            Commit::at(v).append(Msg::user("1")).releasing_lock("w2"),
        )
        .await
        .unwrap();
    assert!(!lock_is_free(b, &id, "w2").await, "w1 still holds it");

    // A failed commit keeps the lock.
    let stale = a
        .commit(
            &id,
            Commit::at(v + 7)
                .append(Msg::user("x"))
                .releasing_lock("w1"),
        )
        .await;
    assert!(matches!(stale, Err(Error::Conflict { .. })), "{stale:?}");
    let taken = Msg::user("dup");
    let v = a
        .commit(&id, Commit::at(v).append(taken.clone()))
        .await
        .unwrap();
    let dup = a
        .commit(&id, Commit::at(v).append(taken).releasing_lock("w1"))
        .await;
    assert!(
        matches!(dup, Err(Error::DuplicateMessage { .. })),
        "{dup:?}"
    );
    assert!(
        !lock_is_free(b, &id, "w2").await,
        "still held after failures"
    );

    // Appending (an agent's last commit) releases.
    let v = a
        .commit(
            &id,
            Commit::at(v)
                .append(Msg::assistant("2"))
                .run_state(Some(json!({ "phase": "done" })))
                .releasing_lock("w1"),
        )
        .await
        .unwrap();
    assert!(lock_is_free(b, &id, "w2").await, "released with the commit");
    assert_eq!(b.load_session(&id).await.unwrap().messages.len(), 3);

    // A commit that may write nothing (restating the run state: the SQL stores skip
    // it), or an empty one, still releases.
    assert!(a.try_lock_session(&id, "w1", MIN).await.unwrap());
    let v = a
        .commit(
            &id,
            Commit::at(v)
                .run_state(Some(json!({ "phase": "done" })))
                .releasing_lock("w1"),
        )
        .await
        .unwrap();
    assert!(lock_is_free(b, &id, "w2").await);
    assert!(a.try_lock_session(&id, "w1", MIN).await.unwrap());
    a.commit(&id, Commit::at(v).releasing_lock("w1"))
        .await
        .unwrap();
    assert!(lock_is_free(b, &id, "w2").await);

    // Any other kind of commit releases too.
    assert!(a.try_lock_session(&id, "w1", MIN).await.unwrap());
    let req = RequirementRecord::new("r1", "confirmation", json!({}));
    let v2 = a
        .commit(&id, Commit::at(v).add_requirement(req).releasing_lock("w1"))
        .await
        .unwrap();
    assert_eq!(v2, v + 1);
    assert!(lock_is_free(b, &id, "w2").await);
}

pub async fn commit_takes_the_lock<S: MemoryStore>(a: &S, b: &S) {
    assert!(a.commit_takes_lock());
    let id = sid("commit-take");
    let v = a.open_session(&id).await.unwrap().version;

    // A free lock is taken with the commit; the owner renews it with the next.
    let v = a
        .commit(
            &id,
            Commit::at(v).append(Msg::user("1")).taking_lock("w1", MIN),
        )
        .await
        .unwrap();
    assert!(!lock_is_free(b, &id, "w2").await, "w1 holds it");
    let v = a
        .commit(
            &id,
            Commit::at(v)
                .append(Msg::assistant("2"))
                .run_state(Some(json!({ "phase": "reasoning" })))
                .taking_lock("w1", MIN),
        )
        .await
        .unwrap();
    assert!(!lock_is_free(b, &id, "w2").await);

    // Another owner is refused, and nothing is written.
    let refused = b
        .commit(
            &id,
            Commit::at(v).append(Msg::user("x")).taking_lock("w2", MIN),
        )
        .await;
    assert!(
        matches!(refused, Err(Error::SessionLocked { ref session }) if *session == id),
        "{refused:?}"
    );
    let refused = b
        .commit(
            &id,
            Commit::at(v)
                .append(Msg::user("y"))
                .log_decision(DecisionEntry::new("r9", json!({"by": "w2"})))
                .taking_lock("w2", MIN),
        )
        .await;
    assert!(
        matches!(refused, Err(Error::SessionLocked { .. })),
        "{refused:?}"
    );
    let state = b.load_session(&id).await.unwrap();
    assert_eq!((state.version, state.messages.len()), (v, 2));
    assert!(b.decisions(&id).await.unwrap().is_empty());
    assert!(!lock_is_free(b, &id, "w2").await, "still w1's");

    // A stale commit is a conflict whoever holds the lock, and takes nothing.
    let stale = b
        .commit(
            &id,
            Commit::at(v + 3)
                .append(Msg::user("z"))
                .taking_lock("w2", MIN),
        )
        .await;
    assert!(matches!(stale, Err(Error::Conflict { .. })), "{stale:?}");
    a.unlock_session(&id, "w1").await.unwrap();
    let stale = b
        .commit(
            &id,
            Commit::at(v + 3)
                .append(Msg::user("z"))
                .taking_lock("w2", MIN),
        )
        .await;
    assert!(matches!(stale, Err(Error::Conflict { .. })), "{stale:?}");
    assert!(lock_is_free(a, &id, "w1").await, "a conflict takes nothing");

    // A commit failing on its contents takes nothing either.
    let taken = Msg::user("dup");
    let v = a
        .commit(&id, Commit::at(v).append(taken.clone()))
        .await
        .unwrap();
    let dup = b
        .commit(&id, Commit::at(v).append(taken).taking_lock("w2", MIN))
        .await;
    assert!(
        matches!(dup, Err(Error::DuplicateMessage { .. })),
        "{dup:?}"
    );
    assert!(lock_is_free(a, &id, "w1").await);

    // An expired lease is taken over (and its interrupt request dropped).
    assert!(
        a.try_lock_session(&id, "w1", Duration::from_millis(1))
            .await
            .unwrap()
    );
    tokio::time::sleep(Duration::from_millis(30)).await;
    let v = b
        .commit(
            &id,
            Commit::at(v).append(Msg::user("3")).taking_lock("w2", MIN),
        )
        .await
        .unwrap();
    assert!(!lock_is_free(a, &id, "w1").await, "w2 holds it now");
    assert!(a.request_interrupt(&id).await.unwrap());
    let v = b
        .commit(
            &id,
            Commit::at(v).append(Msg::user("4")).taking_lock("w2", MIN),
        )
        .await
        .unwrap();
    assert_eq!(
        b.interrupt_requests("w2").await.unwrap(),
        vec![id.clone()],
        "renewing keeps the request"
    );

    // Taking and releasing in one commit: refused while another holds it; else the
    // commit applies and the lock ends free.
    let refused = a
        .commit(
            &id,
            Commit::at(v)
                .append(Msg::user("5"))
                .taking_lock("w1", MIN)
                .releasing_lock("w1"),
        )
        .await;
    assert!(
        matches!(refused, Err(Error::SessionLocked { .. })),
        "{refused:?}"
    );
    b.unlock_session(&id, "w2").await.unwrap();
    let v = a
        .commit(
            &id,
            Commit::at(v)
                .append(Msg::user("5"))
                .taking_lock("w1", MIN)
                .releasing_lock("w1"),
        )
        .await
        .unwrap();
    assert!(lock_is_free(b, &id, "w2").await);

    // A commit that writes nothing (empty, or restating the run state) still takes
    // it, after the version check.
    let same = a
        .commit(&id, Commit::at(v).taking_lock("w1", MIN))
        .await
        .unwrap();
    assert_eq!(same, v);
    assert!(!lock_is_free(b, &id, "w2").await);
    a.unlock_session(&id, "w1").await.unwrap();
    let v = a
        .commit(
            &id,
            Commit::at(v).run_state(Some(json!({ "phase": "done" }))),
        )
        .await
        .unwrap();
    // (The SQL stores skip the write; the in-memory store makes it.)
    let restated = b
        .commit(
            &id,
            Commit::at(v)
                .run_state(Some(json!({ "phase": "done" })))
                .taking_lock("w2", MIN),
        )
        .await
        .unwrap();
    assert!(restated == v || restated == v + 1, "{restated} {v}");
    let v = restated;
    assert!(!lock_is_free(a, &id, "w1").await, "w2 took it");
    let stale = a
        .commit(&id, Commit::at(v + 1).taking_lock("w1", MIN))
        .await;
    assert!(matches!(stale, Err(Error::Conflict { .. })), "{stale:?}");
    b.unlock_session(&id, "w2").await.unwrap();

    // A session that does not exist is not created.
    let missing = sid("commit-take-missing");
    let err = a
        .commit(
            &missing,
            Commit::at(0).append(Msg::user("x")).taking_lock("w1", MIN),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SessionNotFound { .. }), "{err}");
    assert!(lock_is_free(b, &missing, "w2").await);
    assert_eq!(b.load_session(&id).await.unwrap().version, v);
}

/// Two owners race to take one session's lock with a commit each, many times: exactly
/// one of them writes each round, the other is refused or conflicts.
pub async fn concurrent_lock_taking_commits_have_one_winner<S: MemoryStore>(a: &S, b: &S) {
    for round in 0..ITERATIONS {
        let id = sid(&format!("commit-take-race-{round}"));
        let v = a.open_session(&id).await.unwrap().version;
        let (ra, rb) = tokio::join!(
            a.commit(
                &id,
                Commit::at(v).append(Msg::user("a")).taking_lock("wa", MIN)
            ),
            b.commit(
                &id,
                Commit::at(v).append(Msg::user("b")).taking_lock("wb", MIN)
            ),
        );
        let won = [&ra, &rb].iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "round {round}: {ra:?} {rb:?}");
        for r in [&ra, &rb] {
            if let Err(e) = r {
                assert!(
                    matches!(e, Error::Conflict { .. } | Error::SessionLocked { .. }),
                    "round {round}: {e}"
                );
            }
        }
        let winner = if ra.is_ok() { "wa" } else { "wb" };
        let loser = if ra.is_ok() { "wb" } else { "wa" };
        assert!(!lock_is_free(b, &id, loser).await, "round {round}");
        // And a later commit of the loser, now at the right version, is refused.
        let refused = b
            .commit(
                &id,
                Commit::at(v + 1)
                    .append(Msg::user("late"))
                    .taking_lock(loser, MIN),
            )
            .await;
        assert!(
            matches!(refused, Err(Error::SessionLocked { .. })),
            "{refused:?}"
        );
        assert_eq!(a.load_session(&id).await.unwrap().messages.len(), 1);
        a.unlock_session(&id, winner).await.unwrap();
    }
}

pub async fn decision_log_is_append_only<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("decisions");
    assert!(a.decisions(&id).await.unwrap().is_empty());
    let err = a
        .append_decisions(&id, vec![DecisionEntry::new("r0", json!({"x": 0}))])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SessionNotFound { .. }), "{err}");
    a.open_session(&id).await.unwrap();
    let v = a
        .commit(
            &id,
            Commit::at(0)
                .append(Msg::user("hi"))
                .log_decision(DecisionEntry::new(
                    "r1",
                    json!({"decision": "approve", "by": "alice"}),
                )),
        )
        .await
        .unwrap();
    // A refusal is recorded without moving the version (views stay valid).
    b.append_decisions(
        &id,
        vec![
            DecisionEntry::new("r2", json!({"verdict": "refused"})),
            DecisionEntry::new("r3", json!({"verdict": "refused", "n": 2})),
        ],
    )
    .await
    .unwrap();
    assert_eq!(a.session_version(&id).await.unwrap(), Some(v));
    // A failed commit records nothing.
    a.commit(
        &id,
        Commit::at(0).log_decision(DecisionEntry::new("lost", json!({}))),
    )
    .await
    .unwrap_err();
    let log = b.decisions(&id).await.unwrap();
    let ids: Vec<&str> = log.iter().map(|e| e.requirement_id.as_str()).collect();
    assert_eq!(ids, ["r1", "r2", "r3"]);
    assert_eq!(log.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(log[0].record["by"], "alice");
    assert_eq!(log[2].record["n"], 2);
    // Later commits (even ones that clear requirements) keep the log.
    a.commit(
        &id,
        Commit::at(v).clear_requirements().append(Msg::user("more")),
    )
    .await
    .unwrap();
    assert_eq!(a.decisions(&id).await.unwrap().len(), 3);
    a.delete_session(&id).await.unwrap();
    assert!(b.decisions(&id).await.unwrap().is_empty());
}

pub async fn interrupt_requests_live_on_the_lock<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("interrupt");
    a.open_session(&id).await.unwrap();
    let lease = Duration::from_secs(30);
    // No run holds the session: nothing to interrupt, and nothing lingers.
    assert!(!b.request_interrupt(&id).await.unwrap());
    assert!(a.try_lock_session(&id, "w1", lease).await.unwrap());
    assert!(!a.interrupt_requests("w1").await.unwrap().contains(&id));
    assert!(b.request_interrupt(&id).await.unwrap());
    assert!(a.interrupt_requests("w1").await.unwrap().contains(&id));
    assert!(!a.interrupt_requests("w2").await.unwrap().contains(&id));
    // Renewal by the holder keeps the request.
    assert!(a.try_lock_session(&id, "w1", lease).await.unwrap());
    assert!(a.interrupt_requests("w1").await.unwrap().contains(&id));
    // The run ends: the next run starts clean.
    a.unlock_session(&id, "w1").await.unwrap();
    assert!(a.try_lock_session(&id, "w1", lease).await.unwrap());
    assert!(!a.interrupt_requests("w1").await.unwrap().contains(&id));
    // A takeover of an expired lock starts clean too.
    assert!(b.request_interrupt(&id).await.unwrap());
    a.unlock_session(&id, "w1").await.unwrap();
    assert!(a.try_lock_session(&id, "w1", Duration::ZERO).await.unwrap());
    assert!(
        !b.request_interrupt(&id).await.unwrap(),
        "an expired lock holds no live run"
    );
    assert!(b.try_lock_session(&id, "w2", lease).await.unwrap());
    assert!(!b.interrupt_requests("w2").await.unwrap().contains(&id));
}

pub async fn changes_reach_other_handles<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("changes");
    a.open_session(&id).await.unwrap();
    let mut feed = a.changes().await.unwrap();
    b.commit(&id, Commit::at(0).append(Msg::user("from b")))
        .await
        .unwrap();
    // Liveness only: the notice arrives (generous bound so a loaded machine passes).
    let got = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match feed.recv().await {
                Ok(c) if c.concerns(&id) => return true,
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return true,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return false,
            }
        }
    })
    .await;
    assert_eq!(
        got.ok(),
        Some(true),
        "a change made through b never reached a's feed"
    );
    // An interrupt request is announced too.
    assert!(
        b.try_lock_session(&id, "w", Duration::from_secs(30))
            .await
            .unwrap()
    );
    while feed.try_recv().is_ok() {}
    let mut interrupts = b.interrupt_notices().await.unwrap();
    assert!(a.request_interrupt(&id).await.unwrap());
    for (name, f) in [
        ("all changes", &mut feed),
        ("interrupt notices", &mut interrupts),
    ] {
        let got = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                match f.recv().await {
                    Ok(c) if c.concerns(&id) && c.maybe_interrupt => return true,
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return true,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return false,
                }
            }
        })
        .await;
        assert_eq!(
            got.ok(),
            Some(true),
            "the interrupt request was not announced on {name}"
        );
    }
}
