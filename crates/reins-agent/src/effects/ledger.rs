//! A tool call through the reins tool-call ledger, written once: [`claim`] before it
//! runs (a finished call gives back its recorded result; a call whose process died
//! mid-call is put to its tool's reconcile), [`finish`] after, and
//! [`settle_from_ledger`] for the calls a crash left behind when a new input closes
//! their turn. At most once, on every driver.

use chrono::Utc;
use reins_hook::HookEvent;
use reins_memory::{Claim, LedgerState};
use reins_message::{ToolOutcome, ToolResult, ToolUse};
use reins_tool::{Reconciliation, ToolCallOutcome, ToolContext};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Witness, hooks};
use crate::agent::Agent;
use crate::error::{AgentError, Result};
use crate::output::RunEvent;
use crate::run::{ExecOutcome, Execution};
use crate::view::{DecisionRecord, Verdict};

/// The text a tool use gets when its process died while it ran.
pub const UNKNOWN_OUTCOME: &str = "outcome unknown: the process running this call stopped before it finished; \
     it may or may not have taken effect";

/// The audit kind of a reconcile entry.
const RECONCILE_KIND: &str = "reconcile";

/// The text a call gets when it was cut off before it took effect (its tool said so
/// when asked) and a new message closed its turn.
const NOT_RUN_SUPERSEDED: &str = "not run: the process running this call stopped before it took effect \
     (the tool confirmed it), and a new message closed the turn";

/// A call about to run: the model's tool use and the one to run (they differ after an
/// edit, by a person or a hook).
#[derive(Debug, Clone, Copy)]
pub struct ToolCall<'a> {
    /// The call as the model made it (its id and name are the ledger's key).
    pub original: &'a ToolUse,
    /// The call to run.
    pub to_run: &'a ToolUse,
}

impl ToolCall<'_> {
    /// Whether the call to run differs from the model's.
    pub fn edited(&self) -> bool {
        self.to_run.input != self.original.input || self.to_run.raw_input != self.original.raw_input
    }

    /// The fingerprint of the arguments that run.
    pub fn fingerprint(&self) -> String {
        reins_memory::fingerprint(&self.to_run.input)
    }
}

/// What [`claim`] found in the ledger.
#[derive(Debug, Clone, PartialEq)]
pub enum Claimed {
    /// The call is this caller's to run (a lease is held).
    Run,
    /// The call finished before: its recorded result, exactly as the ledger holds it.
    Recorded(ToolResult),
    /// The call's earlier run stopped before it finished and is settled now (found by
    /// its tool's reconcile, or `Unknown`), recorded in the ledger.
    Settled(ToolResult),
}

/// Whether `claim` may take an unfinished call over at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takeover {
    /// Only once its lease has ended (another process may still run it).
    AfterLease,
    /// Now: the caller knows the run that started it is gone (a journal that shows
    /// the call started in an earlier attempt of the same step).
    Now,
}

/// Claims `call` in the ledger before it runs. A call that finished gives its recorded
/// result. A call whose earlier run stopped before it finished (its lease ended, or
/// `takeover` is [`Takeover::Now`]: then without waiting for that run's lease) is taken
/// over: an idempotent tool simply runs
/// again; any other is reconciled ([`reconcile`]): a found result or `Unknown` is
/// recorded, and a call that did not take effect runs. A call another process runs
/// under a live lease is [`AgentError::ToolInFlight`].
///
/// # Errors
/// The store's, [`AgentError::ToolInFlight`], a `Reconciled` hook's.
pub async fn claim(
    agent: &Agent,
    session: &str,
    iteration: u32,
    call: ToolCall<'_>,
    takeover: Takeover,
    cancel: &CancellationToken,
    witness: &dyn Witness,
) -> Result<Claimed> {
    let (cfg, rt) = (&*agent.config, &*agent.runtime);
    let store = &rt.store;
    let original = call.original;
    let fingerprint = call.fingerprint();
    let idempotent = rt.toolkit.is_idempotent(&original.name);
    let lease = cfg.tool_lease;
    // A call the caller knows was started by a run that is gone is its own at once:
    // its lease (the dead run's) is not waited for.
    let entry = if takeover == Takeover::Now && !idempotent {
        store.ledger_entry(session, &original.id).await?
    } else {
        None
    };
    let recovered = match entry.map(|e| (e.state, e.result)) {
        Some((LedgerState::Finished, Some(r))) => return Ok(Claimed::Recorded(r)),
        Some(_) => true,
        None => match take(
            store.as_ref(),
            session,
            call,
            &fingerprint,
            lease,
            idempotent,
        )
        .await?
        {
            Taken::Granted { recovered } => recovered,
            Taken::Done(claimed) => return Ok(claimed),
        },
    };
    if recovered {
        let unfinished = Unfinished {
            original,
            executed: call.edited().then_some(call.to_run),
            key: reins_tool::idempotency_key(session, &original.id, &fingerprint),
        };
        if let Settled::Result(r) =
            reconcile(agent, session, iteration, unfinished, cancel, witness).await?
        {
            store.finish(session, &original.id, &r).await?;
            return Ok(Claimed::Settled(r));
        }
        // The effect did not happen: the call runs now.
    }
    Ok(Claimed::Run)
}

/// What [`take`] got.
enum Taken {
    /// The lease; `recovered`: an earlier run of the call stopped before it finished.
    Granted { recovered: bool },
    /// No lease: the call is settled.
    Done(Claimed),
}

/// Claims the call's lease in the ledger, taking over one whose lease ended (exactly
/// one of racing processes gets it).
async fn take(
    store: &dyn reins_memory::MemoryStore,
    session: &str,
    call: ToolCall<'_>,
    fingerprint: &str,
    lease: std::time::Duration,
    idempotent: bool,
) -> Result<Taken> {
    // The caller's fingerprint of the call (a SHA-256 over the arguments' canonical
    // JSON: made once per call, not once per use).
    let original = call.original;
    let started = std::time::Instant::now();
    let claim = store
        .claim(session, &original.id, fingerprint, lease, false)
        .await;
    crate::telemetry::store_call("claim", started.elapsed());
    let mut claim = claim?;
    let mut recovered = false;
    if matches!(claim, Claim::Expired) {
        claim = store
            .claim(session, &original.id, fingerprint, lease, true)
            .await?;
        recovered = matches!(claim, Claim::Granted) && !idempotent;
    }
    match claim {
        Claim::Granted => Ok(Taken::Granted { recovered }),
        Claim::Finished(r) => Ok(Taken::Done(Claimed::Recorded(r))),
        Claim::InFlight { lease_until } => Err(AgentError::ToolInFlight {
            id: original.id.clone(),
            until: lease_until,
        }),
        Claim::Expired => {
            let r = ToolResult::unknown(&original.id, &original.name, UNKNOWN_OUTCOME);
            store.finish(session, &original.id, &r).await?;
            Ok(Taken::Done(Claimed::Settled(r)))
        }
    }
}

/// The context a claimed call runs with: its session and id, the arguments'
/// fingerprint, a cancellation token, and the trace context of the current span (the
/// call's `execute_tool` span when the caller is inside it).
pub fn context(session: &str, call: ToolCall<'_>, cancel: CancellationToken) -> ToolContext {
    ToolContext::new(session.to_owned(), call.original.id.clone())
        .with_cancel(cancel)
        .with_args_fingerprint(call.fingerprint())
        .with_trace_parent(crate::telemetry::current_traceparent())
}

/// The options a claimed call runs with (the agent's interrupt grace).
pub fn options(agent: &Agent) -> reins_tool::ExecOptions {
    reins_tool::ExecOptions {
        grace: agent.config.grace,
        ..reins_tool::ExecOptions::default()
    }
}

/// The end of a claimed call that ran: its result (under the model's id and name, with
/// the arguments that ran when they were edited) recorded in the ledger. A suspended
/// call records nothing.
///
/// # Errors
/// The store's.
pub async fn finish(
    agent: &Agent,
    session: &str,
    call: ToolCall<'_>,
    outcome: ToolCallOutcome,
) -> Result<ExecOutcome> {
    let original = call.original;
    let mut result = match outcome {
        ToolCallOutcome::Done(r) => r,
        ToolCallOutcome::Suspended { reason, .. } => {
            return Ok(ExecOutcome::Suspended {
                id: original.id.clone(),
                reason,
            });
        }
    };
    result.id.clone_from(&original.id);
    result.name.clone_from(&original.name);
    if call.edited() {
        result
            .metadata
            .insert("executed_input".to_owned(), call.to_run.input.clone());
    }
    let started = std::time::Instant::now();
    let stored = agent
        .runtime
        .store
        .finish(session, &original.id, &result)
        .await;
    crate::telemetry::store_call("finish", started.elapsed());
    stored?;
    crate::evidence::seal_execution(
        agent.runtime.store.as_ref(),
        agent.runtime.evidence.as_deref(),
        session,
        original,
        call.to_run,
        &result,
    )
    .await;
    Ok(ExecOutcome::Done(result))
}

/// After a crash in the middle of tool execution, before a new input closes the turn:
/// calls the ledger shows finished keep their recorded results; calls that started
/// and never finished are reconciled (their tool is asked whether they took effect): a
/// found result is kept, a call that did not take effect is closed as not run, and the
/// rest become `Unknown` — each recorded in the ledger. Calls that never started are
/// left to the input. Returns the results to apply (`Event::Settled`).
///
/// # Errors
/// The store's, a `Reconciled` hook's.
pub async fn settle_from_ledger(
    agent: &Agent,
    session: &str,
    iteration: u32,
    calls: Vec<Execution>,
    cancel: &CancellationToken,
    witness: &dyn Witness,
) -> Result<Vec<ToolResult>> {
    let store = &agent.runtime.store;
    let mut results = Vec::new();
    for e in calls {
        let id = &e.tool_use.id;
        let Some(entry) = store.ledger_entry(session, id).await? else {
            continue;
        };
        if let (LedgerState::Finished, Some(r)) = (&entry.state, &entry.result) {
            results.push(r.clone());
            continue;
        }
        // The key the call ran with: the ledger's fingerprint is that of the
        // arguments that ran.
        let call = Unfinished {
            original: &e.tool_use,
            executed: None,
            key: reins_tool::idempotency_key(session, id, &entry.fingerprint),
        };
        let r = match reconcile(agent, session, iteration, call, cancel, witness).await? {
            Settled::Result(r) => r,
            // It never took effect, and the new input closes the turn: not run.
            Settled::NotRun => ToolResult::cancelled(id, &e.tool_use.name, NOT_RUN_SUPERSEDED),
        };
        store.finish(session, id, &r).await?;
        results.push(r);
    }
    Ok(results)
}

/// What recovery does with a call after asking its tool.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// The result to record (found by the tool, or `Unknown`).
    Result(ToolResult),
    /// The effect did not happen: the call may run again.
    NotRun,
}

/// The call being reconciled: the model's tool use, the one that ran (they differ
/// after an edit), and its idempotency key.
#[derive(Debug, Clone)]
pub struct Unfinished<'a> {
    /// The model's call.
    pub original: &'a ToolUse,
    /// The call that ran, when it differs from the model's.
    pub executed: Option<&'a ToolUse>,
    /// The idempotency key it ran with.
    pub key: String,
}

/// Reconciles a call whose outcome is unknown (the ledger shows it started and never
/// finished): asks the tool ([`reins_tool::Tool::reconcile`]) with the call's
/// idempotency key, records the verdict in the audit trail (`kind: "reconcile"`,
/// `via: "recovery"`), runs the `Reconciled` hooks and reports
/// [`RunEvent::Reconciled`]. A found or unknown result is returned (the caller records
/// it in the ledger); [`Settled::NotRun`] only when the tool says the effect did not
/// happen.
///
/// # Errors
/// The store's, a `Reconciled` hook's.
pub async fn reconcile(
    agent: &Agent,
    session: &str,
    iteration: u32,
    call: Unfinished<'_>,
    cancel: &CancellationToken,
    witness: &dyn Witness,
) -> Result<Settled> {
    let Unfinished {
        original,
        executed,
        key,
    } = call;
    let ran = executed.unwrap_or(original);
    let ctx = ToolContext::new(session.to_owned(), original.id.clone())
        .with_idempotency_key(key.clone())
        .with_cancel(cancel.child_token());
    let verdict = agent.runtime.toolkit.reconcile(ran, ctx).await;
    let label = verdict.label();
    crate::telemetry::reconciled(&original.name, &original.id, label);
    let (mut settled, note) = verdict_of(original, verdict, &key);
    if let (Settled::Result(r), Some(ran)) = (&mut settled, executed) {
        r.metadata
            .insert("executed_input".to_owned(), ran.input.clone());
    }
    let record = DecisionRecord {
        seq: 0,
        at: Utc::now(),
        requirement_id: original.id.clone(),
        tool_name: original.name.clone(),
        kind: RECONCILE_KIND.to_owned(),
        decision: label.to_owned(),
        via: "recovery".to_owned(),
        verdict: Verdict::Applied,
        actor: None,
        shown_input: original.input.clone(),
        executed_input: executed.map(|u| u.input.clone()),
        note: Some(note),
        view: None,
        shown_fingerprint: Some(reins_memory::fingerprint(&original.input)),
        executed_fingerprint: executed.map(|u| reins_memory::fingerprint(&u.input)),
        grant_id: None,
        policy_hash: None,
        quorum: None,
    };
    agent
        .runtime
        .store
        .append_decisions(session, vec![record.to_entry()])
        .await?;
    hooks::notify(
        agent,
        session,
        iteration,
        HookEvent::Reconciled {
            tool_use: ran.clone(),
            verdict: label.to_owned(),
            idempotency_key: key.clone(),
        },
    )
    .await?;
    witness.emit(|| RunEvent::Reconciled {
        id: original.id.clone(),
        name: original.name.clone(),
        verdict: label.to_owned(),
        idempotency_key: key.clone(),
    });
    Ok(settled)
}

/// What a reconcile verdict settles, and the audit note that says so.
fn verdict_of(original: &ToolUse, verdict: Reconciliation, key: &str) -> (Settled, String) {
    let name = &original.name;
    match verdict {
        Reconciliation::Happened(out) => {
            let mut r = ToolResult::new(&original.id, name, ToolOutcome::Success, out.content);
            r.metadata = out.metadata;
            r.metadata
                .insert("reconciled".to_owned(), Value::from("happened"));
            (
                Settled::Result(r),
                format!(
                    "the process running the call stopped before it finished; `{name}` found that it took effect (idempotency key {key})"
                ),
            )
        }
        Reconciliation::NotRun => (
            Settled::NotRun,
            format!(
                "the process running the call stopped before it finished; `{name}` found that it had not taken effect (idempotency key {key}), so it may run again"
            ),
        ),
        Reconciliation::CannotTell(reason) => {
            let text = match &reason {
                Some(why) => format!("{UNKNOWN_OUTCOME} ({why})"),
                None => UNKNOWN_OUTCOME.to_owned(),
            };
            let mut r = ToolResult::unknown(&original.id, name, text);
            r.metadata
                .insert("reconciled".to_owned(), Value::from("cannot_tell"));
            let why = reason.unwrap_or_else(|| format!("`{name}` does not reconcile"));
            (
                Settled::Result(r),
                format!(
                    "the process running the call stopped before it finished; whether it took effect is unknown: {why} (idempotency key {key})"
                ),
            )
        }
    }
}
