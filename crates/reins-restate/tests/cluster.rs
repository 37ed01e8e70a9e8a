//! reins sessions on a three-node restate-server cluster on loopback (every node runs
//! every role; the log and the metadata are replicated on two nodes: one node may
//! fail; one partition), with the reins service as a real child process. The node that
//! leads the partition, where the session's turn runs, is killed with `kill -9` while the run is
//! paused, and while a tool runs: the run goes on from the other nodes — no tool runs
//! twice, nothing is lost. (The consent scenarios' crash tests run on a cluster in
//! `scenario_crash.rs`.)
//!
//! `REINS_CLUSTER_ROUNDS=N` repeats each test N times (default 1).
//!
//! Fails under `CI=true` when restate-server is not installed; elsewhere it is
//! reported SKIPPED.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use reins_agent::run::Phase;
use reins_agent::{Decision, RunStatus};
use reins_message::{Msg, Role, ToolOutcome};
use reins_restate::{RestateClient, TurnRequest};
use support::ClusterHarness;

const SETTLE: Duration = Duration::from_secs(60);

fn user(text: &str) -> TurnRequest {
    TurnRequest::message(Msg::user(text))
}

fn rounds() -> usize {
    std::env::var("REINS_CLUSTER_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// The outcomes of the tool results stored for the session, in order.
async fn outcomes(h: &ClusterHarness, session: &str) -> Vec<ToolOutcome> {
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

/// Kills (`kill -9`) the node that leads the partition every turn runs on; the client
/// goes to another node's ingress. The node killed.
async fn kill_the_leader(h: &mut ClusterHarness) -> usize {
    let leader = h.leader().expect("a node leads the partition");
    let other = (leader + 1) % h.cluster.len();
    h.client = RestateClient::new(h.cluster.ingress_url(other));
    h.cluster.kill(leader).await.unwrap();
    leader
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_a_paused_run_waits_on_killed_the_others_take_the_approval() {
    for round in 0..rounds() {
        let Some(mut h) = ClusterHarness::start(&[]).await else {
            return;
        };
        let session = format!("k{round}");
        let s = h
            .client
            .submit(&session, &user("delete a.txt"), None)
            .await
            .unwrap();
        let view = h
            .client
            .wait_settled(&session, s.version, SETTLE)
            .await
            .unwrap();
        assert!(view.paused, "{view:?}\n{}", h.service_log());
        let killed = kill_the_leader(&mut h).await;
        // The service too: the pause is in the store and in the journal, on the others.
        h.service.restart().await;
        let id = view.requirements[0].id.clone();
        let d = h
            .client
            .decide(
                &session,
                vec![Decision::approve(&id).by("ana")],
                Some(view.token),
                None,
            )
            .await
            .unwrap();
        let end = h
            .client
            .wait_settled(&session, d.version, SETTLE)
            .await
            .unwrap();
        assert_eq!(
            end.phase,
            Phase::Finished(RunStatus::Completed),
            "node {killed} killed\n{}",
            h.service_log()
        );
        eprintln!("node {killed} (the leader) killed while paused");
        assert_eq!(h.count("delete_file start"), 1, "the tool runs once");
        assert_eq!(outcomes(&h, &session).await, [ToolOutcome::Success]);
        let stored = h.stored(&session).await;
        assert_eq!(
            stored.messages.len(),
            4,
            "nothing is lost: {:?}",
            stored.messages
        );
        assert!(stored.messages[3].text().starts_with("done: deleted a.txt"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_a_run_is_on_killed_mid_tool_the_others_finish_it_without_running_it_twice() {
    for round in 0..rounds() {
        let Some(mut h) = ClusterHarness::start(&[]).await else {
            return;
        };
        let session = format!("t{round}");
        let s = h
            .client
            .submit(&session, &user("work 3000"), None)
            .await
            .unwrap();
        h.wait_for_line("work start").await;
        let killed = kill_the_leader(&mut h).await;
        let end = h
            .client
            .wait_settled(&session, s.version, SETTLE)
            .await
            .unwrap();
        assert_eq!(
            end.phase,
            Phase::Finished(RunStatus::Completed),
            "node {killed} killed\n{}",
            h.service_log()
        );
        // The call started once. Cut off with the node that ran its turn, it is put to
        // its tool's reconcile (`Unknown`: the demo tool cannot tell) and never runs
        // again; a call that outlived the node finished once, and its result is kept.
        assert_eq!(h.count("work start"), 1, "the tool runs once");
        let expected = if h.count("work end") == 1 {
            ToolOutcome::Success
        } else {
            ToolOutcome::Unknown
        };
        eprintln!("node {killed} (the leader) killed mid-tool: the call ended {expected:?}");
        assert_eq!(outcomes(&h, &session).await, [expected]);
        assert_eq!(h.stored(&session).await.messages.len(), 4);
    }
}
