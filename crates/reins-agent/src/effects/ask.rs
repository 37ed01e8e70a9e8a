//! Calls that ask a person a question mid-call ([`ToolContext::ask`], e.g. an MCP
//! server's elicitation) and stay in flight while the run pauses: [`LiveCalls`], the
//! registry a driver lends the effects (one per agent on the local driver, one per
//! service process on Restate), and the wait that moves a call there when it asks.
//!
//! While the step waits for a call, the call runs inline. When it asks, its future
//! moves to a task of its own and is kept in [`LiveCalls`] with the channel its answer
//! goes to; the step ends with a user-input requirement (the question's schema as its
//! fields) and the run pauses on it. The answer comes back as a
//! [`Step::Ask`](crate::run::Step::Ask): it is handed to the live call and the step
//! waits for its result (or its next question). A call that is not live in this
//! process any more — the process restarted, or the answer reached another one —
//! cannot be answered: its outcome is `Unknown` (it was running; it may have acted),
//! recorded in the ledger, and nothing runs again. The process that holds it watches
//! the store meanwhile: once the call's ledger entry is finished elsewhere, it stops
//! the call (an MCP server hears `cancelled`).
//!
//! [`ToolContext::ask`]: reins_tool::ToolContext::ask

use std::future::Future;
use std::pin::Pin;

use chrono::{DateTime, Utc};
use reins_message::{ToolResult, ToolUse};
use reins_tool::{PendingQuestion, QuestionAnswer, ToolCallOutcome, ToolChunk, ToolQuestion};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use super::Ports;
use crate::agent::Agent;
use crate::live::{LiveCall, WeakLiveCalls};
use crate::requirement::{Requirement, RequirementKind};

/// The text a call gets when its question was answered where the call is not live.
pub const ASKED_ELSEWHERE: &str = "outcome unknown: the call was waiting for an answer to its question \
     in a process that stopped or is not this one; it may or may not have taken effect";

/// A tool call's future, owned.
pub(super) type CallFuture = Pin<Box<dyn Future<Output = ToolCallOutcome> + Send>>;

/// How waiting for a call ended.
#[allow(
    clippy::large_enum_variant,
    reason = "one value per asking tool call, moved once: boxing would only add an allocation"
)]
pub(super) enum Waited {
    /// It finished.
    Done(ToolCallOutcome),
    /// It asked this question (now a requirement) and stays in flight, in
    /// [`LiveCalls`].
    Asked(Requirement),
}

/// A call's channels: its future, its questions, its partial output, its token.
pub(super) struct Running {
    pub(super) call: CallFuture,
    pub(super) questions: UnboundedReceiver<PendingQuestion>,
    pub(super) chunks: UnboundedReceiver<ToolChunk>,
    pub(super) cancel: CancellationToken,
}

/// Waits for call `tool_use` of the ports' session, forwarding the run's interrupt to
/// it and its partial output to the listeners and the `ActingChunk` hooks, until it
/// finishes or asks a question; a call that asks is kept in the ports' live calls.
pub(super) async fn wait(
    ports: &Ports<'_>,
    iteration: u32,
    tool_use: &ToolUse,
    running: Running,
) -> Waited {
    let Ports {
        agent,
        session,
        cancel: turn,
        witness,
        live,
        ..
    } = *ports;
    let Running {
        mut call,
        mut questions,
        mut chunks,
        cancel,
    } = running;
    let forward =
        |chunk: ToolChunk| super::hooks::acting_chunk(agent, session, iteration, chunk, witness);
    let every = witness.progress_every();
    loop {
        tokio::select! {
            biased;
            out = &mut call => {
                while let Ok(c) = chunks.try_recv() {
                    forward(c).await;
                }
                return Waited::Done(out);
            }
            () = turn.cancelled(), if !cancel.is_cancelled() => cancel.cancel(),
            Some(c) = chunks.recv() => {
                forward(c).await;
                if witness.wants_progress() {
                    witness.progress().await;
                }
            }
            () = sleep(every), if every.is_some() => witness.progress().await,
            Some(q) = questions.recv() => {
                if turn.is_cancelled() {
                    let _ = q.reply.send(QuestionAnswer::Cancel);
                    continue;
                }
                let requirement = question_requirement(agent, tool_use, &q.question, Utc::now());
                let task = tokio::spawn(call);
                while let Ok(c) = chunks.try_recv() {
                    forward(c).await;
                }
                let watch = CancellationToken::new();
                live.insert(
                    session,
                    &tool_use.id,
                    LiveCall { task, questions, chunks, reply: q.reply, cancel, watch: watch.clone() },
                );
                watch_settled(agent, live.downgrade(), session.to_owned(), tool_use.id.clone(), watch);
                return Waited::Asked(requirement);
            }
        }
    }
}

async fn sleep(every: Option<std::time::Duration>) {
    match every {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Hands `answer` to the live call `tool_use` of the ports' session and waits for it
/// again: `Err` with the `Unknown` result to record when the call is not live in this
/// process.
pub(super) async fn resume(
    ports: &Ports<'_>,
    iteration: u32,
    tool_use: &ToolUse,
    answer: QuestionAnswer,
) -> Result<Waited, ToolResult> {
    let Some(live) = ports.live.take(ports.session, &tool_use.id) else {
        return Err(ToolResult::unknown(
            &tool_use.id,
            &tool_use.name,
            ASKED_ELSEWHERE,
        ));
    };
    let (id, name) = (tool_use.id.clone(), tool_use.name.clone());
    let _ = live.reply.send(answer);
    let task = live.task;
    let call: CallFuture = Box::pin(async move {
        task.await.unwrap_or_else(|e| {
            ToolCallOutcome::Done(ToolResult::unknown(
                id,
                name,
                format!("the call's task failed while it ran: {e}"),
            ))
        })
    });
    let running = Running {
        call,
        questions: live.questions,
        chunks: live.chunks,
        cancel: live.cancel,
    };
    Ok(wait(ports, iteration, tool_use, running).await)
}

/// Stops the live call `id` of `session` once its ledger entry is finished by anyone
/// (a new message closed it, or its answer reached a turn in another process, which
/// recorded `Unknown`), instead of leaving it waiting for an answer that cannot come.
/// Stops watching when the call is taken for its answer (`watch`).
fn watch_settled(
    agent: &Agent,
    live: WeakLiveCalls,
    session: String,
    id: String,
    watch: CancellationToken,
) {
    let store = agent.store().clone();
    tokio::spawn(async move {
        let Ok(mut feed) = store.changes().await else {
            return;
        };
        // The first look comes right after subscribing: what another worker did
        // before the feed existed sends no notice.
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) {
                let change = tokio::select! {
                    () = watch.cancelled() => return,
                    c = feed.recv() => c,
                };
                match change {
                    Ok(c) if !c.concerns(&session) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    // A change of this session, or missed changes: look.
                    _ => {}
                }
            }
            let settled = matches!(
                store.ledger_entry(&session, &id).await,
                Ok(Some(e)) if e.state == reins_memory::LedgerState::Finished
            );
            if settled {
                if let Some(call) = live.take(&session, &id) {
                    tracing::debug!(session = %session, tool_use_id = %id, "a call's question was settled elsewhere: the call is stopped");
                    call.cancel.cancel();
                }
                return;
            }
        }
    });
}

/// The user-input requirement call `tool_use` raises when it asks `question` at
/// `now`: its id is the call's id, `~ask-` and a fresh id; it expires after the
/// agent's `requirement_ttl`.
fn question_requirement(
    agent: &Agent,
    tool_use: &ToolUse,
    question: &ToolQuestion,
    now: DateTime<Utc>,
) -> Requirement {
    let expires_at = agent
        .config
        .run
        .requirement_ttl_secs
        .and_then(|s| i64::try_from(s).ok())
        .map(|s| now + chrono::Duration::seconds(s));
    Requirement {
        id: format!("{}~ask-{}", tool_use.id, reins_message::new_id()),
        tool_use: tool_use.clone(),
        kind: RequirementKind::UserInput {
            fields: question.schema.clone(),
        },
        reason: question.message.clone(),
        created_at: now,
        expires_at,
        path: Vec::new(),
        agent: None,
        quorum: None,
    }
}
