//! Following child sessions: a paused sub-agent call shows what its child session
//! waits for *in the store*, not a copy taken when the child paused. The child is an
//! ordinary session that anyone allowed may answer directly; the parent's view (and
//! every decision validated against it) follows.

use std::sync::Arc;

use futures::future::BoxFuture;
use reins_memory::{MemoryStore, SessionState};

use crate::error::{AgentError, Decided, Result};
use crate::requirement::Requirement;
use crate::run::{Call, Refusal, Run, RunConfig, RunInput};
use crate::state::{SessionCore, SessionView};
use crate::view::{Actor, DecisionRecord, Verdict};

/// How deep sub-agents may nest before following stops (a guard against a store that
/// holds a cycle of session ids; real nesting is a few levels).
const MAX_DEPTH: usize = 32;

/// The id of the child session a sub-agent call runs in: the parent session's id and
/// the tool use id, joined with `/`.
pub fn child_session_id(parent_session: &str, tool_use_id: &str) -> String {
    format!("{parent_session}/{tool_use_id}")
}

/// Brings `run`'s copies of its sub-agents' requirements up to date with their child
/// sessions in `store` (recursively). Returns whether anything changed.
pub(crate) async fn follow_children(
    store: &Arc<dyn MemoryStore>,
    config: RunConfig,
    session: &str,
    run: &mut Run,
) -> Result<bool> {
    follow_at(store, config, session, run, 0).await
}

fn follow_at<'a>(
    store: &'a Arc<dyn MemoryStore>,
    config: RunConfig,
    session: &'a str,
    run: &'a mut Run,
    depth: usize,
) -> BoxFuture<'a, Result<bool>> {
    Box::pin(async move {
        if depth >= MAX_DEPTH || !run.is_paused() {
            return Ok(false);
        }
        let mut changed = false;
        for call in run.state().delegated_calls() {
            let child = child_session_id(session, &call.id);
            let Some(waiting) = child_waits_for(store, config, &child, depth).await? else {
                continue;
            };
            changed |= run.follow_child(&call.id, waiting);
        }
        Ok(changed)
    })
}

/// What child session `id` waits for now, with its own children followed; `None` when
/// the store holds no such session (the copy is kept).
pub(crate) async fn child_waits_for(
    store: &Arc<dyn MemoryStore>,
    config: RunConfig,
    id: &str,
    depth: usize,
) -> Result<Option<Vec<Requirement>>> {
    let state = match store.load_session(id).await {
        Ok(s) => s,
        Err(reins_memory::Error::SessionNotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut core = SessionCore::from_state(state, config)?;
    follow_at(store, config, id, &mut core.run, depth + 1).await?;
    Ok(Some(if core.run.is_paused() {
        core.run.requirements()
    } else {
        Vec::new()
    }))
}

/// The view of a stored session — where its run is, whether it is paused, what it
/// waits for (following its sub-agents' child sessions in `store`) and the view token
/// to act on it — as a [`Session`] shows it. The one computation of a session's status
/// for readers of the store that are not a `Session`: reins-server's API and inbox,
/// the Restate session object. Only the stored run state is read: `state` may come
/// without its transcript (a [`SessionHead`](reins_memory::SessionHead)).
///
/// # Errors
/// [`AgentError::CorruptRunState`] for a run state that does not read; a store
/// failure while following a child session.
///
/// [`Session`]: crate::Session
pub async fn stored_view(store: &Arc<dyn MemoryStore>, state: SessionState) -> Result<SessionView> {
    let id = state.id.clone();
    let mut core = SessionCore::from_state(state, RunConfig::default())?;
    follow_children(store, RunConfig::default(), &id, &mut core.run).await?;
    Ok(core.view_of(&id))
}

/// The output of the last call of a stored session's run, as the driver that ran it
/// answered — its status, last assistant message, requirements, usage, iterations,
/// repairs and structured answer (stored with the run state when the call paused or
/// ended) — once the run no longer runs (`None` while it does). What a door that
/// follows a run in another process answers with.
///
/// # Errors
/// [`AgentError::CorruptRunState`] for a run state that does not read; a store
/// failure while following a child session.
pub async fn stored_output(
    store: &Arc<dyn MemoryStore>,
    state: SessionState,
) -> Result<Option<crate::RunOutput>> {
    let id = state.id.clone();
    let mut core = SessionCore::from_state(state, RunConfig::default())?;
    follow_children(store, RunConfig::default(), &id, &mut core.run).await?;
    let view = core.view_of(&id);
    let Some(status) = view.outcome() else {
        return Ok(None);
    };
    let summary = core.run.state().last_call().cloned().unwrap_or_default();
    let messages = core.run.messages();
    let message = summary
        .answer
        .as_deref()
        .and_then(|a| messages.iter().rev().find(|m| m.id == a))
        .or_else(|| {
            // Stored before the summary was: the last assistant message.
            messages
                .iter()
                .rev()
                .find(|m| m.role == reins_message::Role::Assistant)
                .filter(|_| core.run.state().last_call().is_none())
        })
        .cloned()
        .unwrap_or_else(|| reins_message::Msg::new(reins_message::Role::Assistant, Vec::new()));
    Ok(Some(crate::RunOutput {
        session_id: id,
        status,
        message,
        requirements: if status == crate::RunStatus::Paused {
            view.requirements
        } else {
            Vec::new()
        },
        usage: summary.usage,
        repairs: summary.repairs,
        iterations: summary.iterations,
        structured: summary.structured,
        empty_answer: summary.empty_answer && status == crate::RunStatus::Completed,
    }))
}

/// What a stored session waits for, following its sub-agents' child sessions: empty
/// unless it is paused ([`stored_view`]'s requirements).
pub async fn pending_requirements(
    store: &Arc<dyn MemoryStore>,
    state: SessionState,
) -> Result<Vec<Requirement>> {
    Ok(stored_view(store, state).await?.requirements)
}

/// Whether one of the requirements `ids` of `session` was already decided: the
/// decision that took effect on the first such id, as [`AgentError::AlreadyDecided`].
/// A nested id (`call/child-id`) is looked up in the child session's trail, where a
/// direct answer on the child is recorded. Ids that were never decided give `None`.
pub(crate) async fn already_decided(
    store: &Arc<dyn MemoryStore>,
    session: &str,
    ids: &[String],
) -> Result<Option<(AgentError, DecisionRecord)>> {
    for id in ids {
        if let Some(found) = decided_at(store, session, id, 0).await? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

fn decided_at<'a>(
    store: &'a Arc<dyn MemoryStore>,
    session: &'a str,
    id: &'a str,
    depth: usize,
) -> BoxFuture<'a, Result<Option<(AgentError, DecisionRecord)>>> {
    Box::pin(async move {
        let trail = match store.decisions(session).await {
            Ok(t) => t,
            Err(reins_memory::Error::SessionNotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let applied = trail
            .into_iter()
            .filter(|e| e.requirement_id == id)
            .filter_map(|e| DecisionRecord::from_entry(session, e).ok())
            // An approval counted towards a quorum that is not complete yet decided
            // nothing: the requirement still waits.
            .rfind(|r| {
                r.verdict == Verdict::Applied && r.quorum.is_none_or(|q| q.approvals >= q.needed)
            });
        if let Some(r) = applied {
            let e = AgentError::AlreadyDecided {
                id: id.to_owned(),
                decided: Box::new(decided(&r)),
            };
            return Ok(Some((e, r)));
        }
        match id.split_once('/') {
            Some((call, rest)) if depth < MAX_DEPTH => {
                let child = child_session_id(session, call);
                Ok(decided_at(store, &child, rest, depth + 1)
                    .await?
                    .map(|(_, mut r)| {
                        r.via = format!("{} on child session `{child}`", r.via);
                        let e = AgentError::AlreadyDecided {
                            id: id.to_owned(),
                            decided: Box::new(decided(&r)),
                        };
                        r.requirement_id = id.to_owned();
                        (e, r)
                    }))
            }
            _ => Ok(None),
        }
    })
}

/// A decision refused because what it names is no longer pending (or the view it
/// was made on changed) is, when that requirement was decided by someone else, a
/// late decision: refused as [`AgentError::AlreadyDecided`] naming the decision that
/// took effect, and recorded as refused for that reason. The same answer whatever
/// the timing (see docs/human-in-the-loop.md, "A late second approver").
///
/// `refusal` is what `Run::apply` refused `call`'s [`Event::Begin`](crate::run::Event::Begin)
/// with, on `session` in `store`; every driver of a [`Run`] passes its refusals through
/// this, so that a late decision gets the same answer whichever driver runs the
/// session. A trail that cannot be read leaves the refusal as it was (logged).
pub async fn late_refusal(
    store: &Arc<dyn MemoryStore>,
    session: &str,
    refusal: Refusal,
    call: &Call,
) -> Refusal {
    let Some(late) = crate::run::late_of(call, &refusal.error) else {
        return refusal;
    };
    match already_decided(store, session, &late.gone).await {
        Ok(Some((error, applied))) => {
            let audit = late_records(&error, &applied, late);
            Refusal { error, audit }
        }
        Ok(None) => refusal,
        Err(e) => {
            tracing::warn!(session = %session, error = %e, "could not read the audit trail of a refused decision");
            refusal
        }
    }
}

/// The audit records of a late input's decisions on requirements `applied` decided
/// first: refused `already_decided`, naming `error`.
pub(crate) fn late_records(
    error: &AgentError,
    applied: &DecisionRecord,
    late: crate::run::Late,
) -> Vec<DecisionRecord> {
    let crate::run::Late {
        named,
        gone,
        via,
        actor,
        view,
        now,
    } = late;
    named
        .into_iter()
        .filter(|(id, _, _)| gone.contains(id))
        .map(|(id, decision, by)| {
            let actor = match (by, actor.as_ref()) {
                (Some(p), Some(a)) if a.principal == p => Some(a.clone()),
                (Some(p), _) => Some(Actor::new(p)),
                (None, a) => a.cloned(),
            };
            DecisionRecord {
                seq: 0,
                at: now,
                requirement_id: id,
                tool_name: applied.tool_name.clone(),
                kind: applied.kind.clone(),
                decision,
                via: via.to_owned(),
                verdict: Verdict::Refused {
                    reason: "already_decided".to_owned(),
                    detail: error.to_string(),
                },
                actor,
                shown_input: applied.shown_input.clone(),
                executed_input: None,
                note: None,
                view: view.clone(),
                shown_fingerprint: applied.shown_fingerprint.clone(),
                executed_fingerprint: None,
                grant_id: None,
                policy_hash: None,
                quorum: None,
            }
        })
        .collect()
}

/// How long a decision that finds its session busy waits for the run in flight to
/// store the decision it may have lost to ([`busy_refusal`]).
pub const BUSY_DECISION_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The answer to a decision that found its session busy (a run in flight), the same on
/// every driver: when the run in flight is the one applying another decision on one of
/// the requirements it names, the decision lost a race — refused as
/// [`AgentError::AlreadyDecided`] naming the decision that took effect, with its audit
/// records (the caller appends them, as for any refusal); otherwise
/// [`AgentError::SessionBusy`], with nothing to record. The other decision is in the
/// audit trail once that run's first commit is stored, an instant after it started:
/// this looks until then, for at most `wait` (say [`BUSY_DECISION_WAIT`]), and answers
/// busy after that. Inputs that name no requirement (a message, `resume()`) are busy
/// at once.
pub async fn busy_refusal(
    store: &Arc<dyn MemoryStore>,
    session: &str,
    call: &Call,
    wait: std::time::Duration,
) -> Refusal {
    let busy = || AgentError::SessionBusy {
        session: session.to_owned(),
    };
    let names_requirements = match call.input() {
        RunInput::Decisions(ds) => !ds.is_empty(),
        RunInput::Message(m) => m.tool_results_iter().next().is_some(),
        RunInput::Resume => false,
    };
    if !names_requirements {
        return busy().into();
    }
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let r = late_refusal(store, session, busy().into(), call).await;
        if !matches!(r.error, AgentError::SessionBusy { .. })
            || tokio::time::Instant::now() >= deadline
        {
            return r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Appends a refusal's audit records to the session's trail (without touching its
/// version: other callers' views stay valid). A failure to record is logged; the
/// caller gets the refusal either way.
pub async fn record_refusal(
    store: &Arc<dyn MemoryStore>,
    session: &str,
    records: Vec<DecisionRecord>,
) {
    if records.is_empty() {
        return;
    }
    let entries = records.iter().map(DecisionRecord::to_entry).collect();
    if let Err(e) = store.append_decisions(session, entries).await {
        tracing::warn!(session = %session, error = %e, "could not record a refused decision");
    }
}

fn decided(r: &DecisionRecord) -> Decided {
    Decided {
        decision: r.decision.clone(),
        by: r.actor.as_ref().map(|a| a.principal.clone()),
        at: r.at,
        via: r.via.clone(),
    }
}
