//! The session port (`reins_agent::port::Sessions`) on its two implementations: the
//! local driver (an `Agent`), and `Relayed` over a backend whose runs execute
//! "elsewhere" (here: a second agent on the same store, which relays its live events
//! to the port as a Restate deployment's processes do). A door sees the same thing
//! through either: the run's events, its output with usage and structured answer, the
//! one decision path with its late-approver refusal, the actor's scope, interrupts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use reins_agent::port::{Decide, Interrupted, LiveEvent, Relayed, Sessions};
use reins_agent::{
    Actor, Agent, AgentError, Decision, ReplayReport, ReplayTurn, RunEvent, RunInput, RunStatus,
    SessionBackend, SessionView, Started, Submission,
};
use reins_memory::{InMemoryStore, MemoryStore};
use reins_message::{Msg, Role, Usage};
use reins_model::{ChatRequest, ScriptedModel, ScriptedResponse};
use reins_tool::{ToolContext, ToolError, ToolPolicy, Toolkit};
use serde_json::json;
use tokio::sync::mpsc::UnboundedSender;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// The file.
    path: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WaitArgs {
    /// What to wait for.
    what: String,
}

/// `delete X` → a confirmed `delete_file` call; `wait X` → a `wait` call that runs
/// until interrupted; tool results → `done: …`; anything else → `echo: …`. Every
/// answer reports 7 input and 3 output tokens.
fn respond(req: &ChatRequest) -> ScriptedResponse {
    let usage = Usage {
        input_tokens: 7,
        output_tokens: 3,
        ..Usage::default()
    };
    let last = req
        .messages
        .iter()
        .rev()
        .find(|m| m.role != Role::System)
        .unwrap();
    let r = if last.role == Role::Tool {
        let texts: Vec<String> = last.tool_results_iter().map(|r| r.text()).collect();
        ScriptedResponse::text(format!("done: {}", texts.join(", ")))
    } else {
        let text = last.text();
        match text.split_once(' ') {
            Some(("delete", arg)) => {
                ScriptedResponse::tool_call("delete_file", json!({"path": arg}))
            }
            Some(("wait", arg)) => ScriptedResponse::tool_call("wait", json!({"what": arg})),
            _ => ScriptedResponse::text(format!("echo: {text}")),
        }
    };
    r.with_usage(usage)
}

fn agent(store: Arc<dyn MemoryStore>) -> Agent {
    let mut tools = Toolkit::new();
    tools
        .add(
            Toolkit::function("delete_file", "Delete a file", |a: PathArgs, _ctx| async move {
                Ok::<_, ToolError>(format!("deleted {}", a.path))
            })
            .policy(ToolPolicy::confirm()),
        )
        .unwrap();
    tools
        .add(Toolkit::function(
            "wait",
            "Wait until interrupted",
            |a: WaitArgs, ctx: ToolContext| async move {
                ctx.cancelled().await;
                Err::<String, _>(ToolError::Failed(format!("stopped waiting for {}", a.what)))
            },
        ))
        .unwrap();
    Agent::builder()
        .name("PortAgent")
        .model(ScriptedModel::from_fn(respond).with_chunk_size(3))
        .toolkit(tools)
        .store_arc(store)
        .interrupt_grace(std::time::Duration::from_millis(200))
        .build()
        .unwrap()
}

/// A backend whose runs execute on its own agent, detached, relaying the live events
/// of their steps to the port (as a driver's processes do over HTTP: best-effort,
/// and sometimes after the step's commit).
struct Elsewhere {
    agent: Agent,
    port: Arc<OnceLock<Arc<Relayed>>>,
    /// Holds the relayed events back until released (a relay that comes late).
    late: Option<Arc<Late>>,
    /// How many of its runs have not finished (the store may say a run ended a
    /// moment before its process has let go of it).
    runs: Arc<tokio::sync::watch::Sender<usize>>,
}

/// The gate of a late relay.
#[derive(Default)]
struct Late {
    release: tokio::sync::Notify,
    relayed: tokio::sync::Notify,
}

#[async_trait]
impl SessionBackend for Elsewhere {
    async fn view(&self, session: &str) -> reins_agent::Result<SessionView> {
        SessionBackend::view(&self.agent, session).await
    }

    async fn submit(&self, session: &str, submission: Submission) -> reins_agent::Result<()> {
        let Started::Here(mut handle) =
            SessionBackend::start(&self.agent, session, submission).await?
        else {
            unreachable!("an agent runs its sessions here");
        };
        match handle.next_event().await {
            Some(RunEvent::RunStarted { .. }) => {}
            _ => return handle.wait().await.map(|_| ()),
        }
        let port = self.port.get().unwrap().clone();
        let session = session.to_owned();
        let late = self.late.clone();
        let runs = self.runs.clone();
        runs.send_modify(|n| *n += 1);
        tokio::spawn(async move {
            let relay = |events: Vec<RunEvent>| {
                let events = events
                    .into_iter()
                    .map(|ev| LiveEvent::relayed(ev, None, Some("a1".to_owned())))
                    .collect();
                port.relay(&session, events).unwrap();
            };
            let mut held = Some(Vec::new()).filter(|_| late.is_some());
            loop {
                let ev = match (&late, held.is_some()) {
                    (Some(gate), true) => tokio::select! {
                        ev = handle.next_event() => ev,
                        () = gate.release.notified() => {
                            relay(held.take().unwrap_or_default());
                            gate.relayed.notify_one();
                            continue;
                        }
                    },
                    _ => handle.next_event().await,
                };
                let Some(ev) = ev else { break };
                if !LiveEvent::is_live(&ev) {
                    continue;
                }
                match held.as_mut() {
                    Some(held) => held.push(ev),
                    None => relay(vec![ev]),
                }
            }
            let _ = handle.wait().await;
            runs.send_modify(|n| *n -= 1);
        });
        Ok(())
    }

    async fn interrupt(&self, session: &str) -> reins_agent::Result<bool> {
        SessionBackend::interrupt(&self.agent, session).await
    }

    async fn replay(
        &self,
        session: &str,
        turns: Option<UnboundedSender<ReplayTurn>>,
    ) -> reins_agent::Result<ReplayReport> {
        SessionBackend::replay(&self.agent, session, turns).await
    }
}

/// How many of a backend's runs have not finished (none on the local port: its
/// handle's end is the run's).
type Runs = Option<tokio::sync::watch::Receiver<usize>>;

/// `Relayed` over `Elsewhere`, its relay late when `late` is given.
fn relayed(late: Option<Arc<Late>>) -> (Arc<Relayed>, Runs) {
    let shared: Arc<dyn MemoryStore> = Arc::new(InMemoryStore::new());
    let slot = Arc::new(OnceLock::new());
    let (runs, watch) = tokio::sync::watch::channel(0);
    let backend = Elsewhere {
        agent: agent(shared.clone()),
        port: slot.clone(),
        late,
        runs: Arc::new(runs),
    };
    let relayed = Arc::new(Relayed::new(agent(shared), Arc::new(backend)));
    slot.set(relayed.clone()).unwrap();
    (relayed, Some(watch))
}

/// Both ports: the local driver, and `Relayed` over `Elsewhere`.
fn ports() -> Vec<(&'static str, Arc<dyn Sessions>, Runs)> {
    let local: Arc<dyn MemoryStore> = Arc::new(InMemoryStore::new());
    let (relayed, runs) = relayed(None);
    vec![
        ("local", Arc::new(agent(local)), None),
        ("relayed", relayed, runs),
    ]
}

fn message(text: &str) -> Submission {
    Submission::new(RunInput::Message(Msg::user(text)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_streams_and_answers_the_same_through_both_ports() {
    for (name, port, _) in ports() {
        assert_eq!(port.card().name, "PortAgent", "{name}");
        assert!(port.card().has_tool("delete_file"), "{name}");
        let mut run = port.start("s1", message("hello there")).await.unwrap();
        let mut events = Vec::new();
        while let Some(ev) = run.next_event().await {
            events.push(ev);
        }
        let out = run.wait().await.unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{name}");
        assert_eq!(out.message.text(), "echo: hello there", "{name}");
        assert_eq!(out.usage.input_tokens, 7, "{name}: {out:?}");
        assert_eq!(out.iterations, 1, "{name}: {out:?}");
        let deltas: String = events
            .iter()
            .filter_map(|e| match e {
                RunEvent::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, "echo: hello there", "{name}: {events:?}");
        assert!(
            matches!(events.first(), Some(RunEvent::RunStarted { .. })),
            "{name}: {events:?}"
        );
        assert!(
            matches!(events.last(), Some(RunEvent::Completed { .. })),
            "{name}: {events:?}"
        );
    }
}

/// A relay that comes after the store told the step (a driver's delivery timed out):
/// the step is told once, from the store, and the late events are dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_relay_never_tells_a_step_twice() {
    let late = Arc::new(Late::default());
    let (port, _) = relayed(Some(late.clone()));
    let mut run = port.start("s5", message("wait here")).await.unwrap();
    let mut events = Vec::new();
    while let Some(ev) = run.next_event().await {
        let ready = matches!(ev, RunEvent::ToolCallReady { .. });
        events.push(ev);
        if ready {
            break;
        }
    }
    // The step's events arrive now, after its commit, and the tool's as it runs.
    late.release.notify_one();
    late.relayed.notified().await;
    assert_eq!(port.interrupt("s5").await.unwrap(), Interrupted::Delivered);
    while let Some(ev) = run.next_event().await {
        events.push(ev);
    }
    let out = run.wait().await.unwrap();
    assert_eq!(out.status, RunStatus::Cancelled, "{events:?}");
    let count = |name: &str| events.iter().filter(|e| e.name() == name).count();
    assert_eq!(count("tool_call_ready"), 1, "{events:?}");
    assert_eq!(count("reasoning_started"), 0, "{events:?}");
    assert_eq!(count("tool_execution_started"), 0, "{events:?}");
    assert_eq!(count("tool_execution_finished"), 1, "{events:?}");
    assert!(
        matches!(events.last(), Some(RunEvent::Cancelled)),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_go_through_one_path_on_both_ports() {
    for (name, port, _) in ports() {
        let out = port
            .start("s2", message("delete a.txt"))
            .await
            .unwrap()
            .wait()
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Paused, "{name}");
        let id = out.requirements[0].id.clone();
        let view = port.view("s2").await.unwrap();

        // An approver scoped to other tools is refused by the run, nothing changes.
        let scoped = Actor::new("rita").deciding_on(["send_email"]);
        let refused = port
            .decide(
                "s2",
                Decide::new(scoped, vec![Decision::approve(&id)]).at(view.token.clone()),
            )
            .await;
        let refused = match refused {
            Ok(run) => run.wait().await.map(|_| ()),
            Err(e) => Err(e),
        };
        assert!(
            matches!(&refused, Err(AgentError::NotEligible { reason, .. }) if reason.contains("send_email")),
            "{name}: {refused:?}"
        );
        assert!(port.view("s2").await.unwrap().paused, "{name}");

        // The approval runs the call once; the run goes on.
        let run = port
            .decide(
                "s2",
                Decide::new(Actor::new("ana"), vec![Decision::approve(&id)]).at(view.token.clone()),
            )
            .await
            .unwrap();
        let out = run.wait().await.unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{name}");
        assert_eq!(out.message.text(), "done: deleted a.txt", "{name}");

        // A late second approver: already decided by ana, and audited.
        let late = port
            .decide(
                "s2",
                Decide::new(Actor::new("ben"), vec![Decision::approve(&id)]).at(view.token),
            )
            .await;
        let late = match late {
            Ok(run) => run.wait().await.map(|_| ()),
            Err(e) => Err(e),
        };
        assert!(
            matches!(&late, Err(AgentError::AlreadyDecided { decided, .. }) if decided.by.as_deref() == Some("ana")),
            "{name}: {late:?}"
        );
        let trail = port.audit("s2").await.unwrap();
        let verdicts: Vec<(String, String)> = trail
            .iter()
            .map(|r| {
                (
                    r.actor.as_ref().unwrap().principal.clone(),
                    match &r.verdict {
                        reins_agent::Verdict::Applied => "applied".to_owned(),
                        reins_agent::Verdict::Refused { reason, .. } => reason.clone(),
                    },
                )
            })
            .collect();
        assert_eq!(
            verdicts,
            [
                ("rita".to_owned(), "not_eligible".to_owned()),
                ("ana".to_owned(), "applied".to_owned()),
                ("ben".to_owned(), "already_decided".to_owned()),
            ],
            "{name}"
        );
        let decided = port.decided("s2", &id).await.unwrap().unwrap();
        assert_eq!(decided.by.as_deref(), Some("ana"), "{name}");
    }
}

/// Waits until the run's tool call is committed: told live as it starts running, or
/// (when the relay is late) made from the stored call.
async fn call_committed(run: &mut reins_agent::RunHandle) {
    while let Some(ev) = run.next_event().await {
        if matches!(
            ev,
            RunEvent::ToolExecutionStarted { .. } | RunEvent::ToolCallReady { .. }
        ) {
            return;
        }
    }
    panic!("the run ended before its call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_stops_the_run_wherever_it_executes() {
    for (name, port, runs) in ports() {
        let mut run = port.start("s3", message("wait forever")).await.unwrap();
        call_committed(&mut run).await;
        let how = port.interrupt("s3").await.unwrap();
        let expected = if port.runs_here() {
            Interrupted::Here
        } else {
            Interrupted::Delivered
        };
        assert_eq!(how, expected, "{name}");
        let out = run.wait().await.unwrap();
        assert_eq!(out.status, RunStatus::Cancelled, "{name}");
        // Once the driver's process has let go of the run, nothing is there to stop.
        if let Some(mut runs) = runs {
            runs.wait_for(|n| *n == 0).await.unwrap();
        }
        assert_eq!(
            port.interrupt("s3").await.unwrap(),
            Interrupted::Idle,
            "{name}"
        );
        let unknown = port.interrupt("nobody").await;
        assert!(
            matches!(
                unknown,
                Err(AgentError::Store(
                    reins_memory::Error::SessionNotFound { .. }
                ))
            ),
            "{name}: {unknown:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_handle_interrupts_the_run_on_both_ports() {
    for (name, port, _) in ports() {
        let mut run = port.start("s4", message("wait here")).await.unwrap();
        call_committed(&mut run).await;
        let mut changes = port.record().changes().await.unwrap();
        drop(run);
        // The session settles: the stored run no longer runs.
        while port.view("s4").await.unwrap().is_running() {
            changes.recv().await.unwrap();
        }
        let view = port.view("s4").await.unwrap();
        assert_eq!(
            view.outcome(),
            Some(RunStatus::Cancelled),
            "{name}: {view:?}"
        );
        let messages = port.read("s4", true).await.unwrap().messages;
        let outcome = messages
            .iter()
            .flat_map(Msg::tool_results_iter)
            .map(|r| format!("{:?}", r.outcome))
            .next()
            .unwrap();
        assert!(
            outcome.contains("Interrupted") || outcome.contains("Cancelled"),
            "{name}: {outcome}"
        );
    }
}
