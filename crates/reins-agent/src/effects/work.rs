//! [`perform`]: the one function that does the work of a step, with what the driver
//! lends it ([`Ports`]), and what the work came to ([`Done`]).

use chrono::{DateTime, Utc};
use reins_message::ToolResult;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::delegate::Child;
use super::{LiveCalls, Reasoning, Summarized, Takeover, Witness};
use crate::agent::Agent;
use crate::error::{Decided, Result};
use crate::run::{
    Batch, Close, Compress, Consult, Consulted, Event, ExecOutcome, Follow, Followed, Notify,
    Prepared, Reason, Refusal, Refuse, Run, Step,
};

/// What the effects of a step work with: the agent (its store, model, tools, hooks,
/// policy), the session, the run's interrupt, where events go, the calls waiting on
/// a question, and whether the step may be a second attempt.
pub struct Ports<'a> {
    /// The agent whose session it is.
    pub agent: &'a Agent,
    /// The session.
    pub session: &'a str,
    /// Fires when the run is interrupted.
    pub cancel: &'a CancellationToken,
    /// Where the events the effects report go.
    pub witness: &'a dyn Witness,
    /// The calls of this process that wait for the answer to a question.
    pub live: &'a LiveCalls,
    /// Whether an earlier attempt of this step may have started its tool calls and
    /// is gone ([`Takeover::Now`]: a journal shows the step began before; the
    /// ledger's lease of such a call is not waited for).
    pub takeover: Takeover,
}

/// The work of one step, as [`perform`] takes it: what a driver hands the effects
/// (inside a journaled step or not). Cheap to clone for a driver that may perform it
/// again.
#[derive(Debug, Clone)]
pub enum Work {
    /// [`Step::Follow`].
    Follow(Follow),
    /// [`Step::Settle`].
    Settle(Batch),
    /// [`Step::Refuse`].
    Refuse(Refuse),
    /// [`Step::Close`].
    Close(Close),
    /// [`Step::Notify`].
    Notify(Notify),
    /// [`Step::Consult`].
    Consult(Consult),
    /// [`Step::Compress`].
    Compress(Compress),
    /// [`Step::Reason`].
    Reason(Reason),
    /// [`Step::Prepare`].
    Prepare(Batch),
    /// [`Step::Execute`].
    Execute(Batch),
    /// [`Step::Ask`].
    Ask(Batch),
    /// The first part of a [`Step::Delegate`]: each call claimed in the parent's
    /// ledger (a call the ledger finished gives its result and runs no child).
    Dispatch(Batch),
    /// The last part of a [`Step::Delegate`]: what each call came to (in the batch's
    /// order) made its outcome.
    Conclude(Batch, Vec<Child>),
    /// A call failed: the `Error` hooks are told, and with `notice` the outbox gets a
    /// `run.failed` notice.
    Fail {
        /// The error.
        message: String,
        /// Whether the run itself failed (not a refused input).
        notice: bool,
        /// The reasoning step it failed at.
        iteration: u32,
    },
}

/// What a driver does with a step it is waiting for when the run is interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnInterrupt {
    /// Wait for it (or perform it again): it keeps the facts (a store write, a tool
    /// call through the ledger).
    Finish,
    /// Give it up: its work is dropped (a model call, a summary).
    Drop,
}

impl Work {
    /// The work of `step`, for the steps whose effects [`perform`] does (`None` for
    /// the driver's own: announcing, committing, pausing, finishing — and
    /// [`Step::Delegate`], which the driver's child turns serve between
    /// [`Work::Dispatch`] and [`Work::Conclude`]).
    #[allow(
        clippy::result_large_err,
        reason = "the step handed back as it is, once per step"
    )]
    pub fn of(step: Step) -> std::result::Result<Work, Step> {
        Ok(match step {
            Step::Follow(f) => Work::Follow(f),
            Step::Settle(b) => Work::Settle(b),
            Step::Refuse(r) => Work::Refuse(r),
            Step::Close(c) => Work::Close(c),
            Step::Notify(n) => Work::Notify(n),
            Step::Consult(c) => Work::Consult(c),
            Step::Compress(c) => Work::Compress(c),
            Step::Reason(r) => Work::Reason(r),
            Step::Prepare(b) => Work::Prepare(b),
            Step::Execute(b) => Work::Execute(b),
            Step::Ask(b) => Work::Ask(b),
            other @ (Step::Announce(_)
            | Step::Commit(_)
            | Step::Delegate(_)
            | Step::Pause(_)
            | Step::Finish(_)) => return Err(other),
        })
    }

    /// The work's name: what a journaling driver names its step (`model`, `tool
    /// call_1`, `tools call_1,call_2`, `hook pre-call`, ...).
    pub fn name(&self) -> String {
        let ids = |b: &Batch| {
            b.calls
                .iter()
                .map(|e| e.tool_use.id.as_str())
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            Work::Follow(_) => "follow".to_owned(),
            Work::Settle(_) => "settle".to_owned(),
            Work::Refuse(_) => "refusal".to_owned(),
            Work::Close(_) => "close".to_owned(),
            Work::Notify(n) => format!("hook {}", n.name()),
            Work::Consult(_) => "consult".to_owned(),
            Work::Compress(_) => "compress".to_owned(),
            Work::Reason(_) => "model".to_owned(),
            Work::Prepare(b) => format!("hook pre-acting {}", ids(b)),
            Work::Execute(b) if b.calls.len() == 1 => format!("tool {}", ids(b)),
            Work::Execute(b) => format!("tools {}", ids(b)),
            Work::Ask(b) => format!("tool-answer {}", ids(b)),
            Work::Dispatch(b) => format!("subagent {}", ids(b)),
            Work::Conclude(b, _) => format!("subagent-finish {}", ids(b)),
            Work::Fail { .. } => "failed".to_owned(),
        }
    }

    /// What to do with it when the run is interrupted while it runs.
    pub fn on_interrupt(&self) -> OnInterrupt {
        match self {
            Work::Reason(_) | Work::Compress(_) => OnInterrupt::Drop,
            _ => OnInterrupt::Finish,
        }
    }
}

/// What a step's work came to. Serializable: a driver that journals its steps
/// journals it, and a replayed step gives it back instead of doing the work again.
#[allow(
    clippy::large_enum_variant,
    reason = "one value per step, moved once: boxing would only add an allocation"
)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Done {
    /// What the child sessions wait for.
    Followed(Followed),
    /// A crash's calls, settled.
    Settled {
        /// Their results.
        results: Vec<ToolResult>,
        /// When.
        now: DateTime<Utc>,
    },
    /// A refusal, settled.
    Refused {
        /// The decision that took effect, when someone else decided first.
        decided: Option<(String, Decided)>,
    },
    /// The work is done; nothing to feed back.
    Nothing,
    /// What the policy and the grants decided.
    Consulted(Consulted),
    /// The summary.
    Summarized(Summarized),
    /// The model call.
    Reasoned {
        /// What it came to.
        reasoning: Reasoning,
        /// When it ended.
        now: DateTime<Utc>,
    },
    /// What the `PreActing` hooks made of the calls.
    Prepared(Vec<Prepared>),
    /// The calls' outcomes.
    Acted {
        /// One per call.
        outcomes: Vec<ExecOutcome>,
        /// A `PostActing` hook asked to stop.
        stop: bool,
        /// Every outcome is the ledger's record.
        recorded: bool,
        /// When the last call ended.
        now: DateTime<Utc>,
    },
    /// The parent's ledger claims of sub-agent calls: per call, its result when the
    /// ledger had finished it (no child runs).
    Dispatched(Vec<Option<ToolResult>>),
}

impl Done {
    /// Feeds what the work came to back to `run`: its event (none for work that only
    /// acts, several for a summary and its usage). A refusal's answer comes back as
    /// the refusal to return.
    pub(crate) fn feed(self, run: &mut Run) -> std::result::Result<(), Refusal> {
        let event = match self {
            Done::Followed(f) => Event::Followed(f),
            Done::Settled { results, now } => Event::Settled { results, now },
            Done::Refused { decided } => Event::Refused { decided },
            Done::Nothing | Done::Dispatched(_) => return Ok(()),
            Done::Consulted(c) => c.into(),
            Done::Summarized(Summarized::Interrupted) => Event::Interrupted(Vec::new()),
            Done::Summarized(s) => {
                for event in s.events() {
                    run.apply(event)?;
                }
                return Ok(());
            }
            Done::Reasoned {
                reasoning:
                    Reasoning::Reasoned {
                        message,
                        usage,
                        verdict,
                        gates,
                    },
                now,
            } => Event::Reasoned {
                message,
                gates,
                after: crate::run::AfterReasoning {
                    stop: verdict.stop,
                    goto: verdict.goto,
                },
                usage,
                now,
            },
            Done::Reasoned {
                reasoning: Reasoning::Interrupted,
                ..
            } => Event::Interrupted(Vec::new()),
            Done::Prepared(p) => Event::Prepared(p),
            Done::Acted {
                outcomes,
                stop,
                recorded,
                now,
            } => Event::Acted {
                outcomes,
                stop,
                recorded,
                now,
            },
        };
        run.apply(event)
    }
}

/// Does the work of a step: the one place each step's effect is written, for every
/// driver (see the [module docs](super)).
///
/// The heavy effects (a model call, tools, settling, children) and the rare ones (a
/// refusal, closing calls, consulting the policy, a failure) run boxed: their
/// futures are many kilobytes, and unboxed they would size this future, and every
/// future that awaits it, for every step — each step's future was copied whole on
/// the way in (measured with `cargo xtask bench --cost`: most of a single turn's
/// instructions were `memcpy`). One allocation on a step that does far more.
///
/// # Errors
/// The store's, the model's, a hook's, a summarizer's: the step did not finish.
pub async fn perform(ports: &Ports<'_>, work: Work) -> Result<Done> {
    let Ports {
        agent,
        session,
        cancel,
        witness,
        ..
    } = *ports;
    Ok(match work {
        Work::Follow(f) => {
            Done::Followed(crate::boxed::boxed(|| super::follow(agent, session, f.calls)).await?)
        }
        Work::Settle(b) => {
            let results = crate::boxed::boxed(|| {
                super::settle_from_ledger(agent, session, b.iteration, b.calls, cancel, witness)
            })
            .await?;
            Done::Settled {
                results,
                now: Utc::now(),
            }
        }
        Work::Refuse(r) => crate::boxed::boxed(|| super::begin::refuse(ports, r)).await,
        Work::Close(c) => {
            crate::boxed::boxed(|| super::begin::close(ports, c)).await?;
            Done::Nothing
        }
        Work::Notify(n) => {
            crate::boxed::boxed(|| async move {
                for event in n.events {
                    super::hooks::notify(agent, session, n.iteration, event).await?;
                }
                Ok::<_, crate::error::AgentError>(())
            })
            .await?;
            Done::Nothing
        }
        Work::Consult(c) => {
            Done::Consulted(crate::boxed::boxed(|| super::consult(agent, session, &c)).await)
        }
        Work::Compress(c) => Done::Summarized(
            crate::boxed::boxed(|| super::summarize(agent, session, c, cancel)).await?,
        ),
        Work::Reason(r) => {
            let reasoning =
                crate::boxed::boxed(|| super::reason(agent, session, r.into(), cancel, witness))
                    .await?;
            Done::Reasoned {
                reasoning,
                now: Utc::now(),
            }
        }
        Work::Prepare(b) => {
            Done::Prepared(crate::boxed::boxed(|| super::act::prepare(ports, b)).await?)
        }
        Work::Execute(b) => crate::boxed::boxed(|| super::act::execute(ports, b)).await?,
        Work::Ask(b) => crate::boxed::boxed(|| super::act::answer(ports, b)).await?,
        Work::Dispatch(b) => {
            Done::Dispatched(crate::boxed::boxed(|| super::delegate::dispatch(ports, b)).await?)
        }
        Work::Conclude(b, children) => {
            crate::boxed::boxed(|| super::delegate::conclude(ports, b, children)).await?
        }
        Work::Fail {
            message,
            notice,
            iteration,
        } => {
            crate::boxed::boxed(|| async move {
                super::hooks::failed(agent, session, iteration, &message).await;
                if notice {
                    super::run_failed(agent.store().as_ref(), session, &message).await;
                }
            })
            .await;
            Done::Nothing
        }
    })
}
