//! reins sessions on a real restate-server, with the reins service as a real child
//! process: pauses, decisions through the ingress, crashes of either process, repeated
//! decisions, interrupts and refused inputs. A tool's effects are lines in an outbox
//! file the test reads.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use reins_agent::run::Phase;
use reins_agent::{AgentError, Decision, RunStatus, ViewToken};
use reins_message::{Msg, Role, ToolOutcome};
use reins_restate::{Delivery, TurnRequest};
use support::Harness;

const SETTLE: Duration = Duration::from_secs(30);

fn user(text: &str) -> TurnRequest {
    TurnRequest::message(Msg::user(text))
}

/// The outcomes of the tool results stored for the session, in order.
async fn outcomes(h: &Harness, session: &str) -> Vec<ToolOutcome> {
    h.stored(session)
        .await
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .flat_map(|m| {
            m.tool_results_iter()
                .map(|r| r.outcome.clone())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Starts `text` on `session` and waits until it pauses; returns the view.
async fn pause(h: &Harness, session: &str, text: &str) -> reins_agent::SessionView {
    let s = h
        .client
        .submit(session, &user(text), Some(&format!("{session}-start")))
        .await
        .unwrap();
    assert_eq!(s.delivery, Delivery::Started);
    let view = h
        .client
        .wait_settled(session, s.version, SETTLE)
        .await
        .unwrap();
    assert!(view.paused, "{view:?}\n{}", h.service_log());
    assert_eq!(view.requirements.len(), 1);
    view
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_through_the_ingress_runs_the_tool_once() {
    let Some(h) = Harness::start(&[]).await else {
        return;
    };
    let view = pause(&h, "s1", "delete a.txt").await;
    assert_eq!(view.requirements[0].tool_use.name, "delete_file");
    assert_eq!(h.count("delete_file start"), 0);

    let id = view.requirements[0].id.clone();
    let s = h
        .client
        .decide(
            "s1",
            vec![Decision::approve(&id).by("ana")],
            Some(view.token),
            Some("d1"),
        )
        .await
        .unwrap();
    assert_eq!(s.delivery, Delivery::Resumed);
    let end = h
        .client
        .wait_settled("s1", s.version, SETTLE)
        .await
        .unwrap();
    assert_eq!(end.phase, Phase::Finished(RunStatus::Completed));
    assert_eq!(h.count("delete_file start"), 1);
    assert_eq!(h.count("model"), 2);
    // The reins store is the record: the transcript and the audit trail.
    let stored = h.stored("s1").await;
    assert_eq!(stored.messages.len(), 4);
    assert!(stored.messages[3].text().starts_with("done: deleted a.txt"));
    let trail = h.decisions("s1").await;
    assert_eq!(trail.len(), 1);
    assert_eq!(trail[0].record["actor"]["principal"], "ana");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_killed_while_paused_resumes_after_a_restart() {
    let Some(mut h) = Harness::start(&[]).await else {
        return;
    };
    let view = pause(&h, "s2", "delete b.txt").await;
    h.service.kill9().await;
    h.service.restart().await;
    let id = view.requirements[0].id.clone();
    let s = h
        .client
        .decide("s2", vec![Decision::approve(&id)], Some(view.token), None)
        .await
        .unwrap();
    let end = h
        .client
        .wait_settled("s2", s.version, SETTLE)
        .await
        .unwrap();
    assert_eq!(
        end.phase,
        Phase::Finished(RunStatus::Completed),
        "{}",
        h.service_log()
    );
    assert_eq!(h.count("delete_file start"), 1);
    // The replayed turn took the model's first answer from the journal.
    assert_eq!(h.count("model"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_killed_mid_tool_gives_unknown_and_never_runs_it_again() {
    let Some(mut h) = Harness::start(&[]).await else {
        return;
    };
    let s = h
        .client
        .submit("s3", &user("work 3000"), None)
        .await
        .unwrap();
    h.wait_for_line("work start").await;
    h.service.kill9().await;
    h.service.restart().await;
    let end = h
        .client
        .wait_settled("s3", s.version, SETTLE)
        .await
        .unwrap();
    assert_eq!(
        end.phase,
        Phase::Finished(RunStatus::Completed),
        "{}",
        h.service_log()
    );
    assert_eq!(outcomes(&h, "s3").await, vec![ToolOutcome::Unknown]);
    // Give a wrongly re-run tool the time to show up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(h.count("work start"), 1);
    assert_eq!(h.count("work end"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_killed_while_a_batchs_results_ride_with_the_next_commit_stores_them_once() {
    // Every model call takes 1.5 s: the kill lands in the second one.
    let Some(mut h) = Harness::start(&["--latency-ms", "1500"]).await else {
        return;
    };
    let s = h.client.submit("s9", &user("work 0"), None).await.unwrap();
    h.wait_for_line("work end").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while h.count("model") < 2 {
        assert!(std::time::Instant::now() < deadline, "{}", h.service_log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The result is in the journal and the ledger, not yet in the transcript: it rides
    // with the commit that stores the model's answer.
    let before = h.stored("s9").await;
    assert_eq!(before.messages.len(), 2, "{:?}", before.messages);
    assert!(before.messages.iter().all(|m| m.role != Role::Tool));
    h.service.kill9().await;
    h.service.restart().await;
    let end = h
        .client
        .wait_settled("s9", s.version, SETTLE)
        .await
        .unwrap();
    assert_eq!(
        end.phase,
        Phase::Finished(RunStatus::Completed),
        "{}",
        h.service_log()
    );
    // The replayed turn took the result from the journal: the tool ran once, the
    // model was asked again only for the answer the crash cut off.
    assert_eq!(outcomes(&h, "s9").await, vec![ToolOutcome::Success]);
    assert_eq!(h.count("work start"), 1);
    assert_eq!(h.count("model"), 3);
    let stored = h.stored("s9").await;
    assert_eq!(stored.messages.len(), 4);
    assert!(
        stored.messages[3].text().starts_with("done: "),
        "{:?}",
        stored.messages[3]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_calls_runs_at_the_same_time_each_once() {
    let Some(h) = Harness::start(&[]).await else {
        return;
    };
    let s = h
        .client
        .submit("b1", &user("batch 3 400"), None)
        .await
        .unwrap();
    let end = h
        .client
        .wait_settled("b1", s.version, SETTLE)
        .await
        .unwrap();
    assert_eq!(end.phase, Phase::Finished(RunStatus::Completed));
    assert_eq!(outcomes(&h, "b1").await, vec![ToolOutcome::Success; 3]);
    // Together: every call started before any ended (one after another, each would
    // end before the next started).
    let work: Vec<String> = h
        .outbox()
        .into_iter()
        .filter(|l| l.starts_with("work "))
        .collect();
    assert_eq!(work.len(), 6, "{work:?}");
    assert!(
        work[..3].iter().all(|l| l.starts_with("work start")),
        "{work:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_killed_mid_batch_gives_unknown_for_every_call_and_runs_none_again() {
    let Some(mut h) = Harness::start(&[]).await else {
        return;
    };
    let s = h
        .client
        .submit("b2", &user("batch 3 3000"), None)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + SETTLE;
    while h.count("work start") < 3 {
        assert!(std::time::Instant::now() < deadline, "{:?}", h.outbox());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.service.kill9().await;
    h.service.restart().await;
    let end = h
        .client
        .wait_settled("b2", s.version, SETTLE)
        .await
        .unwrap();
    assert_eq!(
        end.phase,
        Phase::Finished(RunStatus::Completed),
        "{}",
        h.service_log()
    );
    assert_eq!(outcomes(&h, "b2").await, vec![ToolOutcome::Unknown; 3]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(h.count("work start"), 3);
    assert_eq!(h.count("work end"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_tool_cut_by_a_crash_runs_again_once() {
    let Some(mut h) = Harness::start(&["--tool-lease-ms", "500"]).await else {
        return;
    };
    let s = h
        .client
        .submit("s4", &user("sync 1500"), None)
        .await
        .unwrap();
    h.wait_for_line("sync start").await;
    h.service.kill9().await;
    h.service.restart().await;
    let end = h
        .client
        .wait_settled("s4", s.version, SETTLE)
        .await
        .unwrap();
    assert_eq!(
        end.phase,
        Phase::Finished(RunStatus::Completed),
        "{}",
        h.service_log()
    );
    assert_eq!(outcomes(&h, "s4").await, vec![ToolOutcome::Success]);
    assert_eq!(h.count("sync start"), 2);
    assert_eq!(h.count("sync end"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restate_server_killed_while_paused_resumes_after_a_restart() {
    let Some(mut h) = Harness::start(&[]).await else {
        return;
    };
    let view = pause(&h, "s5", "delete c.txt").await;
    h.restate.kill().await.unwrap();
    h.restate.restart().await.unwrap();
    let id = view.requirements[0].id.clone();
    let s = h
        .client
        .decide("s5", vec![Decision::approve(&id)], Some(view.token), None)
        .await
        .unwrap();
    assert_eq!(s.delivery, Delivery::Resumed);
    let end = h
        .client
        .wait_settled("s5", s.version, SETTLE)
        .await
        .unwrap();
    assert_eq!(
        end.phase,
        Phase::Finished(RunStatus::Completed),
        "{}",
        h.service_log()
    );
    assert_eq!(h.count("delete_file start"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_decision_twice_runs_the_tool_once() {
    let Some(h) = Harness::start(&[]).await else {
        return;
    };
    let view = pause(&h, "s6", "delete d.txt").await;
    let id = view.requirements[0].id.clone();
    let decide = || {
        h.client.decide(
            "s6",
            vec![Decision::approve(&id)],
            Some(view.token.clone()),
            Some("same-key"),
        )
    };
    let (a, b) = tokio::join!(decide(), decide());
    let a = a.unwrap();
    assert_eq!(
        a,
        b.unwrap(),
        "a repeated idempotency key gets the first answer"
    );
    h.client
        .wait_settled("s6", a.version, SETTLE)
        .await
        .unwrap();
    // The same decision again without a key: refused as already decided (as the local
    // driver refuses it), nothing runs.
    let again = h
        .client
        .decide(
            "s6",
            vec![Decision::approve(&id)],
            Some(view.token.clone()),
            None,
        )
        .await;
    let refused = again.unwrap_err();
    let r = refused.refused().expect("a typed refusal");
    assert_eq!((r.code.as_str(), r.status()), ("already_decided", 409));
    assert!(
        matches!(
            r.to_agent_error(),
            Some(AgentError::AlreadyDecided { ref decided, .. }) if decided.decision == "approve"
        ),
        "{r:?}"
    );
    let end = h
        .client
        .wait_settled("s6", a.version, SETTLE)
        .await
        .unwrap();
    assert_eq!(end.phase, Phase::Finished(RunStatus::Completed));
    assert_eq!(h.count("delete_file start"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_mid_stream_ends_the_run_cancelled_and_sanitized() {
    let Some(h) = Harness::start(&[]).await else {
        return;
    };
    let s = h
        .client
        .submit("s7", &user("stream 50"), None)
        .await
        .unwrap();
    h.wait_for_line("model").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let i = h.client.interrupt("s7").await.unwrap();
    assert!(i.requested);
    let end = h
        .client
        .wait_settled("s7", s.version, Duration::from_secs(4))
        .await
        .unwrap();
    assert_eq!(
        end.phase,
        Phase::Finished(RunStatus::Cancelled),
        "{}",
        h.service_log()
    );
    // The partial answer was never stored: the user's message is all there is.
    let stored = h.stored("s7").await;
    assert_eq!(stored.messages.len(), 1, "{:?}", stored.messages);
    assert_eq!(stored.messages[0].role, Role::User);
    // The session takes the next message as usual.
    let hello = user("hello");
    let s = h.client.submit("s7", &hello, None).await.unwrap();
    let end = h
        .client
        .wait_settled("s7", s.version, SETTLE)
        .await
        .unwrap();
    assert_eq!(end.phase, Phase::Finished(RunStatus::Completed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_local_drivers_typed_errors_and_changes_nothing() {
    let Some(h) = Harness::start(&[]).await else {
        return;
    };
    // Unknown session.
    let e = h.client.view("nobody").await.unwrap_err();
    let r = e.refused().unwrap();
    assert_eq!((r.code.as_str(), r.status()), ("not_found", 404));
    assert!(matches!(
        r.to_agent_error(),
        Some(AgentError::Store(
            reins_memory::Error::SessionNotFound { .. }
        ))
    ));
    let e = h
        .client
        .decide("nobody", vec![Decision::approve("call_1")], None, None)
        .await
        .unwrap_err();
    assert_eq!(e.refused().unwrap().code, "not_found");

    // A decision for nothing pending.
    let s = h.client.submit("s8", &user("hello"), None).await.unwrap();
    h.client
        .wait_settled("s8", s.version, SETTLE)
        .await
        .unwrap();
    let e = h
        .client
        .decide("s8", vec![Decision::approve("call_1")], None, None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.refused().unwrap().to_agent_error(),
            Some(AgentError::NothingToResume { .. })
        ),
        "{e}"
    );

    // A stale view and an unknown requirement, on a paused session.
    let view = pause(&h, "s9", "delete e.txt").await;
    let before = h.stored("s9").await.version;
    let stale = ViewToken::new(true, ["call_other"]);
    let e = h
        .client
        .decide(
            "s9",
            vec![Decision::approve(&view.requirements[0].id)],
            Some(stale),
            None,
        )
        .await
        .unwrap_err();
    let r = e.refused().unwrap();
    assert_eq!((r.code.as_str(), r.status()), ("stale_view", 409));
    match r.to_agent_error() {
        Some(AgentError::StaleView { seen, pending }) => {
            assert_eq!(seen, ["call_other"]);
            assert_eq!(pending, view.requirements);
        }
        other => panic!("{other:?}"),
    }
    let e = h
        .client
        .decide("s9", vec![Decision::approve("call_nope")], None, None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.refused().unwrap().to_agent_error(),
            Some(AgentError::UnknownRequirement { .. })
        ),
        "{e}"
    );
    // Nothing changed: same version, still paused on the same requirement, nothing ran.
    assert_eq!(h.stored("s9").await.version, before);
    assert_eq!(h.client.pending("s9").await.unwrap(), view.requirements);
    assert_eq!(h.count("delete_file start"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_service_processes_and_100_sessions_run_every_tool_once() {
    // Few HTTP/2 streams per connection: Restate opens more connections, and the
    // round-robin proxy spreads them over the three processes.
    let config = "[worker.invoker]\nhttp2-streams-per-connection-limit = 2\n";
    let Some(mut h) = Harness::start_cluster(3, &[], config).await else {
        return;
    };
    let sessions: Vec<String> = (0..100).map(|i| format!("c{i}")).collect();
    let started = futures::future::join_all(sessions.iter().map(|s| {
        let key = format!("{s}-start");
        let req = user(&format!("delete {s}.txt"));
        let client = h.client.clone();
        async move { client.submit(s, &req, Some(&key)).await.unwrap() }
    }))
    .await;
    let views = futures::future::join_all(sessions.iter().zip(&started).map(|(s, sub)| {
        let client = h.client.clone();
        async move { client.wait_settled(s, sub.version, SETTLE).await.unwrap() }
    }))
    .await;
    assert!(views.iter().all(|v| v.paused && v.requirements.len() == 1));

    // One process dies while everything is paused; the other two finish the work.
    h.others[0].kill9().await;
    let decided = futures::future::join_all(sessions.iter().zip(views).map(|(s, v)| {
        let client = h.client.clone();
        let key = format!("{s}-approve");
        async move {
            let d = vec![Decision::approve(&v.requirements[0].id)];
            client
                .decide(s, d, Some(v.token), Some(&key))
                .await
                .unwrap()
        }
    }))
    .await;
    let ends = futures::future::join_all(sessions.iter().zip(&decided).map(|(s, d)| {
        let client = h.client.clone();
        async move { client.wait_settled(s, d.version, SETTLE).await.unwrap() }
    }))
    .await;
    assert!(
        ends.iter()
            .all(|v| v.phase == Phase::Finished(RunStatus::Completed))
    );
    let lines = h.outbox();
    for s in &sessions {
        let starts = lines
            .iter()
            .filter(|l| l.starts_with(&format!("delete_file start {s}/")))
            .count();
        assert_eq!(starts, 1, "session {s}: {starts} runs");
    }
    let workers: std::collections::BTreeSet<&str> = lines
        .iter()
        .filter(|l| l.starts_with("delete_file start"))
        .filter_map(|l| l.rsplit(' ').next())
        .collect();
    assert!(workers.len() >= 2, "the tool calls ran on {workers:?}");
    assert!(!workers.contains("p1"), "p1 was killed before any tool ran");
}

/// An input sent the moment the stored session is settled is taken, never refused as
/// busy while the settled turn's invocation closes: the next message after a finished
/// turn, after an approved one, and after an interrupted one, many times in a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_right_after_a_turn_settles_is_taken() {
    let Some(h) = Harness::start(&[]).await else {
        return;
    };
    let mut s = h.client.submit("s12", &user("hello"), None).await.unwrap();
    for i in 0..12 {
        let end = h
            .client
            .wait_settled("s12", s.version, SETTLE)
            .await
            .unwrap();
        assert_eq!(end.phase, Phase::Finished(RunStatus::Completed));
        s = h
            .client
            .submit("s12", &user(&format!("hello {i}")), None)
            .await
            .unwrap_or_else(|e| panic!("message {i} right after the turn settled: {e}"));
        assert_eq!(s.delivery, Delivery::Started);
    }
    h.client
        .wait_settled("s12", s.version, SETTLE)
        .await
        .unwrap();
    assert_eq!(h.count("model"), 13);

    // After an approval: the turn ends with the tool's answer, the next message at once.
    let view = pause(&h, "s13", "delete f.txt").await;
    let d = h
        .client
        .decide(
            "s13",
            vec![Decision::approve(&view.requirements[0].id)],
            Some(view.token),
            None,
        )
        .await
        .unwrap();
    h.client
        .wait_settled("s13", d.version, SETTLE)
        .await
        .unwrap();
    let s = h.client.submit("s13", &user("hello"), None).await.unwrap();
    let end = h
        .client
        .wait_settled("s13", s.version, SETTLE)
        .await
        .unwrap();
    assert_eq!(end.phase, Phase::Finished(RunStatus::Completed));
    assert_eq!(h.count("delete_file start"), 1);
}
