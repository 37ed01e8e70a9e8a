//! Interrupts (the CLI's ESC): every checkpoint stops the run, the turn is sanitized,
//! and the next call works on a valid transcript.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::time::Duration;

use reins_agent::{AgentError, Concurrency, RunEvent, RunStatus};
use reins_message::{Msg, Role, ToolOutcome};
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_tool::ToolPolicy;
use serde_json::json;
use support::*;

async fn wait_for(handle: &mut reins_agent::RunHandle, pred: impl Fn(&RunEvent) -> bool) {
    while let Some(ev) = handle.next_event().await {
        if pred(&ev) {
            return;
        }
    }
    panic!("the run ended before the awaited event");
}

#[tokio::test]
async fn interrupt_while_streaming_drops_the_partial_message() {
    let model = DripModel::new(1000, Duration::from_millis(5));
    let counter = Counter::default();
    let agent = reins_agent::Agent::builder()
        .model(model.clone())
        .toolkit(toolkit(&counter, ToolPolicy::auto()))
        .build()
        .unwrap();
    let session = agent.session("esc-stream").await.unwrap();
    let mut run = session
        .send(Msg::user("tell me a long story"))
        .start()
        .await
        .unwrap();
    wait_for(&mut run, |e| matches!(e, RunEvent::TextDelta { .. })).await;
    run.interrupt();
    let out = run.wait().await.unwrap();
    assert_eq!(out.status, RunStatus::Cancelled);
    let msgs = session.messages().await.unwrap();
    assert_eq!(msgs.len(), 1, "only the user message is kept: {msgs:#?}");
    assert_eq!(msgs[0].role, Role::User);
    // The session is usable at once.
    let short = reins_agent::Agent::builder()
        .model(ScriptedModel::new([ScriptedResponse::text("short story")]))
        .store_arc(agent.store().clone())
        .build()
        .unwrap();
    let out = short
        .session("esc-stream")
        .await
        .unwrap()
        .send(Msg::user("shorter"))
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
}

#[tokio::test]
async fn interrupt_before_the_model_answers() {
    let model =
        ScriptedModel::new([ScriptedResponse::text("late")]).with_latency(Duration::from_secs(30));
    let agent = reins_agent::Agent::builder().model(model).build().unwrap();
    let session = agent.session("esc-wait").await.unwrap();
    let mut run = session.send(Msg::user("hi")).start().await.unwrap();
    wait_for(&mut run, |e| matches!(e, RunEvent::ReasoningStarted { .. })).await;
    run.interrupt();
    let out = tokio::time::timeout(Duration::from_secs(5), run.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status, RunStatus::Cancelled);
    assert_eq!(session.messages().await.unwrap().len(), 1);
}

#[tokio::test]
async fn interrupt_inside_a_tool_reports_it_interrupted_and_skips_the_rest() {
    let counter = Counter::default();
    let model = ScriptedModel::new([
        call("t1", "search_web", json!({"query": "a"}))
            .then_tool_call("slow", json!({"ms": 30000}))
            .then_tool_call("delete_file", json!({"path": "x"})),
        text("after"),
    ]);
    let agent = agent(model.clone(), toolkit(&counter, ToolPolicy::auto()))
        .tool_concurrency(Concurrency::Sequential)
        .interrupt_grace(Duration::from_millis(200))
        .build()
        .unwrap();
    let session = agent.session("esc-tool").await.unwrap();
    let mut run = session
        .send(Msg::user("do three things"))
        .start()
        .await
        .unwrap();
    wait_for(
        &mut run,
        |e| matches!(e, RunEvent::ToolExecutionStarted { name, .. } if name == "slow"),
    )
    .await;
    run.interrupt();
    let out = tokio::time::timeout(Duration::from_secs(5), run.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status, RunStatus::Cancelled);
    let msgs = session.messages().await.unwrap();
    assert_valid(&msgs);
    let oc = outcomes(&msgs);
    assert_eq!(oc["t1"], ToolOutcome::Success, "the completed pair is kept");
    let ids: Vec<String> = msgs
        .iter()
        .flat_map(|m| m.tool_uses().map(|u| u.id.clone()))
        .collect();
    assert_eq!(oc[&ids[1]], ToolOutcome::Interrupted);
    assert_eq!(oc[&ids[2]], ToolOutcome::Cancelled);
    assert!(result_text(&msgs, &ids[2]).contains("not run: interrupted"));
    assert_eq!(counter.count("delete_file"), 0);
    assert_eq!(model.calls(), 1);
    // The next call works and the model sees a valid transcript.
    let out = session.send(Msg::user("ok, what happened?")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    let req = model.last_request().unwrap();
    assert_valid(&req.messages);
}

#[tokio::test]
async fn dropping_the_callers_future_interrupts_and_sanitizes() {
    let counter = Counter::default();
    let model = ScriptedModel::new([call("t1", "slow", json!({"ms": 30000})), text("next")]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::auto()))
        .interrupt_grace(Duration::from_millis(100))
        .build()
        .unwrap();
    let session = agent.session("drop").await.unwrap();
    let r =
        tokio::time::timeout(Duration::from_millis(300), session.send(Msg::user("sleep"))).await;
    assert!(r.is_err(), "the call was still running");
    // The dropped run finishes its cleanup in the background.
    let mut out = None;
    for _ in 0..100 {
        match session.send(Msg::user("again")).await {
            Err(AgentError::SessionBusy { .. }) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            other => {
                out = Some(other.unwrap());
                break;
            }
        }
    }
    assert_eq!(out.unwrap().status, RunStatus::Completed);
    let msgs = session.messages().await.unwrap();
    assert_valid(&msgs);
    assert_eq!(outcomes(&msgs)["t1"], ToolOutcome::Interrupted);
}

#[tokio::test]
async fn interrupt_when_nothing_runs_is_a_no_op() {
    let model = ScriptedModel::new([ScriptedResponse::text("hi")]);
    let agent = reins_agent::Agent::builder().model(model).build().unwrap();
    let session = agent.session("noop").await.unwrap();
    let mut run = session.send(Msg::user("hi")).start().await.unwrap();
    let interrupter = run.interrupter();
    wait_for(&mut run, |e| matches!(e, RunEvent::Completed { .. })).await;
    interrupter.interrupt();
    let out = run.wait().await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(session.messages().await.unwrap().len(), 2);
}

#[tokio::test]
async fn events_arrive_in_order() {
    let counter = Counter::default();
    let model = ScriptedModel::new([
        call("t1", "search_web", json!({"query": "q"})),
        text("found it"),
    ]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::auto()))
        .build()
        .unwrap();
    let session = agent.session("events").await.unwrap();
    let mut run = session.send(Msg::user("search")).start().await.unwrap();
    let mut kinds = Vec::new();
    while let Some(ev) = run.next_event().await {
        let k = serde_json::to_value(&ev).unwrap()["event"]
            .as_str()
            .unwrap()
            .to_owned();
        if kinds.last() != Some(&k) {
            kinds.push(k);
        }
    }
    let out = run.wait().await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(
        kinds,
        [
            "run_started",
            "reasoning_started",
            "tool_call_started",
            "tool_call_ready",
            "tool_execution_started",
            "tool_execution_finished",
            "reasoning_started",
            "text_delta",
            "completed"
        ]
    );
}
