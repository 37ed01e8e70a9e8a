//! The one interpreter of a [`Run`]: [`drive`] asks the run for each step and answers
//! it, the same way on every driver. A driver implements [`Driver`] — where a step's
//! work runs ([`Perform::perform`]: in this process, or inside a journaled step), how a
//! commit is written ([`Driver::commit`]), where child sessions run
//! ([`Driver::children`]), and how a paused run waits ([`Driver::wait`]: the local
//! driver ends the call; Restate waits on awakeables) — and nothing about what a step
//! means: that is the run's (`Run::next`) and the effects' ([`effects::perform`]).
//!
//! [`check`] is the same for an input a driver only validates (reins-restate's
//! `submit`): the steps before its commit, nothing stored.

use std::future::Future;

use chrono::Utc;
use tracing::Instrument;

use crate::agent::Agent;
use crate::effects::delegate::{Child, ChildAnswer, ChildCall};
use crate::effects::{self, Done, LiveCalls, Witness, Work};
use crate::error::{AgentError, Result};
use crate::output::{RunEvent, RunOutput, RunStatus};
use crate::requirement::Requirement;
use crate::run::{
    Announcement, Batch, Call, Checkpoint, CommitAt, Event, Flush, Run, RunInput, Step,
};

/// Where a step's work runs.
pub trait Perform: Send {
    /// Performs `work` ([`effects::perform`] with what the driver lends it): here, or
    /// inside a journaled step (then what the journal holds, for a step done before).
    fn perform(&mut self, work: Work) -> impl Future<Output = Result<Done>> + Send;
}

/// What a driver decides: where each step runs, how it stores, where child sessions
/// run, how a paused run waits. See the [module docs](self). Its methods are called
/// from the interpreter's own future (no boxing per step).
pub trait Driver: Perform {
    /// The agent whose session it is.
    fn agent(&self) -> &Agent;

    /// The session.
    fn session(&self) -> &str;

    /// Where run events go.
    fn witness(&self) -> &dyn Witness;

    /// The calls of this process waiting on a question.
    fn live(&self) -> &LiveCalls;

    /// Whether a batch's results may ride with the next commit when every one is the
    /// tool-call ledger's record (the driver finds them there, or in its journal,
    /// after a crash).
    fn defers_results(&self) -> bool;

    /// Before each step once the call has begun: keeps what the driver holds alive;
    /// whether the caller interrupted the run.
    fn checkpoint(&mut self) -> impl Future<Output = bool> + Send;

    /// Writes `checkpoint`'s commit (setting its expected version, and taking or
    /// releasing what the driver holds in it).
    ///
    /// # Errors
    /// The store's: [`reins_memory::Error::Conflict`] when the driver's copy of the
    /// session was stale (the call begins again once on a fresh copy, see
    /// [`Driver::confirm`]).
    fn commit(&mut self, checkpoint: Checkpoint) -> impl Future<Output = Result<()>> + Send;

    /// Makes sure `run` is the session as stored before a refusal is decided or after
    /// a commit found it stale: `true` when it was read again (the call begins again
    /// on it).
    fn confirm(&mut self, run: &mut Run) -> impl Future<Output = Result<bool>> + Send;

    /// Runs one turn of each child session of a dispatch (at the same time where it
    /// can), each until it pauses or ends; the answers in order.
    fn children(
        &mut self,
        calls: Vec<ChildCall>,
    ) -> impl Future<Output = Result<Vec<ChildAnswer>>> + Send;

    /// The run paused, waiting for `requirements`: the next call to go on with, or
    /// `None` (the call ends paused).
    fn wait(
        &mut self,
        requirements: &[Requirement],
    ) -> impl Future<Output = Result<Option<Call>>> + Send;

    /// The call's input was refused with `error`: the next call to go on with (a
    /// paused turn that goes on waiting), `None` (the call ends paused), or the error
    /// to return.
    fn refused(&mut self, error: AgentError) -> impl Future<Output = Result<Option<Call>>> + Send;
}

/// How one call ended.
#[allow(
    clippy::large_enum_variant,
    reason = "one value per call, moved once: boxing would only add an allocation"
)]
enum Stop {
    Paused(Vec<Requirement>),
    Ended(RunOutput),
}

/// Why one call stopped short.
enum Failure {
    /// The input was refused (settled, the hooks told).
    Refused(AgentError),
    /// The run failed.
    Failed(AgentError),
    /// The call never began (the session was held elsewhere when its first commit
    /// was written).
    Unstarted(AgentError),
}

/// Drives `run` from `call` to the end of the run: each call to its pause (then the
/// driver waits for the next, or the call ends paused) or its end. Every step the run
/// hands out is answered here; the driver only places them.
///
/// # Errors
/// The input's refusal; the run's failure (announced, the `Error` hooks told, a
/// `run.failed` notice written).
pub async fn drive<D: Driver>(d: &mut D, run: &mut Run, call: Call) -> Result<RunOutput> {
    let mut call = call.with_deferred_results(d.defers_results());
    loop {
        let resumed =
            !matches!(call.input(), RunInput::Message(m) if m.role != reins_message::Role::Tool);
        // Each call — to its pause or its end — is a turn in its `invoke_agent` span.
        let span = crate::telemetry::turn(
            d.agent(),
            d.session(),
            resumed,
            call.trace_parent(),
            run.state().traceparent(),
        );
        call = call.with_traceparent(crate::telemetry::traceparent_of(&span));
        let ended = one_call(d, run, call).instrument(span.clone()).await;
        crate::telemetry::run_ended(
            &span,
            match &ended {
                Ok(Stop::Paused(_)) => Ok(RunStatus::Paused),
                Ok(Stop::Ended(out)) => Ok(out.status),
                Err(Failure::Refused(_)) => Err("refused"),
                Err(Failure::Failed(e) | Failure::Unstarted(e)) => {
                    Err(crate::telemetry::error_type(e))
                }
            },
        );
        drop(span);
        d.live().keep_only(d.session(), &run.state().asking());
        let next = match ended {
            Ok(Stop::Ended(out)) => return Ok(out),
            Ok(Stop::Paused(requirements)) => d.wait(&requirements).await?,
            Err(Failure::Refused(e)) => d.refused(e).await?,
            Err(Failure::Unstarted(e)) => return Err(e),
            Err(Failure::Failed(e)) => {
                crate::boxed::boxed(|| fail(d, run, &e)).await;
                return Err(e);
            }
        };
        match next {
            Some(next) => call = next.with_deferred_results(d.defers_results()),
            None => return run.output(RunStatus::Paused),
        }
    }
}

/// One call: its input, to its pause or its end.
///
/// Its future is moved whole when the call begins, so what only some calls await —
/// a second look at the store (`confirm`), sub-agents — is boxed: unboxed,
/// the largest of them would size every call's future (measured with
/// `cargo xtask bench --cost`: copying futures was a third of a single turn).
async fn one_call<D: Driver>(
    d: &mut D,
    run: &mut Run,
    call: Call,
) -> std::result::Result<Stop, Failure> {
    use Failure::Failed;
    // Kept for a second attempt on a fresh copy of the session.
    let mut spare = Some(call.clone());
    run.apply(Event::Begin(call)).map_err(|r| Failed(r.error))?;
    let mut begun = false;
    loop {
        if begun && d.checkpoint().await {
            run.apply(Event::Interrupted(Vec::new()))
                .map_err(|r| Failed(r.error))?;
        }
        match run.next() {
            Step::Announce(a) => announce(d, run, a),
            Step::Commit(c) => {
                let at_begin = c.at == CommitAt::Begin;
                match d.commit(c).await {
                    Ok(()) => begun |= at_begin,
                    Err(AgentError::Store(reins_memory::Error::Conflict { .. }))
                        if at_begin && spare.is_some() =>
                    {
                        crate::boxed::boxed(|| d.confirm(run))
                            .await
                            .map_err(Failed)?;
                        if let Some(call) = spare.take() {
                            run.apply(Event::Begin(call)).map_err(|r| Failed(r.error))?;
                        }
                    }
                    Err(e @ AgentError::SessionBusy { .. }) if at_begin => {
                        return Err(Failure::Unstarted(e));
                    }
                    Err(e) => return Err(Failed(e)),
                }
            }
            Step::Refuse(r) => {
                if spare.is_some()
                    && crate::boxed::boxed(|| d.confirm(run))
                        .await
                        .map_err(Failed)?
                {
                    if let Some(call) = spare.take() {
                        run.apply(Event::Begin(call)).map_err(|r| Failed(r.error))?;
                    }
                    continue;
                }
                let done = d.perform(Work::Refuse(r)).await.map_err(Failed)?;
                let error = match done.feed(run) {
                    Err(refusal) => refusal.error,
                    Ok(()) => AgentError::Internal("a refusal came back accepted".to_owned()),
                };
                let message = error.to_string();
                d.witness().emit(|| RunEvent::Failed { error: message });
                return Err(Failure::Refused(error));
            }
            Step::Delegate(batch) => crate::boxed::boxed(|| delegate(d, run, batch))
                .await
                .map_err(Failed)?,
            Step::Reason(r) => {
                let unsaved = r.unsaved;
                match d.perform(Work::Reason(r)).await {
                    Ok(done) => done.feed(run).map_err(|r| Failed(r.error))?,
                    Err(e) => {
                        if unsaved {
                            // Stored before the error is returned, as they would have
                            // been before the model call.
                            let commit = run.take_commit(Flush::All);
                            let at = CommitAt::End;
                            if let Err(ce) = d.commit(Checkpoint { commit, at }).await {
                                tracing::warn!(session = %d.session(), error = %ce, "could not store a batch's results after the run failed");
                            }
                        }
                        return Err(Failed(e));
                    }
                }
            }
            Step::Pause(requirements) => return Ok(Stop::Paused(requirements)),
            Step::Finish(status) => {
                let out = run.output(status).map_err(Failed)?;
                if !out.repairs.is_empty() {
                    tracing::info!(session = %d.session(), repairs = ?out.repairs, "transcript repaired");
                }
                return Ok(Stop::Ended(out));
            }
            step => {
                let work = match Work::of(step) {
                    Ok(work) => work,
                    Err(step) => {
                        return Err(Failed(AgentError::Internal(format!(
                            "the `{}` step has no work",
                            step.name()
                        ))));
                    }
                };
                let done = d.perform(work).await.map_err(Failed)?;
                done.feed(run).map_err(|r| Failed(r.error))?;
            }
        }
    }
}

/// A [`Step::Delegate`]: the parent's ledger ([`Work::Dispatch`]), the children's
/// turns where the driver runs them, their answers made outcomes ([`Work::Conclude`]).
async fn delegate<D: Driver>(d: &mut D, run: &mut Run, batch: Batch) -> Result<()> {
    let Done::Dispatched(settled) = d.perform(Work::Dispatch(batch.clone())).await? else {
        return Err(AgentError::Internal(
            "a dispatch came back as something else".to_owned(),
        ));
    };
    let calls = effects::delegate::child_calls(d.session(), &batch, &settled);
    let mut answers = if calls.is_empty() {
        Vec::new()
    } else {
        d.children(calls).await?
    }
    .into_iter();
    let mut children = Vec::with_capacity(settled.len());
    for s in settled {
        children.push(match s {
            Some(r) => Child::Settled(r),
            None => Child::Answered(answers.next().ok_or_else(|| {
                AgentError::Internal("a child session gave no answer".to_owned())
            })?),
        });
    }
    let done = d.perform(Work::Conclude(batch, children)).await?;
    done.feed(run).map_err(|r| r.error)
}

/// Announces what `a` stands for, when anyone listens.
fn announce<D: Driver>(d: &D, run: &Run, a: Announcement) {
    let session = d.session();
    if let Announcement::Context(check) = &a {
        if let Some(c) = &check.compressed {
            tracing::debug!(
                session = %session,
                covered = c.summary.messages,
                before = c.tokens_before,
                after = check.tokens,
                "context compressed"
            );
        }
        if check.over_budget {
            tracing::warn!(
                session = %session,
                tokens = check.tokens,
                budget = check.budget,
                "the request is over the context budget even after compression; sending it anyway"
            );
        }
    }
    if let Announcement::Repaired(report) = &a {
        tracing::warn!(session = %session, report = ?report, "transcript repaired");
    }
    let w = d.witness();
    if !w.listening() {
        return;
    }
    match a {
        Announcement::Started { resumed } => {
            w.send(RunEvent::RunStarted {
                session_id: session.to_owned(),
            });
            if resumed {
                w.send(RunEvent::Resumed);
            }
        }
        Announcement::Context(check) => {
            if let Some(c) = check.compressed {
                w.send(RunEvent::ContextCompressed {
                    summary: c.summary,
                    tokens_before: c.tokens_before,
                    tokens_after: check.tokens,
                });
            }
            if check.over_budget {
                w.send(RunEvent::ContextOverBudget {
                    tokens: check.tokens,
                    budget: check.budget,
                });
            }
        }
        Announcement::Repaired(report) => w.send(RunEvent::Repaired { report }),
        Announcement::Replayed(results) => {
            for result in results {
                w.send(RunEvent::ToolReplayed { result });
            }
        }
        Announcement::Paused => w.send(RunEvent::Paused {
            requirements: run.requirements(),
        }),
        Announcement::Ended(status @ (RunStatus::Completed | RunStatus::MaxIterations)) => {
            if let Ok(out) = run.output(status) {
                w.send(RunEvent::Completed {
                    message: out.message,
                    status,
                });
            }
        }
        Announcement::Ended(RunStatus::Cancelled) => w.send(RunEvent::Cancelled),
        Announcement::Ended(RunStatus::Paused) => {}
    }
}

/// A failed call: announced, the `Error` hooks told, and — when the run itself
/// failed, not a refused input — the outbox's `run.failed` notice.
pub(crate) async fn fail<D: Driver>(d: &mut D, run: &Run, error: &AgentError) {
    let message = error.to_string();
    d.witness().emit(|| RunEvent::Failed {
        error: message.clone(),
    });
    let notice = matches!(
        error,
        AgentError::Model(_)
            | AgentError::Hook(_)
            | AgentError::Store(_)
            | AgentError::Summarization(_)
            | AgentError::InvalidOutput { .. }
            | AgentError::CorruptRunState { .. }
            | AgentError::Backend(_)
            | AgentError::Internal(_)
    );
    let work = Work::Fail {
        message,
        notice,
        iteration: run.state().iteration(),
    };
    if let Err(e) = d.perform(work).await {
        tracing::warn!(session = %d.session(), error = %e, "could not tell the Error hooks of a failed call");
    }
}

/// Checks `call`'s input against `run` as a call would begin — following paused
/// sub-agents' child sessions, settling nothing — and stores nothing: `Ok` when the
/// input is accepted; a refused input is settled ([`Step::Refuse`]: a decision someone
/// else already took made `AlreadyDecided`, the refusal audited) and returned.
///
/// # Errors
/// The refusal, or the failure of a step before it.
pub async fn check<P: Perform>(p: &mut P, run: &mut Run, call: Call) -> Result<()> {
    run.apply(Event::Begin(call)).map_err(|r| r.error)?;
    loop {
        match run.next() {
            Step::Follow(f) => {
                p.perform(Work::Follow(f))
                    .await?
                    .feed(run)
                    .map_err(|r| r.error)?;
            }
            // Checking settles nothing: a crash's calls are settled by the call that
            // begins.
            Step::Settle(_) => {
                run.apply(Event::Settled {
                    results: Vec::new(),
                    now: Utc::now(),
                })
                .map_err(|r| r.error)?;
            }
            Step::Refuse(r) => {
                let done = p.perform(Work::Refuse(r)).await?;
                return Err(match done.feed(run) {
                    Err(refusal) => refusal.error,
                    Ok(()) => AgentError::Internal("a refusal came back accepted".to_owned()),
                });
            }
            _ => return Ok(()),
        }
    }
}
