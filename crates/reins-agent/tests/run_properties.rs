//! Properties of the sans-IO run state machine, without a runtime: for any sequence of
//! model outputs (text, tool calls, malformed arguments, reused ids), hook actions
//! (stop, goto), caller inputs (messages, resumes, decisions, tool results, bogus ids)
//! and interrupts:
//! - every transcript sent to the model is provider-valid;
//! - a `Confirm` tool never executes without an approval;
//! - no tool use executes twice;
//! - every call ends paused or in one of the terminal statuses, in bounded steps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{HashMap, HashSet};

use chrono::Utc;
use proptest::prelude::*;
use reins_agent::run::{
    AfterReasoning, AutoDecision, Event, ExecOutcome, GateDecision, Phase, Run, RunConfig,
    RunInput, Step,
};
use reins_agent::testing::by_hand;
use reins_agent::{Agent, Decision, RequirementKind, RunStatus};
use reins_message::{ContentBlock, Msg, Role, ToolResult, ToolUse};
use serde_json::json;

#[derive(Debug, Clone)]
enum Gate {
    Run,
    Confirm,
    External,
    Input,
}

#[derive(Debug, Clone)]
struct Call {
    gate: Gate,
    malformed: bool,
    /// Reuse the id of an earlier call (hostile or buggy model).
    reuse: bool,
    suspend: bool,
}

#[derive(Debug, Clone)]
enum ModelOut {
    Text,
    Calls(Vec<Call>),
    Empty,
}

#[derive(Debug, Clone)]
enum Hook {
    None,
    Stop,
    Goto,
}

#[derive(Debug, Clone)]
enum Input {
    User,
    Resume,
    /// Decide on pending requirements: (index into pending, kind 0..4), plus a bogus id.
    Decide(Vec<(usize, u8)>, bool),
    ToolResults(Vec<usize>, bool),
}

#[derive(Debug, Clone)]
struct Scenario {
    max_iters: u32,
    history_turns: Option<u32>,
    outputs: Vec<(ModelOut, Hook, bool)>,
    inputs: Vec<(Input, Option<usize>)>,
}

fn call() -> impl Strategy<Value = Call> {
    (
        prop_oneof![
            Just(Gate::Run),
            Just(Gate::Confirm),
            Just(Gate::External),
            Just(Gate::Input)
        ],
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(gate, malformed, reuse, suspend)| Call {
            gate,
            malformed,
            reuse,
            suspend,
        })
}

fn model_out() -> impl Strategy<Value = ModelOut> {
    prop_oneof![
        2 => Just(ModelOut::Text),
        5 => prop::collection::vec(call(), 1..4).prop_map(ModelOut::Calls),
        1 => Just(ModelOut::Empty),
    ]
}

fn hook() -> impl Strategy<Value = Hook> {
    prop_oneof![6 => Just(Hook::None), 1 => Just(Hook::Stop), 1 => Just(Hook::Goto)]
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        3 => Just(Input::User),
        2 => Just(Input::Resume),
        4 => (prop::collection::vec((0usize..4, 0u8..4), 0..4), prop::bool::weighted(0.15))
            .prop_map(|(d, bogus)| Input::Decide(d, bogus)),
        1 => (prop::collection::vec(0usize..4, 1..3), prop::bool::weighted(0.2))
            .prop_map(|(i, bogus)| Input::ToolResults(i, bogus)),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        1u32..5,
        prop::option::of(1u32..3),
        prop::collection::vec((model_out(), hook(), prop::bool::weighted(0.1)), 1..30),
        prop::collection::vec((input(), prop::option::weighted(0.15, 0usize..6)), 1..12),
    )
        .prop_map(|(max_iters, history_turns, outputs, inputs)| Scenario {
            max_iters,
            history_turns,
            outputs,
            inputs,
        })
}

/// Provider validity of a request transcript.
fn check_valid(messages: &[Msg]) -> Result<(), String> {
    let mut open: Vec<String> = Vec::new();
    let mut all = HashSet::new();
    for m in messages {
        if m.role == Role::Assistant {
            if !open.is_empty() {
                return Err(format!("{open:?} open before an assistant message"));
            }
            for u in m.tool_uses() {
                if !all.insert(u.id.clone()) {
                    return Err(format!("duplicate tool use id {}", u.id));
                }
                open.push(u.id.clone());
            }
        } else {
            for r in m.tool_results_iter() {
                match open.iter().position(|id| *id == r.id) {
                    Some(p) => {
                        open.remove(p);
                    }
                    None => return Err(format!("result {} without a pending use", r.id)),
                }
            }
            if m.role == Role::User && !open.is_empty() {
                return Err(format!("user message while {open:?} are open"));
            }
        }
    }
    Ok(())
}

struct Sim {
    run: Run,
    outputs: std::vec::IntoIter<(ModelOut, Hook, bool)>,
    next_id: usize,
    gates: HashMap<String, Gate>,
    suspends: HashSet<String>,
    approved: HashSet<String>,
    executed: HashSet<String>,
    used_ids: Vec<String>,
    /// Calls paused by a hook's `stop_agent()` (never put to the policy or the grants).
    stopped: HashSet<String>,
}

impl Sim {
    fn model_message(&mut self, out: &ModelOut) -> (Msg, Vec<GateDecision>) {
        match out {
            ModelOut::Text => (Msg::assistant("answer"), Vec::new()),
            ModelOut::Empty => (Msg::new(Role::Assistant, Vec::new()), Vec::new()),
            ModelOut::Calls(calls) => {
                let mut content = Vec::new();
                let mut gates = Vec::new();
                for c in calls {
                    let id = if c.reuse && !self.used_ids.is_empty() {
                        self.used_ids[self.next_id % self.used_ids.len()].clone()
                    } else {
                        self.next_id += 1;
                        format!("id{}", self.next_id)
                    };
                    let mut u = ToolUse::new(id.clone(), "tool", json!({"n": 1}));
                    if c.malformed {
                        u.input = serde_json::Value::Null;
                        u.raw_input = Some("{bad".into());
                    }
                    self.used_ids.push(id);
                    gates.push(match c.gate {
                        Gate::Run => GateDecision::Run,
                        Gate::Confirm => GateDecision::Confirm {
                            reason: "confirm".into(),
                        },
                        Gate::External => GateDecision::External,
                        Gate::Input => GateDecision::UserInput {
                            fields: json!({"type": "object"}),
                        },
                    });
                    content.push((ContentBlock::ToolUse(u), c.clone()));
                }
                let msg = Msg::new(
                    Role::Assistant,
                    content.iter().map(|(b, _)| b.clone()).collect(),
                );
                (msg, gates)
            }
        }
    }

    /// Drives until the run pauses or finishes; `interrupt_at` interrupts at that step.
    fn drive(&mut self, interrupt_at: Option<usize>) -> Result<Option<RunStatus>, TestCaseError> {
        for step_no in 0..200 {
            if interrupt_at == Some(step_no) {
                // Ignored by the run when no run is in progress.
                by_hand::apply(&mut self.run, Event::Interrupted(Vec::new())).unwrap();
            }
            match by_hand::next(&mut self.run) {
                Step::Compress(_) => {
                    return Err(TestCaseError::fail(
                        "compression asked without a context budget",
                    ));
                }
                Step::Delegate(_) | Step::Ask(_) | Step::Follow(_) | Step::Settle(_) => {
                    return Err(TestCaseError::fail(
                        "sub-agents, questions and crashes are not simulated",
                    ));
                }
                Step::Refuse(_) => {
                    return Err(TestCaseError::fail("a refusal after the input was taken"));
                }
                Step::Commit(_) | Step::Announce(_) | Step::Notify(_) | Step::Close(_) => {}
                Step::Prepare(_) => {
                    return Err(TestCaseError::fail("no hook listens"));
                }
                Step::Reason(step) => {
                    let summary = step.summary;
                    check_valid(&step.request.messages).map_err(TestCaseError::fail)?;
                    let Some((out, hook, stop_after)) = self.outputs.next() else {
                        // The model is out of answers: it says something plain.
                        by_hand::apply(
                            &mut self.run,
                            Event::Reasoned {
                                message: Msg::assistant("bye"),
                                gates: vec![],
                                after: AfterReasoning::default(),
                                usage: Default::default(),
                                now: Utc::now(),
                            },
                        )
                        .unwrap();
                        continue;
                    };
                    let out = if summary { ModelOut::Text } else { out };
                    let (msg, gates) = self.model_message(&out);
                    // Remember each call's gate by the id the run will use (it renames
                    // reused ids; we read them back from the transcript below).
                    let before = self.run.messages().len();
                    let after = match hook {
                        Hook::None => AfterReasoning::default(),
                        Hook::Stop => AfterReasoning {
                            stop: true,
                            goto: vec![],
                        },
                        Hook::Goto => AfterReasoning {
                            stop: false,
                            goto: vec![Msg::user("think again")],
                        },
                    };
                    let calls = match &out {
                        ModelOut::Calls(c) => c.clone(),
                        _ => vec![],
                    };
                    let stop = after.stop;
                    by_hand::apply(
                        &mut self.run,
                        Event::Reasoned {
                            message: msg,
                            gates,
                            after,
                            usage: Default::default(),
                            now: Utc::now(),
                        },
                    )
                    .unwrap();
                    let stored: Vec<ToolUse> = self.run.messages()[before..]
                        .iter()
                        .filter(|m| m.role == Role::Assistant)
                        .flat_map(|m| m.tool_uses().cloned())
                        .collect();
                    for (u, c) in stored.iter().zip(calls.iter()) {
                        let g = if stop { Gate::Confirm } else { c.gate.clone() };
                        if stop {
                            self.stopped.insert(u.id.clone());
                        }
                        self.gates.insert(u.id.clone(), g);
                        if c.suspend {
                            self.suspends.insert(u.id.clone());
                        }
                    }
                    let _ = stop_after;
                }
                Step::Execute(batch) => {
                    let mut outcomes = Vec::new();
                    for e in batch.calls {
                        let id = e.tool_use.id.clone();
                        let gate = self.gates.get(&id).cloned().unwrap_or(Gate::Run);
                        if matches!(gate, Gate::Confirm) {
                            prop_assert!(
                                self.approved.contains(&id),
                                "confirm tool {id} executed without approval"
                            );
                        }
                        prop_assert!(
                            matches!(gate, Gate::Run | Gate::Confirm | Gate::Input),
                            "{id} executed with gate {gate:?}"
                        );
                        prop_assert!(
                            self.executed.insert(id.clone()),
                            "tool use {id} executed twice"
                        );
                        if self.suspends.remove(&id) {
                            outcomes.push(ExecOutcome::Suspended {
                                id,
                                reason: "later".into(),
                            });
                        } else {
                            outcomes.push(ExecOutcome::Done(ToolResult::success(id, "tool", "ok")));
                        }
                    }
                    let stop = self.outputs.as_slice().first().is_some_and(|o| o.2);
                    by_hand::apply(
                        &mut self.run,
                        Event::Acted {
                            outcomes,
                            stop,
                            recorded: false,
                            now: Utc::now(),
                        },
                    )
                    .unwrap();
                }
                Step::Consult(step) => {
                    // The policy and the grants see only confirmations; every other
                    // consultation decides its first call by a grant.
                    prop_assert!(!step.requirements.is_empty());
                    for r in &step.requirements {
                        prop_assert_eq!(&r.kind, &RequirementKind::Confirmation);
                        prop_assert!(
                            matches!(self.gates.get(&r.id), Some(Gate::Confirm))
                                && !self.stopped.contains(&r.id),
                            "{} was consulted without a confirming gate",
                            r.id
                        );
                    }
                    let mut decisions = Vec::new();
                    if step_no % 2 == 1 {
                        let id = step.requirements[0].id.clone();
                        self.approved.insert(id.clone());
                        decisions.push((id, AutoDecision::Grant { id: "g".into() }));
                    }
                    by_hand::apply(
                        &mut self.run,
                        Event::DecidedWithoutAsking {
                            decisions,
                            asked: Vec::new(),
                            now: Utc::now(),
                        },
                    )
                    .unwrap();
                }
                Step::Pause(_) => return Ok(None),
                Step::Finish(s) => return Ok(Some(s)),
            }
        }
        Err(TestCaseError::fail("the run did not end within 200 steps"))
    }

    fn pending(&self) -> Vec<String> {
        self.run.requirements().into_iter().map(|r| r.id).collect()
    }
}

/// Begins a call: the steps before its input is checked are answered (no child
/// sessions, nothing to settle); its refusal, or `Ok` once it is to be stored.
fn begin(run: &mut Run, call: reins_agent::run::Call) -> Result<(), reins_agent::run::Refusal> {
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn the_run_state_machine_keeps_its_guarantees(sc in scenario()) {
        let config = RunConfig { max_iters: sc.max_iters, requirement_ttl_secs: None, history_turns: sc.history_turns };
        let mut sim = Sim {
            run: Run::new(config),
            outputs: sc.outputs.clone().into_iter(),
            next_id: 0,
            gates: HashMap::new(),
            suspends: HashSet::new(),
            approved: HashSet::new(),
            executed: HashSet::new(),
            used_ids: Vec::new(),
            stopped: HashSet::new(),
        };
        let agent = Agent::builder()
            .model(reins_model::ScriptedModel::new([reins_model::ScriptedResponse::text("unused")]))
            .build()
            .unwrap();
        for (input, interrupt_at) in sc.inputs {
            let now = Utc::now();
            let pending = sim.pending();
            let run_input = match input {
                Input::User => RunInput::Message(Msg::user("hello")),
                Input::Resume => RunInput::Resume,
                Input::Decide(ds, bogus) => {
                    let mut out = Vec::new();
                    for (i, kind) in ds {
                        let Some(id) = pending.get(i % pending.len().max(1)).cloned() else { continue };
                        out.push(match kind {
                            0 => Decision::approve(id),
                            1 => Decision::reject(id, "no"),
                            2 => Decision::input(id, json!({"x": 1})),
                            _ => Decision::external_result(id, "done", false),
                        });
                    }
                    if bogus {
                        out.push(Decision::approve("bogus"));
                    }
                    RunInput::Decisions(out)
                }
                Input::ToolResults(idx, bogus) => {
                    let mut rs: Vec<ToolResult> = idx
                        .iter()
                        .filter_map(|i| pending.get(i % pending.len().max(1)))
                        .map(|id| ToolResult::cancelled(id.clone(), "tool", "cancelled"))
                        .collect();
                    if bogus || rs.is_empty() {
                        rs.push(ToolResult::success("bogus", "tool", "forged"));
                    }
                    RunInput::Message(Msg::tool_results(rs))
                }
            };
            let before = sim.run.clone();
            let decisions = match &run_input {
                RunInput::Decisions(ds) => ds.clone(),
                _ => vec![],
            };
            let resume = matches!(run_input, RunInput::Resume);
            match begin(&mut sim.run, agent.begin("s", run_input, now)) {
                Ok(()) => {
                    for d in &decisions {
                        if let Decision::Approve { id, .. } = d {
                            sim.approved.insert(id.clone());
                        }
                    }
                    if resume {
                        for id in &pending {
                            if matches!(sim.gates.get(id), Some(Gate::Confirm)) {
                                sim.approved.insert(id.clone());
                            }
                        }
                    }
                }
                Err(_) => {
                    // Refused input changes nothing.
                    prop_assert_eq!(sim.run.messages(), before.messages());
                    prop_assert_eq!(sim.run.state(), before.state());
                    continue;
                }
            }
            let status = sim.drive(interrupt_at)?;
            match status {
                None => prop_assert_eq!(sim.run.phase(), Phase::Paused),
                Some(s) => prop_assert!(matches!(s, RunStatus::Completed | RunStatus::Cancelled | RunStatus::MaxIterations)),
            }
            // Whatever happened, the stored transcript repairs to valid, and once the
            // run is not paused it is valid as it is.
            let (repaired, _) = reins_memory::sanitize_for_request(sim.run.messages());
            check_valid(&repaired).map_err(TestCaseError::fail)?;
            if status.is_some() {
                check_valid(sim.run.messages()).map_err(TestCaseError::fail)?;
            }
            // The stored state round-trips.
            let state: reins_agent::RunState =
                serde_json::from_value(serde_json::to_value(sim.run.state()).unwrap()).unwrap();
            prop_assert_eq!(&state, sim.run.state());
        }
    }
}
