//! Two callers on one pause, on a real restate-server with the reins service as a
//! child process: approvals sent at the same moment get the local driver's answers —
//! one takes effect, the other is refused `already_decided` naming it, and the refusal
//! is in the audit trail — and a request repeated with its idempotency key is a
//! harmless replay (the first answer, nothing recorded twice). The tool runs once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use reins_agent::{Actor, DecisionRecord, Verdict};
use reins_agent::{AgentError, Decision};
use reins_message::Msg;
use reins_restate::{Delivery, Submitted, TurnRequest};
use support::Harness;

const SETTLE: Duration = Duration::from_secs(30);

/// Starts `delete FILE` on `session` and waits until it pauses; the requirement id.
async fn pause(h: &Harness, session: &str, file: &str) -> String {
    let s = h
        .client
        .submit(
            session,
            &TurnRequest::message(Msg::user(format!("delete {file}"))),
            None,
        )
        .await
        .unwrap();
    let view = h
        .client
        .wait_settled(session, s.version, SETTLE)
        .await
        .unwrap();
    assert!(view.paused, "{view:?}\n{}", h.service_log());
    view.requirements[0].id.clone()
}

fn approve(id: &str, by: &str) -> TurnRequest {
    TurnRequest::decisions(vec![Decision::approve(id)]).by(Actor::new(by))
}

/// The session's audit trail, decoded.
async fn trail(h: &Harness, session: &str) -> Vec<DecisionRecord> {
    h.decisions(session)
        .await
        .into_iter()
        .map(|e| serde_json::from_value::<DecisionRecord>(e.record).unwrap())
        .collect()
}

/// Of two answers to the same approval, exactly one took effect (`resumed`) and the
/// other is refused `already_decided`, naming the winner; returns the winner's index.
fn one_wins(
    answers: [&reins_restate::Result<Submitted>; 2],
    names: [&str; 2],
    h: &Harness,
) -> usize {
    let won: Vec<usize> = (0..2).filter(|&i| answers[i].is_ok()).collect();
    assert_eq!(
        won.len(),
        1,
        "exactly one approval takes effect: {answers:?}\n{}",
        h.service_log()
    );
    let (w, l) = (won[0], 1 - won[0]);
    assert_eq!(
        answers[w].as_ref().unwrap().delivery,
        Delivery::Resumed,
        "{answers:?}"
    );
    let refused = answers[l].as_ref().unwrap_err();
    let r = refused.refused().expect("a typed refusal");
    assert_eq!(
        (r.code.as_str(), r.status()),
        ("already_decided", 409),
        "{r:?}"
    );
    match r.to_agent_error() {
        Some(AgentError::AlreadyDecided { decided, .. }) => {
            assert_eq!(decided.decision, "approve");
            assert_eq!(decided.by.as_deref(), Some(names[w]), "{r:?}");
        }
        other => panic!("not AlreadyDecided: {other:?}"),
    }
    w
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_approvals_at_once_one_takes_effect_the_other_is_refused_and_recorded() {
    let Some(h) = Harness::start(&[]).await else {
        return;
    };
    let started = std::time::Instant::now();
    // Two approvers, and the same approver twice (an identical decision without an
    // idempotency key is a second decision, refused as the local driver refuses it).
    for (round, names) in [["alice", "bob"], ["carol", "carol"], ["dave", "erin"]]
        .into_iter()
        .enumerate()
    {
        let session = format!("race-{round}");
        let file = format!("r{round}.txt");
        let id = pause(&h, &session, &file).await;
        let (first, second) = (approve(&id, names[0]), approve(&id, names[1]));
        let (a, b) = tokio::join!(
            h.client.submit(&session, &first, None),
            h.client.submit(&session, &second, None),
        );
        let w = one_wins([&a, &b], names, &h);
        let version = a.as_ref().or(b.as_ref()).unwrap().version;
        h.client
            .wait_settled(&session, version, SETTLE)
            .await
            .unwrap();

        // The audit trail: the winner's approval applied, the loser's refused.
        let records = trail(&h, &session).await;
        assert_eq!(records.len(), 2, "{records:#?}");
        let applied: Vec<_> = records
            .iter()
            .filter(|r| r.verdict == Verdict::Applied)
            .collect();
        assert_eq!(applied.len(), 1, "{records:#?}");
        assert_eq!(applied[0].actor.as_ref().unwrap().principal, names[w]);
        let refused: Vec<_> = records
            .iter()
            .filter(|r| matches!(&r.verdict, Verdict::Refused { reason, .. } if reason == "already_decided"))
            .collect();
        assert_eq!(refused.len(), 1, "{records:#?}");
        assert_eq!(refused[0].actor.as_ref().unwrap().principal, names[1 - w]);
        assert_eq!(refused[0].requirement_id, id);
        assert_eq!(
            h.count(&format!("delete_file start {session}/")),
            1,
            "{:?}",
            h.outbox()
        );
    }

    // The same request twice with one idempotency key: a harmless replay — the first
    // answer to both, one record.
    let id = pause(&h, "replay", "again.txt").await;
    let req = approve(&id, "frank");
    let (a, b) = tokio::join!(
        h.client.submit("replay", &req, Some("approve-once")),
        h.client.submit("replay", &req, Some("approve-once")),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b);
    assert_eq!(a.delivery, Delivery::Resumed);
    h.client
        .wait_settled("replay", a.version, SETTLE)
        .await
        .unwrap();
    let records = trail(&h, "replay").await;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0].verdict, Verdict::Applied);
    assert_eq!(h.count("delete_file start replay/"), 1);
    eprintln!(
        "racing approvals on Restate: 4 sessions in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
