//! The effects of a [`Run`](crate::run::Run)'s steps, written once: every driver
//! performs them through these functions, so a step does the same thing whichever
//! driver runs it. The local driver calls them directly; a driver that journals its
//! steps (reins-restate) calls them inside its journaled steps and journals what they
//! return.
//!
//! | step | effect |
//! |---|---|
//! | [`Step::Consult`](crate::run::Step::Consult) | [`consult`]: the approval policy, then the standing grants; answered with [`Event::DecidedWithoutAsking`](crate::run::Event::DecidedWithoutAsking) (`Consulted` converts into it) |
//! | [`Step::Reason`](crate::run::Step::Reason) | [`reason`]: the `PreReasoning` hooks on the finished request, the model's stream turned into one message, the `PostReasoning` hooks, each tool use's gate |
//! | [`Step::Compress`](crate::run::Step::Compress) | [`summarize`]: the summary (the summarizer chunk by chunk, the `PreSummary`/`PostSummary` hooks) |
//! | [`Step::Execute`](crate::run::Step::Execute) | [`hooks::pre_acting`], then the ledger: [`claim`] (a recorded result, or a call cut off reconciled: [`reconcile`]), the tool, [`finish`]; then [`hooks::post_acting`] |
//! | [`Step::Replayed`](crate::run::Step::Replayed) | [`hooks::notify`] with `ToolReplayed` |
//! | a new input after a crash mid-tool | [`settle_from_ledger`] |
//! | a run that ends with an error | [`hooks::failed`], then [`run_failed`] (the outbox's `run.failed` notice) |
//!
//! What the effects report while they run goes to a [`Witness`] (the local driver's
//! event channel, reins-restate's live relay).

mod compress;
pub mod hooks;
mod ledger;
mod notice;
mod reason;

pub use compress::{Summarized, summarize};
pub use ledger::{
    Claimed, Settled, Takeover, ToolCall, UNKNOWN_OUTCOME, Unfinished, claim, context, finish,
    options, reconcile, settle_from_ledger,
};
pub use notice::run_failed;
pub use reason::{ModelCall, Reasoning, reason};

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
            let verdict = policy
                .decide(PolicyRequest {
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
                    decisions.push((r.id.clone(), AutoDecision::PolicyAllow { reason }));
                    continue;
                }
                PolicyVerdict::Deny { note } => {
                    decisions.push((r.id.clone(), AutoDecision::PolicyDeny { note }));
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
