//! Acting, written once: the `PreActing` hooks on a batch ([`prepare`]), the calls
//! themselves through the tool-call ledger ([`execute`]: claim, the tool — its partial
//! output, its questions —, finish, the `PostActing` hooks), and answers handed to
//! calls waiting on a question ([`answer`]).

use std::sync::Arc;

use chrono::Utc;
use reins_hook::HookEventKind;
use reins_message::{ToolResult, ToolUse};
use reins_tool::{QuestionAnswer, ToolCallOutcome};
use tracing::Instrument;

use super::ask::{self as live, Running, Waited};
use super::{Claimed, Done, Ports, ToolCall, hooks};
use crate::error::Result;
use crate::output::RunEvent;
use crate::run::{Batch, ExecOutcome, Execution, Prepared};

/// The `PreActing` hooks on each call of `batch`: the call to run as they left it
/// (its id and name stay the model's), or the result of a call they rejected.
///
/// # Errors
/// A hook's error.
pub(super) async fn prepare(ports: &Ports<'_>, batch: Batch) -> Result<Vec<Prepared>> {
    let mut out = Vec::with_capacity(batch.calls.len());
    for e in &batch.calls {
        let to_run = e.effective_use();
        if ports.cancel.is_cancelled() {
            out.push(Prepared::Run((*to_run).clone()));
            continue;
        }
        let (to_run, verdict) =
            hooks::pre_acting(ports.agent, ports.session, batch.iteration, &to_run).await?;
        out.push(match &verdict.rejection {
            Some(note) => Prepared::Rejected(hooks::rejected_by_hook(&e.tool_use, note)),
            None => Prepared::Run(to_run),
        });
    }
    Ok(out)
}

/// What one call came to: its outcome, whether a `PostActing` hook asked to stop,
/// and whether the outcome is a result exactly as the ledger records it.
pub(super) struct Acted {
    pub(super) outcome: ExecOutcome,
    pub(super) stop: bool,
    pub(super) recorded: bool,
    /// The call started in this step (announced as started, so announced as finished).
    pub(super) ran: bool,
}

impl Acted {
    /// A result the step did not run for (the ledger's, a reconcile's, a call stopped
    /// before it started).
    pub(super) fn done(result: ToolResult, recorded: bool) -> Self {
        Self {
            outcome: ExecOutcome::Done(result),
            stop: false,
            recorded,
            ran: false,
        }
    }
}

/// Runs the calls of `batch` at the same time, each through the ledger and the
/// `PostActing` hooks, announcing each one's result as soon as it has one. The first
/// error of a call is the batch's (the others' results are in the ledger).
///
/// # Errors
/// The store's, [`AgentError::ToolInFlight`](crate::AgentError::ToolInFlight), a
/// hook's.
pub(super) async fn execute(ports: &Ports<'_>, batch: Batch) -> Result<Done> {
    let iteration = batch.iteration;
    let calls = batch
        .calls
        .iter()
        .map(|e| in_span(ports, iteration, e, None));
    let ran = if batch.calls.len() == 1 {
        let mut one = Vec::with_capacity(1);
        for c in calls {
            one.push(c.await);
        }
        one
    } else {
        futures::future::join_all(calls).await
    };
    collect(ran)
}

/// Hands each call of `batch` the answer to its question, one after another, and
/// waits for its result (or its next question). A call not live in this process is
/// `Unknown`.
///
/// # Errors
/// As [`execute`].
pub(super) async fn answer(ports: &Ports<'_>, batch: Batch) -> Result<Done> {
    let mut ran = Vec::with_capacity(batch.calls.len());
    for e in &batch.calls {
        let answer = e.answer.clone().unwrap_or(QuestionAnswer::Cancel);
        ran.push(in_span(ports, batch.iteration, e, Some(answer)).await);
    }
    collect(ran)
}

/// The outcomes of a batch's calls, as one [`Done::Acted`].
pub(super) fn collect(ran: Vec<Result<Acted>>) -> Result<Done> {
    let mut outcomes = Vec::with_capacity(ran.len());
    let (mut stop, mut recorded) = (false, true);
    for a in ran {
        let a = a?;
        stop |= a.stop;
        recorded &= a.recorded;
        outcomes.push(a.outcome);
    }
    Ok(Done::Acted {
        outcomes,
        stop,
        recorded,
        now: Utc::now(),
    })
}

/// One call (or an answer to its question) in its `execute_tool` span, announcing its
/// result.
async fn in_span(
    ports: &Ports<'_>,
    iteration: u32,
    exec: &Execution,
    answer: Option<QuestionAnswer>,
) -> Result<Acted> {
    let tool = crate::telemetry::ToolSpan::start(&exec.tool_use.name, &exec.tool_use.id);
    let out = match answer {
        Some(answer) => {
            answer_one(ports, iteration, exec, answer)
                .instrument(tool.span().clone())
                .await
        }
        None => {
            run_one(ports, iteration, exec)
                .instrument(tool.span().clone())
                .await
        }
    };
    tool.end(
        out.as_ref()
            .map(|a| a.outcome.label())
            .map_err(crate::telemetry::error_type),
    );
    if let Ok(Acted {
        outcome: ExecOutcome::Done(r),
        ran: true,
        ..
    }) = &out
    {
        ports
            .witness
            .emit(|| RunEvent::ToolExecutionFinished { result: r.clone() });
    }
    out
}

/// One call through the ledger: a call the ledger finished gives its recorded result;
/// a call an earlier run cut off is reconciled; otherwise the tool runs.
async fn run_one(ports: &Ports<'_>, iteration: u32, exec: &Execution) -> Result<Acted> {
    let Ports {
        agent,
        session,
        cancel,
        witness,
        takeover,
        ..
    } = *ports;
    let original = &exec.tool_use;
    // Checkpoint: before each tool.
    if cancel.is_cancelled() {
        let r = ToolResult::cancelled(
            &original.id,
            &original.name,
            crate::run::NOT_RUN_INTERRUPTED,
        );
        return Ok(Acted::done(r, false));
    }
    let to_run = exec.effective_use();
    let call = ToolCall {
        original,
        to_run: &to_run,
    };
    match super::claim(agent, session, iteration, call, takeover, cancel, witness).await? {
        Claimed::Run => {}
        Claimed::Recorded(r) => return Ok(Acted::done(r, true)),
        Claimed::Settled(r) => return Ok(Acted::done(r, false)),
    }
    witness.emit(|| RunEvent::ToolExecutionStarted {
        id: original.id.clone(),
        name: original.name.clone(),
    });
    // The call gets a token of its own (the run's interrupt is forwarded while the
    // step waits for it), so that it can outlive the step when it asks a question.
    let (questions_tx, questions) = tokio::sync::mpsc::unbounded_channel();
    let (chunks_tx, chunks) = tokio::sync::mpsc::unbounded_channel();
    let call_cancel = tokio_util::sync::CancellationToken::new();
    let ctx = super::context(session, call, call_cancel.clone())
        .with_question_sender(questions_tx)
        .with_chunk_sender(chunks_tx);
    let opts = super::options(agent);
    let toolkit = agent.toolkit().clone();
    let call_use = Arc::clone(&to_run);
    let running = Running {
        call: Box::pin(async move { toolkit.execute(&call_use, ctx, &opts).await }),
        questions,
        chunks,
        cancel: call_cancel,
    };
    match live::wait(ports, iteration, &to_run, running).await {
        Waited::Done(outcome) => finish(ports, iteration, original, to_run, outcome).await,
        Waited::Asked(requirement) => Ok(asking(original, requirement)),
    }
}

/// Hands the answer to a call waiting on its question, and waits for it again.
async fn answer_one(
    ports: &Ports<'_>,
    iteration: u32,
    exec: &Execution,
    answer: QuestionAnswer,
) -> Result<Acted> {
    let to_run = exec.effective_use();
    let original = &exec.tool_use;
    ports.witness.emit(|| RunEvent::ToolExecutionStarted {
        id: original.id.clone(),
        name: original.name.clone(),
    });
    match live::resume(ports, iteration, &to_run, answer).await {
        Err(unknown) => {
            ports
                .agent
                .store()
                .finish(ports.session, &original.id, &unknown)
                .await?;
            Ok(Acted {
                ran: true,
                ..Acted::done(unknown, false)
            })
        }
        Ok(Waited::Done(outcome)) => finish(ports, iteration, original, to_run, outcome).await,
        Ok(Waited::Asked(requirement)) => Ok(asking(original, requirement)),
    }
}

fn asking(original: &ToolUse, requirement: crate::requirement::Requirement) -> Acted {
    Acted {
        outcome: ExecOutcome::Asking {
            id: original.id.clone(),
            requirement,
        },
        stop: false,
        recorded: false,
        ran: true,
    }
}

/// The end of a call that ran: its result recorded in the ledger, then the
/// `PostActing` hooks (not after an interrupt).
async fn finish(
    ports: &Ports<'_>,
    iteration: u32,
    original: &ToolUse,
    to_run: Arc<ToolUse>,
    outcome: ToolCallOutcome,
) -> Result<Acted> {
    let Ports { agent, session, .. } = *ports;
    let call = ToolCall {
        original,
        to_run: &to_run,
    };
    let result = match super::finish(agent, session, call, outcome).await? {
        ExecOutcome::Done(r) => r,
        other => {
            return Ok(Acted {
                outcome: other,
                stop: false,
                recorded: false,
                ran: true,
            });
        }
    };
    post_acting(ports, iteration, Arc::unwrap_or_clone(to_run), result).await
}

/// The `PostActing` hooks on a finished call, when one listens and the run was not
/// interrupted: they may edit the result or ask to stop. The result is the ledger's
/// record while they leave it as it is.
pub(super) async fn post_acting(
    ports: &Ports<'_>,
    iteration: u32,
    to_run: ToolUse,
    result: ToolResult,
) -> Result<Acted> {
    if ports.cancel.is_cancelled() || !hooks::wants(ports.agent, HookEventKind::PostActing) {
        return Ok(Acted {
            ran: true,
            ..Acted::done(result, true)
        });
    }
    let recorded = result.clone();
    let (result, verdict) =
        hooks::post_acting(ports.agent, ports.session, iteration, to_run, result).await?;
    let unchanged = result == recorded && !verdict.stop;
    Ok(Acted {
        outcome: ExecOutcome::Done(result),
        stop: verdict.stop,
        recorded: unchanged,
        ran: true,
    })
}
