//! Hooks that stop after acting or send the agent back to reasoning, hook edits, the
//! iteration limit, and errors from the model, a hook or the store.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use reins_agent::{Agent, AgentError, RunEvent, RunStatus};
use reins_hook::{Control, Hook, HookContext, HookError, HookEvent};
use reins_memory::{Commit, InMemoryStore, MemoryStore};
use reins_message::{Msg, ToolOutcome};
use reins_model::{ModelError, ScriptedModel, ScriptedResponse};
use reins_tool::ToolPolicy;
use serde_json::json;
use support::*;

struct StopAfterActing;

#[async_trait]
impl Hook for StopAfterActing {
    async fn on_event(
        &self,
        ev: &mut HookEvent,
        _: &HookContext,
        c: &mut Control,
    ) -> Result<(), HookError> {
        if matches!(ev, HookEvent::PostActing { .. }) {
            c.stop_agent();
        }
        Ok(())
    }
}

#[tokio::test]
async fn post_acting_stop_pauses_after_tools_ran_and_resume_reasons_again() {
    let counter = Counter::default();
    let model = ScriptedModel::new([
        call("c1", "search_web", json!({"query": "rust"})),
        text("found it"),
    ]);
    let agent = agent(model.clone(), toolkit(&counter, ToolPolicy::auto()))
        .hook(StopAfterActing)
        .build()
        .unwrap();
    let s = agent.session("pa").await.unwrap();
    let out = s.send(Msg::user("search")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    assert!(
        out.requirements.is_empty(),
        "a stop after acting waits for nothing"
    );
    assert_eq!(counter.count("search_web"), 1);
    let msgs = s.messages().await.unwrap();
    assert_eq!(
        outcomes(&msgs)["c1"],
        ToolOutcome::Success,
        "the results are stored"
    );
    assert_eq!(model.calls(), 1);
    let out = s.resume().await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.message.text(), "found it");
    assert_eq!(counter.count("search_web"), 1);
}

#[tokio::test]
async fn post_acting_stop_then_a_new_message_works_too() {
    let counter = Counter::default();
    let model = ScriptedModel::new([
        call("c1", "search_web", json!({"query": "a"})),
        text("other answer"),
    ]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::auto()))
        .hook(StopAfterActing)
        .build()
        .unwrap();
    let s = agent.session("pa2").await.unwrap();
    s.send(Msg::user("search")).await.unwrap();
    let out = s.send(Msg::user("something else")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_valid(&s.messages().await.unwrap());
}

/// Sends the agent back to reasoning once, with a note, when the model answers
/// without checking its work.
struct GotoOnce(AtomicUsize);

#[async_trait]
impl Hook for GotoOnce {
    async fn on_event(
        &self,
        ev: &mut HookEvent,
        _: &HookContext,
        c: &mut Control,
    ) -> Result<(), HookError> {
        if let HookEvent::PostReasoning { .. } = ev {
            if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
                c.goto_reasoning(vec![Msg::user("Double-check your answer first.")]);
            }
        }
        Ok(())
    }
}

#[tokio::test]
async fn goto_reasoning_reasons_again_with_the_hooks_messages() {
    let model = ScriptedModel::new([text("42"), text("Checked: 42")]);
    let agent = Agent::builder()
        .model(model.clone())
        .hook(GotoOnce(AtomicUsize::new(0)))
        .build()
        .unwrap();
    let out = agent.send(Msg::user("what is 6 x 7?")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.message.text(), "Checked: 42");
    let last = model.last_request().unwrap();
    assert_eq!(
        last.messages.last().unwrap().text(),
        "Double-check your answer first."
    );
    assert_eq!(model.calls(), 2);
}

/// Rewrites delete paths into the sandbox before tools run.
struct Sandbox;

#[async_trait]
impl Hook for Sandbox {
    async fn on_event(
        &self,
        ev: &mut HookEvent,
        _: &HookContext,
        c: &mut Control,
    ) -> Result<(), HookError> {
        if let HookEvent::PreActing { tool_use } = ev {
            if tool_use.name == "send_email" {
                c.reject("email is disabled in this sandbox");
            } else if let Some(p) = tool_use.input.get("path").and_then(|p| p.as_str()) {
                tool_use.input = json!({"path": format!("/sandbox/{p}")});
            }
        }
        Ok(())
    }
}

#[tokio::test]
async fn pre_acting_hooks_edit_or_reject_calls_and_the_edit_is_recorded() {
    let counter = Counter::default();
    let model = ScriptedModel::new([
        call("c1", "delete_file", json!({"path": "a.txt"}))
            .then_tool_call("send_email", json!({"to": "x@y.z"})),
        text("ok"),
    ]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::auto()))
        .hook(Sandbox)
        .build()
        .unwrap();
    let s = agent.session("pre").await.unwrap();
    s.send(Msg::user("go")).await.unwrap();
    assert_eq!(
        counter.args("delete_file"),
        vec![json!({"path": "/sandbox/a.txt"})]
    );
    assert_eq!(counter.count("send_email"), 0);
    let msgs = s.messages().await.unwrap();
    let r = msgs
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .find(|r| r.id == "c1")
        .unwrap();
    assert_eq!(
        r.metadata["executed_input"],
        json!({"path": "/sandbox/a.txt"})
    );
    let rejected = msgs
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .find(|r| r.name == "send_email")
        .unwrap();
    assert!(matches!(rejected.outcome, ToolOutcome::Rejected { .. }));
    assert_valid(&msgs);
}

#[tokio::test]
async fn max_iterations_ends_with_a_summary_made_without_tools() {
    let counter = Counter::default();
    let model = ScriptedModel::from_fn(|req| {
        if req.tools.is_empty() {
            ScriptedResponse::text("Summary: I searched three times and found nothing.")
        } else {
            ScriptedResponse::tool_call("search_web", json!({"query": "more"}))
        }
    });
    let agent = agent(model.clone(), toolkit(&counter, ToolPolicy::auto()))
        .max_iters(3)
        .build()
        .unwrap();
    let out = agent.send(Msg::user("search forever")).await.unwrap();
    assert_eq!(out.status, RunStatus::MaxIterations);
    assert!(out.message.text().starts_with("Summary:"));
    assert_eq!(counter.count("search_web"), 3);
    assert_eq!(model.calls(), 4);
    let last = model.last_request().unwrap();
    assert!(last.tools.is_empty());
    assert_eq!(last.tool_choice, reins_model::ToolChoice::None);
    assert_valid(&last.messages);
}

#[tokio::test]
async fn a_model_error_ends_the_run_and_the_session_stays_usable() {
    let model = ScriptedModel::new([
        ScriptedResponse::error(ModelError::RateLimited {
            retry_after: None,
            message: "slow down".into(),
        }),
        ScriptedResponse::text("hello again"),
    ]);
    let agent = Agent::builder().model(model).build().unwrap();
    let s = agent.session("merr").await.unwrap();
    let err = s.send(Msg::user("hi")).await.unwrap_err();
    assert!(
        matches!(err, AgentError::Model(ModelError::RateLimited { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("slow down"));
    // The user's message was acknowledged and stored; resume retries the model call.
    assert_eq!(s.messages().await.unwrap().len(), 1);
    let out = s.resume().await.unwrap();
    assert_eq!(out.message.text(), "hello again");
    assert_valid(&s.messages().await.unwrap());
}

#[tokio::test]
async fn a_model_stream_that_breaks_mid_way_stores_no_partial_message() {
    let model = ScriptedModel::new([
        ScriptedResponse::text("this answer will be cut")
            .fail_after_chunks(1, ModelError::Network("reset".into())),
        ScriptedResponse::text("complete answer"),
    ]);
    let agent = Agent::builder().model(model).build().unwrap();
    let s = agent.session("cut").await.unwrap();
    assert!(s.send(Msg::user("hi")).await.is_err());
    assert_eq!(s.messages().await.unwrap().len(), 1);
    let out = s.send(Msg::user("again")).await.unwrap();
    assert_eq!(out.message.text(), "complete answer");
}

struct FailingHook;

#[async_trait]
impl Hook for FailingHook {
    fn name(&self) -> &str {
        "budget"
    }
    async fn on_event(
        &self,
        ev: &mut HookEvent,
        _: &HookContext,
        _: &mut Control,
    ) -> Result<(), HookError> {
        if matches!(ev, HookEvent::PreReasoning { .. }) {
            return Err(HookError::new("budget exhausted"));
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_hook_error_ends_the_run_with_that_error() {
    let model = ScriptedModel::new([ScriptedResponse::text("never")]);
    let agent = Agent::builder()
        .model(model.clone())
        .hook(FailingHook)
        .build()
        .unwrap();
    let s = agent.session("herr").await.unwrap();
    let err = s.send(Msg::user("hi")).await.unwrap_err();
    assert!(matches!(err, AgentError::Hook(_)), "{err}");
    assert!(err.to_string().contains("budget"), "{err}");
    assert_eq!(model.calls(), 0);
    assert_valid(&s.messages().await.unwrap());
}

/// A store whose commits start failing after `ok` successful ones.
struct FlakyStore {
    inner: InMemoryStore,
    ok: AtomicUsize,
}

#[async_trait]
impl MemoryStore for FlakyStore {
    async fn open_session(&self, id: &str) -> reins_memory::Result<reins_memory::SessionState> {
        self.inner.open_session(id).await
    }
    async fn load_session(&self, id: &str) -> reins_memory::Result<reins_memory::SessionState> {
        self.inner.load_session(id).await
    }
    async fn commit(&self, id: &str, commit: Commit) -> reins_memory::Result<u64> {
        if self.ok.load(Ordering::SeqCst) == 0 {
            return Err(reins_memory::Error::Database("disk full".into()));
        }
        self.ok.fetch_sub(1, Ordering::SeqCst);
        self.inner.commit(id, commit).await
    }
    async fn list_sessions(&self) -> reins_memory::Result<Vec<reins_memory::SessionSummary>> {
        self.inner.list_sessions().await
    }
    async fn delete_session(&self, id: &str) -> reins_memory::Result<()> {
        self.inner.delete_session(id).await
    }
    async fn claim(
        &self,
        s: &str,
        t: &str,
        f: &str,
        l: std::time::Duration,
        a: bool,
    ) -> reins_memory::Result<reins_memory::Claim> {
        self.inner.claim(s, t, f, l, a).await
    }
    async fn finish(
        &self,
        s: &str,
        t: &str,
        r: &reins_message::ToolResult,
    ) -> reins_memory::Result<()> {
        self.inner.finish(s, t, r).await
    }
    async fn ledger_entry(
        &self,
        s: &str,
        t: &str,
    ) -> reins_memory::Result<Option<reins_memory::LedgerEntry>> {
        self.inner.ledger_entry(s, t).await
    }
    async fn try_lock_session(
        &self,
        s: &str,
        o: &str,
        l: std::time::Duration,
    ) -> reins_memory::Result<bool> {
        self.inner.try_lock_session(s, o, l).await
    }
    async fn unlock_session(&self, s: &str, o: &str) -> reins_memory::Result<()> {
        self.inner.unlock_session(s, o).await
    }
    async fn session_version(&self, id: &str) -> reins_memory::Result<Option<u64>> {
        self.inner.session_version(id).await
    }
    async fn append_decisions(
        &self,
        session: &str,
        entries: Vec<reins_memory::DecisionEntry>,
    ) -> reins_memory::Result<()> {
        self.inner.append_decisions(session, entries).await
    }
    async fn decisions(
        &self,
        session: &str,
    ) -> reins_memory::Result<Vec<reins_memory::DecisionEntry>> {
        self.inner.decisions(session).await
    }
    async fn request_interrupt(&self, session: &str) -> reins_memory::Result<bool> {
        self.inner.request_interrupt(session).await
    }
    async fn interrupt_requests(&self, owner: &str) -> reins_memory::Result<Vec<String>> {
        self.inner.interrupt_requests(owner).await
    }
    async fn changes(&self) -> reins_memory::Result<reins_memory::ChangeFeed> {
        self.inner.changes().await
    }
    async fn interrupt_notices(&self) -> reins_memory::Result<reins_memory::ChangeFeed> {
        self.inner.interrupt_notices().await
    }
}

#[tokio::test]
async fn a_store_error_ends_the_run_and_the_session_reloads_valid() {
    let counter = Counter::default();
    let inner = InMemoryStore::new();
    let store = Arc::new(FlakyStore {
        inner: inner.clone(),
        ok: AtomicUsize::new(2),
    });
    let model = ScriptedModel::new([
        call("c1", "search_web", json!({"query": "q"})),
        text("done"),
        text("done again"),
    ]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::auto()))
        .store_arc(store.clone())
        .build()
        .unwrap();
    let s = agent.session("serr").await.unwrap();
    let err = s.send(Msg::user("search")).await.unwrap_err();
    assert!(matches!(err, AgentError::Store(_)), "{err}");
    assert!(err.to_string().contains("disk full"));
    // What is stored is valid and loads; the tool's result is in the ledger.
    let stored = inner.load_session("serr").await.unwrap();
    let (repaired, _) = reins_memory::sanitize_for_request(&stored.messages);
    assert_valid(&repaired);
    assert!(inner.ledger_entry("serr", "c1").await.unwrap().is_some());
    // Once the store recovers, the session goes on without running the tool again.
    store.ok.store(100, Ordering::SeqCst);
    let out = s.resume().await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("search_web"), 1);
    assert_valid(&s.messages().await.unwrap());
}

/// A model that answers with nothing: the run says so (not a silent Completed), the
/// empty answer is not stored, and the next turn is provider-valid.
#[tokio::test]
async fn an_empty_answer_is_flagged_and_the_next_turn_stays_valid() {
    let counter = Counter::default();
    let model = ScriptedModel::new([ScriptedResponse::empty(), text("here I am")]);
    let agent = agent(model.clone(), toolkit(&counter, ToolPolicy::confirm()))
        .build()
        .unwrap();
    let s = agent.session("empty").await.unwrap();
    let out = s.send(Msg::user("hello?")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert!(out.empty_answer);
    assert_eq!(s.messages().await.unwrap().len(), 1);
    let out = s.send(Msg::user("hello again")).await.unwrap();
    assert!(!out.empty_answer);
    assert_eq!(out.message.text(), "here I am");
    assert_valid(&model.last_request().unwrap().messages);
    assert_valid(&s.messages().await.unwrap());
}

/// With parallel tools, each tool's `ToolExecutionFinished` is published when that tool
/// finishes: a quick tool's result is announced before a slow one's, whatever their
/// order in the batch.
#[tokio::test]
async fn each_tool_is_announced_when_it_finishes() {
    let counter = Counter::default();
    let both = ScriptedResponse::tool_call_with_id("slow1", "slow", json!({"ms": 300}))
        .then_tool_call("search_web", json!({"query": "fast"}));
    let model = ScriptedModel::new([both, text("done")]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::auto()))
        .build()
        .unwrap();
    let mut run = agent
        .session("order")
        .await
        .unwrap()
        .send(Msg::user("both"))
        .start()
        .await
        .unwrap();
    let mut finished = Vec::new();
    while let Some(ev) = run.next_event().await {
        if let RunEvent::ToolExecutionFinished { result } = ev {
            finished.push(result.name);
        }
    }
    run.wait().await.unwrap();
    assert_eq!(finished, ["search_web", "slow"]);
}
