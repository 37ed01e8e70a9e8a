//! The effects of a [`Run`](crate::run::Run)'s steps, written once: [`perform`] does
//! the work of each step a driver hands it (as [`Work`]) and returns what it came to
//! ([`Done`], serializable: a driver that journals its steps journals it), which
//! feeds the run back. The local driver performs each step in its process; a driver
//! that journals its steps (reins-restate) performs each inside a journaled step.
//! Either way the step does the same thing.
//!
//! | work | effect |
//! |---|---|
//! | [`Step::Follow`](crate::run::Step::Follow) | [`follow`]: what the paused sub-agent calls' child sessions wait for in the store |
//! | [`Step::Settle`](crate::run::Step::Settle) | [`settle_from_ledger`]: a crash's calls, from the ledger (reconciled when cut off) |
//! | [`Step::Refuse`](crate::run::Step::Refuse) | a refused decision someone else already took is told apart (the audit trail), the refusal audited, the `Error` hooks told |
//! | [`Step::Close`](crate::run::Step::Close) | child sessions a new message closed are closed; calls waiting on a question get their results in the ledger and are stopped |
//! | [`Step::Notify`](crate::run::Step::Notify) | [`hooks::notify`]: `PreCall`, `PostCall`, `ToolReplayed` |
//! | [`Step::Consult`](crate::run::Step::Consult) | [`consult`]: the approval policy, then the standing grants |
//! | [`Step::Compress`](crate::run::Step::Compress) | [`summarize`]: the summary (the summarizer chunk by chunk, the `PreSummary`/`PostSummary` hooks) |
//! | [`Step::Reason`](crate::run::Step::Reason) | [`reason`]: the `PreReasoning` hooks on the finished request, the model's stream turned into one message, the `PostReasoning` hooks, each tool use's gate |
//! | [`Step::Prepare`](crate::run::Step::Prepare) | [`hooks::pre_acting`] per call |
//! | [`Step::Execute`](crate::run::Step::Execute) | per call, at the same time: the ledger's [`claim`] (a recorded result, or a call cut off reconciled: [`reconcile`]), the tool (its partial output, its questions: [`LiveCalls`]), [`finish`], [`hooks::post_acting`] |
//! | [`Step::Ask`](crate::run::Step::Ask) | per call: the answer handed to the live call, its result ([`finish`], [`hooks::post_acting`]) or its next question |
//! | [`Step::Delegate`](crate::run::Step::Delegate) | [`Work::Dispatch`] (the parent's ledger), the driver's child turns ([`delegate::serve_child`]), [`Work::Conclude`] (the routed answers audited, the outcome, the ledger, [`hooks::post_acting`]) |
//! | a call that fails | [`Work::Fail`]: [`hooks::failed`], then [`run_failed`] (the outbox's `run.failed` notice) |
//!
//! | a commit the store took | [`seal`]: the signed receipts of the decisions it applied ([`to_seal`] takes them before the commit; nothing without an evidence signer) |
//!
//! What the effects report while they run goes to a [`Witness`] (the local driver's
//! event channel, reins-restate's live relay).

mod act;
mod ask;
mod begin;
mod compress;
pub mod delegate;
pub mod hooks;
mod ledger;
mod notice;
mod reason;
mod work;

pub use crate::evidence::{seal, to_seal};
pub use crate::live::LiveCalls;
pub use ask::ASKED_ELSEWHERE;
pub use begin::follow;
pub use compress::{Summarized, summarize};
pub use ledger::{
    Claimed, Settled, Takeover, ToolCall, UNKNOWN_OUTCOME, Unfinished, claim, context, finish,
    options, reconcile, settle_from_ledger,
};
pub use notice::run_failed;
pub use reason::{ModelCall, Reasoning, reason};
pub use work::{Done, OnInterrupt, Ports, Work, perform};

use async_trait::async_trait;
use chrono::Utc;
use reins_memory::{Error as StoreError, GrantEffect, GrantFilter};

use crate::agent::Agent;
use crate::approval::{PolicyRequest, PolicyVerdict};
use crate::output::RunEvent;
use crate::run::{AutoDecision, Consult, Consulted};

/// Answers a [`Consult`] step: each confirmation is put to the agent's approval
/// policy (allow or deny decide it; ask goes on; for a tool that needs a quorum only
/// deny decides, since a quorum is people), then to the standing deny rules (the first
/// live one that matches rejects it, with its note), then — unless its tool needs a
/// quorum — to the standing grants (the first grant that matches the tool, the turn's
/// principal, the session and the arguments allows it).
/// What neither decides is left to people. Grants that cannot be read leave the call
/// to a person (logged). See [`crate::approval`] for the order.
pub async fn consult(agent: &Agent, session: &str, step: &Consult) -> Consulted {
    let rt = &*agent.runtime;
    let principal = step.principal.as_deref();
    let mut decisions = Vec::new();
    let mut asked = Vec::new();
    for r in &step.requirements {
        if let Some(policy) = &rt.policy {
            let (verdict, policy_hash) = policy
                .decide_hashed(PolicyRequest {
                    tool: &r.tool_use.name,
                    arguments: &r.tool_use.input,
                    tool_use_id: &r.id,
                    session,
                    principal,
                    agent: r.agent.as_deref().unwrap_or(&agent.config.name),
                    path: &r.path,
                    now: Utc::now(),
                })
                .await;
            match verdict {
                PolicyVerdict::Ask => {}
                PolicyVerdict::AskBecause { reason } => asked.push((r.id.clone(), reason)),
                // A quorum is people: the policy may deny the call, not allow it.
                PolicyVerdict::Allow { .. } if r.quorum.is_some() => {
                    tracing::debug!(session = %session, tool = %r.tool_use.name, "the approval policy allowed a call that needs a quorum; asking people");
                }
                PolicyVerdict::Allow { reason } => {
                    decisions.push((
                        r.id.clone(),
                        AutoDecision::PolicyAllow {
                            reason,
                            policy_hash,
                        },
                    ));
                    continue;
                }
                PolicyVerdict::Deny { note } => {
                    decisions.push((r.id.clone(), AutoDecision::PolicyDeny { note, policy_hash }));
                    continue;
                }
            }
        }
        let grants = match rt
            .store
            .list_grants(&GrantFilter::all().tool(&r.tool_use.name))
            .await
        {
            Ok(g) => g,
            Err(StoreError::Unsupported { .. }) => continue,
            Err(e) => {
                tracing::warn!(session = %session, error = %e, "could not read the standing grants; asking a person");
                continue;
            }
        };
        let now = Utc::now();
        let matching = |effect: GrantEffect| {
            grants.iter().find(|g| {
                g.effect == effect
                    && g.matches(&r.tool_use.name, principal, session, &r.tool_use.input, now)
            })
        };
        if let Some(g) = matching(GrantEffect::Deny) {
            let note = match &g.note {
                Some(n) if !n.trim().is_empty() => format!("Rejected by a standing rule: {n}"),
                _ => "Rejected by a standing rule.".to_owned(),
            };
            let id = g.id.clone();
            decisions.push((r.id.clone(), AutoDecision::GrantDeny { id, note }));
            continue;
        }
        // A quorum asks people.
        if r.quorum.is_some() {
            continue;
        }
        if let Some(g) = matching(GrantEffect::Allow) {
            decisions.push((r.id.clone(), AutoDecision::Grant { id: g.id.clone() }));
        }
    }
    // Why people are asked, for the calls nothing else decided.
    asked.retain(|(id, _)| !decisions.iter().any(|(d, _)| d == id));
    Consulted {
        decisions,
        asked,
        now: Utc::now(),
    }
}

/// Where the effects report what happens while they run: the run events (to a
/// listener, or a relay), and progress on a long effect.
#[async_trait]
pub trait Witness: Send + Sync {
    /// Whether anyone listens (events are made only then).
    fn listening(&self) -> bool {
        true
    }

    /// Reports a run event.
    fn send(&self, event: RunEvent);

    /// A long effect made progress (a streamed chunk): a driver keeps its leases alive.
    async fn progress(&self) {}

    /// Whether [`Witness::progress`] has work to do now: the effects call it only
    /// then (on every streamed chunk, an `async` trait call is an allocation). The
    /// provided method says yes.
    fn wants_progress(&self) -> bool {
        true
    }

    /// How often a long effect (a tool call) reports progress while it waits
    /// (`None`: only when something happens).
    fn progress_every(&self) -> Option<std::time::Duration> {
        None
    }
}

impl dyn Witness + '_ {
    /// Reports the event `make` makes, when anyone listens.
    pub fn emit(&self, make: impl FnOnce() -> RunEvent) {
        if self.listening() {
            self.send(make());
        }
    }
}

/// A [`Witness`] nobody listens to.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unheard;

impl Witness for Unheard {
    fn listening(&self) -> bool {
        false
    }

    fn send(&self, _event: RunEvent) {}

    fn wants_progress(&self) -> bool {
        false
    }
}
