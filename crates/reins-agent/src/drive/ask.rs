//! Calls that ask a person a question mid-call ([`ToolContext::ask`], e.g. an MCP
//! server's elicitation) and stay in flight while the run pauses.
//!
//! While the run waits for a call, the call runs inline. When it asks, the call's
//! future moves to a task of its own and is kept in the agent's [`LiveCalls`] with
//! the channel its answer goes to; the run pauses with a user-input requirement (the
//! question's schema as its fields). `resolve` with an input (or a rejection, which
//! declines) dispatches the call again: the answer is handed to the live call and the
//! run waits for its result (or its next question). A call that is not live in this
//! process any more — the process restarted, or the decision reached another worker —
//! cannot be answered: its outcome is `Unknown` (it was running, it may have acted).
//! The process that holds it watches the store meanwhile: once the call's ledger entry
//! is finished elsewhere, it cancels the call (the server hears `cancelled`).
//!
//! [`ToolContext::ask`]: reins_tool::ToolContext::ask

use std::future::Future;
use std::pin::Pin;

use chrono::Utc;
use reins_message::{ToolResult, ToolUse};
use reins_tool::{PendingQuestion, QuestionAnswer, ToolCallOutcome};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use super::Driver;
use crate::error::Result;
use crate::live::LiveCall;
use crate::output::RunEvent;
use crate::requirement::Requirement;
use crate::run::{ExecOutcome, Execution};

/// The text a call gets when its question was answered where the call is not live.
pub const ASKED_ELSEWHERE: &str = "outcome unknown: the call was waiting for an answer to its question \
     in a process that stopped or is not this one; it may or may not have taken effect";

/// A tool call's future, owned.
pub(crate) type CallFuture = Pin<Box<dyn Future<Output = ToolCallOutcome> + Send>>;

/// How waiting for a call ended.
#[allow(
    clippy::large_enum_variant,
    reason = "one value per asking tool call, moved once: boxing would only add an allocation"
)]
pub(crate) enum Waited {
    /// It finished.
    Done(ToolCallOutcome),
    /// It asked a question (now a requirement) and stays in flight.
    Asked(Requirement),
}

impl Driver {
    /// Waits for a call, forwarding the run's interrupt to it, until it finishes or
    /// asks a question.
    pub(super) async fn await_call(
        &self,
        mut call: CallFuture,
        mut questions: UnboundedReceiver<PendingQuestion>,
        cancel: CancellationToken,
        tool_use: &ToolUse,
    ) -> Waited {
        loop {
            tokio::select! {
                biased;
                out = &mut call => return Waited::Done(out),
                () = self.cancel.cancelled(), if !cancel.is_cancelled() => cancel.cancel(),
                Some(q) = questions.recv() => {
                    if self.cancel.is_cancelled() {
                        let _ = q.reply.send(QuestionAnswer::Cancel);
                        continue;
                    }
                    let requirement = self.question_requirement(tool_use, &q);
                    let task = tokio::spawn(call);
                    let watch = CancellationToken::new();
                    self.agent.runtime.live_calls.insert(
                        &self.session,
                        &tool_use.id,
                        LiveCall { task, questions, reply: q.reply, cancel, watch: watch.clone() },
                    );
                    self.watch_elsewhere(tool_use.id.clone(), watch);
                    return Waited::Asked(requirement);
                }
            }
        }
    }

    /// Cancels the live call `id` once its ledger entry is finished by someone else
    /// (the answer reached another worker, which recorded `Unknown`), instead of
    /// leaving it waiting for an answer that cannot come.
    fn watch_elsewhere(&self, id: String, watch: CancellationToken) {
        let store = self.agent.runtime.store.clone();
        let live_calls = self.agent.runtime.live_calls.downgrade();
        let session = self.session.clone();
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
                    if let Some(call) = live_calls.take(&session, &id) {
                        tracing::debug!(session = %session, tool_use_id = %id, "a call's question was settled elsewhere: cancelled");
                        call.cancel.cancel();
                    }
                    return;
                }
            }
        });
    }

    fn question_requirement(&self, tool_use: &ToolUse, q: &PendingQuestion) -> Requirement {
        crate::nested::question_requirement(&self.agent, tool_use, &q.question, Utc::now())
    }

    /// Hands the answer to a call waiting for it, and waits for the call again.
    pub(super) async fn continue_call(
        &self,
        exec: &Execution,
        answer: QuestionAnswer,
        iteration: u32,
    ) -> Result<(ExecOutcome, bool)> {
        let to_run = exec.effective_use();
        let Some(live) = self
            .agent
            .runtime
            .live_calls
            .take(&self.session, &exec.tool_use.id)
        else {
            let r = ToolResult::unknown(&exec.tool_use.id, &exec.tool_use.name, ASKED_ELSEWHERE);
            self.agent
                .runtime
                .store
                .finish(&self.session, &exec.tool_use.id, &r)
                .await?;
            return Ok((ExecOutcome::Done(r), false));
        };
        let (id, name) = (exec.tool_use.id.clone(), exec.tool_use.name.clone());
        self.emit(|| RunEvent::ToolExecutionStarted {
            id: id.clone(),
            name: name.clone(),
        });
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
        match self
            .await_call(call, live.questions, live.cancel, &to_run)
            .await
        {
            Waited::Done(outcome) => {
                self.finish_call(&exec.tool_use, to_run, outcome, iteration)
                    .await
            }
            Waited::Asked(requirement) => Ok((
                ExecOutcome::Asking {
                    id: exec.tool_use.id.clone(),
                    requirement,
                },
                false,
            )),
        }
    }
}
