//! The run verbs: `send(msg)`, `resume()` and `resolve(decisions)` return builders.
//! Awaiting one runs to the end; `.start()` gives a `RunHandle` with events and
//! interrupt; `.at(&token)` acts only on the view a person was shown; `.output::<T>()`
//! ends the run with a typed answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::time::Duration;

use reins_agent::{
    AgentError, DEFAULT_SESSION, Decision, FINAL_ANSWER_TOOL, OutputSpec, Requirement, RunEvent,
    RunHandle, RunStatus,
};
use reins_message::{Msg, Role, ToolOutcome, ToolResult};
use reins_model::{ModelCapabilities, ScriptedModel, ScriptedResponse};
use reins_tool::ToolPolicy;
use serde::Deserialize;
use serde_json::json;
use support::*;

fn ids(reqs: &[Requirement]) -> Vec<String> {
    reqs.iter().map(|r| r.id.clone()).collect()
}

/// Every event of a started run, in order, and its output.
async fn drain(mut run: RunHandle) -> (Vec<RunEvent>, reins_agent::RunOutput) {
    let mut events = Vec::new();
    while let Some(ev) = run.next_event().await {
        events.push(ev);
    }
    (events, run.wait().await.unwrap())
}

/// A model that asks for `delete_file`, then `send_email`, then answers.
fn two_confirmations() -> ScriptedModel {
    ScriptedModel::new([
        call("c1", "delete_file", json!({"path": "a.txt"})),
        call("c2", "send_email", json!({"to": "ops", "body": "gone"})),
        text("all done"),
    ])
}

#[tokio::test]
async fn send_awaited_runs_to_the_end_on_the_session_and_on_the_agents_default() {
    let counter = Counter::default();
    let model = ScriptedModel::new([
        call("s1", "search_web", json!({"query": "rust"})),
        text("found it"),
        text("hello from default"),
    ]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::auto()))
        .build()
        .unwrap();
    let session = agent.session("verbs-send").await.unwrap();

    let out = session.send(Msg::user("search rust")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.message.text(), "found it");
    assert_eq!(counter.count("search_web"), 1);
    let msgs = session.messages().await.unwrap();
    assert_valid(&msgs);
    assert_eq!(msgs.len(), 4, "user, tool call, result, answer: {msgs:#?}");

    // `agent.send` runs on the default session, opened when the run starts.
    let out = agent.send(Msg::user("hi")).await.unwrap();
    assert_eq!(out.message.text(), "hello from default");
    let default = agent.session(DEFAULT_SESSION).await.unwrap();
    let msgs = default.messages().await.unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0].text(), "hi");
    // The named session did not move.
    assert_eq!(session.messages().await.unwrap().len(), 4);
}

#[tokio::test]
async fn send_start_streams_events_refuses_a_second_run_and_interrupts() {
    let model = DripModel::new(1000, Duration::from_millis(5));
    let counter = Counter::default();
    let agent = reins_agent::Agent::builder()
        .model(model.clone())
        .toolkit(toolkit(&counter, ToolPolicy::auto()))
        .build()
        .unwrap();
    let session = agent.session("verbs-start").await.unwrap();
    let mut run = session
        .send(Msg::user("tell me a long story"))
        .start()
        .await
        .unwrap();
    assert_eq!(run.session_id(), "verbs-start");

    // The session is claimed before `start` returns.
    let err = session.send(Msg::user("me too")).await.unwrap_err();
    assert!(
        matches!(err, AgentError::SessionBusy { ref session } if session == "verbs-start"),
        "{err}"
    );

    let first = run.next_event().await.unwrap();
    assert!(
        matches!(first, RunEvent::RunStarted { ref session_id } if session_id == "verbs-start"),
        "{first:?}"
    );
    let mut deltas = 0;
    while let Some(ev) = run.next_event().await {
        if matches!(ev, RunEvent::TextDelta { .. }) {
            deltas += 1;
            if deltas == 3 {
                break;
            }
        }
    }
    assert_eq!(deltas, 3, "the model's text streams as events");
    run.interrupt();
    let out = run.wait().await.unwrap();
    assert_eq!(out.status, RunStatus::Cancelled);
    let msgs = session.messages().await.unwrap();
    assert_eq!(msgs.len(), 1, "only the user message is kept: {msgs:#?}");
    assert_eq!(msgs[0].role, Role::User);
    assert_eq!(count_calls(&model.calls), 1);
}

#[tokio::test]
async fn resume_at_a_stale_view_is_refused_and_runs_nothing() {
    let counter = Counter::default();
    let agent = agent(
        two_confirmations(),
        toolkit(&counter, ToolPolicy::confirm()),
    )
    .build()
    .unwrap();
    let page = agent.session("verbs-resume").await.unwrap();
    let out = page
        .send(Msg::user("delete a.txt, tell ops"))
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let shown = page.view().await.unwrap();
    assert_eq!(ids(&shown.requirements), ["c1"]);
    // A second handle, opened now: its own view shows c1.
    let late = agent.session("verbs-resume").await.unwrap();
    assert_eq!(late.current_view(), shown.token);

    // Someone else approves c1; the session now waits for c2.
    let other = agent.session("verbs-resume").await.unwrap();
    let out = other.resume().await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    assert_eq!(ids(&out.requirements), ["c2"]);
    assert_eq!(counter.count("delete_file"), 1);

    // The page reads again (its own view shows c2), but resumes on the token it
    // showed a person, which showed c1: refused, and c2 does not run.
    let now = page.view().await.unwrap();
    assert_eq!(ids(&now.requirements), ["c2"]);
    let err = page.resume().at(&shown.token).await.unwrap_err();
    match &err {
        AgentError::StaleView { seen, pending } => {
            assert_eq!(seen, &["c1"]);
            assert_eq!(ids(pending), ["c2"]);
        }
        other => panic!("expected StaleView, got {other}"),
    }
    // Started, the refusal is the handle's outcome.
    let run = page.resume().at(&shown.token).start().await.unwrap();
    let err = run.wait().await.unwrap_err();
    assert!(matches!(err, AgentError::StaleView { .. }), "{err}");
    assert_eq!(counter.count("send_email"), 0, "consent was widened");
    assert!(page.is_paused().await.unwrap());

    // Without `.at`, a handle acts on its own view: the late handle's is stale...
    let err = late.resume().await.unwrap_err();
    assert!(matches!(err, AgentError::StaleView { .. }), "{err}");
    // ...and with the current token named, it approves c2 and the run completes.
    let run = late.resume().at(&now.token).start().await.unwrap();
    let (events, out) = drain(run).await;
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.message.text(), "all done");
    assert!(events.iter().any(|e| matches!(e, RunEvent::Resumed)));
    assert_eq!(counter.count("send_email"), 1);
    assert_eq!(counter.count("delete_file"), 1);
}

#[tokio::test]
async fn resolve_at_applies_on_the_view_it_names_only() {
    let counter = Counter::default();
    let agent = agent(
        two_confirmations(),
        toolkit(&counter, ToolPolicy::confirm()),
    )
    .build()
    .unwrap();
    let s = agent.session("verbs-resolve").await.unwrap();
    s.send(Msg::user("delete a.txt, tell ops")).await.unwrap();
    let first = s.view().await.unwrap();

    // Resolving on the view shown runs c1, as a handle with events.
    let run = s
        .resolve(vec![Decision::approve("c1")])
        .at(&first.token)
        .start()
        .await
        .unwrap();
    let (events, out) = drain(run).await;
    assert_eq!(out.status, RunStatus::Paused);
    assert_eq!(ids(&out.requirements), ["c2"]);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, RunEvent::ToolExecutionFinished { result } if result.id == "c1")),
        "{events:#?}"
    );
    assert_eq!(counter.count("delete_file"), 1);

    // The first view is stale now: a rejection of c2 on it is refused, changes nothing.
    let err = s
        .resolve(vec![Decision::reject("c2", "no")])
        .at(&first.token)
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::StaleView { .. }), "{err}");
    assert_eq!(ids(&s.requirements().await.unwrap()), ["c2"]);

    // On the current view the rejection lands; the model answers.
    let now = s.view().await.unwrap();
    let out = s
        .resolve(vec![Decision::reject("c2", "no")])
        .at(&now.token)
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("send_email"), 0);
    assert_eq!(
        outcomes(&s.messages().await.unwrap())["c2"],
        ToolOutcome::Rejected {
            note: Some("no".to_owned())
        }
    );
}

#[tokio::test]
async fn send_at_a_stale_view_is_refused_and_tool_results_on_the_current_one_land() {
    let counter = Counter::default();
    let model = ScriptedModel::new([
        call("x1", "delete_file", json!({"path": "a.txt"})),
        text("noted"),
    ]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::external()))
        .build()
        .unwrap();
    let s = agent.session("verbs-send-at").await.unwrap();
    let idle = s.view().await.unwrap();
    let out = s.send(Msg::user("delete a.txt")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);

    // Results meant for what an idle view showed are refused.
    let results = Msg::tool_results([ToolResult::success("x1", "delete_file", "deleted")]);
    let err = s.send(results.clone()).at(&idle.token).await.unwrap_err();
    assert!(matches!(err, AgentError::StaleView { .. }), "{err}");
    assert_eq!(s.messages().await.unwrap().len(), 2);

    let now = s.view().await.unwrap();
    let out = s.send(results).at(&now.token).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.message.text(), "noted");
    assert_eq!(
        outcomes(&s.messages().await.unwrap())["x1"],
        ToolOutcome::Success
    );
    assert_eq!(counter.count("delete_file"), 0, "the caller executed it");
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Count {
    /// How many.
    n: u32,
}

fn answer(id: &str, n: u32) -> ScriptedResponse {
    ScriptedResponse::tool_call_with_id(id, FINAL_ANSWER_TOOL, json!({ "n": n }))
}

#[tokio::test]
async fn send_output_returns_a_typed_answer_awaited_or_started() {
    let counter = Counter::default();
    let model = ScriptedModel::new([answer("a1", 3), text("free text"), answer("a2", 7)])
        .with_capabilities(ModelCapabilities::new(false, true));
    let agent = agent(model, toolkit(&counter, ToolPolicy::confirm()))
        .build()
        .unwrap();
    let s = agent.session("verbs-output").await.unwrap();

    let out = s
        .send(Msg::user("how many?"))
        .output::<Count>()
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.parsed::<Count>().unwrap().n, 3);

    // A plain send is free text again: the schema belonged to that run.
    let out = s.send(Msg::user("thanks")).await.unwrap();
    assert_eq!(out.message.text(), "free text");
    assert!(out.structured.is_none());

    // Started, the typed answer comes with the handle's output.
    let run = s
        .send(Msg::user("and now?"))
        .output::<Count>()
        .start()
        .await
        .unwrap();
    let (_, out) = drain(run).await;
    assert_eq!(out.parsed::<Count>().unwrap().n, 7);
}

#[tokio::test]
async fn a_bad_output_spec_is_refused_before_anything_is_sent() {
    let counter = Counter::default();
    let agent = agent(
        ScriptedModel::new([text("never asked")]),
        toolkit(&counter, ToolPolicy::auto()),
    )
    .build()
    .unwrap();
    let s = agent.session("verbs-bad-spec").await.unwrap();
    let bad = OutputSpec::new("bad", json!("not a schema"));
    let err = s
        .send(Msg::user("x"))
        .output_spec(bad.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, AgentError::InvalidInput(m) if m.contains("must be a JSON object")),
        "{err}"
    );
    let err = s
        .send(Msg::user("x"))
        .output_spec(bad)
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::InvalidInput(_)), "{err}");
    assert!(s.messages().await.unwrap().is_empty(), "nothing was sent");

    // A hand-written spec that is valid is used as given.
    let mut t = reins_tool::Toolkit::new();
    t.add(reins_tool::Toolkit::function(
        "noop",
        "Does nothing",
        |_: reins_tool::NoArgs, _| async { Ok::<_, reins_tool::ToolError>("x") },
    ))
    .unwrap();
    let model = ScriptedModel::new([answer("a1", 5)])
        .with_capabilities(ModelCapabilities::new(false, true));
    let typed = reins_agent::Agent::builder()
        .model(model)
        .toolkit(t)
        .build()
        .unwrap();
    let spec = OutputSpec::new(
        "count",
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
    );
    let out = typed
        .send(Msg::user("count"))
        .output_spec(spec)
        .await
        .unwrap();
    assert_eq!(out.structured, Some(json!({"n": 5})));
}
