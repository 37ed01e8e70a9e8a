//! The effects around a call's input: following the child sessions of paused
//! sub-agent calls ([`follow`]), settling a refused input ([`refuse`]: a decision
//! someone else already took is told apart, the refusal audited, the `Error` hooks
//! told), and closing what a new message closed ([`close`]).

use reins_message::ToolUse;

use super::{Done, Ports};
use crate::agent::Agent;
use crate::error::{AgentError, Result};
use crate::run::{Close, Followed, Refuse};

/// Reads what the child sessions of the paused sub-agent calls `calls` of `session`
/// wait for in `agent`'s store (each one's own children followed, at any depth): a
/// decision is then checked against what a child waits for now (someone may have
/// answered it directly).
///
/// # Errors
/// A store failure, or a child session whose run state does not read.
pub async fn follow(agent: &Agent, session: &str, calls: Vec<ToolUse>) -> Result<Followed> {
    let mut children = Vec::new();
    let config = agent.run_config();
    for call in calls {
        let child = crate::follow::child_session_id(session, &call.id);
        if let Some(waiting) =
            crate::follow::child_waits_for(agent.store(), config, &child, 0).await?
        {
            children.push((call.id, waiting));
        }
    }
    Ok(Followed { children })
}

/// Settles a refused input: when it named requirements that someone else decided
/// meanwhile, the decision that took effect (the refusal becomes
/// [`AgentError::AlreadyDecided`], and is recorded as refused for that reason);
/// otherwise its own audit records. The records are appended to the audit trail and
/// the `Error` hooks are told. A trail that cannot be read leaves the refusal as it
/// was (logged).
pub(super) async fn refuse(ports: &Ports<'_>, refuse: Refuse) -> Done {
    let Ports { agent, session, .. } = *ports;
    let store = agent.store();
    let Refuse {
        message,
        audit,
        late,
        iteration,
    } = refuse;
    let found = match &late {
        Some(late) => match crate::follow::already_decided(store, session, &late.gone).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(session = %session, error = %e, "could not read the audit trail of a refused decision");
                None
            }
        },
        None => None,
    };
    let (decided, message, audit) = match (found, late) {
        (Some((error, applied)), Some(late)) => {
            let records = crate::follow::late_records(&error, &applied, late);
            let AgentError::AlreadyDecided { id, decided } = &error else {
                return Done::Refused { decided: None };
            };
            (
                Some((id.clone(), (**decided).clone())),
                error.to_string(),
                records,
            )
        }
        _ => (None, message, audit),
    };
    crate::follow::record_refusal(store, session, audit).await;
    super::hooks::failed(agent, session, iteration, &message).await;
    Done::Refused { decided }
}

/// Closes what a new message closed: the calls that were waiting on a question get
/// their results in the ledger (unless someone finished them there) and are stopped
/// when they are live in this process (a process that holds one elsewhere stops it
/// when it sees its ledger entry finished); the child sessions of paused sub-agent
/// calls are closed, so nothing stays approvable there (a failure is logged: the
/// parent's own turn is already stored, and the child shows as closed once retried).
///
/// # Errors
/// The store's, recording a closed call's result.
pub(super) async fn close(ports: &Ports<'_>, close: Close) -> Result<()> {
    let Ports {
        agent,
        session,
        live,
        ..
    } = *ports;
    let store = agent.store();
    for r in &close.asking {
        if let Some(call) = live.take(session, &r.id) {
            call.cancel.cancel();
        }
        let entry = store.ledger_entry(session, &r.id).await?;
        if entry.is_some_and(|e| e.state != reins_memory::LedgerState::Finished) {
            store.finish(session, &r.id, r).await?;
        }
    }
    for child in &close.children {
        let Some(sub) = agent.runtime.subagents.get(&child.name) else {
            continue;
        };
        if let Err(e) = sub
            .close(session, child, &close.note, close.actor.clone())
            .await
        {
            tracing::warn!(session = %session, call = %child.id, error = %e, "could not close a sub-agent's child session");
        }
    }
    Ok(())
}
