//! Tools that ask a person a question mid-call (`ToolContext::ask`, what an MCP
//! server's elicitation becomes): the run pauses with a user-input requirement while
//! the call stays in flight; `resolve` answers it and the same call goes on. Where the
//! call is not live any more (another worker, a restart), the outcome is `Unknown`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reins_agent::{ASKED_ELSEWHERE, Agent, AgentError, Decision, RequirementKind, RunStatus};
use reins_message::{Msg, ToolOutcome};
use reins_model::ScriptedModel;
use reins_tool::{DynamicTool, QuestionAnswer, ToolError, ToolOutput, ToolQuestion, Toolkit};
use serde_json::{Value, json};
use support::*;

fn seat_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "seat": { "type": "string", "enum": ["window", "aisle"] } },
        "required": ["seat"]
    })
}

/// `book`: asks which seat (once, or `questions` times), then books. Counts starts,
/// finishes and cancellations.
#[derive(Clone, Default)]
struct Probe {
    started: Arc<AtomicUsize>,
    finished: Arc<AtomicUsize>,
    cancelled: Arc<AtomicUsize>,
}

fn booking_tools(probe: &Probe, questions: usize) -> Toolkit {
    let p = probe.clone();
    let mut tk = Toolkit::new();
    tk.add_dynamic(DynamicTool::new(
        "book",
        "Book a flight",
        json!({"type": "object", "properties": {"to": {"type": "string"}}}),
        move |args: Value, ctx: reins_tool::ToolContext| {
            let p = p.clone();
            async move {
                p.started.fetch_add(1, Ordering::SeqCst);
                let mut seats = Vec::new();
                for n in 0..questions {
                    let q = ToolQuestion {
                        message: format!("Which seat for leg {}?", n + 1),
                        schema: seat_schema(),
                    };
                    match ctx.ask(q).await {
                        QuestionAnswer::Accept(v) => {
                            seats.push(v["seat"].as_str().unwrap_or("?").to_owned())
                        }
                        QuestionAnswer::Decline => {
                            p.finished.fetch_add(1, Ordering::SeqCst);
                            return Ok::<_, ToolError>(ToolOutput::text(
                                "not booked: the traveller declined",
                            ));
                        }
                        QuestionAnswer::Cancel => {
                            p.cancelled.fetch_add(1, Ordering::SeqCst);
                            return Err(ToolError::Cancelled);
                        }
                    }
                }
                p.finished.fetch_add(1, Ordering::SeqCst);
                Ok(ToolOutput::text(format!(
                    "booked to {} in {}",
                    args["to"].as_str().unwrap_or("?"),
                    seats.join("+")
                )))
            }
        },
    ))
    .unwrap();
    tk
}

fn booking_model() -> ScriptedModel {
    ScriptedModel::new([
        call("b1", "book", json!({"to": "Lisbon"})),
        text("Booked."),
        text("Anything else?"),
    ])
}

fn booking_agent(store: &SharedStore, probe: &Probe, questions: usize) -> Agent {
    booking_agent_with(store, probe, questions, booking_model())
}

/// A worker that picks up someone else's run: its model only answers.
fn answering_agent(store: &SharedStore) -> Agent {
    booking_agent_with(
        store,
        &Probe::default(),
        1,
        ScriptedModel::new([text("The booking may or may not have gone through.")]),
    )
}

fn booking_agent_with(
    store: &SharedStore,
    probe: &Probe,
    questions: usize,
    model: ScriptedModel,
) -> Agent {
    Agent::builder()
        .model(model)
        .toolkit(booking_tools(probe, questions))
        .store_arc(store.clone())
        .build()
        .unwrap()
}

fn sid() -> String {
    format!("ask-{}", reins_message::new_id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_pauses_the_run_and_the_answer_reaches_the_same_call() {
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    let probe = Probe::default();
    let agent = booking_agent(&store, &probe, 1);
    let session = agent.session(&sid()).await.unwrap();
    let out = session.send(Msg::user("book me to Lisbon")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let req = &out.requirements[0];
    assert_eq!(req.tool_use.name, "book");
    assert_eq!(req.reason, "Which seat for leg 1?");
    assert_eq!(
        req.kind,
        RequirementKind::UserInput {
            fields: seat_schema()
        }
    );
    assert_ne!(req.id, "b1", "a question has an id of its own");
    assert!(session.is_paused().await.unwrap());
    assert_eq!(probe.started.load(Ordering::SeqCst), 1);

    // An answer that does not match the question's fields is refused; nothing changes.
    let e = session
        .resolve(vec![Decision::input(&req.id, json!({"seat": "middle"}))])
        .await
        .unwrap_err();
    assert!(matches!(e, AgentError::InvalidInput(_)), "{e}");
    assert!(
        e.to_string()
            .contains("does not match the question's fields"),
        "{e}"
    );
    assert!(session.is_paused().await.unwrap());

    let out = session
        .resolve(vec![
            Decision::input(&req.id, json!({"seat": "window"})).by("ada"),
        ])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed, "{:?}", out.message);
    assert_eq!(
        probe.started.load(Ordering::SeqCst),
        1,
        "the same call went on"
    );
    assert_eq!(probe.finished.load(Ordering::SeqCst), 1);
    let msgs = session.messages().await.unwrap();
    assert_valid(&msgs);
    assert_eq!(result_text(&msgs, "b1"), "booked to Lisbon in window");
    let trail = session.decisions().await.unwrap();
    assert!(
        trail.iter().any(|d| d.requirement_id == req.id
            && d.actor.as_ref().is_some_and(|a| a.principal == "ada"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_may_ask_again_and_a_rejection_declines() {
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    let probe = Probe::default();
    let agent = booking_agent(&store, &probe, 2);
    let session = agent.session(&sid()).await.unwrap();
    let out = session.send(Msg::user("book two legs")).await.unwrap();
    let first = out.requirements[0].id.clone();
    let out = session
        .resolve(vec![Decision::input(&first, json!({"seat": "aisle"}))])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    let second = &out.requirements[0];
    assert_ne!(second.id, first);
    assert_eq!(second.reason, "Which seat for leg 2?");
    let out = session
        .resolve(vec![Decision::reject(&second.id, "no second leg")])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(
        result_text(&session.messages().await.unwrap(), "b1"),
        "not booked: the traveller declined"
    );
    assert_eq!(probe.started.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_message_instead_of_an_answer_stops_the_call() {
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    let probe = Probe::default();
    let agent = booking_agent(&store, &probe, 1);
    let session = agent.session(&sid()).await.unwrap();
    session.send(Msg::user("book me to Lisbon")).await.unwrap();
    let out = session.send(Msg::user("never mind")).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    let msgs = session.messages().await.unwrap();
    assert_valid(&msgs);
    assert_eq!(outcomes(&msgs)["b1"], ToolOutcome::Interrupted);
    // The live call saw the cancellation and ended.
    for _ in 0..400 {
        if probe.cancelled.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(probe.cancelled.load(Ordering::SeqCst), 1);
    assert_eq!(probe.finished.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_given_where_the_call_is_not_live_makes_it_unknown() {
    for (label, a, b, _keep) in store_pairs("askelse").await {
        let probe = Probe::default();
        let id = sid();
        let worker_a = booking_agent(&a, &probe, 1);
        let worker_b = answering_agent(&b);
        // B's handle is open before A pauses.
        let on_b = worker_b.session(&id).await.unwrap();
        let out = worker_a
            .session(&id)
            .await
            .unwrap()
            .send(Msg::user("book me to Lisbon"))
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Paused, "{label}");
        let req = out.requirements[0].clone();
        let seen = on_b.requirements().await.unwrap();
        assert_eq!(seen, vec![req.clone()], "{label}: B sees A's question");
        let out = on_b
            .resolve(vec![Decision::input(&req.id, json!({"seat": "window"}))])
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        let msgs = on_b.messages().await.unwrap();
        assert_valid(&msgs);
        assert_eq!(outcomes(&msgs)["b1"], ToolOutcome::Unknown, "{label}");
        assert_eq!(result_text(&msgs, "b1"), ASKED_ELSEWHERE, "{label}");
        assert_eq!(probe.finished.load(Ordering::SeqCst), 0, "{label}");
        // A sees the call settled elsewhere and stops it, instead of waiting forever.
        for _ in 0..1_000 {
            if probe.cancelled.load(Ordering::SeqCst) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            probe.cancelled.load(Ordering::SeqCst),
            1,
            "{label}: A's call still waits"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_question_is_still_pending_and_its_answer_gives_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ask.db");
    let id = sid();
    let req = {
        let store: SharedStore = Arc::new(reins_memory::SqliteStore::open(&path).await.unwrap());
        let agent = booking_agent(&store, &Probe::default(), 1);
        let out = agent
            .session(&id)
            .await
            .unwrap()
            .send(Msg::user("book me to Lisbon"))
            .await
            .unwrap();
        out.requirements[0].clone()
    };
    let store: SharedStore = Arc::new(reins_memory::SqliteStore::open(&path).await.unwrap());
    let agent = answering_agent(&store);
    let session = agent.session(&id).await.unwrap();
    assert_eq!(session.requirements().await.unwrap(), vec![req.clone()]);
    let out = session
        .resolve(vec![Decision::input(&req.id, json!({"seat": "aisle"}))])
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(
        outcomes(&session.messages().await.unwrap())["b1"],
        ToolOutcome::Unknown
    );
    // The ledger records it too: a second resume cannot run it again.
    let entry = store.ledger_entry(&id, "b1").await.unwrap().unwrap();
    assert_eq!(entry.result.unwrap().outcome, ToolOutcome::Unknown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_while_the_answered_call_runs_on_is_honest() {
    let store: SharedStore = Arc::new(reins_memory::InMemoryStore::new());
    let started = Arc::new(AtomicUsize::new(0));
    let s = started.clone();
    let mut tk = Toolkit::new();
    tk.add_dynamic(DynamicTool::new(
        "deploy",
        "Deploy",
        json!({"type": "object"}),
        move |_args: Value, ctx: reins_tool::ToolContext| {
            let s = s.clone();
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                let q = ToolQuestion {
                    message: "Which region?".into(),
                    schema: json!({"type": "object", "properties": {"region": {"type": "string"}}}),
                };
                let QuestionAnswer::Accept(_) = ctx.ask(q).await else {
                    return Err(ToolError::Cancelled);
                };
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(60)) => Ok::<_, ToolError>(ToolOutput::text("deployed")),
                    () = ctx.cancelled() => Err(ToolError::Cancelled),
                }
            }
        },
    ))
    .unwrap();
    let agent = Agent::builder()
        .model(ScriptedModel::new([
            call("d1", "deploy", json!({})),
            text("never"),
        ]))
        .toolkit(tk)
        .store_arc(store)
        .build()
        .unwrap();
    let session = agent.session(&sid()).await.unwrap();
    let out = session.send(Msg::user("deploy")).await.unwrap();
    let req = out.requirements[0].id.clone();
    let handle = session
        .resolve(vec![Decision::input(&req, json!({"region": "eu"}))])
        .start()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    handle.interrupt();
    let out = handle.wait().await.unwrap();
    assert_eq!(out.status, RunStatus::Cancelled);
    let msgs = session.messages().await.unwrap();
    assert_valid(&msgs);
    assert_eq!(outcomes(&msgs)["d1"], ToolOutcome::Interrupted);
    assert_eq!(started.load(Ordering::SeqCst), 1);
}
