//! Budgets on the sans-IO run, with a clock the test controls: active time (not time
//! spent paused) against a wall-time limit, and the invariant that for any sequence of
//! model usage, tool calls and time, the run never starts a model call or a tool once a
//! limit is reached, unless a person extended it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use chrono::{DateTime, Duration, TimeZone, Utc};
use proptest::prelude::*;
use reins_agent::budget::Budget;
use reins_agent::run::{
    AfterReasoning, Call, Event, ExecOutcome, GateDecision, Run, RunInput, Step,
};
use reins_agent::testing::by_hand;
use reins_agent::{Agent, Decision, RequirementKind, RunStatus};
use reins_message::{ContentBlock, Msg, Role, ToolResult, ToolUse, Usage};
use reins_model::ScriptedModel;
use serde_json::json;

fn t(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000, 0).unwrap() + Duration::seconds(secs)
}

fn agent(limit: Budget) -> Agent {
    Agent::builder()
        .model(ScriptedModel::new([]))
        .budget(limit)
        .build()
        .unwrap()
}

fn calls(ids: &[String]) -> Msg {
    Msg::new(
        Role::Assistant,
        ids.iter()
            .map(|id| ContentBlock::ToolUse(ToolUse::new(id, "search", json!({"q": id}))))
            .collect(),
    )
}

fn reasoned(message: Msg, tools: usize, tokens: u64, now: DateTime<Utc>) -> Event {
    Event::Reasoned {
        message,
        gates: vec![GateDecision::Run; tools],
        after: AfterReasoning::default(),
        usage: Usage {
            input_tokens: tokens,
            ..Usage::default()
        },
        now,
    }
}

/// Begins a call on `run`: the steps before its input is checked are answered (no
/// child sessions, nothing to settle); its refusal, or `Ok` once it is stored.
fn begin(run: &mut Run, call: Call) -> Result<(), reins_agent::run::Refusal> {
    by_hand::apply(run, Event::Begin(call)).unwrap();
    loop {
        match by_hand::next(run) {
            Step::Follow(_) => by_hand::apply(run, Event::Followed(Default::default())).unwrap(),
            Step::Settle(_) => by_hand::apply(
                run,
                Event::Settled {
                    results: Vec::new(),
                    now: Utc::now(),
                },
            )
            .unwrap(),
            Step::Refuse(_) => {
                return Err(by_hand::apply(run, Event::Refused { decided: None }).unwrap_err());
            }
            Step::Commit(_) => return Ok(()),
            other => panic!("a call begins with {other:?}"),
        }
    }
}

/// The run's next step that is not bookkeeping (commits, announcements, hooks).
fn step(run: &mut Run) -> Step {
    loop {
        match by_hand::next(run) {
            Step::Commit(_) | Step::Announce(_) | Step::Notify(_) | Step::Close(_) => {}
            other => return other,
        }
    }
}

fn acted(batch: &reins_agent::run::Batch, now: DateTime<Utc>) -> Event {
    Event::Acted {
        outcomes: batch
            .calls
            .iter()
            .map(|e| ExecOutcome::Done(ToolResult::success(&e.tool_use.id, "search", "ok")))
            .collect(),
        stop: false,
        recorded: false,
        now,
    }
}

#[test]
fn active_time_counts_and_time_spent_paused_does_not() {
    let agent = agent(Budget::new().wall_time(std::time::Duration::from_secs(10)));
    let mut run = Run::new(agent.run_config());
    begin(
        &mut run,
        agent.begin("s", RunInput::Message(Msg::user("go")), t(0)),
    )
    .unwrap();
    assert!(matches!(step(&mut run), Step::Reason(_)));
    by_hand::apply(&mut run, reasoned(calls(&["c1".into()]), 1, 0, t(4))).unwrap();
    let Step::Execute(batch) = step(&mut run) else {
        panic!("the tool starts within the limit");
    };
    by_hand::apply(&mut run, acted(&batch, t(11))).unwrap();
    // 11 s active: the next model call waits for a person.
    let Step::Pause(reqs) = step(&mut run) else {
        panic!("over the wall-time limit the run pauses");
    };
    let RequirementKind::Budget { budget } = &reqs[0].kind else {
        panic!("a budget requirement");
    };
    assert_eq!(budget.reached, ["wall_secs"]);
    assert_eq!(budget.spent.wall_ms, 11_000);
    assert_eq!(reqs[0].created_at, t(11));

    // An hour later a person extends it; the hour paused is not counted.
    let extend = Decision::approve_with(&reqs[0].id, json!({"wall_secs": 20}));
    begin(
        &mut run,
        agent.begin("s", RunInput::Decisions(vec![extend]), t(3_600)),
    )
    .unwrap();
    assert!(matches!(step(&mut run), Step::Reason(_)));
    by_hand::apply(&mut run, reasoned(Msg::assistant("done"), 0, 0, t(3_605))).unwrap();
    assert_eq!(step(&mut run), Step::Finish(RunStatus::Completed));
    assert_eq!(run.budget_spent().wall_ms, 16_000);
    assert_eq!(run.budget_limit().unwrap().wall_secs, Some(20));
    // The spend is in the stored state.
    let stored = serde_json::to_value(run.state()).unwrap();
    assert_eq!(stored["budget"]["spent"]["wall_ms"], 16_000);
}

#[test]
fn a_session_limit_from_the_call_overrides_the_agents() {
    let agent = agent(Budget::new().tokens(1_000_000));
    let mut run = Run::new(agent.run_config());
    let call = agent
        .begin("s", RunInput::Message(Msg::user("go")), t(0))
        .with_budget(Budget::new().tokens(10));
    begin(&mut run, call).unwrap();
    assert!(matches!(step(&mut run), Step::Reason(_)));
    by_hand::apply(&mut run, reasoned(Msg::assistant("hi"), 0, 10, t(1))).unwrap();
    assert_eq!(step(&mut run), Step::Finish(RunStatus::Completed));
    begin(
        &mut run,
        agent.begin("s", RunInput::Message(Msg::user("more")), t(2)),
    )
    .unwrap();
    assert!(
        matches!(step(&mut run), Step::Pause(_)),
        "the session's own limit holds"
    );
    // A negative cost as the session's limit is refused at the start.
    let bad = agent
        .begin("s", RunInput::Message(Msg::user("x")), t(3))
        .with_budget(Budget::new().cost(-1.0));
    let before = run.state().clone();
    let refused = begin(&mut run, bad).unwrap_err();
    assert!(matches!(
        refused.error,
        reins_agent::AgentError::InvalidBudget { .. }
    ));
    assert_eq!(run.state(), &before);
}

#[test]
fn a_session_cost_limit_needs_the_models_price() {
    // No price: a session's cost limit could never be counted, so it is refused.
    let unpriced = Agent::builder()
        .model(ScriptedModel::new([]))
        .build()
        .unwrap();
    let mut run = Run::new(unpriced.run_config());
    let call = unpriced
        .begin("s", RunInput::Message(Msg::user("go")), t(0))
        .with_budget(Budget::new().cost(1.0));
    let before = run.state().clone();
    let refused = begin(&mut run, call).unwrap_err();
    assert!(
        matches!(&refused.error, reins_agent::AgentError::InvalidBudget { reason } if reason.contains("price")),
        "{:?}",
        refused.error
    );
    assert_eq!(run.state(), &before);
    // With a price and no default limit, the session's cost limit is counted.
    let model = ScriptedModel::new([]);
    let name = reins_model::ChatModel::model_name(&model).to_owned();
    let priced = Agent::builder()
        .model(model)
        .price(
            name,
            reins_agent::budget::Price::per_million(1_000_000.0, 1_000_000.0),
        )
        .build()
        .unwrap();
    let mut run = Run::new(priced.run_config());
    let call = priced
        .begin("s", RunInput::Message(Msg::user("go")), t(0))
        .with_budget(Budget::new().cost(5.0));
    begin(&mut run, call).unwrap();
    assert!(matches!(step(&mut run), Step::Reason(_)));
    by_hand::apply(&mut run, reasoned(Msg::assistant("hi"), 0, 6, t(1))).unwrap();
    assert_eq!(step(&mut run), Step::Finish(RunStatus::Completed));
    assert!(run.budget_spent().cost >= 6.0, "{:?}", run.budget_spent());
    begin(
        &mut run,
        priced.begin("s", RunInput::Message(Msg::user("more")), t(2)),
    )
    .unwrap();
    assert!(
        matches!(step(&mut run), Step::Pause(_)),
        "the cost limit holds"
    );
}

/// One model answer in the property: tokens used, tool calls made, seconds taken.
#[derive(Debug, Clone)]
struct Answer {
    tokens: u64,
    tools: usize,
    secs: i64,
}

fn answer() -> impl Strategy<Value = Answer> {
    (0u64..300, 0usize..4, 0i64..6).prop_map(|(tokens, tools, secs)| Answer {
        tokens,
        tools,
        secs,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// For any usage, tool calls and time, and any mix of extensions and ends: a model
    /// call is started only while no limit is reached, and a tool only while its start
    /// stays within the tool-call limit and no other limit is reached.
    #[test]
    fn nothing_starts_over_the_budget_without_an_extension(
        answers in proptest::collection::vec(answer(), 1..60),
        tokens in 50u64..800,
        tool_calls in 1u64..8,
        wall in 5u64..40,
        extend in proptest::collection::vec(any::<bool>(), 0..20),
    ) {
        let limit = Budget::new()
            .tokens(tokens)
            .tool_calls(tool_calls)
            .wall_time(std::time::Duration::from_secs(wall));
        let agent = agent(limit);
        let mut run = Run::new(agent.run_config());
        let mut now = 0;
        let mut answers = answers.into_iter();
        let mut extend = extend.into_iter();
        let mut n = 0;
        begin(&mut run, agent.begin("s", RunInput::Message(Msg::user("go")), t(now))).unwrap();
        for _ in 0..400 {
            match step(&mut run) {
                Step::Reason(_) => {
                    let limit = run.budget_limit().unwrap();
                    let spent = run.budget_spent();
                    prop_assert!(limit.reached(&spent, false).is_empty(),
                        "a model call started over the budget: {spent:?} of {limit:?}");
                    let Some(a) = answers.next() else { break };
                    now += a.secs;
                    let ids: Vec<String> = (0..a.tools).map(|_| { n += 1; format!("c{n}") }).collect();
                    let msg = if ids.is_empty() { Msg::assistant("done") } else { calls(&ids) };
                    by_hand::apply(&mut run, reasoned(msg, a.tools, a.tokens, t(now))).unwrap();
                }
                Step::Execute(batch) => {
                    let limit = run.budget_limit().unwrap();
                    let spent = run.budget_spent();
                    // The batch is counted as started.
                    prop_assert!(spent.tool_calls <= limit.tool_calls.unwrap(),
                        "tools started beyond the limit: {spent:?} of {limit:?}");
                    let before = reins_agent::budget::Spend {
                        tool_calls: spent.tool_calls - batch.calls.len() as u64,
                        ..spent
                    };
                    prop_assert!(limit.reached(&before, true).is_empty(),
                        "a tool started over the budget: {before:?} of {limit:?}");
                    now += 1;
                    by_hand::apply(&mut run, acted(&batch, t(now))).unwrap();
                }
                Step::Pause(reqs) => {
                    let r = reqs.iter().find(|r| matches!(r.kind, RequirementKind::Budget { .. }));
                    let r = r.expect("only the budget pauses this run");
                    let d = if extend.next().unwrap_or(false) {
                        Decision::approve(&r.id)
                    } else {
                        Decision::reject(&r.id, "")
                    };
                    now += 100;
                    begin(&mut run, agent.begin("s", RunInput::Decisions(vec![d]), t(now))).unwrap();
                }
                Step::Finish(status) => {
                    prop_assert!(matches!(status, RunStatus::Completed | RunStatus::MaxIterations), "{status:?}");
                    now += 1;
                    begin(&mut run, agent.begin("s", RunInput::Message(Msg::user("more")), t(now))).unwrap();
                }
                other => prop_assert!(false, "unexpected step {other:?}"),
            }
        }
        prop_assert!(reins_memory::repair::violations(run.messages()).is_empty());
    }
}
