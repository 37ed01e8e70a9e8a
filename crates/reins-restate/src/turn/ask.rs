//! Calls that ask a person a question mid-call (`ToolContext::ask`, e.g. an MCP
//! server's elicitation) on the Restate driver.
//!
//! A journaled step cannot stay open across a pause, and a tool's future cannot be
//! journaled. So the question ends the step, not the call: when the call asks, its
//! future moves to a task of this process, kept with the channel its answer goes to
//! (by session and tool use id), and the step journals the question as a user-input
//! requirement. The run pauses on it like on any requirement: its answer arrives
//! through an awakeable of its own (`submit` → `deliver`). The turn then runs one
//! journaled step `tool-answer <id>` that hands the answer to the live call and waits
//! for its result (or its next question); the result goes to the ledger, as any call's.
//!
//! The limit, and why: the live call is in the memory of the process that ran the
//! step. The turn reaches it when it resumes in that process — the invocation stays
//! open there while it waits (within the turn handler's timeouts), and a suspended
//! turn that Restate resumes on the same process finds it too. A turn resumed where
//! the call is not (the process restarted, or Restate picked another process of the
//! deployment) cannot hand it the answer: the call's outcome is `Unknown` (it was
//! running; it may have acted), recorded in the ledger, and nothing runs again — the
//! local driver's rule for an answer that reaches another worker.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{LazyLock, Mutex};

use reins_agent::ASKED_ELSEWHERE;
use reins_agent::run::{ExecOutcome, Execution};
use reins_message::ToolResult;
use reins_tool::{PendingQuestion, QuestionAnswer, ToolCallOutcome, ToolChunk, ToolQuestion};
use restate_sdk::prelude::*;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{OnCancel, ToolStep, TurnDriver};
use crate::object::retry;

/// A tool call's future, owned.
pub(super) type CallFuture = Pin<Box<dyn Future<Output = ToolCallOutcome> + Send>>;

/// How waiting for a call ended.
pub(super) enum Waited {
    /// It finished.
    Done(ToolCallOutcome),
    /// It asked this question, and waits (kept in [`LIVE`]).
    Asked(ToolQuestion),
}

/// A call waiting for the answer to its question.
struct LiveCall {
    task: tokio::task::JoinHandle<ToolCallOutcome>,
    questions: UnboundedReceiver<PendingQuestion>,
    chunks: UnboundedReceiver<ToolChunk>,
    reply: oneshot::Sender<QuestionAnswer>,
    cancel: CancellationToken,
    /// Stops the watcher that ends the call once its ledger entry is finished.
    watch: CancellationToken,
}

/// The calls of this process that wait for an answer, by session and tool use id.
static LIVE: LazyLock<Mutex<HashMap<(String, String), LiveCall>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn live() -> std::sync::MutexGuard<'static, HashMap<(String, String), LiveCall>> {
    LIVE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where a running call's partial output goes: the listeners and the `ActingChunk`
/// hooks (`reins_agent::effects::hooks::acting_chunk`, as on the local driver).
pub(super) struct Chunks<'a> {
    pub(super) agent: &'a reins_agent::Agent,
    pub(super) iteration: u32,
    pub(super) witness: &'a crate::live::LiveSender,
    pub(super) rx: UnboundedReceiver<ToolChunk>,
}

impl Chunks<'_> {
    async fn forward(&self, session: &str, chunk: ToolChunk) {
        reins_agent::effects::hooks::acting_chunk(
            self.agent,
            session,
            self.iteration,
            chunk,
            self.witness,
        )
        .await;
    }
}

/// Waits for call `id` of `session`, forwarding the turn's interrupt (`turn`) to it
/// and its partial output to `chunks`, until it finishes or asks a question; a call
/// that asks is kept live.
pub(super) async fn wait(
    session: &str,
    id: &str,
    mut call: CallFuture,
    mut questions: UnboundedReceiver<PendingQuestion>,
    mut chunks: Chunks<'_>,
    cancel: CancellationToken,
    turn: &CancellationToken,
) -> Waited {
    loop {
        tokio::select! {
            biased;
            out = &mut call => {
                while let Ok(c) = chunks.rx.try_recv() {
                    chunks.forward(session, c).await;
                }
                return Waited::Done(out);
            }
            () = turn.cancelled(), if !cancel.is_cancelled() => cancel.cancel(),
            Some(c) = chunks.rx.recv() => chunks.forward(session, c).await,
            Some(q) = questions.recv() => {
                if turn.is_cancelled() {
                    let _ = q.reply.send(QuestionAnswer::Cancel);
                    continue;
                }
                let question = q.question.clone();
                let task = tokio::spawn(call);
                while let Ok(c) = chunks.rx.try_recv() {
                    chunks.forward(session, c).await;
                }
                let watch = CancellationToken::new();
                live().insert(
                    (session.to_owned(), id.to_owned()),
                    LiveCall { task, questions, chunks: chunks.rx, reply: q.reply, cancel, watch: watch.clone() },
                );
                watch_settled(chunks.agent.store().clone(), session.to_owned(), id.to_owned(), watch);
                return Waited::Asked(question);
            }
        }
    }
}

/// Puts `outcomes` in the order of the tool use ids `order`.
pub(super) fn in_order(outcomes: &mut [ExecOutcome], order: &[String]) {
    let at = |o: &ExecOutcome| {
        let id = match o {
            ExecOutcome::Done(r) => &r.id,
            ExecOutcome::Delegated { id, .. }
            | ExecOutcome::Asking { id, .. }
            | ExecOutcome::Suspended { id, .. } => id,
        };
        order.iter().position(|x| x == id).unwrap_or(usize::MAX)
    };
    outcomes.sort_by_key(at);
}

impl TurnDriver<'_, '_> {
    /// The calls in flight on a question (`before` the input: their ids) that the
    /// input closed (a new message): the run gave each a result; the journaled step
    /// `close-asking <id>,..` records it in the ledger and stops the call when it is
    /// live in this process (a process holding it elsewhere stops it when it sees the
    /// ledger entry finished). Without it the call would wait for its answer until
    /// the process exits.
    pub(super) async fn close_asking(
        &mut self,
        run: &reins_agent::run::Run,
        before: Vec<String>,
    ) -> Result<(), TerminalError> {
        let still = run.state().asking();
        let results: Vec<ToolResult> = before
            .iter()
            .filter(|id| !still.contains(id))
            .filter_map(|id| {
                run.messages()
                    .iter()
                    .rev()
                    .flat_map(reins_message::Msg::tool_results_iter)
                    .find(|r| &r.id == id)
                    .cloned()
            })
            .collect();
        if results.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = results.iter().map(|r| r.id.as_str()).collect();
        let name = format!("close-asking {}", ids.join(","));
        let (agent, session) = (self.agent().clone(), self.session.clone());
        self.journal(&name, OnCancel::Retry, move || {
            let (agent, session, results) = (agent.clone(), session.clone(), results.clone());
            async move {
                for r in &results {
                    if let Some(call) = live_take(&session, &r.id) {
                        call.cancel.cancel();
                    }
                    let store = agent.store();
                    let entry = store.ledger_entry(&session, &r.id).await.map_err(retry)?;
                    if entry.is_some_and(|e| e.state != reins_memory::LedgerState::Finished) {
                        store.finish(&session, &r.id, r).await.map_err(retry)?;
                    }
                }
                Ok(Json(()))
            }
        })
        .await
    }

    /// Hands `answer` to the live call of `exec` and waits for its result or its next
    /// question (one journaled step). A call not live in this process is `Unknown`.
    pub(super) async fn act_answer(
        &mut self,
        iteration: u32,
        exec: Execution,
        answer: QuestionAnswer,
    ) -> Result<ExecOutcome, TerminalError> {
        let id = exec.tool_use.id.clone();
        let (agent, session, token, live) = (
            self.agent().clone(),
            self.session.clone(),
            self.token.clone(),
            self.live(),
        );
        let step: ToolStep = self
            .journal(&format!("tool-answer {id}"), OnCancel::Retry, move || {
                let (agent, session, exec, answer, token, live) = (
                    agent.clone(),
                    session.clone(),
                    exec.clone(),
                    answer.clone(),
                    token.clone(),
                    live.clone(),
                );
                async move {
                    answer_step(agent, session, iteration, exec, answer, token, live).await
                }
            })
            .await?;
        Ok(match step {
            ToolStep::Done(r) => ExecOutcome::Done(r),
            ToolStep::Suspended { reason } => ExecOutcome::Suspended { id, reason },
            ToolStep::Asked { requirement } => ExecOutcome::Asking { id, requirement },
        })
    }
}

async fn answer_step(
    agent: reins_agent::Agent,
    session: String,
    iteration: u32,
    exec: Execution,
    answer: QuestionAnswer,
    token: CancellationToken,
    live: super::Live,
) -> HandlerResult<Json<ToolStep>> {
    let original = &exec.tool_use;
    let taken = live_take(&session, &original.id);
    let Some(call) = taken else {
        let r = ToolResult::unknown(&original.id, &original.name, ASKED_ELSEWHERE);
        agent
            .store()
            .finish(&session, &original.id, &r)
            .await
            .map_err(retry)?;
        return Ok(Json(ToolStep::Done(r)));
    };
    let _ = call.reply.send(answer);
    let (id, name) = (original.id.clone(), original.name.clone());
    let task = call.task;
    let fut: CallFuture = Box::pin(async move {
        task.await.unwrap_or_else(|e| {
            ToolCallOutcome::Done(ToolResult::unknown(
                id,
                name,
                format!("the call's task failed while it ran: {e}"),
            ))
        })
    });
    let sender = live.relay.open(&live.session, &live.run_id);
    let chunks = Chunks {
        agent: &agent,
        iteration,
        witness: &sender,
        rx: call.chunks,
    };
    let waited = wait(
        &session,
        &original.id,
        fut,
        call.questions,
        chunks,
        call.cancel,
        &token,
    )
    .await;
    match waited {
        Waited::Done(outcome) => {
            super::tools::finish_call(&agent, &session, &exec, outcome, sender).await
        }
        Waited::Asked(question) => {
            sender.close().await;
            let requirement = reins_agent::nested::question_requirement(
                &agent,
                original,
                &question,
                chrono::Utc::now(),
            );
            Ok(Json(ToolStep::Asked { requirement }))
        }
    }
}

fn live_take(session: &str, id: &str) -> Option<LiveCall> {
    let call = live().remove(&(session.to_owned(), id.to_owned()));
    if let Some(c) = &call {
        c.watch.cancel();
    }
    call
}

/// Ends the live call `id` of `session` once its ledger entry is finished by anyone
/// (a new message closed it, or its answer reached a turn in another process, which
/// recorded `Unknown`), instead of leaving it waiting for an answer that cannot come.
/// Stops when the call is taken for its answer (`watch`).
fn watch_settled(
    store: std::sync::Arc<dyn reins_memory::MemoryStore>,
    session: String,
    id: String,
    watch: CancellationToken,
) {
    tokio::spawn(async move {
        let Ok(mut feed) = store.changes().await else {
            return;
        };
        // The first look comes right after subscribing: a change made before the feed
        // existed sends no notice.
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
                    _ => {}
                }
            }
            let finished = matches!(
                store.ledger_entry(&session, &id).await,
                Ok(Some(e)) if e.state == reins_memory::LedgerState::Finished
            );
            if finished {
                if let Some(call) = live_take(&session, &id) {
                    tracing::debug!(session = %session, tool_use_id = %id, "a call's question was settled: the call is stopped");
                    call.cancel.cancel();
                }
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_keep_the_batch_order() {
        let done = |id: &str| ExecOutcome::Done(ToolResult::success(id, "t", "ok"));
        let mut outcomes = vec![
            ExecOutcome::Asking {
                id: "b".to_owned(),
                requirement: reins_agent::Requirement {
                    id: "b~ask-1".to_owned(),
                    tool_use: reins_message::ToolUse::new("b", "t", serde_json::json!({})),
                    kind: reins_agent::RequirementKind::Confirmation,
                    reason: String::new(),
                    created_at: chrono::Utc::now(),
                    expires_at: None,
                    path: Vec::new(),
                    agent: None,
                    quorum: None,
                },
            },
            done("c"),
            done("a"),
        ];
        in_order(
            &mut outcomes,
            &["a".to_owned(), "b".to_owned(), "c".to_owned()],
        );
        let ids: Vec<&str> = outcomes
            .iter()
            .map(|o| match o {
                ExecOutcome::Done(r) => r.id.as_str(),
                ExecOutcome::Asking { id, .. } => id.as_str(),
                _ => "",
            })
            .collect();
        assert_eq!(ids, ["a", "b", "c"]);
    }
}
