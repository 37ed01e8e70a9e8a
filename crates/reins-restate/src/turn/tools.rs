//! The tool side of a Restate turn: a batch of calls, each shown to the `PreActing`
//! hooks (journaled), then behind a journaled started marker (`tool-start <id>`), run
//! one journaled step each or together in one (`tools <id>,..`), each through the
//! reins tool-call ledger as the local driver runs it (`reins_agent::effects`: claim,
//! run, finish), then shown to the `PostActing` hooks (journaled). A call a crash
//! interrupted is put to its tool's reconcile (or runs again once when its tool is
//! idempotent) and never silently runs twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use reins_agent::effects::{self, Claimed, Takeover, ToolCall};
use reins_agent::run::{Event, ExecOutcome, Execution, Flush, Run};
use reins_agent::{Agent, RunEvent};
use reins_message::{ToolResult, ToolUse};
use reins_tool::ToolCallOutcome;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use tokio_util::sync::CancellationToken;

use super::{Live, OnCancel, ToolStep, TurnDriver, effect_error};

/// A call cleared to run: the model's, and the one to run (after the hooks).
#[derive(Clone)]
pub(super) struct Ready {
    original: Arc<ToolUse>,
    to_run: ToolUse,
}

impl TurnDriver<'_, '_> {
    /// Runs a batch of tool calls: the `PreActing` hooks first (a call they reject
    /// does not run), then each call behind a started marker — at the same time in one
    /// journaled step when the agent runs batches in parallel (the default) and the
    /// batch has several calls, otherwise one after another, one step each — then the
    /// `PostActing` hooks on each result.
    pub(super) async fn act(
        &mut self,
        run: &mut Run,
        batch: Vec<Execution>,
    ) -> Result<(), TerminalError> {
        let iteration = run.state().iteration();
        // Sub-agent calls and answered questions are served on their own (see
        // `subagent` and `ask`), before the others; the outcomes keep the batch order.
        let order: Vec<String> = batch.iter().map(|e| e.tool_use.id.clone()).collect();
        let (nested, batch) = self.split_nested(batch);
        let had_nested = !nested.is_empty();
        let mut rejected_any = false;
        if !nested.is_empty() {
            // A child session finds its sub-agent through the parent's stored call.
            self.commit(run, Flush::Recorded).await?;
        }
        let mut outcomes = self.act_nested(iteration, nested).await?;
        let mut ready = Vec::with_capacity(batch.len());
        for exec in batch {
            match self.prepare(iteration, exec).await? {
                Ok(r) => ready.push(r),
                Err(rejected) => {
                    rejected_any = true;
                    outcomes.push(ExecOutcome::Done(rejected));
                }
            }
        }
        let parallel = ready.len() > 1
            && self.agent().tool_concurrency() == reins_tool::Concurrency::Parallel
            && !self.interrupted();
        // The model's calls are stored, and the batch marked as started, in one
        // journaled step.
        let fresh = self.mark_started(run, ready.is_empty()).await?;
        let (ran, ended) = if parallel {
            self.act_together(iteration, ready, fresh).await?
        } else {
            self.act_in_turn(iteration, ready, fresh).await?
        };
        let mut stop = false;
        for (tool_use, outcome) in ran {
            outcomes.push(match outcome {
                ExecOutcome::Done(r) => {
                    let (r, s) = self.post_acting(iteration, tool_use, r).await?;
                    stop |= s;
                    ExecOutcome::Done(r)
                }
                o => o,
            });
        }
        // Every result is in a journaled tool step and in the ledger: a replay gets
        // them from the journal, and a turn that never comes back settles them from
        // the ledger (as the local driver does when it defers them), so they may wait
        // for the commit that stores the next model answer. Sub-agent
        // calls, questions, calls a hook rejected or whose result a hook saw (neither
        // is the ledger's record as it is) and a hook's stop are stored at once.
        let deferrable = !had_nested
            && !rejected_any
            && !self.wants(reins_hook::HookEventKind::PostActing)
            && !stop
            && !outcomes.is_empty()
            && outcomes.iter().all(|o| matches!(o, ExecOutcome::Done(_)));
        super::ask::in_order(&mut outcomes, &order);
        // The time the last tool step ended (journaled with it); a batch that ran no
        // tool step reads the clock.
        let now = match ended {
            Some(now) => now,
            None => self.clock().await?,
        };
        let _ = run.apply(Event::Acted {
            outcomes,
            stop,
            now,
        });
        if self.interrupted() {
            return Ok(());
        }
        if deferrable {
            self.carried = true;
            return Ok(());
        }
        self.commit(run, Flush::All).await
    }

    /// The `PreActing` hooks on one call: the call to run, or the result of a call
    /// they rejected.
    async fn prepare(
        &mut self,
        iteration: u32,
        exec: Execution,
    ) -> Result<Result<Ready, ToolResult>, TerminalError> {
        let to_run = exec.effective_use();
        if self.interrupted() {
            return Ok(Ok(Ready {
                original: exec.tool_use,
                to_run: (*to_run).clone(),
            }));
        }
        let to_run = match self.pre_acting(iteration, (*to_run).clone()).await? {
            None => (*to_run).clone(),
            Some((_, verdict)) if verdict.rejection.is_some() => {
                let note = verdict.rejection.unwrap_or_default();
                return Ok(Err(effects::hooks::rejected_by_hook(&exec.tool_use, &note)));
            }
            Some((edited, _)) => edited,
        };
        Ok(Ok(Ready {
            original: exec.tool_use,
            to_run,
        }))
    }

    /// The started marker of the batch, folded into the commit that stores the
    /// model's calls (`commit`; a bare `tool-start` step when there is nothing to
    /// store): its closure runs only when the journal does not hold it yet. `false`
    /// (replayed, not run) means an earlier attempt of this invocation got past it and
    /// may have begun the batch's calls before their results were journaled: each
    /// call then asks the ledger (one never claimed runs; one claimed is reconciled).
    /// With `none_to_run`, only the commit.
    async fn mark_started(
        &mut self,
        run: &mut Run,
        none_to_run: bool,
    ) -> Result<Arc<AtomicBool>, TerminalError> {
        let fresh = Arc::new(AtomicBool::new(false));
        if none_to_run {
            self.commit(run, Flush::Recorded).await?;
            return Ok(fresh);
        }
        let flag = Arc::clone(&fresh);
        match run.take_commit(Flush::Recorded) {
            Some(mut commit) => {
                commit.expected_version = self.version;
                let (agent, session) = (self.agent().clone(), self.session.clone());
                self.version = self
                    .journal("commit", OnCancel::Retry, move || {
                        // Set when the step runs (not when it is replayed).
                        let flag = Arc::clone(&flag);
                        let store =
                            super::commit_once(agent.clone(), session.clone(), commit.clone());
                        async move {
                            flag.store(true, Ordering::SeqCst);
                            store.await
                        }
                    })
                    .await?;
            }
            None => {
                self.journal("tool-start", OnCancel::Retry, move || {
                    let flag = Arc::clone(&flag);
                    async move {
                        flag.store(true, Ordering::SeqCst);
                        Ok(Json(()))
                    }
                })
                .await?;
            }
        }
        Ok(fresh)
    }

    /// The calls one after another, a step each; with the time the last step ended.
    async fn act_in_turn(
        &mut self,
        iteration: u32,
        batch: Vec<Ready>,
        fresh: Arc<AtomicBool>,
    ) -> Result<Ran, TerminalError> {
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut ended = None;
        for call in batch {
            let id = call.original.id.clone();
            if self.interrupted() {
                let r = ToolResult::cancelled(
                    &id,
                    &call.original.name,
                    reins_agent::run::NOT_RUN_INTERRUPTED,
                );
                outcomes.push((call.to_run, ExecOutcome::Done(r)));
                continue;
            }
            let fresh = Arc::clone(&fresh);
            let (agent, session, token, live) = (
                self.agent().clone(),
                self.session.clone(),
                self.token.clone(),
                self.live(),
            );
            let to_run = call.to_run.clone();
            let step: Stamped<ToolStep> = self
                .journal(&format!("tool {id}"), OnCancel::Retry, move || {
                    let step = tool_step(
                        agent.clone(),
                        session.clone(),
                        iteration,
                        call.clone(),
                        fresh.load(Ordering::SeqCst),
                        token.clone(),
                        live.clone(),
                    );
                    async move { step.await.map(|Json(value)| Json(Stamped::now(value))) }
                })
                .await?;
            ended = Some(step.now);
            outcomes.push((to_run, step.value.into_outcome(id)));
        }
        Ok((outcomes, ended))
    }

    /// The calls at the same time: one journaled step that runs them all (each
    /// through the ledger, as alone), behind the batch's marker. A crash in the middle
    /// leaves the marker journaled and no result: on replay each call asks the
    /// ledger, as a single call does — a finished one keeps its result, one that
    /// never started runs, one cut off is reconciled (an idempotent one runs again).
    async fn act_together(
        &mut self,
        iteration: u32,
        batch: Vec<Ready>,
        fresh: Arc<AtomicBool>,
    ) -> Result<Ran, TerminalError> {
        let calls: Vec<(Ready, Arc<AtomicBool>)> = batch
            .into_iter()
            .map(|call| (call, Arc::clone(&fresh)))
            .collect();
        let ids: Vec<String> = calls.iter().map(|(c, _)| c.original.id.clone()).collect();
        let uses: Vec<ToolUse> = calls.iter().map(|(c, _)| c.to_run.clone()).collect();
        let (agent, session, token, live) = (
            self.agent().clone(),
            self.session.clone(),
            self.token.clone(),
            self.live(),
        );
        let steps: Stamped<Vec<ToolStep>> = self
            .journal(
                &format!("tools {}", ids.join(",")),
                OnCancel::Retry,
                move || {
                    let runs: Vec<_> = calls
                        .iter()
                        .map(|(call, fresh)| {
                            tool_step(
                                agent.clone(),
                                session.clone(),
                                iteration,
                                call.clone(),
                                fresh.load(Ordering::SeqCst),
                                token.clone(),
                                live.clone(),
                            )
                        })
                        .collect();
                    async move {
                        let mut steps = Vec::with_capacity(runs.len());
                        for r in futures::future::join_all(runs).await {
                            let Json(step) = r?;
                            steps.push(step);
                        }
                        Ok(Json(Stamped::now(steps)))
                    }
                },
            )
            .await?;
        let ended = Some(steps.now);
        let ran = steps
            .value
            .into_iter()
            .zip(ids)
            .zip(uses)
            .map(|((step, id), to_run)| (to_run, step.into_outcome(id)))
            .collect();
        Ok((ran, ended))
    }
}

/// The calls that ran (the call that ran, its outcome) and when the last step ended.
type Ran = (Vec<(ToolUse, ExecOutcome)>, Option<DateTime<Utc>>);

/// A tool step's value with the time it ended: the batch's `Acted` time, journaled
/// with the step instead of in a `clock` step of its own.
#[derive(Serialize, Deserialize)]
struct Stamped<T> {
    value: T,
    now: DateTime<Utc>,
}

impl<T> Stamped<T> {
    fn now(value: T) -> Self {
        Self {
            value,
            now: Utc::now(),
        }
    }
}

impl ToolStep {
    fn into_outcome(self, id: String) -> ExecOutcome {
        match self {
            Self::Done(r) => ExecOutcome::Done(r),
            Self::Suspended { reason } => ExecOutcome::Suspended { id, reason },
            Self::Asked { requirement } => ExecOutcome::Asking { id, requirement },
        }
    }
}

/// One tool call through the ledger, as the local driver runs it
/// (`reins_agent::effects::claim`, the tool, `effects::finish`): a finished call returns
/// its recorded result; a call an earlier attempt of this step started (`fresh` is
/// false: the journal has its marker, not its result) is taken over at once and put to
/// its tool's reconcile, unless the tool is idempotent (then it runs again once its
/// lease ends).
async fn tool_step(
    agent: Agent,
    session: String,
    iteration: u32,
    call: Ready,
    fresh: bool,
    token: CancellationToken,
    live: Live,
) -> HandlerResult<Json<ToolStep>> {
    let sender = live.relay.open(&live.session, &live.run_id);
    // The call's `execute_tool` span, as the local driver's (reins_agent::telemetry).
    let span = reins_agent::telemetry::ToolSpan::start(&call.original.name, &call.original.id);
    let out = tracing::Instrument::instrument(
        run_call(&agent, &session, iteration, &call, fresh, &token, &sender),
        span.span().clone(),
    )
    .await;
    match &out {
        Ok(ToolStep::Done(r)) => {
            span.record(reins_agent::telemetry::outcome_label(&r.outcome), None)
        }
        Ok(ToolStep::Suspended { .. }) => span.record("suspended", None),
        Ok(ToolStep::Asked { .. }) => span.record("asking", None),
        Err(_) => span.record("failed", None),
    }
    sender.close().await;
    out.map(Json)
}

async fn run_call(
    agent: &Agent,
    session: &str,
    iteration: u32,
    call: &Ready,
    fresh: bool,
    token: &CancellationToken,
    sender: &crate::live::LiveSender,
) -> Result<ToolStep, HandlerError> {
    let tool_call = ToolCall {
        original: &call.original,
        to_run: &call.to_run,
    };
    let takeover = if fresh {
        Takeover::AfterLease
    } else {
        Takeover::Now
    };
    let claimed = effects::claim(
        agent, session, iteration, tool_call, takeover, token, sender,
    )
    .await
    .map_err(effect_error)?;
    match claimed {
        Claimed::Run => {}
        Claimed::Recorded(r) | Claimed::Settled(r) => return Ok(ToolStep::Done(r)),
    }
    sender.send(&RunEvent::ToolExecutionStarted {
        id: call.original.id.clone(),
        name: call.original.name.clone(),
    });
    // The call gets a token of its own: it outlives this step when it asks a question.
    let (questions_tx, questions) = tokio::sync::mpsc::unbounded_channel();
    let (chunks_tx, chunks) = tokio::sync::mpsc::unbounded_channel();
    let call_cancel = CancellationToken::new();
    let ctx = effects::context(session, tool_call, call_cancel.clone())
        .with_question_sender(questions_tx)
        .with_chunk_sender(chunks_tx);
    let (toolkit, call_use, opts) = (
        agent.toolkit().clone(),
        call.to_run.clone(),
        effects::options(agent),
    );
    let fut: super::ask::CallFuture =
        Box::pin(async move { toolkit.execute(&call_use, ctx, &opts).await });
    let chunks = super::ask::Chunks {
        agent,
        iteration,
        witness: sender,
        rx: chunks,
    };
    let waited = super::ask::wait(
        session,
        &call.original.id,
        fut,
        questions,
        chunks,
        call_cancel,
        token,
    )
    .await;
    let outcome = match waited {
        super::ask::Waited::Done(outcome) => outcome,
        super::ask::Waited::Asked(question) => {
            let requirement = reins_agent::nested::question_requirement(
                agent,
                &call.original,
                &question,
                chrono::Utc::now(),
            );
            return Ok(ToolStep::Asked { requirement });
        }
    };
    finished(agent, session, tool_call, outcome, sender).await
}

/// The end of a call that ran (at once, or after answers to its questions): its
/// result recorded in the ledger (`effects::finish`).
pub(super) async fn finish_call(
    agent: &Agent,
    session: &str,
    exec: &Execution,
    outcome: ToolCallOutcome,
    sender: crate::live::LiveSender,
) -> HandlerResult<Json<ToolStep>> {
    let to_run = exec.effective_use();
    let call = ToolCall {
        original: &exec.tool_use,
        to_run: &to_run,
    };
    let step = finished(agent, session, call, outcome, &sender).await;
    sender.close().await;
    step.map(Json)
}

async fn finished(
    agent: &Agent,
    session: &str,
    call: ToolCall<'_>,
    outcome: ToolCallOutcome,
    sender: &crate::live::LiveSender,
) -> Result<ToolStep, HandlerError> {
    match effects::finish(agent, session, call, outcome)
        .await
        .map_err(effect_error)?
    {
        ExecOutcome::Done(result) => {
            sender.send(&RunEvent::ToolExecutionFinished {
                result: result.clone(),
            });
            Ok(ToolStep::Done(result))
        }
        ExecOutcome::Suspended { reason, .. } => Ok(ToolStep::Suspended { reason }),
        _ => Err(effect_error(reins_agent::AgentError::Internal(
            "a tool call ended neither done nor suspended".to_owned(),
        ))),
    }
}
