//! Agno's flow: tool policies pause with requirements; `resolve` answers them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use reins_agent::{AgentError, Decision, RequirementKind, RunStatus};
use reins_message::{Msg, ToolOutcome};
use reins_model::ScriptedModel;
use reins_tool::ToolPolicy;
use serde_json::json;
use support::*;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct BookArgs {
    room: String,
    date: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ChargeArgs {
    amount: u32,
}

async fn paused(
    id: &str,
    responses: Vec<reins_model::ScriptedResponse>,
) -> (
    reins_agent::Agent,
    reins_agent::Session,
    ScriptedModel,
    Counter,
) {
    let counter = Counter::default();
    let model = ScriptedModel::new(responses);
    let agent = agent(model.clone(), toolkit(&counter, ToolPolicy::confirm()))
        .build()
        .unwrap();
    let session = agent.session(id).await.unwrap();
    let out = session.send(Msg::user("go")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    (agent, session, model, counter)
}

#[tokio::test]
async fn approve_runs_the_tool_once() {
    let (_a, session, _m, counter) = paused(
        "a1",
        vec![
            call("c1", "delete_file", json!({"path": "a.txt"})),
            text("done"),
        ],
    )
    .await;
    let out = session
        .resolve(vec![Decision::approve("c1").by("ana")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("delete_file"), 1);
    let err = session
        .resolve(vec![Decision::approve("c1")])
        .await
        .unwrap_err();
    // A replayed decision is refused, naming the one that took effect.
    assert!(
        matches!(&err, AgentError::AlreadyDecided { id, decided } if id == "c1" && decided.by.as_deref() == Some("ana")),
        "{err}"
    );
    assert_eq!(counter.count("delete_file"), 1);
}

#[tokio::test]
async fn reject_tells_the_model_and_runs_nothing() {
    let (_a, session, model, counter) = paused(
        "a2",
        vec![
            call("c1", "delete_file", json!({"path": "a.txt"})),
            text("ok, kept"),
        ],
    )
    .await;
    let out = session
        .resolve(vec![Decision::reject("c1", "keep that file")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.total(), 0);
    let req = model.last_request().unwrap();
    let r = req
        .messages
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .next()
        .unwrap();
    assert_eq!(
        r.outcome,
        ToolOutcome::Rejected {
            note: Some("keep that file".into())
        }
    );
    assert!(r.text().contains("keep that file"));
}

#[tokio::test]
async fn approve_with_edits_keeps_the_original_call_and_records_what_ran() {
    let (_a, session, _m, counter) = paused(
        "a3",
        vec![
            call("c1", "delete_file", json!({"path": "/etc/passwd"})),
            text("done"),
        ],
    )
    .await;
    session
        .resolve(vec![Decision::approve_with(
            "c1",
            json!({"path": "/tmp/x"}),
        )])
        .await
        .unwrap();
    assert_eq!(counter.args("delete_file"), vec![json!({"path": "/tmp/x"})]);
    let msgs = session.messages().await.unwrap();
    let original = msgs
        .iter()
        .flat_map(|m| m.tool_uses())
        .find(|u| u.id == "c1")
        .unwrap();
    assert_eq!(
        original.input,
        json!({"path": "/etc/passwd"}),
        "the model's call is untouched"
    );
    let result = msgs
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .find(|r| r.id == "c1")
        .unwrap();
    assert_eq!(result.metadata["executed_input"], json!({"path": "/tmp/x"}));
    assert_valid(&msgs);
}

#[tokio::test]
async fn bad_decisions_are_refused_and_change_nothing() {
    let (agent, session, _m, counter) = paused(
        "a4",
        vec![
            call("c1", "delete_file", json!({"path": "a.txt"})),
            text("done"),
        ],
    )
    .await;
    let before = agent.store().load_session("a4").await.unwrap();
    let cases = vec![
        (vec![Decision::approve("nope")], "nope"),
        (
            vec![Decision::input("c1", json!({"x": 1}))],
            "cannot answer",
        ),
        (
            vec![Decision::external_result("c1", "ok", false)],
            "cannot answer",
        ),
        (
            vec![Decision::approve("c1"), Decision::reject("c1", "")],
            "more than once",
        ),
        // One good decision next to a bad one: nothing is applied.
        (
            vec![Decision::approve("c1"), Decision::approve("ghost")],
            "ghost",
        ),
        (vec![], "no decisions"),
    ];
    for (ds, needle) in cases {
        let err = session.resolve(ds).await.unwrap_err();
        assert!(err.to_string().contains(needle), "{err}");
    }
    let after = agent.store().load_session("a4").await.unwrap();
    assert_eq!(before.version, after.version);
    assert_eq!(before.messages, after.messages);
    assert_eq!(before.requirements, after.requirements);
    assert_eq!(counter.total(), 0);
    assert!(session.is_paused().await.unwrap());
}

#[tokio::test]
async fn partial_decisions_run_what_is_resolved_and_stay_paused() {
    let both = call("c1", "delete_file", json!({"path": "a.txt"}))
        .then_tool_call("send_email", json!({"to": "bo@example.com"}));
    let (_a, session, model, counter) = paused("a5", vec![both, text("all done")]).await;
    let reqs = session.requirements().await.unwrap();
    assert_eq!(reqs.len(), 2);
    let email_id = reqs[1].id.clone();
    let out = session
        .resolve(vec![Decision::approve("c1")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    assert_eq!(out.requirements.len(), 1);
    assert_eq!(out.requirements[0].id, email_id);
    assert_eq!(counter.count("delete_file"), 1);
    assert_eq!(
        model.calls(),
        1,
        "the model waits until every call has a result"
    );
    let out = session
        .resolve(vec![Decision::reject(&email_id, "")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(model.calls(), 2);
    assert_eq!(counter.count("send_email"), 0);
    assert_valid(&session.messages().await.unwrap());
}

#[tokio::test]
async fn ungated_tools_run_while_gated_ones_wait() {
    let mixed = call("c1", "search_web", json!({"query": "rust"}))
        .then_tool_call("delete_file", json!({"path": "a.txt"}));
    let (_a, session, _m, counter) = paused("a6", vec![mixed, text("done")]).await;
    assert_eq!(counter.count("search_web"), 1);
    assert_eq!(counter.count("delete_file"), 0);
    let reqs = session.requirements().await.unwrap();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].tool_use.name, "delete_file");
    let id = reqs[0].id.clone();
    let out = session.resolve(vec![Decision::approve(id)]).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(
        counter.count("search_web"),
        1,
        "the ungated call is not run again"
    );
    assert_eq!(counter.count("delete_file"), 1);
}

#[tokio::test]
async fn user_input_merges_values_into_the_arguments() {
    let counter = Counter::default();
    let mut tools = toolkit(&counter, ToolPolicy::auto());
    tools
        .add(
            reins_tool::Toolkit::function("book", "Book a room", {
                let c = counter.clone();
                move |a: BookArgs, _ctx| {
                    let c = c.clone();
                    async move {
                        c.record("book", json!({"room": a.room, "date": a.date}));
                        Ok::<_, reins_tool::ToolError>("booked".to_owned())
                    }
                }
            })
            .policy(ToolPolicy::user_input(json!({
                "type": "object",
                "properties": {"date": {"type": "string"}},
                "required": ["date"]
            }))),
        )
        .unwrap();
    let model = ScriptedModel::new([call("b1", "book", json!({"room": "blue"})), text("booked")]);
    let agent = agent(model, tools).build().unwrap();
    let session = agent.session("u1").await.unwrap();
    let out = session.send(Msg::user("book the blue room")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    assert!(matches!(
        out.requirements[0].kind,
        RequirementKind::UserInput { .. }
    ));
    // resume() cannot answer an input requirement.
    assert!(session.resume().await.is_err());
    let err = session
        .resolve(vec![Decision::input("b1", json!("friday"))])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("JSON object"), "{err}");
    let out = session
        .resolve(vec![Decision::input("b1", json!({"date": "friday"}))])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(
        counter.args("book"),
        vec![json!({"room": "blue", "date": "friday"})]
    );
}

#[tokio::test]
async fn external_execution_takes_the_callers_result() {
    let counter = Counter::default();
    let mut tools = toolkit(&counter, ToolPolicy::auto());
    tools
        .add(
            reins_tool::Toolkit::function("charge_card", "Charge a card", {
                let c = counter.clone();
                move |a: ChargeArgs, _ctx| {
                    let c = c.clone();
                    async move {
                        c.record("charge_card", json!({"amount": a.amount}));
                        Ok::<_, reins_tool::ToolError>("charged".to_owned())
                    }
                }
            })
            .policy(ToolPolicy::external()),
        )
        .unwrap();
    let model = ScriptedModel::new([
        call("x1", "charge_card", json!({"amount": 5})),
        text("paid"),
    ]);
    let agent = agent(model.clone(), tools).build().unwrap();
    let session = agent.session("e1").await.unwrap();
    let out = session.send(Msg::user("pay")).await.unwrap();
    assert_eq!(out.requirements[0].kind, RequirementKind::External);
    let out = session
        .resolve(vec![Decision::external_result("x1", "receipt #42", false)])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(
        counter.count("charge_card"),
        0,
        "the caller ran it, not reins"
    );
    assert_eq!(
        result_text(&session.messages().await.unwrap(), "x1"),
        "receipt #42"
    );
}

#[tokio::test]
async fn a_tool_that_suspends_itself_pauses_until_the_caller_answers() {
    let counter = Counter::default();
    let model = ScriptedModel::new([
        call("s1", "suspend", json!({"query": "invoice 7"})),
        text("thanks"),
    ]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::auto()))
        .build()
        .unwrap();
    let session = agent.session("sus").await.unwrap();
    let out = session.send(Msg::user("find invoice 7")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    assert_eq!(out.requirements[0].kind, RequirementKind::External);
    assert!(out.requirements[0].reason.contains("invoice 7"));
    let out = session
        .send(Msg::tool_results([reins_message::ToolResult::success(
            "s1",
            "suspend",
            "invoice 7: paid",
        )]))
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("suspend"), 1);
    assert_valid(&session.messages().await.unwrap());
}

#[tokio::test]
async fn expired_requirements_refuse_decisions_but_a_new_message_moves_on() {
    let counter = Counter::default();
    let model = ScriptedModel::new([call("c1", "delete_file", json!({"path": "a"})), text("ok")]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::confirm()))
        .requirement_ttl(std::time::Duration::from_secs(1))
        .build()
        .unwrap();
    let session = agent.session("exp").await.unwrap();
    let out = session.send(Msg::user("delete a")).await.unwrap();
    assert!(out.requirements[0].expires_at.is_some());
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let err = session
        .resolve(vec![Decision::approve("c1")])
        .await
        .unwrap_err();
    assert!(
        matches!(err, AgentError::RequirementExpired { .. }),
        "{err}"
    );
    assert_eq!(counter.total(), 0);
    let out = session.send(Msg::user("never mind")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.total(), 0);
}
