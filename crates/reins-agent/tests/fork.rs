//! Forks and replays: a fork serves the calls its source already made from the
//! source's ledger (no second email, no second approval), a different call goes
//! through its policy, a replay never runs a tool and says where it diverged. On
//! memory, SQLite and PostgreSQL (when `REINS_TEST_POSTGRES_URL` is set).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use proptest::prelude::*;
use reins_agent::{
    Agent, AgentError, Decision, Divergence, ForkPoint, RunEvent, RunStatus, Session, replay, turns,
};
use reins_hook::{Control, Hook, HookContext, HookError, HookEvent, HookEventKind};
use reins_message::{Msg, ToolOutcome};
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_tool::ToolPolicy;
use serde_json::json;
use support::*;

fn email(id: &str, to: &str) -> ScriptedResponse {
    call(id, "send_email", json!({"to": to, "body": "hi"}))
}

/// A session on `store` that sent one approved email to bob: (agent, session, counter).
async fn sent_once(
    store: SharedStore,
    id: &str,
    more: Vec<ScriptedResponse>,
) -> (Agent, Session, Counter) {
    let counter = Counter::default();
    let mut script = vec![email("c1", "bob@example.com"), text("Sent to bob.")];
    script.extend(more);
    let agent = agent(
        ScriptedModel::new(script),
        toolkit(&counter, ToolPolicy::confirm()),
    )
    .store_arc(store)
    .build()
    .unwrap();
    let s = agent.session(id).await.unwrap();
    let out = s.send(Msg::user("email bob")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let out = s
        .resolve(vec![Decision::approve("c1").by("ana")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("send_email"), 1);
    (agent, s, counter)
}

#[tokio::test]
async fn a_fork_serves_the_approved_email_from_the_record_on_every_store() {
    for (label, store, _other, _keep) in store_pairs("fork_serves").await {
        let (_agent, original, counter) = sent_once(
            store.clone(),
            "orig",
            vec![email("f1", "bob@example.com"), text("Sent to bob.")],
        )
        .await;
        let before = original.messages().await.unwrap();
        let fork = original
            .fork(ForkPoint::BeforeTurn(0), "orig/fork-1")
            .await
            .unwrap();
        assert!(fork.messages().await.unwrap().is_empty(), "{label}");
        let origin = fork.forked_from().await.unwrap().unwrap();
        assert_eq!(
            (origin.source.as_str(), origin.at, origin.recorded_calls),
            ("orig", 0, 1)
        );

        let mut handle = fork.send(Msg::user("email bob")).start().await.unwrap();
        let mut replayed = Vec::new();
        while let Some(ev) = handle.next_event().await {
            if let RunEvent::ToolReplayed { result } = ev {
                replayed.push(result);
            }
        }
        let out = handle.wait().await.unwrap();
        assert_eq!(
            out.status,
            RunStatus::Completed,
            "{label}: no approval is asked again"
        );
        assert_eq!(
            counter.count("send_email"),
            1,
            "{label}: one email in the outbox"
        );
        assert_eq!(replayed.len(), 1, "{label}");
        assert_eq!(replayed[0].id, "f1");
        assert_eq!(replayed[0].metadata["replayed_from"], "c1");
        assert_eq!(replayed[0].metadata["replayed_session"], "orig");

        let msgs = fork.messages().await.unwrap();
        assert_valid(&msgs);
        assert_eq!(result_text(&msgs, "f1"), "sent to bob@example.com");
        let audit = fork.decisions().await.unwrap();
        assert_eq!(audit.len(), 1, "{label}: {audit:?}");
        assert_eq!(audit[0].decision, "replayed");
        assert_eq!(audit[0].via, "fork");
        assert_eq!(audit[0].requirement_id, "f1");
        let origin = fork.forked_from().await.unwrap().unwrap();
        assert_eq!(origin.served_calls, 1);

        // The original is untouched, and the fork's record survives a reload from
        // the store (a fresh agent on the same store).
        assert_eq!(original.messages().await.unwrap(), before, "{label}");
        assert_eq!(original.decisions().await.unwrap().len(), 1);
    }
}

#[tokio::test]
async fn a_fork_with_another_recipient_asks_again_and_sends_a_second_email() {
    for (label, store, _other, _keep) in store_pairs("fork_differs").await {
        let (_agent, original, counter) = sent_once(
            store,
            "orig",
            vec![email("f1", "carol@example.com"), text("Sent to carol.")],
        )
        .await;
        let fork = original
            .fork(ForkPoint::BeforeTurn(0), "fork")
            .await
            .unwrap();
        let out = fork.send(Msg::user("email carol")).await.unwrap();
        assert_eq!(
            out.status,
            RunStatus::Paused,
            "{label}: a new call needs approval"
        );
        assert_eq!(out.requirements[0].id, "f1");
        let out = fork
            .resolve(vec![Decision::approve("f1").by("ana")])
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed);
        assert_eq!(counter.count("send_email"), 2, "{label}");
        assert_eq!(
            counter.args("send_email")[1]["to"],
            "carol@example.com",
            "{label}: the second email is the new one"
        );
        assert!(
            fork.decisions()
                .await
                .unwrap()
                .iter()
                .all(|d| d.decision != "replayed")
        );
    }
}

#[tokio::test]
async fn rerun_side_effects_asks_for_a_fresh_approval() {
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    let (_agent, original, counter) = sent_once(
        store,
        "orig",
        vec![email("f1", "bob@example.com"), text("Sent again.")],
    )
    .await;
    let fork = original
        .fork(ForkPoint::BeforeTurn(0), "fork")
        .rerun_side_effects()
        .await
        .unwrap();
    assert_eq!(fork.forked_from().await.unwrap().unwrap().recorded_calls, 0);
    let out = fork.send(Msg::user("email bob")).await.unwrap();
    assert_eq!(
        out.status,
        RunStatus::Paused,
        "the re-run needs its own approval"
    );
    assert_eq!(counter.count("send_email"), 1);
    fork.resolve(vec![Decision::approve("f1")]).await.unwrap();
    assert_eq!(counter.count("send_email"), 2);
}

#[tokio::test]
async fn each_recorded_call_serves_one_call() {
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    let (_agent, original, counter) = sent_once(
        store,
        "orig",
        vec![
            // The fork asks for the same email twice in one message.
            email("f1", "bob@example.com")
                .then_tool_call("send_email", json!({"to": "bob@example.com", "body": "hi"})),
            text("Sent twice?"),
        ],
    )
    .await;
    let fork = original
        .fork(ForkPoint::BeforeTurn(0), "fork")
        .await
        .unwrap();
    let out = fork.send(Msg::user("email bob twice")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    assert_eq!(
        out.requirements.len(),
        1,
        "the first is served, the second is a new call"
    );
    assert_ne!(out.requirements[0].id, "f1");
    assert_eq!(counter.count("send_email"), 1);
}

#[tokio::test]
async fn bad_fork_points_and_taken_ids_are_refused_with_nothing_written() {
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    let (agent, original, _counter) = sent_once(store.clone(), "orig", vec![]).await;
    // Message 1 is the assistant's tool use: cutting after it leaves it unanswered.
    let err = original
        .fork(ForkPoint::Messages(2), "f")
        .await
        .unwrap_err();
    assert!(
        matches!(err, AgentError::InvalidInput(ref m) if m.contains("has no result")),
        "{err}"
    );
    let err = original
        .fork(ForkPoint::BeforeTurn(3), "f")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("turn 3 does not exist"), "{err}");
    let err = original
        .fork(ForkPoint::Messages(99), "f")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("fewer than 99"), "{err}");
    assert_eq!(
        store.session_version("f").await.unwrap(),
        None,
        "nothing written"
    );
    // Forking into an existing session is refused and leaves it as it was.
    let err = original
        .fork(ForkPoint::BeforeTurn(0), "orig")
        .await
        .unwrap_err();
    assert!(
        matches!(err, AgentError::SessionExists { ref session } if session == "orig"),
        "{err}"
    );
    let other = agent.session("other").await.unwrap();
    other.send(Msg::user("hello")).await.ok();
    let v = store.session_version("other").await.unwrap();
    assert!(
        original
            .fork(ForkPoint::BeforeTurn(0), "other")
            .await
            .is_err()
    );
    assert_eq!(store.session_version("other").await.unwrap(), v);
    // A cut after the whole first turn is fine.
    let n = original.messages().await.unwrap().len();
    let f = original
        .fork(ForkPoint::Messages(n), "whole")
        .await
        .unwrap();
    assert_eq!(f.messages().await.unwrap().len(), n);
}

#[tokio::test]
async fn a_fork_of_a_fork_still_serves_and_a_snapshot_of_a_fork_imports_elsewhere() {
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    let (agent, original, counter) = sent_once(
        store,
        "orig",
        vec![
            email("f1", "bob@example.com"),
            text("Sent."),
            email("g1", "bob@example.com"),
            text("Sent."),
            email("h1", "bob@example.com"),
            text("Sent."),
        ],
    )
    .await;
    let fork = original
        .fork(ForkPoint::BeforeTurn(0), "fork")
        .await
        .unwrap();
    fork.send(Msg::user("email bob")).await.unwrap();
    // The fork's call was served (it is not in the fork's ledger): its own fork finds
    // it in the fork's record.
    let grandchild = fork.fork(ForkPoint::BeforeTurn(0), "fork2").await.unwrap();
    let out = grandchild.send(Msg::user("email bob")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("send_email"), 1);

    // Export the first fork before it is used again, import it into another store.
    let fresh = original
        .fork(ForkPoint::BeforeTurn(0), "fork3")
        .await
        .unwrap();
    let snap = fresh.snapshot().await.unwrap();
    let json = snap.to_json().unwrap();
    let elsewhere = agent_with(
        Arc::new(reins_memory::InMemoryStore::new()),
        ScriptedModel::new([email("h1", "bob@example.com"), text("Sent.")]),
        &counter,
    );
    let imported = elsewhere
        .restore(reins_agent::SessionSnapshot::from_json(&json).unwrap())
        .await
        .unwrap();
    assert_eq!(
        imported.forked_from().await.unwrap().unwrap().source,
        "orig"
    );
    let out = imported.send(Msg::user("email bob")).await.unwrap();
    assert_eq!(
        out.status,
        RunStatus::Completed,
        "served from the imported record"
    );
    assert_eq!(counter.count("send_email"), 1);
    drop(agent);
}

fn agent_with(store: SharedStore, model: ScriptedModel, counter: &Counter) -> Agent {
    agent(model, toolkit(counter, ToolPolicy::confirm()))
        .store_arc(store)
        .build()
        .unwrap()
}

/// Records the `Forked` hook events it sees.
#[derive(Default, Clone)]
struct SeenForks(Arc<Mutex<Vec<(String, String, usize)>>>);

#[async_trait]
impl Hook for SeenForks {
    fn name(&self) -> &str {
        "seen_forks"
    }
    fn interested(&self, kind: HookEventKind) -> bool {
        matches!(kind, HookEventKind::Forked | HookEventKind::ToolReplayed)
    }
    async fn on_event(
        &self,
        event: &mut HookEvent,
        ctx: &HookContext,
        _control: &mut Control,
    ) -> Result<(), HookError> {
        match event {
            HookEvent::Forked { source, at, .. } => {
                self.0
                    .lock()
                    .unwrap()
                    .push((ctx.session_id.clone(), source.clone(), *at));
            }
            HookEvent::ToolReplayed { result } => {
                self.0.lock().unwrap().push((
                    ctx.session_id.clone(),
                    format!("replayed {}", result.id),
                    0,
                ));
            }
            _ => {}
        }
        Ok(())
    }
}

#[tokio::test]
async fn hooks_see_forked_and_tool_replayed() {
    let counter = Counter::default();
    let seen = SeenForks::default();
    let agent = agent(
        ScriptedModel::new([
            call("c1", "search_web", json!({"query": "rust"})),
            text("found"),
            call("f1", "search_web", json!({"query": "rust"})),
            text("found"),
        ]),
        toolkit(&counter, ToolPolicy::confirm()),
    )
    .hook(seen.clone())
    .build()
    .unwrap();
    let s = agent.session("s").await.unwrap();
    s.send(Msg::user("search")).await.unwrap();
    let f = s.fork(ForkPoint::BeforeTurn(0), "s/f").await.unwrap();
    f.send(Msg::user("search")).await.unwrap();
    assert_eq!(counter.count("search_web"), 1);
    let seen = seen.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            ("s/f".to_owned(), "s".to_owned(), 0),
            ("s/f".to_owned(), "replayed f1".to_owned(), 0)
        ]
    );
}

#[tokio::test]
async fn a_replay_never_runs_a_tool_and_points_at_the_first_different_call() {
    for (label, store, _other, _keep) in store_pairs("replay").await {
        let counter = Counter::default();
        let recorder = agent(
            ScriptedModel::new([
                call("c1", "search_web", json!({"query": "flights to oslo"})),
                text("Found 3 flights."),
                email("c2", "bob@example.com"),
                text("Told bob."),
            ]),
            toolkit(&counter, ToolPolicy::confirm()),
        )
        .store_arc(store)
        .build()
        .unwrap();
        let recorded = recorder.session("trip").await.unwrap();
        recorded.send(Msg::user("find flights")).await.unwrap();
        recorded.send(Msg::user("tell bob")).await.unwrap();
        recorded
            .resolve(vec![Decision::approve("c2")])
            .await
            .unwrap();
        assert_eq!(counter.total(), 2);
        assert_eq!(turns(&recorded.messages().await.unwrap()).len(), 2);

        // The same behaviour: everything is served, nothing diverges, nothing runs.
        let same = agent_with(
            Arc::new(reins_memory::InMemoryStore::new()),
            ScriptedModel::new([
                call("n1", "search_web", json!({"query": "flights to oslo"})),
                text("Found 3 flights."),
                email("n2", "bob@example.com"),
                text("Told bob."),
            ]),
            &counter,
        );
        let report = replay(&recorded, &same).await.unwrap();
        assert!(report.matches(), "{label}: {report:?}");
        assert_eq!(report.turns.len(), 2);
        assert_eq!(report.turns[1].served, ["send_email"]);
        assert_eq!(counter.total(), 2, "{label}: a replay runs nothing");
        assert!(
            same.store().list_sessions().await.unwrap().is_empty(),
            "scratch deleted"
        );

        // Another model: the same first turn, then an email to someone else.
        let other = agent_with(
            Arc::new(reins_memory::InMemoryStore::new()),
            ScriptedModel::new([
                call("n1", "search_web", json!({"query": "flights to oslo"})),
                text("Found 3 flights."),
                email("n2", "alice@example.com"),
                text("Told alice."),
            ]),
            &counter,
        );
        let report = replay(&recorded, &other).await.unwrap();
        assert_eq!(
            report.first_divergence,
            Some(Divergence::DifferentArguments {
                turn: 1,
                tool: "send_email".into(),
                recorded: json!({"to": "bob@example.com", "body": "hi"}),
                new: json!({"to": "alice@example.com", "body": "hi"}),
            }),
            "{label}"
        );
        assert!(report.turns[0].divergences.is_empty());
        assert_eq!(report.turns[1].not_run, ["send_email"]);
        assert!(matches!(
            report.turns[1].divergences[1],
            Divergence::DifferentAnswer { turn: 1, .. }
        ));
        assert_eq!(counter.total(), 2, "{label}: the new call was not run");

        // A model that calls a tool the recording never called.
        let new_call = agent_with(
            Arc::new(reins_memory::InMemoryStore::new()),
            ScriptedModel::new([
                call("n0", "delete_file", json!({"path": "/tmp/x"})),
                text("Found 3 flights."),
            ]),
            &counter,
        );
        let report = replay(&recorded, &new_call).await.unwrap();
        assert!(matches!(
            report.first_divergence,
            Some(Divergence::NewCall { turn: 0, ref tool, .. }) if tool == "delete_file"
        ));
        assert_eq!(counter.count("delete_file"), 0, "{label}: not run");
        // The script ran out in the second turn: the report says so and keeps turn 0.
        assert_eq!(report.turns.len(), 1);
        assert!(
            report
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with("turn 1:")),
            "{:?}",
            report.error
        );
        assert!(!report.matches());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// For random histories (turns of 0-2 ungated calls) and any fork point, a fork is
    /// a provider-valid prefix of its source or is refused, and re-asking the source's
    /// turns in the fork runs no call a second time.
    #[test]
    fn forks_are_valid_prefixes_and_never_run_a_recorded_call_twice(
        shape in prop::collection::vec(0usize..3, 1..4),
        cut in 0usize..16,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            // The source's script, then the fork's: the same calls under other ids.
            let mut script = Vec::new();
            for prefix in ["c", "f"] {
                let mut n = 0;
                for calls in &shape {
                    for _ in 0..*calls {
                        n += 1;
                        script.push(call(&format!("{prefix}{n}"), "search_web", json!({"query": format!("q{n}")})));
                    }
                    script.push(text("ok"));
                }
            }
            let counter = Counter::default();
            let agent = agent(ScriptedModel::new(script), toolkit(&counter, ToolPolicy::confirm()))
                .build()
                .unwrap();
            let s = agent.session("src").await.unwrap();
            for t in 0..shape.len() {
                let out = s.send(Msg::user(format!("turn {t}"))).await.unwrap();
                prop_assert_eq!(out.status, RunStatus::Completed);
            }
            let source = s.messages().await.unwrap();
            let ran = counter.total();
            match s.fork(ForkPoint::Messages(cut.min(source.len())), "f").await {
                Err(e) => {
                    // Refused only where the cut leaves a tool use unanswered.
                    prop_assert!(e.to_string().contains("has no result"), "{}", e);
                }
                Ok(f) => {
                    let kept = f.messages().await.unwrap();
                    prop_assert_eq!(&kept[..], &source[..kept.len()]);
                    assert_valid(&kept);
                }
            }
            // A fork at the start re-asks every turn: everything is served.
            let f0 = s.fork(ForkPoint::BeforeTurn(0), "f0").await.unwrap();
            for t in 0..shape.len() {
                let out = f0.send(Msg::user(format!("turn {t}"))).await.unwrap();
                prop_assert_eq!(out.status, RunStatus::Completed);
            }
            prop_assert_eq!(counter.total(), ran, "no recorded call ran twice");
            let msgs = f0.messages().await.unwrap();
            assert_valid(&msgs);
            prop_assert!(outcomes(&msgs).values().all(|o| *o == ToolOutcome::Success));
            Ok(())
        })?;
    }
}
