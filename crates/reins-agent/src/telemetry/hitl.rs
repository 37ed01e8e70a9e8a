//! The people's side of a run as `reins.*` events (on the current span) and metrics:
//! a requirement going pending, its decision (who, through which door, the verdict,
//! the fingerprint, the wait), decisions the policy or a standing grant made without
//! asking, interrupts, reconcile verdicts and replayed results.

use chrono::{DateTime, Utc};

use super::metric;
use crate::requirement::Requirement;
use crate::view::DecisionRecord;

/// The door a decision came through, from its actor's `via` metadata (set by the
/// protocol adapters: `ag-ui`, `a2a`, `mcp`, `acp`, `slack`, `email`), else from the
/// record's own `via` (`grant`, `policy`, `recovery`, `message`), else `api` (the REST
/// API, which the inbox uses, and in-process calls). Always one of a fixed set.
pub fn door_of(record: &DecisionRecord) -> &'static str {
    let via = record
        .actor
        .as_ref()
        .and_then(|a| a.metadata.as_ref())
        .and_then(|m| m.get("via"))
        .and_then(|v| v.as_str());
    match via.unwrap_or(record.via.as_str()) {
        "ag-ui" => "ag-ui",
        "a2a" => "a2a",
        "mcp" => "mcp",
        "acp" => "acp",
        "slack" => "slack",
        "email" => "email",
        "inbox" => "inbox",
        "grant" => "grant",
        "policy" => "policy",
        "recovery" => "recovery",
        "message" => "message",
        "resolve" | "resume" | "tool_results" | "api" | "rest" => "api",
        _ => "other",
    }
}

/// A decision label as a bounded verdict: an approval that ran other arguments is an
/// `edit`.
fn verdict_of(record: &DecisionRecord) -> &'static str {
    match record.decision.as_str() {
        "approve" if record.executed_input.is_some() => "edit",
        "approve" => "approve",
        "reject" => "reject",
        "input" => "input",
        "external_result" => "external_result",
        "tool_result" => "tool_result",
        _ => "other",
    }
}

/// A requirement began to wait for a person.
pub(crate) fn requirement_pending(req: &Requirement) {
    tracing::event!(
        target: "reins",
        tracing::Level::INFO,
        reins.requirement.id = %req.id,
        reins.requirement.kind = req.kind.label(),
        gen_ai.tool.name = %req.tool_use.name,
        gen_ai.tool.call.id = %req.tool_use.id,
        reins.fingerprint = %req.fingerprint(),
        reins.quorum.needed = i64::from(req.quorum.as_ref().map_or(0, |q| q.needed)),
        "reins.requirement.pending"
    );
    metrics::gauge!(metric::REQUIREMENTS_PENDING, "tool" => req.tool_use.name.clone())
        .increment(1.0);
}

/// A person's decision was applied to a requirement pending since `pending_since`
/// (`None`: not known); `settles`: the requirement stops waiting (not a quorum's
/// partial approval).
pub(crate) fn decided(
    record: &DecisionRecord,
    pending_since: Option<DateTime<Utc>>,
    settles: bool,
) {
    let door = door_of(record);
    let verdict = verdict_of(record);
    let waited = pending_since.map(|t| (record.at - t).to_std().unwrap_or_default());
    let fingerprint = record
        .executed_fingerprint
        .as_deref()
        .or(record.shown_fingerprint.as_deref())
        .unwrap_or_default();
    tracing::event!(
        target: "reins",
        tracing::Level::INFO,
        reins.requirement.id = %record.requirement_id,
        reins.requirement.kind = %record.kind,
        gen_ai.tool.name = %record.tool_name,
        reins.decision.by = record.actor.as_ref().map_or("", |a| a.principal.as_str()),
        reins.decision.door = door,
        reins.decision.verdict = verdict,
        reins.fingerprint = %fingerprint,
        reins.decision.edited = record.executed_input.is_some(),
        reins.wait.seconds = waited.map_or(0.0, |w| w.as_secs_f64()),
        "reins.requirement.decided"
    );
    metrics::counter!(metric::DECISIONS, "door" => door, "verdict" => verdict).increment(1);
    if let Some(w) = waited {
        metrics::histogram!(metric::APPROVAL_WAIT, "door" => door).record(w.as_secs_f64());
    }
    if pending_since.is_some() && settles {
        metrics::gauge!(metric::REQUIREMENTS_PENDING, "tool" => record.tool_name.clone())
            .decrement(1.0);
    }
}

/// The approval policy or a standing grant answered a call without asking: `door`
/// (`grant`, `policy`), `verdict` (`approve`, `reject`) and the grant's id (empty for
/// the policy).
pub(crate) fn decided_without_asking(
    tool: &str,
    id: &str,
    door: &'static str,
    verdict: &'static str,
    grant: &str,
) {
    tracing::event!(
        target: "reins",
        tracing::Level::INFO,
        gen_ai.tool.name = %tool,
        gen_ai.tool.call.id = %id,
        reins.decision.door = door,
        reins.decision.verdict = verdict,
        reins.grant.id = grant,
        "reins.decision.automatic"
    );
    metrics::counter!(metric::DECISIONS, "door" => door, "verdict" => verdict).increment(1);
}

/// An interrupt stopped the turn.
pub(crate) fn interrupted(session: &str) {
    tracing::event!(target: "reins", tracing::Level::INFO, gen_ai.conversation.id = %session, "reins.interrupt");
    metrics::counter!(metric::INTERRUPTS).increment(1);
}

/// A call cut off by a crash was put to its tool's reconcile.
pub(crate) fn reconciled(tool: &str, id: &str, verdict: &'static str) {
    tracing::event!(
        target: "reins",
        tracing::Level::INFO,
        gen_ai.tool.name = %tool,
        gen_ai.tool.call.id = %id,
        reins.reconcile.verdict = verdict,
        "reins.reconcile"
    );
    metrics::counter!(metric::RECONCILES, "verdict" => verdict).increment(1);
}

/// A result was served from a fork's record.
pub(crate) fn replayed(tool: &str, id: &str) {
    tracing::event!(
        target: "reins",
        tracing::Level::INFO,
        gen_ai.tool.name = %tool,
        gen_ai.tool.call.id = %id,
        "reins.tool.replayed"
    );
    metrics::counter!(metric::REPLAYED).increment(1);
}
