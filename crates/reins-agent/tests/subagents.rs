//! Sub-agents as tools: a child's pause is the parent's pause (requirements carry their
//! path), decisions made at the parent are routed down, interrupts flow down, and the
//! child's side effects stay at most once through the nesting.
//!
//! Every scenario runs on the in-memory store, SQLite and PostgreSQL (fails under
//! `CI=true` without a server, reported SKIPPED elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::sync::Arc;

use reins_agent::{Agent, AgentError, Decision, RunStatus, child_session_id};
use reins_memory::InMemoryStore;
use reins_message::{Msg, ToolOutcome};
use reins_model::ScriptedModel;
use reins_tool::ToolPolicy;
use serde_json::json;
use support::subagents::*;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_confirmation_surfaces_at_the_parent_with_its_path_and_approval_is_routed_down() {
    for (label, store, _, _keep) in store_pairs("sapprove").await {
        let counter = Counter::default();
        let lead = team(
            &store,
            lead_script(),
            research_script(),
            &counter,
            ToolPolicy::confirm(),
        );
        let id = sid();
        let session = lead.session(&id).await.unwrap();
        let out = session
            .send(Msg::user("send ops the report"))
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Paused, "{label}");
        assert_eq!(out.requirements.len(), 1, "{label}");
        let r = &out.requirements[0];
        assert_eq!(r.id, "p1/c1", "{label}");
        assert_eq!(r.path, vec!["p1".to_owned(), "c1".to_owned()], "{label}");
        assert_eq!(r.agent.as_deref(), Some("research"), "{label}");
        assert_eq!(r.tool_use.name, "send_email", "{label}");
        assert_eq!(r.kind.label(), "confirmation", "{label}");
        assert_eq!(counter.count("send_email"), 0, "{label}");

        // The child is a session of its own, in the same store, paused on its own id.
        let child = lead
            .subagent("research")
            .unwrap()
            .session(&child_session_id(&id, "p1"))
            .await
            .unwrap();
        let child_reqs = child.requirements().await.unwrap();
        assert_eq!(child_reqs.len(), 1, "{label}");
        assert_eq!(child_reqs[0].id, "c1", "{label}");
        assert!(child_reqs[0].path.is_empty(), "{label}");

        let out = session
            .resolve(vec![Decision::approve("p1/c1").by("alice")])
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(out.message.text(), "research reports: done", "{label}");
        assert_eq!(counter.count("send_email"), 1, "{label}");

        let parent_msgs = session.messages().await.unwrap();
        assert_valid(&parent_msgs);
        assert_eq!(
            result_text(&parent_msgs, "p1"),
            "the report went out",
            "{label}"
        );
        let child_msgs = child.messages().await.unwrap();
        assert_valid(&child_msgs);
        assert_eq!(
            outcomes(&child_msgs).get("c1"),
            Some(&ToolOutcome::Success),
            "{label}"
        );

        // Both trails hold the decision: the parent's with the routed id, the child's
        // with its own.
        let parent_trail = session.decisions().await.unwrap();
        assert!(
            parent_trail
                .iter()
                .any(|d| d.requirement_id == "p1/c1" && d.decision == "approve"),
            "{label}: {parent_trail:?}"
        );
        let child_trail = child.decisions().await.unwrap();
        assert!(
            child_trail.iter().any(|d| d.requirement_id == "c1"
                && d.decision == "approve"
                && d.actor.as_ref().is_some_and(|a| a.principal == "alice")),
            "{label}: {child_trail:?}"
        );

        // Resolving again finds nothing pending and runs nothing.
        let again = session.resolve(vec![Decision::approve("p1/c1")]).await;
        assert!(again.is_err(), "{label}");
        assert_eq!(counter.count("send_email"), 1, "{label}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_at_the_parent_reaches_the_childs_model_with_its_note() {
    for (label, store, _, _keep) in store_pairs("sreject").await {
        let counter = Counter::default();
        let research_model = research_script();
        let seen = research_model.clone();
        let lead = team(
            &store,
            lead_script(),
            research_model,
            &counter,
            ToolPolicy::confirm(),
        );
        let id = sid();
        let session = lead.session(&id).await.unwrap();
        session
            .send(Msg::user("send ops the report"))
            .await
            .unwrap();
        let out = session
            .resolve(vec![Decision::reject("p1/c1", "not before Monday")])
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(counter.count("send_email"), 0, "{label}");
        let child = lead
            .subagent("research")
            .unwrap()
            .session(&child_session_id(&id, "p1"))
            .await
            .unwrap();
        let child_msgs = child.messages().await.unwrap();
        assert!(
            matches!(
                outcomes(&child_msgs).get("c1"),
                Some(ToolOutcome::Rejected { .. })
            ),
            "{label}"
        );
        // The child's model was asked again with the note in the transcript.
        let requests = seen.requests();
        let last = requests.last().unwrap();
        assert!(
            last.messages
                .iter()
                .flat_map(|m| m.tool_results_iter())
                .any(|r| r.id == "c1" && r.text().contains("not before Monday")),
            "{label}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_input_and_resume_are_routed_to_the_child() {
    for (label, store, _, _keep) in store_pairs("sinput").await {
        // User input: the kind is the child's; the values are merged into its call.
        let counter = Counter::default();
        let lead = team(
            &store,
            lead_script(),
            research_script(),
            &counter,
            ToolPolicy::user_input(json!({
                "type": "object",
                "properties": {"body": {"type": "string"}},
                "required": ["body"]
            })),
        );
        let session = lead.session(&sid()).await.unwrap();
        let out = session
            .send(Msg::user("send ops the report"))
            .await
            .unwrap();
        assert_eq!(out.requirements[0].kind.label(), "user_input", "{label}");
        // Approving is the wrong kind of answer, at the parent as at the child.
        let err = session
            .resolve(vec![Decision::approve("p1/c1")])
            .await
            .unwrap_err();
        assert!(matches!(err, AgentError::WrongDecision { .. }), "{label}");
        let out = session
            .resolve(vec![Decision::input(
                "p1/c1",
                json!({"body": "final numbers"}),
            )])
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(
            counter.args("send_email"),
            vec![json!({"to": "ops", "body": "final numbers"})],
            "{label}"
        );

        // resume(): approves the child's confirmation the parent showed.
        let counter = Counter::default();
        let lead = team(
            &store,
            lead_script(),
            research_script(),
            &counter,
            ToolPolicy::confirm(),
        );
        let session = lead.session(&sid()).await.unwrap();
        session
            .send(Msg::user("send ops the report"))
            .await
            .unwrap();
        let out = session.resume().await.unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(counter.count("send_email"), 1, "{label}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requirements_nested_two_levels_deep_carry_the_whole_path() {
    for (label, store, _, _keep) in store_pairs("sdeep").await {
        let counter = Counter::default();
        let research = Agent::builder()
            .name("research")
            .model(research_script())
            .toolkit(toolkit(&counter, ToolPolicy::confirm()))
            .store_arc(store.clone())
            .build()
            .unwrap();
        let manager = Agent::builder()
            .name("manager")
            .model(ScriptedModel::new([
                call("m1", "research", json!({"task": "email ops the report"})),
                text("manager: report sent"),
            ]))
            .store_arc(store.clone())
            .subagent(research.as_tool("research", "Researches"))
            .build()
            .unwrap();
        let lead = Agent::builder()
            .name("lead")
            .model(ScriptedModel::new([
                call("p1", "manager", json!({"task": "get the report out"})),
                text("all done"),
            ]))
            .store_arc(store.clone())
            .subagent(manager.as_tool("manager", "Manages"))
            .build()
            .unwrap();
        let session = lead.session(&sid()).await.unwrap();
        let out = session.send(Msg::user("report")).await.unwrap();
        assert_eq!(out.status, RunStatus::Paused, "{label}");
        let r = &out.requirements[0];
        assert_eq!(r.id, "p1/m1/c1", "{label}");
        assert_eq!(r.path, ["p1", "m1", "c1"], "{label}");
        assert_eq!(r.agent.as_deref(), Some("research"), "{label}");
        let out = session
            .resolve(vec![Decision::approve("p1/m1/c1")])
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(out.message.text(), "all done", "{label}");
        assert_eq!(counter.count("send_email"), 1, "{label}");
    }
}

/// The child's answers were delivered but the parent never recorded the outcome (what
/// a crash between the two leaves): the parent's next dispatch reads the finished
/// child instead of asking again, and the tool ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatch_that_finds_the_child_already_finished_reuses_its_answer() {
    for (label, store, _, _keep) in store_pairs("sdone").await {
        let counter = Counter::default();
        let lead = team(
            &store,
            lead_script(),
            research_script(),
            &counter,
            ToolPolicy::confirm(),
        );
        let id = sid();
        let session = lead.session(&id).await.unwrap();
        session
            .send(Msg::user("send ops the report"))
            .await
            .unwrap();
        // Someone answers the child directly.
        let child = lead
            .subagent("research")
            .unwrap()
            .session(&child_session_id(&id, "p1"))
            .await
            .unwrap();
        child.requirements().await.unwrap();
        let out = child.resolve(vec![Decision::approve("c1")]).await.unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(counter.count("send_email"), 1, "{label}");
        // The parent follows the child: the requirement is gone, a decision for it is
        // refused, and `resume()` takes the child's answer without asking again.
        assert!(session.requirements().await.unwrap().is_empty(), "{label}");
        let refused = session
            .resolve(vec![Decision::approve("p1/c1")])
            .await
            .unwrap_err();
        assert!(
            matches!(refused, AgentError::AlreadyDecided { .. }),
            "{label}: {refused}"
        );
        let out = session.resume().await.unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(counter.count("send_email"), 1, "{label}");
        assert_eq!(
            result_text(&session.messages().await.unwrap(), "p1"),
            "the report went out",
            "{label}"
        );
    }
}

/// Defect 1 of issue #24: a nested call answered directly on the child session is no
/// longer decidable at the parent. The parent's view follows the child's store state
/// (the requirement is gone), a rejection of it is refused, and the parent's audit
/// trail records nothing as applied — through a handle opened before the child was
/// answered and through a fresh one, on a second worker too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_answered_on_the_child_is_no_longer_decidable_at_the_parent() {
    for (label, store, other, _keep) in store_pairs("sfollow").await {
        let counter = Counter::default();
        let lead = team(
            &store,
            lead_script(),
            research_script(),
            &counter,
            ToolPolicy::confirm(),
        );
        let id = sid();
        let session = lead.session(&id).await.unwrap();
        let out = session
            .send(Msg::user("send ops the report"))
            .await
            .unwrap();
        assert_eq!(out.requirements[0].id, "p1/c1", "{label}");
        let seen = session.current_view();

        // Someone approves `c1` on the child session: the email is sent.
        let child = lead
            .subagent("research")
            .unwrap()
            .session(&child_session_id(&id, "p1"))
            .await
            .unwrap();
        child.requirements().await.unwrap();
        let out = child
            .resolve(vec![Decision::approve("c1").by("carol")])
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(counter.count("send_email"), 1, "{label}");

        // A second worker's parent agent (same agents, the store's other handle).
        let counter2 = Counter::default();
        let lead2 = team(
            &other,
            lead_script(),
            research_script(),
            &counter2,
            ToolPolicy::confirm(),
        );
        let fresh = lead2.session(&id).await.unwrap();
        for (who, handle) in [("old handle", &session), ("other worker", &fresh)] {
            let refused = handle
                .resolve(vec![Decision::reject("p1/c1", "do NOT send").by("dave")])
                .await
                .unwrap_err();
            // Refused, naming the decision that took effect (on the child).
            assert!(
                matches!(
                    &refused,
                    AgentError::AlreadyDecided { id, decided }
                        if id == "p1/c1"
                            && decided.decision == "approve"
                            && decided.by.as_deref() == Some("carol")
                ),
                "{label} {who}: {refused}"
            );
            let at_view = handle
                .resolve(vec![Decision::reject("p1/c1", "do NOT send").by("dave")])
                .at(&seen)
                .await
                .unwrap_err();
            assert!(
                matches!(at_view, AgentError::AlreadyDecided { .. }),
                "{label} {who}: {at_view}"
            );
            assert!(
                handle.requirements().await.unwrap().is_empty(),
                "{label} {who}"
            );
        }
        let trail = session.decisions().await.unwrap();
        assert!(
            !trail
                .iter()
                .any(|d| d.verdict == reins_agent::Verdict::Applied),
            "{label}: the parent's trail claims a decision took effect: {trail:?}"
        );
        // The child's trail holds the one decision that did.
        let child_trail = child.decisions().await.unwrap();
        assert_eq!(
            child_trail
                .iter()
                .filter(|d| d.verdict == reins_agent::Verdict::Applied)
                .map(|d| (d.requirement_id.as_str(), d.decision.as_str()))
                .collect::<Vec<_>>(),
            [("c1", "approve")],
            "{label}"
        );
        // Going on takes the child's answer; nothing runs twice.
        let out = session.resume().await.unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(
            counter.count("send_email") + counter2.count("send_email"),
            1,
            "{label}"
        );
        assert_valid(&session.messages().await.unwrap());
    }
}

/// Defect 2 of issue #24: a new user message at the parent closes the paused
/// sub-agent call, and with it the child's pending call: rejected with a note in the
/// child's transcript and audit trail, no longer approvable there, and gone from what
/// an inbox lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_message_at_the_parent_closes_the_childs_pending_call() {
    for (label, store, _, _keep) in store_pairs("sclose").await {
        let counter = Counter::default();
        let lead = team(
            &store,
            lead_script(),
            research_script(),
            &counter,
            ToolPolicy::confirm(),
        );
        let id = sid();
        let session = lead
            .session(&id)
            .await
            .unwrap()
            .as_actor(reins_agent::Actor::new("erin"));
        let out = session
            .send(Msg::user("send ops the report"))
            .await
            .unwrap();
        assert_eq!(out.requirements[0].id, "p1/c1", "{label}");
        let child_id = child_session_id(&id, "p1");

        let out = session.send(Msg::user("never mind, don't")).await.unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert!(
            matches!(
                outcomes(&session.messages().await.unwrap()).get("p1"),
                Some(ToolOutcome::Rejected { .. })
            ),
            "{label}"
        );

        // The child: not paused, its call rejected with a note saying why.
        let child = lead
            .subagent("research")
            .unwrap()
            .session(&child_id)
            .await
            .unwrap();
        assert!(!child.is_paused().await.unwrap(), "{label}");
        assert!(child.requirements().await.unwrap().is_empty(), "{label}");
        let child_msgs = child.messages().await.unwrap();
        assert_valid(&child_msgs);
        match outcomes(&child_msgs).get("c1") {
            Some(ToolOutcome::Rejected { note: Some(note) }) => {
                assert!(
                    note.contains(&id) && note.contains("never mind"),
                    "{label}: {note}"
                );
            }
            other => panic!("{label}: c1 should be rejected with a note, got {other:?}"),
        }
        let trail = child.decisions().await.unwrap();
        assert!(
            trail.iter().any(|d| d.requirement_id == "c1"
                && d.decision == "reject"
                && d.via == "parent"
                && d.verdict == reins_agent::Verdict::Applied
                && d.actor.as_ref().is_some_and(|a| a.principal == "erin")),
            "{label}: {trail:?}"
        );

        // No longer approvable on the child; the answer says what happened.
        let late = child
            .resolve(vec![Decision::approve("c1").by("frank")])
            .await
            .unwrap_err();
        assert!(
            matches!(&late, AgentError::AlreadyDecided { decided, .. } if decided.decision == "reject" && decided.via == "parent"),
            "{label}: {late}"
        );
        assert_eq!(counter.count("send_email"), 0, "{label}");

        // Gone from the inbox: no open requirement records, nothing pending.
        for sess in [&id, &child_id] {
            let stored = store.load_session(sess).await.unwrap();
            assert_eq!(stored.open_requirements().count(), 0, "{label} {sess}");
            let pending = reins_agent::pending_requirements(&store, stored)
                .await
                .unwrap();
            assert!(pending.is_empty(), "{label} {sess}");
        }
        assert!(
            !store
                .list_sessions()
                .await
                .unwrap()
                .iter()
                .any(|s| s.has_open_requirements && (s.id == id || s.id == child_id)),
            "{label}"
        );
    }
}

/// Answers the child session directly at the last moment: after the parent took a
/// decision for it, before the parent hands that decision to the child.
struct AnswerChildFirst {
    research: Agent,
    armed: std::sync::Mutex<Option<String>>,
}

#[async_trait::async_trait]
impl reins_hook::Hook for AnswerChildFirst {
    async fn on_event(
        &self,
        ev: &mut reins_hook::HookEvent,
        _: &reins_hook::HookContext,
        _: &mut reins_hook::Control,
    ) -> Result<(), reins_hook::HookError> {
        if let reins_hook::HookEvent::PreActing { tool_use } = ev {
            let child = self.armed.lock().unwrap().take();
            if let (Some(child), "research") = (child, tool_use.name.as_str()) {
                let s = self.research.session(&child).await.unwrap();
                s.requirements().await.unwrap();
                s.resolve(vec![Decision::approve("c1").by("carol")])
                    .await
                    .unwrap();
            }
        }
        Ok(())
    }
}

/// The window between a parent's decision and its delivery to the child: when the
/// child was answered directly in between, the parent's audit trail records the
/// parent's decision as refused (`already_decided`), never as applied, and the tool
/// runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routed_decision_the_child_no_longer_waits_for_is_recorded_as_refused() {
    for (label, store, _, _keep) in store_pairs("swindow").await {
        let counter = Counter::default();
        let research = Agent::builder()
            .name("research")
            .model(research_script())
            .toolkit(toolkit(&counter, ToolPolicy::confirm()))
            .store_arc(store.clone())
            .build()
            .unwrap();
        let hook = Arc::new(AnswerChildFirst {
            research: research.clone(),
            armed: std::sync::Mutex::new(None),
        });
        let lead = Agent::builder()
            .name("lead")
            .model(lead_script())
            .store_arc(store.clone())
            .subagent(research.as_tool("research", "Researches and reports by email"))
            .hook(hook.clone())
            .build()
            .unwrap();
        let id = sid();
        let session = lead.session(&id).await.unwrap();
        session
            .send(Msg::user("send ops the report"))
            .await
            .unwrap();
        *hook.armed.lock().unwrap() = Some(child_session_id(&id, "p1"));
        let out = session
            .resolve(vec![Decision::reject("p1/c1", "do NOT send").by("dave")])
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(
            counter.count("send_email"),
            1,
            "{label}: carol's approval ran it"
        );
        let trail = session.decisions().await.unwrap();
        assert!(
            !trail
                .iter()
                .any(|d| d.verdict == reins_agent::Verdict::Applied),
            "{label}: the parent's trail claims a decision took effect: {trail:?}"
        );
        assert!(
            trail.iter().any(|d| d.requirement_id == "p1/c1"
                && d.decision == "reject"
                && d.actor.as_ref().is_some_and(|a| a.principal == "dave")
                && matches!(&d.verdict, reins_agent::Verdict::Refused { reason, .. } if reason == "already_decided")),
            "{label}: {trail:?}"
        );
        assert_eq!(
            result_text(&session.messages().await.unwrap(), "p1"),
            "the report went out",
            "{label}"
        );
    }
}

#[tokio::test]
async fn a_subagent_on_another_store_is_refused_at_build() {
    let research = Agent::builder()
        .name("research")
        .model(ScriptedModel::new(
            Vec::<reins_model::ScriptedResponse>::new(),
        ))
        .build()
        .unwrap();
    let err = Agent::builder()
        .name("lead")
        .model(ScriptedModel::new(
            Vec::<reins_model::ScriptedResponse>::new(),
        ))
        .subagent(research.as_tool("research", "Researches"))
        .build()
        .unwrap_err();
    assert!(
        matches!(err, AgentError::Config(ref m) if m.contains("same store")),
        "{err}"
    );
}

#[tokio::test]
async fn a_paused_parent_snapshot_keeps_the_nested_requirements() {
    let store: Store = Arc::new(InMemoryStore::new());
    let counter = Counter::default();
    let lead = team(
        &store,
        lead_script(),
        research_script(),
        &counter,
        ToolPolicy::confirm(),
    );
    let session = lead.session(&sid()).await.unwrap();
    session
        .send(Msg::user("send ops the report"))
        .await
        .unwrap();
    let snap = serde_json::to_value(session.snapshot().await.unwrap()).unwrap();
    let text = snap.to_string();
    assert!(text.contains("\"delegated\""), "{text}");
    assert!(text.contains("p1/c1"), "{text}");
}
