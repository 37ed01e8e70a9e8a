//! Acting: a batch of tool calls run through hooks, the ledger and the toolkit
//! (in parallel by default), their partial output forwarded, their results fed back to
//! the run. Sub-agent calls go to [`crate::subagent`], calls that ask a question to
//! `ask`.

use std::sync::Arc;

use chrono::Utc;
use reins_hook::HookEventKind;
use reins_message::ToolResult;
use reins_tool::{Concurrency, ToolCallOutcome, ToolContext};
use tokio::sync::mpsc::UnboundedSender;
use tracing::Instrument;

use super::{Driver, ask};
use crate::effects::{self, Claimed, Takeover, ToolCall, hooks};
use crate::error::Result;
use crate::output::{RunEvent, RunStatus};
use crate::run::{Event, ExecOutcome, Execution};
use crate::state::SessionCore;

impl Driver {
    pub(super) async fn act(
        &self,
        core: &mut SessionCore,
        batch: Vec<Execution>,
    ) -> Result<Option<RunStatus>> {
        let iteration = core.run.state().iteration();
        // Answers routed to paused sub-agents and answers to questions of calls in
        // flight travel with their executions.
        let route = |e: &Execution| (e.routed.clone(), e.answer.clone());
        let (chunk_tx, mut chunk_rx) = tokio::sync::mpsc::unbounded_channel();
        let exec_all = async {
            let mut outcomes = Vec::with_capacity(batch.len());
            match self.agent.config.concurrency {
                Concurrency::Parallel if batch.len() > 1 => {
                    let futs = batch.iter().map(|e| {
                        self.execute_and_announce(e, iteration, chunk_tx.clone(), route(e))
                    });
                    outcomes = futures::future::join_all(futs).await;
                }
                _ => {
                    for e in &batch {
                        outcomes.push(
                            self.execute_and_announce(e, iteration, chunk_tx.clone(), route(e))
                                .await,
                        );
                    }
                }
            }
            drop(chunk_tx);
            outcomes
        };
        let forward = |chunk: reins_tool::ToolChunk| {
            crate::effects::hooks::acting_chunk(&self.agent, &self.session, iteration, chunk, self)
        };
        // Until every call of the batch is done (a call that asked a question keeps
        // its chunk sender, so the channel does not close): forward partial output,
        // and keep the session lock alive meanwhile (tools may run long).
        tokio::pin!(exec_all);
        let outcomes = loop {
            tokio::select! {
                biased;
                done = &mut exec_all => break done,
                Some(chunk) = chunk_rx.recv() => {
                    forward(chunk).await;
                    self.lock.renew_if_due().await;
                }
                _ = tokio::time::sleep(self.lock.renew_every()) => self.lock.renew_if_due().await,
            }
        };
        while let Ok(chunk) = chunk_rx.try_recv() {
            forward(chunk).await;
        }

        let mut results = Vec::new();
        let mut stop = false;
        let mut first_error = None;
        for o in outcomes {
            match o {
                Ok((outcome, s)) => {
                    stop |= s;
                    results.push(outcome);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let ledgered =
            std::mem::take(&mut *self.ledgered.lock().unwrap_or_else(|p| p.into_inner()));
        // Every result is what the ledger recorded: a crash before they are stored is
        // settled from the ledger with the same results (a resume reuses them, a new
        // message closes the turn with them), so they may wait for the next commit.
        let deferrable = !stop
            && first_error.is_none()
            && !results.is_empty()
            && results.iter().all(|o| match o {
                ExecOutcome::Done(r) => ledgered.contains(&r.id),
                _ => false,
            });
        core.run.apply(Event::Acted {
            outcomes: results,
            stop,
            now: Utc::now(),
        })?;
        if let Some(e) = first_error {
            self.commit(core).await?;
            return Err(e);
        }
        // Checkpoint: after tools.
        if self.cancel.is_cancelled() {
            return self.interrupt(core, Vec::new()).await.map(Some);
        }
        if deferrable && self.agent.runtime.store.commit_takes_lock() {
            self.deferred
                .store(true, std::sync::atomic::Ordering::Release);
        } else {
            self.commit(core).await?;
        }
        Ok(None)
    }

    /// Records that call `id`'s result is exactly what the ledger holds for it.
    fn ledgered(&self, id: &str) {
        self.ledgered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(id.to_owned());
    }

    /// Runs one call through hooks, the ledger and the toolkit. Returns the outcome
    /// and whether a `PostActing` hook asked to stop.
    /// [`Driver::execute_one`], publishing `ToolExecutionFinished` as soon as this call
    /// has its result (not when the whole parallel batch is done).
    async fn execute_and_announce(
        &self,
        exec: &Execution,
        iteration: u32,
        chunks: UnboundedSender<reins_tool::ToolChunk>,
        (routed, answer): (
            Option<crate::run::ChildInput>,
            Option<reins_tool::QuestionAnswer>,
        ),
    ) -> Result<(ExecOutcome, bool)> {
        let tool = crate::telemetry::ToolSpan::start(&exec.tool_use.name, &exec.tool_use.id);
        let out = match answer {
            Some(answer) => {
                self.continue_call(exec, answer, iteration)
                    .instrument(tool.span().clone())
                    .await
            }
            None => {
                self.execute_one(exec, iteration, chunks, routed)
                    .instrument(tool.span().clone())
                    .await
            }
        };
        tool.end(
            out.as_ref()
                .map(|(o, _)| o.label())
                .map_err(crate::telemetry::error_type),
        );
        if let Ok((ExecOutcome::Done(r), _)) = &out {
            self.emit(|| RunEvent::ToolExecutionFinished { result: r.clone() });
        }
        out
    }

    async fn execute_one(
        &self,
        exec: &Execution,
        iteration: u32,
        chunks: UnboundedSender<reins_tool::ToolChunk>,
        routed: Option<crate::run::ChildInput>,
    ) -> Result<(ExecOutcome, bool)> {
        let rt = &*self.agent.runtime;
        let original = &exec.tool_use;
        // Checkpoint: before each tool.
        if self.cancel.is_cancelled() {
            return Ok((
                ExecOutcome::Done(ToolResult::cancelled(
                    &original.id,
                    &original.name,
                    crate::run::NOT_RUN_INTERRUPTED,
                )),
                false,
            ));
        }
        // The hooks get a copy of the call to edit; without one listening, the call
        // is the run's own (shared, not copied).
        let to_run = if self.wants(HookEventKind::PreActing) {
            let (to_run, verdict) =
                hooks::pre_acting(&self.agent, &self.session, iteration, &exec.effective_use())
                    .await?;
            if let Some(note) = &verdict.rejection {
                let r = hooks::rejected_by_hook(original, note);
                return Ok((ExecOutcome::Done(r), false));
            }
            Arc::new(to_run)
        } else {
            exec.effective_use()
        };
        if let Some(sub) = rt.subagents.get(&original.name) {
            return self.execute_subagent(sub, to_run, routed, iteration).await;
        }
        let call = ToolCall {
            original,
            to_run: &to_run,
        };
        // The ledger: at most once.
        match effects::claim(
            &self.agent,
            &self.session,
            iteration,
            call,
            Takeover::AfterLease,
            &self.cancel,
            self,
        )
        .await?
        {
            Claimed::Run => {}
            Claimed::Recorded(r) => {
                self.ledgered(&r.id);
                return Ok((ExecOutcome::Done(r), false));
            }
            Claimed::Settled(r) => return Ok((ExecOutcome::Done(r), false)),
        }
        let fingerprint = call.fingerprint();

        self.emit(|| RunEvent::ToolExecutionStarted {
            id: original.id.clone(),
            name: original.name.clone(),
        });
        // The call gets a token of its own (the run's interrupt is forwarded while the
        // run waits for it), so that it can outlive the run when it asks a question.
        let (questions_tx, questions) = tokio::sync::mpsc::unbounded_channel();
        let call_cancel = tokio_util::sync::CancellationToken::new();
        let ctx = ToolContext::new(self.session.clone(), original.id.clone())
            .with_cancel(call_cancel.clone())
            .with_chunk_sender(chunks)
            .with_question_sender(questions_tx)
            .with_args_fingerprint(fingerprint)
            .with_trace_parent(crate::telemetry::current_traceparent());
        let opts = effects::options(&self.agent);
        let toolkit = rt.toolkit.clone();
        let call_use = to_run.clone();
        let call: ask::CallFuture =
            Box::pin(async move { toolkit.execute(&call_use, ctx, &opts).await });
        let outcome = match self.await_call(call, questions, call_cancel, &to_run).await {
            ask::Waited::Done(outcome) => outcome,
            ask::Waited::Asked(requirement) => {
                return Ok((
                    ExecOutcome::Asking {
                        id: original.id.clone(),
                        requirement,
                    },
                    false,
                ));
            }
        };
        self.finish_call(original, to_run, outcome, iteration).await
    }

    /// The end of a call that ran: its result recorded in the ledger, then the
    /// `PostActing` hooks.
    pub(super) async fn finish_call(
        &self,
        original: &reins_message::ToolUse,
        to_run: Arc<reins_message::ToolUse>,
        outcome: ToolCallOutcome,
        iteration: u32,
    ) -> Result<(ExecOutcome, bool)> {
        let call = ToolCall {
            original,
            to_run: &to_run,
        };
        let result = match effects::finish(&self.agent, &self.session, call, outcome).await? {
            ExecOutcome::Done(r) => r,
            other => return Ok((other, false)),
        };
        if !self.wants(HookEventKind::PostActing) {
            self.ledgered(&original.id);
            return self.post_acting(to_run, result, iteration).await;
        }
        let recorded = result.clone();
        let (outcome, stop) = self.post_acting(to_run, result, iteration).await?;
        if matches!(&outcome, ExecOutcome::Done(r) if *r == recorded) && !stop {
            self.ledgered(&original.id);
        }
        Ok((outcome, stop))
    }

    /// Runs the `PostActing` hooks on a finished call (not after an interrupt): they may
    /// edit the result or ask to stop.
    async fn post_acting(
        &self,
        to_run: Arc<reins_message::ToolUse>,
        result: ToolResult,
        iteration: u32,
    ) -> Result<(ExecOutcome, bool)> {
        if self.cancel.is_cancelled() || !self.wants(HookEventKind::PostActing) {
            return Ok((ExecOutcome::Done(result), false));
        }
        let (result, verdict) = hooks::post_acting(
            &self.agent,
            &self.session,
            iteration,
            Arc::unwrap_or_clone(to_run),
            result,
        )
        .await?;
        Ok((ExecOutcome::Done(result), verdict.stop))
    }

    /// Serves a sub-agent call (see [`crate::subagent`]): the child session runs, and
    /// its pause becomes this call's.
    async fn execute_subagent(
        &self,
        sub: &std::sync::Arc<dyn crate::delegate::Delegate>,
        to_run: Arc<reins_message::ToolUse>,
        routed: Option<crate::run::ChildInput>,
        iteration: u32,
    ) -> Result<(ExecOutcome, bool)> {
        self.emit(|| RunEvent::ToolExecutionStarted {
            id: to_run.id.clone(),
            name: to_run.name.clone(),
        });
        let outcome = sub
            .execute(
                &self.agent.runtime.store,
                self.agent.config.tool_lease,
                &self.session,
                &to_run,
                routed,
                self.cancel.child_token(),
            )
            .await?;
        let ExecOutcome::Done(result) = outcome else {
            return Ok((outcome, false));
        };
        self.post_acting(to_run, result, iteration).await
    }
}
