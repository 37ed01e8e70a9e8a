//! The tool side of a Restate turn: a batch of calls, each behind a journaled started
//! marker (`tool-start <id>`), run one journaled step each or together in one
//! (`tools <id>,..`), each through the reins tool-call ledger, so that a call a crash
//! interrupted comes back `Unknown` (or runs again once when its tool is idempotent)
//! and never silently twice; and the settlement of a turn the local driver left
//! mid-tool.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use reins_agent::run::{Event, ExecOutcome, Execution, Flush, Run};
use reins_agent::{Agent, AgentError, RunEvent, UNKNOWN_OUTCOME};
use reins_memory::{Claim, LedgerState};
use reins_message::ToolResult;
use reins_tool::{ToolCallOutcome, ToolContext};
use restate_sdk::prelude::*;

use tokio_util::sync::CancellationToken;

use super::{Live, OnCancel, ToolStep, TurnDriver};
use crate::object::retry;

impl TurnDriver<'_, '_> {
    /// Runs a batch of tool calls, each behind a started marker: at the same time in
    /// one journaled step when the agent runs batches in parallel (the default) and
    /// the batch has several calls, otherwise one after another, one step each.
    pub(super) async fn act(
        &mut self,
        run: &mut Run,
        batch: Vec<Execution>,
    ) -> Result<(), TerminalError> {
        // Sub-agent calls and answered questions are served on their own (see
        // `subagent` and `ask`), before the others; the outcomes keep the batch order.
        let order: Vec<String> = batch.iter().map(|e| e.tool_use.id.clone()).collect();
        let (nested, batch) = self.split_nested(batch);
        let mut outcomes = self.act_nested(nested).await?;
        let parallel = batch.len() > 1
            && self.agent().tool_concurrency() == reins_tool::Concurrency::Parallel
            && !self.interrupted();
        outcomes.extend(if parallel {
            self.act_together(batch).await?
        } else {
            self.act_in_turn(batch).await?
        });
        super::ask::in_order(&mut outcomes, &order);
        let now = self.clock().await?;
        let _ = run.apply(Event::Acted {
            outcomes,
            stop: false,
            now,
        });
        if self.interrupted() {
            return Ok(());
        }
        self.commit(run, Flush::All).await
    }

    /// The started marker of call `id`: its closure runs only when the journal does not
    /// hold it yet. `false` (replayed, not run) means an earlier attempt of this
    /// invocation began this call and stopped before its result was journaled.
    async fn mark_started(&mut self, id: &str) -> Result<Arc<AtomicBool>, TerminalError> {
        let fresh = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&fresh);
        self.journal(&format!("tool-start {id}"), OnCancel::Retry, move || {
            let flag = Arc::clone(&flag);
            async move {
                flag.store(true, Ordering::SeqCst);
                Ok(Json(()))
            }
        })
        .await?;
        Ok(fresh)
    }

    /// The calls one after another: a marker and a step each.
    async fn act_in_turn(
        &mut self,
        batch: Vec<Execution>,
    ) -> Result<Vec<ExecOutcome>, TerminalError> {
        let mut outcomes = Vec::with_capacity(batch.len());
        for exec in batch {
            let id = exec.tool_use.id.clone();
            if self.interrupted() {
                outcomes.push(ExecOutcome::Done(ToolResult::cancelled(
                    &id,
                    &exec.tool_use.name,
                    reins_agent::run::NOT_RUN_INTERRUPTED,
                )));
                continue;
            }
            let fresh = self.mark_started(&id).await?;
            let (agent, session, token, live) = (
                self.agent().clone(),
                self.session.clone(),
                self.token.clone(),
                self.live(),
            );
            let step: ToolStep = self
                .journal(&format!("tool {id}"), OnCancel::Retry, move || {
                    tool_step(
                        agent.clone(),
                        session.clone(),
                        exec.clone(),
                        fresh.load(Ordering::SeqCst),
                        token.clone(),
                        live.clone(),
                    )
                })
                .await?;
            outcomes.push(step.into_outcome(id));
        }
        Ok(outcomes)
    }

    /// The calls at the same time: every marker first, then one journaled step that
    /// runs them all (each through the ledger, as alone). A crash in the middle leaves
    /// every marker journaled and no result: on replay each call asks the ledger, as a
    /// single call does — a finished one keeps its result, one that never started
    /// runs, one cut off is `Unknown` (an idempotent one runs again).
    async fn act_together(
        &mut self,
        batch: Vec<Execution>,
    ) -> Result<Vec<ExecOutcome>, TerminalError> {
        let mut calls = Vec::with_capacity(batch.len());
        for exec in batch {
            let fresh = self.mark_started(&exec.tool_use.id).await?;
            calls.push((exec, fresh));
        }
        let ids: Vec<String> = calls.iter().map(|(e, _)| e.tool_use.id.clone()).collect();
        let (agent, session, token, live) = (
            self.agent().clone(),
            self.session.clone(),
            self.token.clone(),
            self.live(),
        );
        let steps: Vec<ToolStep> = self
            .journal(
                &format!("tools {}", ids.join(",")),
                OnCancel::Retry,
                move || {
                    let runs: Vec<_> = calls
                        .iter()
                        .map(|(exec, fresh)| {
                            tool_step(
                                agent.clone(),
                                session.clone(),
                                exec.clone(),
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
                        Ok(Json(steps))
                    }
                },
            )
            .await?;
        Ok(steps
            .into_iter()
            .zip(ids)
            .map(|(step, id)| step.into_outcome(id))
            .collect())
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

/// One tool call through the ledger, as the local driver runs it: a finished call
/// returns its recorded result; a call an earlier attempt started and did not finish
/// is `Unknown` unless the tool is idempotent (then it runs again once its lease
/// ends).
async fn tool_step(
    agent: Agent,
    session: String,
    exec: Execution,
    fresh: bool,
    token: CancellationToken,
    live: Live,
) -> HandlerResult<Json<ToolStep>> {
    let store = agent.store();
    let original = &exec.tool_use;
    let to_run = exec.effective_use();
    let idempotent = agent.toolkit().is_idempotent(&original.name);
    let unknown = || ToolResult::unknown(&original.id, &original.name, UNKNOWN_OUTCOME);
    if !fresh {
        let entry = store
            .ledger_entry(&session, &original.id)
            .await
            .map_err(retry)?;
        if let Some(entry) = entry {
            match (entry.state, entry.result) {
                (LedgerState::Finished, Some(r)) => return Ok(Json(ToolStep::Done(r))),
                _ if idempotent => {}
                _ => {
                    let r = unknown();
                    store
                        .finish(&session, &original.id, &r)
                        .await
                        .map_err(retry)?;
                    return Ok(Json(ToolStep::Done(r)));
                }
            }
        }
    }
    let fingerprint = reins_memory::fingerprint(&to_run.input);
    let lease = agent.tool_lease();
    let mut claim = store
        .claim(&session, &original.id, &fingerprint, lease, false)
        .await
        .map_err(retry)?;
    if matches!(claim, Claim::Expired) && idempotent {
        claim = store
            .claim(&session, &original.id, &fingerprint, lease, true)
            .await
            .map_err(retry)?;
    }
    match claim {
        Claim::Granted => {}
        Claim::Finished(r) => return Ok(Json(ToolStep::Done(r))),
        Claim::InFlight { lease_until } => {
            // Retried by Restate until the lease ends.
            return Err(retry(AgentError::ToolInFlight {
                id: original.id.clone(),
                until: lease_until,
            }));
        }
        Claim::Expired => {
            let r = unknown();
            store
                .finish(&session, &original.id, &r)
                .await
                .map_err(retry)?;
            return Ok(Json(ToolStep::Done(r)));
        }
    }
    // The call gets a token of its own: it outlives this step when it asks a question.
    let (questions_tx, questions) = tokio::sync::mpsc::unbounded_channel();
    let call_cancel = CancellationToken::new();
    let ctx = ToolContext::new(session.clone(), original.id.clone())
        .with_cancel(call_cancel.clone())
        .with_question_sender(questions_tx);
    let opts = reins_tool::ExecOptions::default();
    let sender = live.relay.open(&live.session, &live.run_id);
    sender.send(&RunEvent::ToolExecutionStarted {
        id: original.id.clone(),
        name: original.name.clone(),
    });
    let toolkit = agent.toolkit().clone();
    let call_use = to_run.clone();
    let call: super::ask::CallFuture =
        Box::pin(async move { toolkit.execute(&call_use, ctx, &opts).await });
    let waited =
        super::ask::wait(&session, &original.id, call, questions, call_cancel, &token).await;
    let outcome = match waited {
        super::ask::Waited::Done(outcome) => outcome,
        super::ask::Waited::Asked(question) => {
            sender.close().await;
            let requirement = reins_agent::nested::question_requirement(
                &agent,
                original,
                &question,
                chrono::Utc::now(),
            );
            return Ok(Json(ToolStep::Asked { requirement }));
        }
    };
    finish_call(&agent, &session, &exec, outcome, sender).await
}

/// The end of a call that ran (at once, or after answers to its questions): its
/// result recorded in the ledger.
pub(super) async fn finish_call(
    agent: &Agent,
    session: &str,
    exec: &Execution,
    outcome: ToolCallOutcome,
    sender: crate::live::LiveSender,
) -> HandlerResult<Json<ToolStep>> {
    let store = agent.store();
    let (original, to_run) = (&exec.tool_use, exec.effective_use());
    let mut result = match outcome {
        ToolCallOutcome::Done(r) => r,
        ToolCallOutcome::Suspended { reason, .. } => {
            sender.close().await;
            return Ok(Json(ToolStep::Suspended { reason }));
        }
    };
    result.id.clone_from(&original.id);
    result.name.clone_from(&original.name);
    if exec.edited {
        result
            .metadata
            .insert("executed_input".to_owned(), to_run.input.clone());
    }
    store
        .finish(session, &original.id, &result)
        .await
        .map_err(retry)?;
    sender.send(&RunEvent::ToolExecutionFinished {
        result: result.clone(),
    });
    sender.close().await;
    Ok(Json(ToolStep::Done(result)))
}

/// After a crash mid-tool of a turn the local driver ran, before a new message closes
/// the turn: finished calls keep their recorded results, started ones become `Unknown`.
pub(super) async fn settle_from_ledger(
    agent: Agent,
    session: String,
    calls: Vec<Execution>,
) -> HandlerResult<Json<Vec<ToolResult>>> {
    let store = agent.store();
    let mut results = Vec::new();
    for e in calls {
        let id = &e.tool_use.id;
        if let Some(entry) = store.ledger_entry(&session, id).await.map_err(retry)? {
            match (entry.state, entry.result) {
                (LedgerState::Finished, Some(r)) => results.push(r),
                _ => {
                    let r = ToolResult::unknown(id, &e.tool_use.name, UNKNOWN_OUTCOME);
                    store.finish(&session, id, &r).await.map_err(retry)?;
                    results.push(r);
                }
            }
        }
    }
    Ok(Json(results))
}
