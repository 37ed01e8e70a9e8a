//! Reconciling calls whose outcome is unknown: a call the ledger shows started and
//! never finished (its process died mid-call) is not guessed at. The driver asks the
//! tool ([`reins_tool::Tool::reconcile`]) with the call's idempotency key, records what
//! it found — the effect happened (its result), it did not (the call runs again), or
//! nobody can tell (`Unknown`) — in the ledger and the audit trail, and publishes
//! [`RunEvent::Reconciled`].

use chrono::Utc;
use reins_hook::{HookEvent, HookEventKind};
use reins_message::{ToolOutcome, ToolResult, ToolUse};
use reins_tool::{Reconciliation, ToolContext};
use serde_json::Value;

use super::{Driver, UNKNOWN_OUTCOME};
use crate::error::Result;
use crate::output::RunEvent;
use crate::view::{DecisionRecord, Verdict};

/// The audit kind of a reconcile entry.
pub(crate) const RECONCILE_KIND: &str = "reconcile";

/// What recovery does with a call after asking its tool.
pub(super) enum Settled {
    /// The result to record (found by the tool, or `Unknown`).
    Result(ToolResult),
    /// The effect did not happen: the call may run again.
    NotRun,
}

/// The call being reconciled: the model's tool use, the one that ran (they differ
/// after an edit), and its idempotency key.
pub(super) struct Unfinished<'a> {
    pub(super) original: &'a ToolUse,
    pub(super) executed: Option<&'a ToolUse>,
    pub(super) key: String,
}

impl Driver {
    /// Asks the tool whether `call` took effect, records the verdict in the audit
    /// trail, and publishes it (a `Reconciled` hook event and run event). A found or unknown result is returned (the caller
    /// records it in the ledger); [`Settled::NotRun`] only when the tool says the effect
    /// did not happen.
    pub(super) async fn reconcile(&self, call: Unfinished<'_>, iteration: u32) -> Result<Settled> {
        let Unfinished {
            original,
            executed,
            key,
        } = call;
        let ran = executed.unwrap_or(original);
        let ctx = ToolContext::new(self.session.clone(), original.id.clone())
            .with_idempotency_key(key.clone())
            .with_cancel(self.cancel.child_token());
        let verdict = self.agent.runtime.toolkit.reconcile(ran, ctx).await;
        let label = verdict.label();
        let (settled, note) = match verdict {
            Reconciliation::Happened(out) => {
                let mut r = ToolResult::new(
                    &original.id,
                    &original.name,
                    ToolOutcome::Success,
                    out.content,
                );
                r.metadata = out.metadata;
                r.metadata
                    .insert("reconciled".to_owned(), Value::from("happened"));
                (
                    Settled::Result(r),
                    format!(
                        "the process running the call stopped before it finished; `{}` found that it took effect (idempotency key {key})",
                        original.name
                    ),
                )
            }
            Reconciliation::NotRun => (
                Settled::NotRun,
                format!(
                    "the process running the call stopped before it finished; `{}` found that it had not taken effect (idempotency key {key}), so it may run again",
                    original.name
                ),
            ),
            Reconciliation::CannotTell(reason) => {
                let text = match &reason {
                    Some(why) => format!("{UNKNOWN_OUTCOME} ({why})"),
                    None => UNKNOWN_OUTCOME.to_owned(),
                };
                let mut r = ToolResult::unknown(&original.id, &original.name, text);
                r.metadata
                    .insert("reconciled".to_owned(), Value::from("cannot_tell"));
                let why =
                    reason.unwrap_or_else(|| format!("`{}` does not reconcile", original.name));
                (
                    Settled::Result(r),
                    format!(
                        "the process running the call stopped before it finished; whether it took effect is unknown: {why} (idempotency key {key})"
                    ),
                )
            }
        };
        let mut settled = settled;
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
            quorum: None,
        };
        self.agent
            .runtime
            .store
            .append_decisions(&self.session, vec![record.to_entry()])
            .await?;
        if self.wants(HookEventKind::Reconciled) {
            let mut ev = HookEvent::Reconciled {
                tool_use: ran.clone(),
                verdict: label.to_owned(),
                idempotency_key: key.clone(),
            };
            self.hooks(&mut ev, iteration).await?;
        }
        self.emit(|| RunEvent::Reconciled {
            id: original.id.clone(),
            name: original.name.clone(),
            verdict: label.to_owned(),
            idempotency_key: key,
        });
        Ok(settled)
    }
}
