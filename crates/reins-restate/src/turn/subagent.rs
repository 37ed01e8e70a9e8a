//! Sub-agent calls on the Restate driver: each child session is a virtual object of
//! its own — the same `ReinsSession` service, keyed by the child session's id
//! (`parent/tool_use_id`) — driven by its parent through Restate's journaled object
//! client.
//!
//! - **A dispatch** of a sub-agent call: the parent's ledger records the call as
//!   running (journaled step `subagent <id>`; a call the ledger finished returns its
//!   result), then the parent calls the child object's exclusive handler `child`
//!   (request-response: the answer is journaled in the parent's invocation, so a
//!   replayed parent never calls twice). `child` starts the child with the task, hands
//!   it the answers routed from the parent, resumes it, or reads it — as the local
//!   driver's dispatch does — and runs the child's turn *until it pauses or ends*:
//!   then it answers, and no invocation waits on the child meanwhile.
//! - **A pause bubbles up**: the child's answer names its requirements; the parent's
//!   call is delegated with them (qualified `call/child-id`), and the parent pauses
//!   on its awakeables as for its own requirements.
//! - **A decision** on the parent for a child's requirement is routed by the run; the
//!   next dispatch hands it to `child`, which applies it through the child's own
//!   `Begin` (the child agent's quorums, approval lifetimes, fingerprints); the parent's
//!   audit trail records it as applied or refused (`subagent-routed <id>`), as the
//!   local driver's does.
//! - **Interrupts flow down**: an interrupt cancels the parent's invocation, and
//!   Restate passes the cancellation on to the child invocation it waits for; the
//!   parent waits for the child's answer (the child ends `cancelled`, its tool calls
//!   stopped by their tokens).
//! - **A new message** at the parent closes its paused children (`close-children`).
//! - **A decision settled at the child** (someone answered the child session
//!   directly, through its own `submit`): the parent follows its children in the
//!   store before it validates an input (`follow`), so the parent no longer shows the
//!   requirement and refuses a decision for it as `already_decided`, naming the
//!   decision taken on the child.

use reins_agent::nested::{self, Followed};
use reins_agent::run::{ChildInput, ExecOutcome, Execution, Phase, Run};
use reins_agent::{Agent, Decision, Requirement, RunOutput, RunStatus, SubAgentTool};
use reins_memory::Claim;
use reins_message::{Msg, Role, ToolResult, ToolUse};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use super::{OnCancel, TurnDriver};
use crate::object::{CLOSING, Inner, SessionObjectClient, TURN, is_cancel, retry};
use crate::wire::{Refused, TurnInput, TurnRequest};

/// What a parent asks of the child object of one of its sub-agent calls.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ChildCall {
    /// The parent session.
    parent: String,
    /// The parent's call (its id names the child session; its `task` starts it).
    tool_use: ToolUse,
    /// Answers routed from the parent, for the child.
    routed: Option<ChildInput>,
}

/// The child's answer: where its session is now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ChildAnswer {
    phase: Phase,
    /// What it waits for (paused).
    waiting: Vec<Requirement>,
    /// Its last assistant message.
    last: Option<Msg>,
    /// The call's result when the child could not start (no `task`).
    invalid: Option<ToolResult>,
    /// What became of the answers routed from the parent.
    routed: Option<Routed>,
}

/// Answers routed to the child, and whether it took them.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Routed {
    decisions: Vec<Decision>,
    /// The child's requirements when they arrived.
    shown: Vec<Requirement>,
    refused: Option<Refused>,
}

impl TurnDriver<'_, '_> {
    /// Splits a batch into the calls this module and [`super::ask`] serve (sub-agent
    /// calls, answered questions) and the others.
    pub(super) fn split_nested(&self, batch: Vec<Execution>) -> (Vec<Execution>, Vec<Execution>) {
        batch.into_iter().partition(|e| {
            e.answer.is_some() || nested::subagent_of(self.agent(), &e.tool_use.name).is_some()
        })
    }

    /// Serves sub-agent calls and answered questions: the questions' answers one after
    /// another, the sub-agent calls at the same time — each one's ledger step first,
    /// then every child object called before any answer is awaited (Restate runs the
    /// child invocations concurrently; their answers are journaled in the order they
    /// come), then each call's answer recorded in the batch's order.
    pub(super) async fn act_nested(
        &mut self,
        iteration: u32,
        calls: Vec<Execution>,
    ) -> Result<Vec<ExecOutcome>, TerminalError> {
        let mut outcomes = Vec::with_capacity(calls.len());
        let mut dispatched: Vec<Dispatched> = Vec::new();
        let mut children = DurableFuturesUnordered::new();
        for exec in calls {
            if self.interrupted() {
                outcomes.push(ExecOutcome::Done(ToolResult::cancelled(
                    &exec.tool_use.id,
                    &exec.tool_use.name,
                    reins_agent::run::NOT_RUN_INTERRUPTED,
                )));
                continue;
            }
            if let Some(answer) = exec.answer.clone() {
                outcomes.push(self.act_answer(iteration, exec, answer).await?);
                continue;
            }
            match self.dispatch(exec).await? {
                Err(done) => outcomes.push(done),
                Ok((d, request)) => {
                    let call = self
                        .ctx
                        .object_client::<SessionObjectClient>(d.child.clone())
                        .child(Json(request))
                        .call();
                    let handle = call.invocation_handle().await?;
                    children.push(call);
                    dispatched.push(Dispatched {
                        handle: Some(handle),
                        ..d
                    });
                }
            }
        }
        // Every child at once; an interrupt (Restate passes it on to each child
        // invocation, and this process stops their running calls) waits for the
        // children's answers (each ends `cancelled`).
        let mut answers: Vec<Option<ChildAnswer>> = vec![None; dispatched.len()];
        loop {
            match children.next().await {
                Ok(None) => break,
                Ok(Some((i, Ok(Json(answer))))) => answers[i] = Some(answer),
                Ok(Some((_, Err(e)))) | Err(e) if is_cancel(&e) => {
                    self.cancelled = true;
                    self.token.cancel();
                    break;
                }
                Ok(Some((_, Err(e)))) | Err(e) => return Err(e),
            }
        }
        for (d, answer) in dispatched.into_iter().zip(answers) {
            let answer = match answer {
                Some(a) => a,
                None => attach(d.handle.as_ref()).await?,
            };
            outcomes.push(self.conclude(d, answer).await?);
        }
        Ok(outcomes)
    }

    /// The first part of a sub-agent call's dispatch (see the module docs): its
    /// parent's ledger entry (`subagent <id>`). `Err`: the call's outcome (its ledger
    /// entry was finished); `Ok`: the child to call, and what to ask it.
    async fn dispatch(
        &mut self,
        exec: Execution,
    ) -> Result<Result<(Dispatched, ChildCall), ExecOutcome>, TerminalError> {
        let agent = self.agent().clone();
        let Some(sub) = nested::subagent_of(&agent, &exec.tool_use.name).cloned() else {
            return Err(TerminalError::new(format!(
                "`{}` is not a sub-agent of agent `{}`",
                exec.tool_use.name,
                agent.name()
            )));
        };
        let tool_use = (*exec.effective_use()).clone();
        let id = tool_use.id.clone();
        // The parent's ledger records the call as running from its first dispatch
        // until its result; the child's own ledger and object keep its tools at most
        // once.
        let (a, session, call) = (agent.clone(), self.session.clone(), tool_use.clone());
        let finished: Option<ToolResult> = self
            .journal(&format!("subagent {id}"), OnCancel::Retry, move || {
                let (a, session, call) = (a.clone(), session.clone(), call.clone());
                async move {
                    let fingerprint = reins_memory::fingerprint(&call.input);
                    let claim = a
                        .store()
                        .claim(&session, &call.id, &fingerprint, a.tool_lease(), true)
                        .await
                        .map_err(retry)?;
                    Ok(Json(match claim {
                        Claim::Finished(r) => Some(r),
                        _ => None,
                    }))
                }
            })
            .await?;
        if let Some(r) = finished {
            return Ok(Err(ExecOutcome::Done(r)));
        }
        let child = reins_agent::child_session_id(&self.session, &id);
        let request = ChildCall {
            parent: self.session.clone(),
            tool_use: tool_use.clone(),
            routed: exec.routed.clone(),
        };
        Ok(Ok((
            Dispatched {
                sub,
                tool_use,
                child,
                handle: None,
            },
            request,
        )))
    }

    /// The end of a sub-agent call's dispatch: the routed answers audited
    /// (`subagent-routed <id>`), the call's outcome from the child's answer, and a
    /// finished call's result in the parent's ledger (`subagent-finish <id>`).
    async fn conclude(
        &mut self,
        d: Dispatched,
        answer: ChildAnswer,
    ) -> Result<ExecOutcome, TerminalError> {
        let agent = self.agent().clone();
        let Dispatched { sub, tool_use, .. } = d;
        let id = tool_use.id.clone();
        if let Some(routed) = &answer.routed {
            let (a, session, call, routed) = (
                agent.clone(),
                self.session.clone(),
                tool_use.clone(),
                routed.clone(),
            );
            self.journal(
                &format!("subagent-routed {id}"),
                OnCancel::Retry,
                move || {
                    let (a, session, call, routed) =
                        (a.clone(), session.clone(), call.clone(), routed.clone());
                    async move {
                        let error = routed.refused.as_ref().map(|r| {
                            r.to_agent_error()
                                .unwrap_or(reins_agent::AgentError::InvalidInput(r.message.clone()))
                        });
                        nested::record_routed(
                            a.store(),
                            &session,
                            &call,
                            &routed.decisions,
                            &routed.shown,
                            error.as_ref(),
                        )
                        .await;
                        Ok(Json(()))
                    }
                },
            )
            .await?;
        }
        let outcome = match answer.invalid {
            Some(r) => ExecOutcome::Done(r),
            None => sub.outcome_of(
                &self.session,
                &tool_use,
                answer.phase,
                answer.waiting,
                answer.last.as_slice(),
            ),
        };
        if let ExecOutcome::Done(r) = &outcome {
            let (a, session, r) = (agent.clone(), self.session.clone(), r.clone());
            self.journal(
                &format!("subagent-finish {id}"),
                OnCancel::Retry,
                move || {
                    let (a, session, r) = (a.clone(), session.clone(), r.clone());
                    async move {
                        a.store().finish(&session, &r.id, &r).await.map_err(retry)?;
                        Ok(Json(()))
                    }
                },
            )
            .await?;
        }
        Ok(outcome)
    }

    /// Brings a paused run's copies of its children's requirements up to date with
    /// the child sessions in the store (journaled step `follow`; none when the run
    /// has no paused sub-agent call).
    pub(super) async fn follow_children(&mut self, run: &mut Run) -> Result<(), TerminalError> {
        let calls = nested::to_follow(run);
        if calls.is_empty() {
            return Ok(());
        }
        let (agent, session) = (self.agent().clone(), self.session.clone());
        let followed: Followed = self
            .journal("follow", OnCancel::Retry, move || {
                let (agent, session, calls) = (agent.clone(), session.clone(), calls.clone());
                async move {
                    nested::follow(&agent, &session, calls)
                        .await
                        .map(Json)
                        .map_err(retry)
                }
            })
            .await?;
        followed.apply(run);
        Ok(())
    }

    /// Closes the child sessions of the paused sub-agent calls `call` (a new user
    /// message, stored) closed, as the local driver closes them (journaled step
    /// `close-children`): what they wait for is rejected, so nothing stays approvable
    /// there.
    pub(super) async fn close_children(
        &mut self,
        closed: Vec<ToolUse>,
        call: reins_agent::run::Call,
    ) -> Result<(), TerminalError> {
        if closed.is_empty() {
            return Ok(());
        }
        let (agent, session) = (self.agent().clone(), self.session.clone());
        self.journal("close-children", OnCancel::Retry, move || {
            let (agent, session, closed, call) =
                (agent.clone(), session.clone(), closed.clone(), call.clone());
            async move {
                nested::close_children(&agent, &session, &closed, &call).await;
                Ok(Json(()))
            }
        })
        .await
    }

    /// Serves one dispatch from the parent on this child session (see the module
    /// docs): the turn runs until the child pauses or ends.
    async fn serve_child(
        &mut self,
        sub: &SubAgentTool,
        call: ChildCall,
    ) -> Result<ChildAnswer, TerminalError> {
        let mut routed = call.routed;
        let mut note: Option<Routed> = None;
        loop {
            let state = self.child_state().await?;
            let input = match routed.take() {
                Some(ChildInput::Decisions { decisions }) => {
                    note = Some(Routed {
                        decisions: decisions.clone(),
                        shown: state.waiting.clone(),
                        refused: None,
                    });
                    Some(TurnInput::Decisions { decisions })
                }
                Some(ChildInput::Resume)
                    if state.phase == Phase::Paused && state.waiting.is_empty() =>
                {
                    Some(TurnInput::Resume)
                }
                // Otherwise go by what the child session holds (the answers were
                // delivered before a crash, or never were needed).
                _ => match state.phase {
                    Phase::Idle if state.empty => match sub.task(&call.tool_use) {
                        Ok(task) => Some(TurnInput::Text { text: task.text() }),
                        Err(invalid) => {
                            return Ok(ChildAnswer {
                                invalid: Some(invalid),
                                routed: note,
                                ..state.answer()
                            });
                        }
                    },
                    Phase::Reasoning | Phase::Acting | Phase::Summarizing => {
                        Some(TurnInput::Resume)
                    }
                    _ => None,
                },
            };
            let Some(input) = input else {
                return Ok(ChildAnswer {
                    routed: note,
                    ..state.answer()
                });
            };
            match self.drive(TurnRequest::new(input)).await {
                Ok(out) => {
                    return Ok(ChildAnswer {
                        routed: note,
                        ..answer_of(out)
                    });
                }
                // The child did not take the routed answers (its state moved on):
                // recorded as refused at the parent; the child goes by its state.
                Err(e) => match (serde_json::from_str::<Refused>(e.message()), &mut note) {
                    (Ok(r), Some(n)) if n.refused.is_none() => n.refused = Some(r),
                    _ => return Err(e),
                },
            }
        }
    }

    /// The child session as stored (journaled step `child-state`).
    async fn child_state(&mut self) -> Result<ChildState, TerminalError> {
        let (agent, session) = (self.agent().clone(), self.session.clone());
        self.journal("child-state", OnCancel::Retry, move || {
            let (agent, session) = (agent.clone(), session.clone());
            async move { child_state(agent, session).await.map(Json) }
        })
        .await
    }
}

/// Where a child session is.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ChildState {
    phase: Phase,
    waiting: Vec<Requirement>,
    last: Option<Msg>,
    empty: bool,
}

impl ChildState {
    fn answer(self) -> ChildAnswer {
        ChildAnswer {
            phase: self.phase,
            waiting: self.waiting,
            last: self.last,
            invalid: None,
            routed: None,
        }
    }
}

async fn child_state(agent: Agent, session: String) -> HandlerResult<ChildState> {
    let stored = match agent.store().load_session(&session).await {
        Ok(s) => s,
        Err(reins_memory::Error::SessionNotFound { .. }) => {
            return Ok(ChildState {
                phase: Phase::Idle,
                waiting: Vec::new(),
                last: None,
                empty: true,
            });
        }
        Err(e) => return Err(retry(e)),
    };
    let loaded = crate::object::Loaded::from_state(stored);
    let last = loaded
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)
        .cloned();
    let empty = loaded.messages.is_empty();
    let mut run = loaded.into_run(&agent, &session)?;
    let calls = nested::to_follow(&run);
    if !calls.is_empty() {
        nested::follow(&agent, &session, calls)
            .await
            .map_err(retry)?
            .apply(&mut run);
    }
    let waiting = if run.is_paused() {
        run.requirements()
    } else {
        Vec::new()
    };
    Ok(ChildState {
        phase: run.phase(),
        waiting,
        last,
        empty,
    })
}

/// The answer of a child turn that ran until it paused or ended.
fn answer_of(out: RunOutput) -> ChildAnswer {
    let phase = match out.status {
        RunStatus::Paused => Phase::Paused,
        status => Phase::Finished(status),
    };
    ChildAnswer {
        phase,
        waiting: out.requirements,
        last: Some(out.message),
        invalid: None,
        routed: None,
    }
}

/// The `child` handler: one dispatch of a sub-agent call, on the child session's
/// object (exclusive: one at a time with its own turns).
pub(crate) async fn serve(
    inner: &std::sync::Arc<Inner>,
    ctx: &ObjectContext<'_>,
    call: ChildCall,
) -> HandlerResult<ChildAnswer> {
    let session = ctx.key().to_owned();
    let parent = inner.agent.owner_of(&call.parent).await.map_err(retry)?;
    let Some(sub) = nested::subagent_of(&parent, &call.tool_use.name).cloned() else {
        return Err(TerminalError::new(format!(
            "`{}` is not a sub-agent of agent `{}`",
            call.tool_use.name,
            parent.name()
        ))
        .into());
    };
    ctx.set(TURN, ctx.invocation_id().to_owned());
    ctx.clear(CLOSING);
    let token = inner.register(&session);
    let mut driver = TurnDriver::new(inner, ctx, session.clone(), token, sub.agent().clone());
    driver.until_pause = true;
    let result = driver.serve_child(&sub, call).await;
    inner.unregister(&session);
    // `turn`, `waiting` and `closing` are all the object's state: one entry.
    ctx.clear_all();
    Ok(result?)
}

/// A sub-agent call whose child object was called.
struct Dispatched {
    sub: SubAgentTool,
    tool_use: ToolUse,
    /// The child session.
    child: String,
    /// The child invocation (to wait for its answer after an interrupt).
    handle: Option<InvocationHandle>,
}

/// Waits for the answer of the child invocation `handle` after this turn was
/// interrupted (the child ends `cancelled` and answers).
async fn attach(handle: Option<&InvocationHandle>) -> Result<ChildAnswer, TerminalError> {
    let Some(handle) = handle else {
        return Err(TerminalError::new(
            "a sub-agent call has no child invocation",
        ));
    };
    loop {
        match handle.attach::<Json<ChildAnswer>>().await {
            Ok(Json(answer)) => return Ok(answer),
            Err(e) if is_cancel(&e) => {}
            Err(e) => return Err(e),
        }
    }
}
