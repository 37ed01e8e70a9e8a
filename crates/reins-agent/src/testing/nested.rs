//! Scenarios of sub-agents and of tools that ask a question, written once for every
//! driver (see the [parent module](super)).
//!
//! | scenario | the agent | what must hold |
//! |---|---|---|
//! | [`Scenario::SubAgent`](super::Scenario::SubAgent) | `Lead` with the sub-agent `research` (agent `Research`: `send_email` needs a confirmation, `slow` runs until stopped) | the child's pause is the parent's (its requirement `call/child-call`, agent `Research`), one approval at the parent runs the tool once and the parent completes with the child's answer; an interrupt of the parent stops the child's running tool and ends both cancelled; a requirement answered on the child session directly is refused at the parent as `AlreadyDecided`, and the parent's `resume` takes the child's answer without running anything again; a new message at the parent closes the paused child (an approval there is refused, nothing runs) |
//! | [`Scenario::AskingTool`](super::Scenario::AskingTool) | `ask_name` asks "Whom should I greet?" mid-call | the question is a user-input requirement (its fields the question's schema); the answer reaches the call, which ran once and greets the name given |

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reins_memory::MemoryStore;
use reins_message::ToolOutcome;
use reins_tool::{QuestionAnswer, ToolContext, ToolError, ToolQuestion, Toolkit};
use serde_json::json;

use super::{On, RuleModel, SETTLE, TOOL};
use crate::agent::{Agent, AgentBuilder};
use crate::backend::Submission;
use crate::error::{AgentError, Result};
use crate::output::RunStatus;
use crate::requirement::{Decision, RequirementKind};
use crate::run::{Phase, RunInput};
use crate::view::Actor;

/// The tool [`Scenario::SubAgent`](super::Scenario::SubAgent)'s child runs until it
/// is stopped.
pub const SLOW: &str = "slow";
/// The tool of [`Scenario::AskingTool`](super::Scenario::AskingTool).
pub const ASKING: &str = "ask_name";
/// The parent's sub-agent tool.
pub const RESEARCH: &str = "research";
/// A tool of the sub-agent that takes a moment (to see two children run at once).
pub const NAP: &str = "nap";

/// The parent of [`Scenario::SubAgent`](super::Scenario::SubAgent): `Lead`, whose
/// model hands `delegate TASK` to the sub-agent `research` (agent `Research`, with
/// `send_email` and `slow`).
pub(super) fn subagent(
    b: AgentBuilder,
    store: Arc<dyn MemoryStore>,
    outbox: &Path,
) -> Result<Agent> {
    let mut tools = super::toolkit(outbox.to_path_buf())?;
    tools
        .add(slow_tool(outbox.to_path_buf()))
        .map_err(|e| AgentError::InvalidInput(e.to_string()))?;
    tools
        .add(nap_tool(outbox.to_path_buf()))
        .map_err(|e| AgentError::InvalidInput(e.to_string()))?;
    let research = Agent::builder()
        .name("Research")
        .system_prompt("You research and send emails.")
        .model(RuleModel)
        .toolkit(tools)
        .store_arc(store)
        .build()?;
    b.name("Lead")
        .toolkit(Toolkit::new())
        .subagent(research.as_tool(RESEARCH, "Researches and sends emails"))
        .build()
}

/// The agent of [`Scenario::AskingTool`](super::Scenario::AskingTool): `ask_name`
/// beside `send_email`.
pub(super) fn asking(b: AgentBuilder, outbox: &Path) -> Result<Agent> {
    let mut tools = super::toolkit(outbox.to_path_buf())?;
    tools
        .add(asking_tool(outbox.to_path_buf()))
        .map_err(|e| AgentError::InvalidInput(e.to_string()))?;
    b.toolkit(tools).build()
}

/// Appends one line to the outbox (one `write`: processes sharing it never
/// interleave).
fn append(outbox: &Path, line: &str) -> std::result::Result<(), ToolError> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(outbox)
        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()))
        .map_err(|e| ToolError::Failed(format!("the outbox: {e}")))
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

/// `slow`: writes `slow SESSION/CALL start`, then waits (up to a minute) until it is
/// stopped, and writes `slow SESSION/CALL stopped`.
fn slow_tool(outbox: std::path::PathBuf) -> reins_tool::FunctionTool {
    Toolkit::function(
        SLOW,
        "Works until stopped",
        move |_: NoArgs, ctx: ToolContext| {
            let outbox = outbox.clone();
            async move {
                let at = format!("{}/{}", ctx.session_id, ctx.tool_use_id);
                append(&outbox, &format!("{SLOW} {at} start"))?;
                tokio::select! {
                    () = ctx.cancel.cancelled() => {
                        append(&outbox, &format!("{SLOW} {at} stopped"))?;
                        Err(ToolError::Failed("stopped".to_owned()))
                    }
                    () = tokio::time::sleep(Duration::from_secs(60)) => {
                        append(&outbox, &format!("{SLOW} {at} end"))?;
                        Ok::<_, ToolError>("worked".to_owned())
                    }
                }
            }
        },
    )
}

/// `nap`: writes `nap SESSION/CALL start`, waits 800 ms, writes `nap SESSION/CALL
/// end`.
fn nap_tool(outbox: std::path::PathBuf) -> reins_tool::FunctionTool {
    Toolkit::function(NAP, "Takes a moment", move |_: NoArgs, ctx: ToolContext| {
        let outbox = outbox.clone();
        async move {
            let at = format!("{}/{}", ctx.session_id, ctx.tool_use_id);
            append(&outbox, &format!("{NAP} {at} start"))?;
            tokio::time::sleep(Duration::from_millis(800)).await;
            append(&outbox, &format!("{NAP} {at} end"))?;
            Ok::<_, ToolError>("rested".to_owned())
        }
    })
}

/// `ask_name`: writes `ask_name SESSION/CALL start`, asks whom to greet, writes
/// `ask_name SESSION/CALL got NAME` and greets.
fn asking_tool(outbox: std::path::PathBuf) -> reins_tool::FunctionTool {
    Toolkit::function(
        ASKING,
        "Greets someone it asks about",
        move |_: NoArgs, ctx: ToolContext| {
            let outbox = outbox.clone();
            async move {
                let at = format!("{}/{}", ctx.session_id, ctx.tool_use_id);
                append(&outbox, &format!("{ASKING} {at} start"))?;
                let answer = ctx
                    .ask(ToolQuestion {
                        message: "Whom should I greet?".to_owned(),
                        schema: json!({
                            "type": "object",
                            "properties": {"name": {"type": "string"}},
                            "required": ["name"]
                        }),
                    })
                    .await;
                let name = match answer {
                    QuestionAnswer::Accept(v) => v
                        .get("name")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("nobody")
                        .to_owned(),
                    QuestionAnswer::Decline => "(declined)".to_owned(),
                    QuestionAnswer::Cancel => "(cancelled)".to_owned(),
                };
                append(&outbox, &format!("{ASKING} {at} got {name}"))?;
                Ok::<_, ToolError>(format!("hello {name}"))
            }
        },
    )
}

impl On<'_> {
    /// Outbox lines of `tool` in `session` (and its child sessions) containing `what`.
    fn lines(&self, tool: &str, session: &str, what: &str) -> usize {
        let mark = format!(" {session}/");
        std::fs::read_to_string(self.outbox)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(&format!("{tool} ")) && l.contains(&mark))
            .filter(|l| l.contains(what))
            .count()
    }

    /// The text of call `id`'s result in `session`.
    async fn result_of(
        &self,
        session: &str,
        id: &str,
    ) -> std::result::Result<Option<(String, ToolOutcome)>, String> {
        Ok(self
            .messages(session)
            .await?
            .iter()
            .flat_map(reins_message::Msg::tool_results_iter)
            .find(|r| r.id == id)
            .map(|r| (r.text(), r.outcome.clone())))
    }

    /// Waits until `session`'s run is not running any more.
    async fn settled(&self, session: &str) -> std::result::Result<crate::SessionView, String> {
        let start = std::time::Instant::now();
        loop {
            match self.backend.view(session).await {
                Ok(v)
                    if !matches!(
                        v.phase,
                        Phase::Reasoning | Phase::Acting | Phase::Summarizing
                    ) =>
                {
                    return Ok(v);
                }
                Ok(_) => {}
                Err(e) => return Err(format!("reading `{session}` failed: {e}")),
            }
            if start.elapsed() > SETTLE {
                return Err(format!("`{session}` did not settle within {SETTLE:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(super) async fn subagent(&self, session: &str) -> std::result::Result<(), String> {
        self.subagents_at_once(&format!("{session}-two")).await?;
        // The child's pause is the parent's; one approval there runs the tool once.
        let v = self
            .send(session, "delegate email carol@example.com", "alice")
            .await?;
        ensure!(
            v.paused,
            "the parent must pause with the child, got {:?}",
            v.phase
        );
        ensure!(
            v.requirements.len() == 1,
            "the parent must show the child's one requirement, shows {}",
            v.requirements.len()
        );
        let r = v.requirements[0].clone();
        ensure!(
            r.path.len() == 2
                && r.id == r.path.join("/")
                && r.agent.as_deref() == Some("Research")
                && r.tool_use.name == TOOL,
            "the requirement must be the child's `send_email`, by agent Research, at path call/child-call: {r:?}"
        );
        ensure!(
            self.runs(session) == 0,
            "nothing may run before the approval"
        );
        let child = crate::child_session_id(session, &r.path[0]);
        let cv = self
            .backend
            .view(&child)
            .await
            .map_err(|e| format!("the child session `{child}`: {e}"))?;
        ensure!(
            cv.paused
                && cv
                    .requirements
                    .iter()
                    .map(|q| q.id.as_str())
                    .collect::<Vec<_>>()
                    == [r.path[1].as_str()],
            "the child session must be paused on its own requirement: {cv:?}"
        );
        let v = self
            .approve(session, &r.id, "ana")
            .await?
            .map_err(|e| format!("the approval at the parent was refused: {e}"))?;
        ensure!(
            v.phase == Phase::Finished(RunStatus::Completed),
            "the parent must complete after the approval, got {:?}",
            v.phase
        );
        ensure!(
            self.runs(session) == 1,
            "the child's tool must run once, ran {}",
            self.runs(session)
        );
        let answer = self.result_of(session, &r.path[0]).await?;
        ensure!(
            matches!(&answer, Some((t, ToolOutcome::Success)) if t == "done"),
            "the parent's call must end with the child's answer `done`, got {answer:?}"
        );

        // An interrupt of the parent reaches the child's running tool.
        let busy = format!("{session}-interrupt");
        self.backend
            .submit(
                &busy,
                Submission {
                    input: RunInput::Message(reins_message::Msg::user("delegate slow")),
                    actor: Some(Actor::new("alice")),
                    view: None,
                    idempotency_key: None,
                    client_tools: Vec::new(),
                    output: None,
                    budget: None,
                    trace_parent: None,
                },
            )
            .await
            .map_err(|e| format!("`delegate slow` was refused: {e}"))?;
        let start = std::time::Instant::now();
        while self.lines(SLOW, &busy, " start") == 0 {
            ensure!(start.elapsed() < SETTLE, "the child's `slow` never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let requested = self
            .backend
            .interrupt(&busy)
            .await
            .map_err(|e| format!("the interrupt failed: {e}"))?;
        ensure!(requested, "the interrupt must find the parent running");
        let v = self.settled(&busy).await?;
        ensure!(
            v.phase == Phase::Finished(RunStatus::Cancelled),
            "the interrupted parent must end cancelled, got {:?}",
            v.phase
        );
        let start = std::time::Instant::now();
        while self.lines(SLOW, &busy, " stopped") == 0 {
            ensure!(
                start.elapsed() < SETTLE,
                "the child's `slow` was never stopped: the interrupt did not reach the child"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        ensure!(
            self.lines(SLOW, &busy, " start") == 1,
            "`slow` must have started once"
        );
        let call = self
            .messages(&busy)
            .await?
            .iter()
            .flat_map(reins_message::Msg::tool_uses)
            .find(|u| u.name == RESEARCH)
            .map(|u| u.id.clone())
            .ok_or("the parent never called the sub-agent")?;
        let child = crate::child_session_id(&busy, &call);
        let cv = self.settled(&child).await?;
        ensure!(
            cv.phase == Phase::Finished(RunStatus::Cancelled),
            "the interrupted child must end cancelled, got {:?}",
            cv.phase
        );

        // A requirement answered on the child directly is no longer the parent's.
        let settled = format!("{session}-settled");
        let v = self
            .send(&settled, "delegate email dave@example.com", "alice")
            .await?;
        ensure!(
            v.paused,
            "the parent must pause with the child, got {:?}",
            v.phase
        );
        let r = v.requirements.first().ok_or("no requirement")?.clone();
        let child = crate::child_session_id(&settled, &r.path[0]);
        let cv = self
            .approve(&child, &r.path[1], "carol")
            .await?
            .map_err(|e| format!("the approval on the child session was refused: {e}"))?;
        ensure!(
            cv.phase == Phase::Finished(RunStatus::Completed),
            "the child must complete after its own approval, got {:?}",
            cv.phase
        );
        ensure!(self.runs(&settled) == 1, "the child's tool must run once");
        let late = self.submit(
            &settled,
            RunInput::Decisions(vec![Decision::reject(&r.id, "do not send").by("dave")]),
            "dave",
        );
        let late = late.await?;
        ensure!(
            matches!(&late, Err(AgentError::AlreadyDecided { id, decided }) if *id == r.id && decided.decision == "approve" && decided.by.as_deref() == Some("carol")),
            "a decision at the parent for a requirement settled at the child must be refused AlreadyDecided naming carol's approval, got {late:?}"
        );
        let v = self
            .backend
            .view(&settled)
            .await
            .map_err(|e| format!("reading the parent failed: {e}"))?;
        ensure!(
            v.requirements.is_empty(),
            "the parent must no longer show the child's requirement: {:?}",
            v.requirements
        );
        let trail = self.trail(&settled).await?;
        ensure!(
            !trail
                .iter()
                .any(|d| d.verdict == crate::view::Verdict::Applied),
            "the parent's audit trail must not claim a decision took effect: {trail:?}"
        );
        let v = self
            .submit(&settled, RunInput::Resume, "alice")
            .await?
            .map_err(|e| format!("resuming the parent was refused: {e}"))?;
        ensure!(
            v.phase == Phase::Finished(RunStatus::Completed),
            "the resumed parent must complete with the child's answer, got {:?}",
            v.phase
        );
        ensure!(self.runs(&settled) == 1, "nothing may run again");
        let answer = self.result_of(&settled, &r.path[0]).await?;
        ensure!(
            matches!(&answer, Some((t, ToolOutcome::Success)) if t == "done"),
            "the parent's call must end with the child's answer, got {answer:?}"
        );

        // A new message at the parent closes the paused child: nothing stays
        // approvable there.
        let moved = format!("{session}-moved");
        let v = self
            .send(&moved, "delegate email erin@example.com", "alice")
            .await?;
        ensure!(
            v.paused,
            "the parent must pause with the child, got {:?}",
            v.phase
        );
        let r = v.requirements.first().ok_or("no requirement")?.clone();
        let v = self.send(&moved, "never mind", "alice").await?;
        ensure!(
            !v.paused && v.requirements.is_empty(),
            "the new message must close the call, got {:?}",
            v.phase
        );
        let child = crate::child_session_id(&moved, &r.path[0]);
        let cv = self.settled(&child).await?;
        ensure!(
            !cv.paused && cv.requirements.is_empty(),
            "the child session must be closed with its parent's call, got {:?} with {:?}",
            cv.phase,
            cv.requirements
        );
        let late = self.approve(&child, &r.path[1], "carol").await?;
        ensure!(
            late.is_err(),
            "an approval on the closed child must be refused, got {late:?}"
        );
        ensure!(self.runs(&moved) == 0, "nothing may run in a closed child");
        Ok(())
    }

    pub(super) async fn asking_tool(&self, session: &str) -> std::result::Result<(), String> {
        let v = self.send(session, "greet", "alice").await?;
        ensure!(
            v.paused,
            "the question must pause the run, got {:?}",
            v.phase
        );
        ensure!(
            v.requirements.len() == 1,
            "one question, {} requirement(s)",
            v.requirements.len()
        );
        let r = v.requirements[0].clone();
        let fields = match &r.kind {
            RequirementKind::UserInput { fields } => fields.clone(),
            other => {
                return Err(format!(
                    "the question must be a user-input requirement, is {other:?}"
                ));
            }
        };
        ensure!(
            fields["properties"]["name"]["type"] == "string" && r.reason == "Whom should I greet?",
            "the requirement must carry the question and its schema: {r:?}"
        );
        ensure!(
            self.lines(ASKING, session, " start") == 1 && self.lines(ASKING, session, " got ") == 0,
            "the call must have started once and wait for its answer"
        );
        let answer = Decision::input(&r.id, json!({"name": "Ada"})).by("ana");
        let v = self
            .submit(session, RunInput::Decisions(vec![answer]), "ana")
            .await?
            .map_err(|e| format!("the answer was refused: {e}"))?;
        ensure!(
            v.phase == Phase::Finished(RunStatus::Completed),
            "the run must complete once the call has its answer, got {:?}",
            v.phase
        );
        ensure!(
            self.lines(ASKING, session, " got Ada") == 1,
            "the call must get the answer `Ada` once"
        );
        ensure!(
            self.lines(ASKING, session, " start") == 1,
            "the call must have run once, started {}",
            self.lines(ASKING, session, " start")
        );
        let result = self.result_of(session, &r.tool_use.id).await?;
        ensure!(
            matches!(&result, Some((t, ToolOutcome::Success)) if t == "hello Ada"),
            "the call's result must greet Ada, got {result:?}"
        );
        self.asking_closed(session).await
    }

    /// A call waiting for its answer that a new message closes stops: its question is
    /// cancelled (the call does not wait on until the process exits).
    async fn asking_closed(&self, session: &str) -> std::result::Result<(), String> {
        let v = self.send(session, "greet", "alice").await?;
        ensure!(
            v.paused,
            "the question must pause the run, got {:?}",
            v.phase
        );
        let id = v
            .requirements
            .first()
            .ok_or("no requirement")?
            .tool_use
            .id
            .clone();
        let v = self.send(session, "count", "alice").await?;
        ensure!(
            v.phase == Phase::Finished(RunStatus::Completed),
            "the new message must run to its end, got {:?}",
            v.phase
        );
        let cancelled = format!("{ASKING} {session}/{id} got (cancelled)");
        let start = std::time::Instant::now();
        while !self.outbox_has(&cancelled) {
            ensure!(
                start.elapsed() < SETTLE,
                "the closed call must stop within {:?}: its question was never cancelled",
                SETTLE
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    fn outbox_has(&self, line: &str) -> bool {
        std::fs::read_to_string(self.outbox)
            .unwrap_or_default()
            .lines()
            .any(|l| l == line)
    }

    /// Two sub-agent calls of one batch run at the same time (as the toolkit's calls
    /// of a parallel batch do): both children's naps start before either ends.
    async fn subagents_at_once(&self, session: &str) -> std::result::Result<(), String> {
        let v = self.send(session, "delegate twice nap", "alice").await?;
        ensure!(
            v.phase == Phase::Finished(RunStatus::Completed),
            "the parent must complete with both children's answers, got {:?}",
            v.phase
        );
        let lines: Vec<String> = std::fs::read_to_string(self.outbox)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(&format!("{NAP} {session}/")))
            .map(str::to_owned)
            .collect();
        let starts = lines.iter().filter(|l| l.ends_with(" start")).count();
        let first_end = lines.iter().position(|l| l.ends_with(" end"));
        let started_before_end = lines
            .iter()
            .take(first_end.unwrap_or(lines.len()))
            .filter(|l| l.ends_with(" start"))
            .count();
        ensure!(
            starts == 2 && started_before_end == 2,
            "both children's calls must run at the same time (each once): {lines:?}"
        );
        Ok(())
    }
}
