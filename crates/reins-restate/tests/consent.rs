//! The consent table of issue #36 on Restate: every scenario of `reins_agent::testing`
//! (the same checks reins-agent's `tests/consent_table.rs` runs on the local driver),
//! through `RestateClient` as the `SessionBackend`, against a real restate-server (from
//! npm) and the scenario's agent served in a process of its own — this test binary
//! started again as `consent_service`, so the service is built from the scenario's
//! own `Scenario::agent`.
//!
//! Fails under `CI=true` when restate-server is not installed; elsewhere it is
//! reported SKIPPED.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use reins_agent::testing::{Scenario, rules};
use reins_memory::{MemoryStore, SqliteStore};
use reins_restate::{LocalRestate, RestateClient, SessionObject};
use tokio::process::{Child, Command};

/// One restate-server at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// The service process: the scenario's agent as the session object, until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by the consent tests as the service process"]
async fn consent_service() {
    let scenario = Scenario::from_name(&env("REINS_CONSENT_SCENARIO")).unwrap();
    let store: Arc<dyn MemoryStore> =
        Arc::new(SqliteStore::open(env("REINS_CONSENT_DB")).await.unwrap());
    let outbox = env("REINS_CONSENT_OUTBOX");
    let agent = if std::env::var_os("REINS_CONSENT_CEDAR").is_some() {
        // The scenario's rules as Cedar policies (reins-policy) instead of by hand.
        let policy = reins_policy::CedarPolicy::new(
            reins_policy::PolicySet::from_source("mail.cedar", rules::CEDAR).unwrap(),
        );
        let cedar = rules::ScenarioRules {
            approval: Arc::new(policy.clone()),
            eligibility: Arc::new(policy),
        };
        scenario.agent_with_rules(store, Path::new(&outbox), cedar)
    } else {
        scenario.agent(store, Path::new(&outbox))
    }
    .unwrap();
    let object = SessionObject::new(agent).unwrap();
    let listener = tokio::net::TcpListener::bind(env("REINS_CONSENT_LISTEN"))
        .await
        .unwrap();
    reins_restate::serve(object, listener).await;
}

/// A restate-server, the scenario's service process and a client of the ingress.
struct Deployment {
    _restate: LocalRestate,
    service: Child,
    client: RestateClient,
    db: PathBuf,
    outbox: PathBuf,
    log: PathBuf,
}

impl Deployment {
    async fn start(binary: PathBuf, dir: &Path, scenario: Scenario, cedar: bool) -> Self {
        let restate = LocalRestate::start_with(binary, dir.join("restate"), "")
            .await
            .unwrap();
        let (db, outbox, log) = (
            dir.join("reins.sqlite"),
            dir.join("outbox.txt"),
            dir.join("service.log"),
        );
        // The store exists (and is migrated) before either process opens it.
        drop(SqliteStore::open(&db).await.unwrap());
        let port = reins_restate::local::free_port().unwrap();
        let out = std::fs::File::create(&log).unwrap();
        let mut service = Command::new(std::env::current_exe().unwrap());
        if cedar {
            service.env("REINS_CONSENT_CEDAR", "1");
        }
        let service = service
            .args(["consent_service", "--exact", "--ignored", "--nocapture"])
            .env("REINS_CONSENT_SCENARIO", scenario.name())
            .env("REINS_CONSENT_DB", &db)
            .env("REINS_CONSENT_OUTBOX", &outbox)
            .env("REINS_CONSENT_LISTEN", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        support::wait_until_listening(port, Duration::from_secs(30), &log).await;
        restate
            .register(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap();
        let client = RestateClient::new(restate.ingress_url());
        Self {
            _restate: restate,
            service,
            client,
            db,
            outbox,
            log,
        }
    }
}

async fn on_restate(scenario: Scenario) {
    on_restate_with(scenario, false).await;
}

/// `cedar`: the service answers the scenario's rules with Cedar policies.
async fn on_restate_with(scenario: Scenario, cedar: bool) {
    let Some(binary) = support::restate_binary() else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let mut d = Deployment::start(binary, dir.path(), scenario, cedar).await;
    let store = SqliteStore::open(&d.db).await.unwrap();
    let result = scenario.check(&d.client, &store, &d.outbox).await;
    d.service.kill().await.unwrap();
    if let Err(e) = result {
        panic!(
            "Restate driver: {e}\nservice log:\n{}",
            std::fs::read_to_string(&d.log).unwrap_or_default()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_of_two_with_one_approval_stays_paused() {
    on_restate(Scenario::Quorum).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denying_policy_rejects_without_asking() {
    on_restate(Scenario::PolicyDenies).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_approval_of_a_short_lived_requirement_is_refused() {
    on_restate(Scenario::ApprovalTtl).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standing_grant_runs_without_asking() {
    on_restate(Scenario::StandingGrant).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_spec_ends_with_a_structured_answer() {
    on_restate(Scenario::OutputSpec).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_pause_interrupt_and_settled_decisions_hold_at_the_parent() {
    on_restate(Scenario::SubAgent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asking_tool_gets_its_answer_and_runs_once() {
    on_restate(Scenario::AskingTool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_blocks_one_call_and_edits_another() {
    on_restate(Scenario::Hooks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_conversation_is_summarized_within_budget() {
    on_restate(Scenario::Compression).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_mid_run_is_reconciled() {
    on_restate(Scenario::Reconcile).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_replays_a_finished_call_without_running_it() {
    on_restate(Scenario::ForkReplay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_approval_sent_twice_with_one_key_runs_once() {
    on_restate(Scenario::IdempotencyKey).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_stops_a_running_call() {
    on_restate(Scenario::Interrupt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_structured_answer_asked_for_by_one_message() {
    on_restate(Scenario::CallOutput).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acting_chunk_and_error_hooks_are_told() {
    on_restate(Scenario::HookEvents).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_as_policies_allow_reject_ask_and_say_who_decides() {
    on_restate(Scenario::PolicyRules).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cedar_policies_answer_the_rules_scenario() {
    on_restate_with(Scenario::PolicyRules, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_is_extended_once_then_ended() {
    on_restate(Scenario::Budget).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_approver_during_the_first_ones_run_is_told_already_decided_and_audited() {
    on_restate(Scenario::LateApprover).await;
}

/// `submit` answers the version its input was validated against, so that waiting for
/// the session to move past it returns — also after a quorum's first approval, which
/// leaves the turn paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_settled_returns_after_a_quorums_first_approval() {
    let Some(binary) = support::restate_binary() else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let mut d = Deployment::start(binary, dir.path(), Scenario::Quorum, false).await;
    let wait = Duration::from_secs(30);
    let sent = d
        .client
        .submit(
            "q1",
            &reins_restate::TurnRequest::message(reins_message::Msg::user(
                "email carol@example.com",
            )),
            None,
        )
        .await
        .unwrap();
    let paused = d
        .client
        .wait_settled("q1", sent.version, wait)
        .await
        .unwrap();
    assert!(paused.paused, "{paused:?}");
    let id = paused.requirements[0].id.clone();
    let approval = reins_agent::Decision::approve(&id).by("ana");
    let decided = d
        .client
        .decide("q1", vec![approval], Some(paused.token.clone()), None)
        .await
        .unwrap();
    assert_eq!(decided.delivery, reins_restate::Delivery::Resumed);
    assert_eq!(decided.version, paused.version, "{decided:?}");
    let after = d
        .client
        .wait_settled("q1", decided.version, wait)
        .await
        .unwrap();
    assert!(after.paused, "{after:?}");
    let approvals = after.requirements[0]
        .quorum
        .as_ref()
        .unwrap()
        .approvals
        .len();
    assert_eq!(approvals, 1);
    d.service.kill().await.unwrap();
}
