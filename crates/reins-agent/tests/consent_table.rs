//! The consent table of issue #36 on the local driver: every scenario of
//! `reins_agent::testing`, each on its own SQLite store, through the local driver as a
//! `SessionBackend`. reins-restate's `tests/consent.rs` runs the same scenarios, with
//! the same checks, on a real restate-server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use reins_agent::testing::Scenario;
use reins_memory::{MemoryStore, SqliteStore};

async fn on_local(scenario: Scenario) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn MemoryStore> = Arc::new(
        SqliteStore::open(dir.path().join("reins.sqlite"))
            .await
            .unwrap(),
    );
    let outbox = dir.path().join("outbox.txt");
    let agent = scenario.agent(store.clone(), &outbox).unwrap();
    if let Err(e) = scenario.check(&agent, &*store, &outbox).await {
        panic!("local driver: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_of_two_with_one_approval_stays_paused() {
    on_local(Scenario::Quorum).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denying_policy_rejects_without_asking() {
    on_local(Scenario::PolicyDenies).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_approval_of_a_short_lived_requirement_is_refused() {
    on_local(Scenario::ApprovalTtl).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standing_grant_runs_without_asking() {
    on_local(Scenario::StandingGrant).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_spec_ends_with_a_structured_answer() {
    on_local(Scenario::OutputSpec).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_blocks_one_call_and_edits_another() {
    on_local(Scenario::Hooks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_conversation_is_summarized_within_budget() {
    on_local(Scenario::Compression).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_mid_run_is_reconciled() {
    on_local(Scenario::Reconcile).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_replays_a_finished_call_without_running_it() {
    on_local(Scenario::ForkReplay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_approval_sent_twice_with_one_key_runs_once() {
    on_local(Scenario::IdempotencyKey).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_stops_a_running_call() {
    on_local(Scenario::Interrupt).await;
}

#[test]
fn every_scenario_has_a_name_that_reads_back() {
    for s in Scenario::ALL {
        assert_eq!(Scenario::from_name(s.name()), Some(s));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_pause_interrupt_and_settled_decisions_hold_at_the_parent() {
    on_local(Scenario::SubAgent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asking_tool_gets_its_answer_and_runs_once() {
    on_local(Scenario::AskingTool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_structured_answer_asked_for_by_one_message() {
    on_local(Scenario::CallOutput).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acting_chunk_and_error_hooks_are_told() {
    on_local(Scenario::HookEvents).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_as_policies_allow_reject_ask_and_say_who_decides() {
    on_local(Scenario::PolicyRules).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_is_extended_once_then_ended() {
    on_local(Scenario::Budget).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_approver_during_the_first_ones_run_is_told_already_decided_and_audited() {
    on_local(Scenario::LateApprover).await;
}
