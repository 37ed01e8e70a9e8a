//! Signed receipts (see [`reins_evidence`] and docs/evidence.md): when an agent has a
//! signer (`AgentBuilder::evidence_signer`), an
//! approval applied and a call finished each add a receipt, signed with the key from the
//! configuration, to the session's evidence chain. The change itself is chained in its
//! own transaction by the store; the receipt follows it in the next one, bound to the
//! chain head it was signed at (a crash in between leaves a chain that verifies, without
//! that receipt).
//!
//! Without a signer nothing here runs: no allocation, no store call.

use std::sync::Arc;

use reins_evidence::{EntryKind, Keyring, Receipt, ReceiptKind, Signer};
use reins_memory::{Commit, DecisionEntry, MemoryStore};
use reins_message::{ToolResult, ToolUse};
use serde_json::Value;

/// The signing side of an agent's evidence: the key receipts are signed with, and the
/// verifying keys published beside it (older keys kept for older receipts, revoked
/// ones marked).
#[derive(Debug, Clone)]
pub(crate) struct Evidence {
    pub(crate) signer: Signer,
    pub(crate) keys: Keyring,
}

impl Evidence {
    pub(crate) fn new(signer: Signer, mut keys: Keyring) -> Self {
        keys.insert_signer(&signer);
        Self { signer, keys }
    }
}

/// Appends one receipt, signed at the chain head the store reports.
async fn append(store: &dyn MemoryStore, ev: &Evidence, session: &str, receipt: Receipt) {
    let signer = ev.signer.clone();
    let seal: reins_memory::evidence::Seal = Box::new(move |head, at| {
        let mut receipt = receipt;
        receipt.at = at.to_owned();
        receipt.chain_head = head.hash.clone();
        let signed = signer.sign(receipt)?;
        let body =
            serde_json::to_value(signed).map_err(|source| reins_evidence::Error::Encode {
                what: "a signed receipt",
                source,
            })?;
        Ok((EntryKind::Receipt, body))
    });
    // The change the receipt attests is stored already; a receipt that cannot be
    // written leaves the chain verifiable, without it. Said loudly.
    if let Err(e) = store.append_evidence(session, seal).await {
        tracing::error!(session = %session, error = %e, "could not store a signed receipt");
    }
}

fn text(v: &Value, pointer: &str) -> Option<String> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Receipts for the applied decisions among `decisions` (a commit's audit entries,
/// stored): one per decision, for approvals and rejections alike.
pub(crate) async fn seal_decisions(
    store: &dyn MemoryStore,
    evidence: Option<&Evidence>,
    session: &str,
    decisions: &[DecisionEntry],
) {
    let Some(ev) = evidence else {
        return;
    };
    for d in decisions {
        let r = &d.record;
        if r.get("verdict").and_then(Value::as_str) != Some("applied") {
            continue;
        }
        let receipt = Receipt {
            kind: ReceiptKind::Approval,
            session: session.to_owned(),
            call_id: d.requirement_id.clone(),
            tool: text(r, "/tool_name").unwrap_or_default(),
            args_shown: text(r, "/shown_fingerprint"),
            args_executed: text(r, "/executed_fingerprint")
                .or_else(|| text(r, "/shown_fingerprint")),
            decision: text(r, "/decision"),
            actor: text(r, "/actor/principal"),
            issuer: text(r, "/actor/metadata/issuer"),
            subject: text(r, "/actor/metadata/subject"),
            door: text(r, "/actor/metadata/via").or_else(|| text(r, "/via")),
            policy_hash: text(r, "/policy_hash"),
            at: String::new(),
            chain_head: String::new(),
        };
        append(store, ev, session, receipt).await;
    }
}

/// A receipt for a call whose result was just recorded in the ledger.
pub(crate) async fn seal_execution(
    store: &dyn MemoryStore,
    evidence: Option<&Evidence>,
    session: &str,
    original: &ToolUse,
    to_run: &ToolUse,
    result: &ToolResult,
) {
    let Some(ev) = evidence else {
        return;
    };
    let outcome = result.outcome.label();
    let receipt = Receipt {
        kind: ReceiptKind::Execution,
        session: session.to_owned(),
        call_id: original.id.clone(),
        tool: original.name.clone(),
        args_shown: Some(reins_memory::fingerprint(&original.input)),
        args_executed: Some(reins_memory::fingerprint(&to_run.input)),
        decision: Some(outcome.to_owned()),
        actor: None,
        issuer: None,
        subject: None,
        door: None,
        policy_hash: None,
        at: String::new(),
        chain_head: String::new(),
    };
    append(store, ev, session, receipt).await;
}

/// The audit entries of `commit` that get a signed receipt once the store has taken
/// it: its decisions when `agent` signs receipts
/// ([`AgentBuilder::evidence_signer`](crate::AgentBuilder::evidence_signer)); none, and
/// no allocation, otherwise. Every driver takes them before it hands the commit to the
/// store and passes them to [`seal`] once the store took it (the local driver and
/// reins-restate alike), so a decision gets the same receipt on every driver.
pub fn to_seal(agent: &crate::Agent, commit: &Commit) -> Vec<DecisionEntry> {
    if agent.runtime.evidence.is_some() {
        commit.decisions.clone()
    } else {
        Vec::new()
    }
}

/// Signs the receipts of `decisions` (from [`to_seal`]) of a commit the store took, in
/// the session's chain: one per applied decision, each in its own transaction after
/// the commit, bound to the chain head it is signed at. Nothing without a signer. A
/// receipt that cannot be stored is logged, never an error: the change it attests is
/// stored, and the chain verifies without it (see docs/evidence.md).
///
/// Returns the signing's own future (no state machine of its own on a commit path).
pub fn seal<'a>(
    agent: &'a crate::Agent,
    session: &'a str,
    decisions: &'a [DecisionEntry],
) -> impl std::future::Future<Output = ()> + Send + 'a {
    seal_decisions(
        agent.runtime.store.as_ref(),
        agent.runtime.evidence.as_deref(),
        session,
        decisions,
    )
}

/// Shared with the runtime.
pub(crate) type Shared = Option<Arc<Evidence>>;
