//! Budgets that ask (issue #38): a session's spend is counted in its stored state; a
//! reached limit pauses the run with a `budget` requirement before the next model call
//! or tool (never in the middle of one); a person extends it or ends the run; the same
//! across a restart; bad extensions are refused and change nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::Arc;

use reins_agent::budget::{BUDGET_TOOL, Budget};
use reins_agent::run::BUDGET_ENDED_MARK;
use reins_agent::{AgentError, Decision, RequirementKind, RunStatus};
use reins_memory::{MemoryStore, SqliteStore};
use reins_message::{Msg, ToolOutcome, Usage};
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_tool::ToolPolicy;
use serde_json::json;
use support::*;

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

fn spent_text(r: ScriptedResponse, tokens: u64) -> ScriptedResponse {
    r.with_usage(usage(tokens - tokens / 4, tokens / 4))
}

#[tokio::test]
async fn a_reached_token_limit_pauses_before_the_model_call_and_an_extension_goes_on() {
    let model = ScriptedModel::new([
        spent_text(text("hello"), 120),
        spent_text(text("second answer"), 50),
    ]);
    let counter = Counter::default();
    let agent = agent(model.clone(), toolkit(&counter, ToolPolicy::auto()))
        .budget(Budget::new().tokens(100))
        .build()
        .unwrap();
    let s = agent.session("b1").await.unwrap();
    // The first call starts under the limit and ends over it: nothing is cut.
    let out = s.send(Msg::user("hi")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(model.calls(), 1);

    let out = s.send(Msg::user("again")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    assert_eq!(model.calls(), 1, "the model is not called over the budget");
    assert_eq!(out.requirements.len(), 1);
    let req = &out.requirements[0];
    assert_eq!(req.id, "budget-1");
    assert_eq!(req.tool_use.name, BUDGET_TOOL);
    let RequirementKind::Budget { budget } = &req.kind else {
        panic!("not a budget requirement: {:?}", req.kind);
    };
    assert_eq!(budget.spent.tokens, 120);
    assert_eq!(budget.limit.tokens, Some(100));
    assert_eq!(budget.reached, vec!["tokens"]);
    assert_eq!(budget.before, "model_call");
    assert!(req.reason.contains("120 of 100"), "{}", req.reason);
    let v = serde_json::to_value(req).unwrap();
    assert_eq!(v["kind"], "budget");

    // resume() does not extend a budget.
    let err = s.resume().await.unwrap_err();
    assert!(matches!(err, AgentError::InvalidInput(_)), "{err}");

    let out = s
        .resolve(vec![
            Decision::approve_with("budget-1", json!({"tokens": 1_000})).by("ops@example.com"),
        ])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.message.text(), "second answer");
    assert_eq!(model.calls(), 2);
    let trail = s.decisions().await.unwrap();
    let rec = trail
        .iter()
        .find(|r| r.requirement_id == "budget-1")
        .expect("the extension is audited");
    assert_eq!(rec.decision, "approve");
    assert_eq!(rec.kind, "budget");
    assert_eq!(rec.actor.as_ref().unwrap().principal, "ops@example.com");
    assert_eq!(rec.executed_input.as_ref().unwrap()["tokens"], 1_000);
    assert_valid(&s.messages().await.unwrap());
}

#[tokio::test]
async fn ending_the_run_completes_it_with_an_honest_message_and_runs_nothing() {
    let model = ScriptedModel::new([
        spent_text(call("c1", "search_web", json!({"query": "rust"})), 150),
        text("never"),
    ]);
    let counter = Counter::default();
    let agent = agent(model.clone(), toolkit(&counter, ToolPolicy::auto()))
        .budget(Budget::new().tokens(100))
        .build()
        .unwrap();
    let s = agent.session("b2").await.unwrap();
    let out = s.send(Msg::user("search")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    assert_eq!(counter.count("search_web"), 0, "the tool did not start");
    let RequirementKind::Budget { budget } = &out.requirements[0].kind else {
        panic!("not a budget requirement");
    };
    assert_eq!(budget.before, "tool_call");

    let out = s
        .resolve(vec![
            Decision::reject("budget-1", "enough for today").by("ops"),
        ])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    let text = out.message.text();
    assert!(text.contains("budget"), "{text}");
    assert!(text.contains("enough for today"), "{text}");
    assert_eq!(out.message.metadata[BUDGET_ENDED_MARK], "ended");
    assert_eq!(model.calls(), 1);
    assert_eq!(counter.count("search_web"), 0);
    let msgs = s.messages().await.unwrap();
    assert_eq!(outcomes(&msgs)["c1"], ToolOutcome::Cancelled);
    assert_valid(&msgs);
    let trail = s.decisions().await.unwrap();
    assert!(
        trail
            .iter()
            .any(|r| r.requirement_id == "budget-1" && r.decision == "reject")
    );
}

/// Ending a run at its budget: every call of the turn that did not start — held back
/// by the budget, or waiting for a decision — is told so and is `Cancelled` (no one
/// rejected it, and nothing stopped it mid-run); the call that ran keeps its result.
#[tokio::test]
async fn ending_at_the_budget_tells_every_call_that_did_not_start_so() {
    let model = ScriptedModel::new([
        call("c1", "search_web", json!({"query": "a"}))
            .then_tool_call("search_web", json!({"query": "b"}))
            .then_tool_call("delete_file", json!({"path": "old.log"})),
        text("never"),
    ]);
    let counter = Counter::default();
    let agent = agent(model.clone(), toolkit(&counter, ToolPolicy::confirm()))
        .budget(Budget::new().tool_calls(1))
        .build()
        .unwrap();
    let s = agent.session("b-ended").await.unwrap();
    let out = s
        .send(Msg::user("search twice, then clean up"))
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let waiting: Vec<&str> = out.requirements.iter().map(|r| r.id.as_str()).collect();
    assert!(waiting.contains(&"budget-1"), "{waiting:?}");
    assert_eq!(counter.count("search_web"), 1, "one search held back");

    let out = s
        .resolve(vec![Decision::reject("budget-1", "that will do").by("ops")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.total(), 1, "nothing else ran");
    let msgs = s.messages().await.unwrap();
    assert_valid(&msgs);
    let results: Vec<serde_json::Value> = msgs
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .map(|r| {
            json!({
                "id": r.id,
                "name": r.name,
                "outcome": r.outcome,
                "text": r.text(),
            })
        })
        .collect();
    insta::assert_json_snapshot!("budget_ended_tool_results", results);
}

#[tokio::test]
async fn bad_extensions_are_refused_and_change_nothing() {
    let model = ScriptedModel::new([spent_text(text("hello"), 120), text("go on")]);
    let counter = Counter::default();
    let agent = agent(model.clone(), toolkit(&counter, ToolPolicy::auto()))
        .budget(Budget::new().tokens(100).tool_calls(5))
        .build()
        .unwrap();
    let s = agent.session("b3").await.unwrap();
    s.send(Msg::user("hi")).await.unwrap();
    assert_eq!(
        s.send(Msg::user("more")).await.unwrap().status,
        RunStatus::Paused
    );
    let before = s.view().await.unwrap();
    for bad in [
        json!({"tokens": 110}),                  // not above what was spent (120)
        json!({"tokens": -1}),                   // negative
        json!({"cost": -0.5}),                   // negative
        json!({"tokens": "lots"}),               // not a number
        json!({"budget": 5}),                    // unknown field
        json!({"tokens": 500, "tool_calls": 0}), // lowered below what may still run
    ] {
        let err = s
            .resolve(vec![Decision::approve_with("budget-1", bad.clone())])
            .await
            .unwrap_err();
        assert!(
            matches!(err, AgentError::InvalidBudget { .. }),
            "{bad}: {err}"
        );
        assert_eq!(s.view().await.unwrap(), before, "{bad} changed the session");
    }
    let err = s
        .resolve(vec![Decision::external_result("budget-1", "x", false)])
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::WrongDecision { .. }), "{err}");
    assert_eq!(s.view().await.unwrap(), before);
    assert_eq!(model.calls(), 1);
    // The suggested limit: approving without a new one.
    let out = s
        .resolve(vec![Decision::approve("budget-1")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(model.calls(), 2);
}

#[tokio::test]
async fn a_tool_call_limit_holds_back_the_calls_beyond_it() {
    let model = ScriptedModel::new([
        call("c1", "search_web", json!({"query": "a"}))
            .then_tool_call("search_web", json!({"query": "b"})),
        text("both done"),
    ]);
    let counter = Counter::default();
    let agent = agent(model.clone(), toolkit(&counter, ToolPolicy::auto()))
        .budget(Budget::new().tool_calls(1))
        .build()
        .unwrap();
    let s = agent.session("b4").await.unwrap();
    let out = s.send(Msg::user("search twice")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    assert_eq!(
        counter.count("search_web"),
        1,
        "one call started, one held back"
    );
    let RequirementKind::Budget { budget } = &out.requirements[0].kind else {
        panic!("not a budget requirement");
    };
    assert_eq!(budget.reached, vec!["tool_calls"]);
    assert_eq!(budget.spent.tool_calls, 1);
    assert_eq!(budget.suggested.tool_calls, Some(2));
    let out = s
        .resolve(vec![Decision::approve("budget-1")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("search_web"), 2);
    assert_eq!(model.calls(), 2);
    assert_valid(&s.messages().await.unwrap());
}

#[tokio::test]
async fn the_spend_and_the_pause_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reins.sqlite");
    {
        let store: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
        let model = ScriptedModel::new([spent_text(text("hello"), 120)]);
        let counter = Counter::default();
        let agent = agent(model.clone(), toolkit(&counter, ToolPolicy::auto()))
            .store(store)
            .budget(Budget::new().tokens(100))
            .build()
            .unwrap();
        let s = agent.session("b5").await.unwrap();
        s.send(Msg::user("hi")).await.unwrap();
        assert_eq!(
            s.send(Msg::user("more")).await.unwrap().status,
            RunStatus::Paused
        );
    }
    // A new process: a new store handle, a new agent, a new model.
    let store: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let model = ScriptedModel::new([text("after the restart")]);
    let counter = Counter::default();
    let agent = agent(model.clone(), toolkit(&counter, ToolPolicy::auto()))
        .store(store)
        .budget(Budget::new().tokens(100))
        .build()
        .unwrap();
    let s = agent.session("b5").await.unwrap();
    let view = s.view().await.unwrap();
    assert!(view.paused);
    let RequirementKind::Budget { budget } = &view.requirements[0].kind else {
        panic!("not a budget requirement");
    };
    assert_eq!(budget.spent.tokens, 120);
    // A bad extension after the restart is refused too.
    assert!(matches!(
        s.resolve(vec![Decision::approve_with(
            "budget-1",
            json!({"tokens": 10})
        )])
        .await
        .unwrap_err(),
        AgentError::InvalidBudget { .. }
    ));
    let out = s
        .resolve(vec![Decision::approve_with(
            "budget-1",
            json!({"tokens": 500}),
        )])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.message.text(), "after the restart");
    assert_eq!(model.calls(), 1);
    // The extension is the session's own limit now, stored with it.
    let again = agent.session("b5").await.unwrap();
    assert!(!again.view().await.unwrap().paused);
}

#[tokio::test]
async fn a_cost_limit_counts_from_the_price_table() {
    let model = ScriptedModel::new([text("one").with_usage(usage(1_000_000, 0)), text("two")])
        .with_name("pricey-1");
    let counter = Counter::default();
    // No price for the model: a cost limit cannot be checked, the agent is refused.
    let err = agent(model.clone(), toolkit(&counter, ToolPolicy::auto()))
        .budget(Budget::new().cost(1.0))
        .build()
        .unwrap_err();
    assert!(matches!(err, AgentError::InvalidBudget { .. }), "{err}");
    let agent = agent(model.clone(), toolkit(&counter, ToolPolicy::auto()))
        .budget(Budget::new().cost(1.0))
        .price(
            "pricey-1",
            reins_agent::budget::Price::per_million(1.5, 6.0),
        )
        .build()
        .unwrap();
    let s = agent.session("b6").await.unwrap();
    s.send(Msg::user("hi")).await.unwrap();
    let out = s.send(Msg::user("more")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let RequirementKind::Budget { budget } = &out.requirements[0].kind else {
        panic!("not a budget requirement");
    };
    assert_eq!(budget.reached, vec!["cost"]);
    assert!((budget.spent.cost - 1.5).abs() < 1e-9);
    assert_eq!(model.calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_people_extending_at_once_extend_once() {
    let model = ScriptedModel::new([spent_text(text("hello"), 120), text("go on"), text("spare")]);
    let counter = Counter::default();
    let agent = agent(model.clone(), toolkit(&counter, ToolPolicy::auto()))
        .budget(Budget::new().tokens(100))
        .build()
        .unwrap();
    let s = agent.session("b7").await.unwrap();
    s.send(Msg::user("hi")).await.unwrap();
    assert_eq!(
        s.send(Msg::user("more")).await.unwrap().status,
        RunStatus::Paused
    );
    let ana = agent.session("b7").await.unwrap();
    let ben = agent.session("b7").await.unwrap();
    let (a, b) = tokio::join!(
        ana.resolve(vec![
            Decision::approve_with("budget-1", json!({"tokens": 500})).by("ana")
        ]),
        ben.resolve(vec![
            Decision::approve_with("budget-1", json!({"tokens": 900})).by("ben")
        ]),
    );
    let ok = [a.is_ok(), b.is_ok()].iter().filter(|x| **x).count();
    assert_eq!(ok, 1, "exactly one extension applies: {a:?} / {b:?}");
    let late = if a.is_err() { a } else { b }.unwrap_err();
    assert!(
        matches!(
            late,
            AgentError::AlreadyDecided { .. }
                | AgentError::NothingToResume { .. }
                | AgentError::SessionBusy { .. }
                | AgentError::StaleView { .. }
        ),
        "{late}"
    );
    assert_eq!(model.calls(), 2, "the run went on once");
    let applied = s
        .decisions()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.requirement_id == "budget-1" && r.verdict == reins_agent::Verdict::Applied)
        .count();
    assert_eq!(applied, 1);
}
