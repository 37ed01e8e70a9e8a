//! The record a fork or a replay serves tool calls from ([`Record`]): the finished
//! calls of the session it came from, each with its tool, the fingerprint of the
//! arguments that ran and the result the ledger kept. A call the model makes in the
//! fork whose tool and argument fingerprint match an unused entry gets that result
//! instead of running again (each entry serves at most one call); any other call goes
//! through the tool's policy and the ledger as usual, or, in a replay, is not run at
//! all. Pure data, stored with the run state, so a fork resumed in another process
//! still serves from it.

use chrono::{DateTime, Utc};
use reins_message::{Msg, ToolResult, ToolUse};
use serde::{Deserialize, Serialize};

use super::Run;
use crate::view::DecisionRecord;

/// The text a call gets in a replay when it is not in the record: a replay never runs
/// a tool.
pub const NOT_IN_RECORD: &str =
    "not run: this call is not in the recorded session, and a replay never runs tools";

/// Where a fork came from and what it may serve from the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The session the fork was made from.
    pub source: String,
    /// How many of the source's messages the fork kept.
    pub at: usize,
    /// `true` for a replay: a call that is not in the record is not run.
    #[serde(default)]
    pub strict: bool,
    /// The source's finished calls after the fork point, in order.
    #[serde(default)]
    pub calls: Vec<RecordedCall>,
}

/// One finished call of the source session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedCall {
    /// The tool.
    pub tool: String,
    /// The fingerprint of the arguments it ran with (see `reins_memory::fingerprint`).
    pub fingerprint: String,
    /// The result the source's ledger recorded (its id is the source's tool use id).
    pub result: ToolResult,
    /// The tool use of the fork that this entry served, once it served one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served: Option<String>,
}

impl Record {
    /// Serves the call `id` of `tool` with arguments of this fingerprint from the first
    /// unused matching entry: its result, re-addressed to `id` and marked
    /// `replayed_from` (the source's tool use id). `None` when nothing matches.
    pub(crate) fn serve(&mut self, id: &str, tool: &str, fingerprint: &str) -> Option<ToolResult> {
        let entry = self
            .calls
            .iter_mut()
            .find(|c| c.served.is_none() && c.tool == tool && c.fingerprint == fingerprint)?;
        entry.served = Some(id.to_owned());
        let mut result = entry.result.clone();
        let from = std::mem::replace(&mut result.id, id.to_owned());
        result.name = tool.to_owned();
        Some(
            result
                .with_metadata("replayed_from", serde_json::Value::String(from))
                .with_metadata(
                    "replayed_session",
                    serde_json::Value::String(self.source.clone()),
                ),
        )
    }

    /// The result of the source's call `original` if this record holds it and it
    /// served a call of the fork: a fork of a fork finds results its parent served
    /// from its own record (they are not in the parent's ledger).
    pub fn served_result(&self, served_id: &str) -> Option<(&RecordedCall, &ToolResult)> {
        self.calls
            .iter()
            .find(|c| c.served.as_deref() == Some(served_id))
            .map(|c| (c, &c.result))
    }
}

impl Run {
    /// Serves the calls of a fork's model message that its record holds (each result
    /// goes into the transcript now, with an audit entry, and is announced by the next
    /// [`Step::Replayed`]); in a replay, a call that is not in the record gets
    /// [`NOT_IN_RECORD`] instead of running. One entry per call, `None` for calls that
    /// go through their policy as usual. Nothing is served when a hook stopped the run.
    pub(super) fn serve_from_record(
        &mut self,
        uses: &[ToolUse],
        stopped: bool,
        now: DateTime<Utc>,
    ) -> Vec<Option<ToolResult>> {
        let Some(record) = self.state.replay.as_mut().filter(|_| !stopped) else {
            return Vec::new();
        };
        let mut served = Vec::with_capacity(uses.len());
        let mut results = Vec::new();
        for u in uses {
            let fingerprint = reins_memory::fingerprint(&u.input);
            let result = record.serve(&u.id, &u.name, &fingerprint).or_else(|| {
                record
                    .strict
                    .then(|| ToolResult::cancelled(&u.id, &u.name, NOT_IN_RECORD))
            });
            if let Some(r) = &result {
                let replayed = r.metadata.contains_key("replayed_from");
                self.req_ops.log.push(DecisionRecord {
                    seq: 0,
                    at: now,
                    requirement_id: u.id.clone(),
                    tool_name: u.name.clone(),
                    kind: "record".to_owned(),
                    decision: if replayed {
                        "replayed"
                    } else {
                        "not_in_record"
                    }
                    .to_owned(),
                    via: if record.strict { "replay" } else { "fork" }.to_owned(),
                    verdict: crate::view::Verdict::Applied,
                    actor: None,
                    shown_input: u.input.clone(),
                    executed_input: None,
                    note: Some(match r.metadata.get("replayed_from") {
                        Some(from) => format!(
                            "served from the record of session `{}` (call {from}); not run again",
                            record.source
                        ),
                        None => NOT_IN_RECORD.to_owned(),
                    }),
                    view: None,
                    shown_fingerprint: Some(fingerprint.clone()),
                    executed_fingerprint: None,
                    grant_id: None,
                    policy_hash: None,
                    quorum: None,
                });
                results.push(r.clone());
            }
            served.push(result);
        }
        if !results.is_empty() {
            self.call.replayed.extend(results.iter().cloned());
            self.push(Msg::tool_results(results));
        }
        served
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn record() -> Record {
        let call = |id: &str, fp: &str| RecordedCall {
            tool: "send_email".into(),
            fingerprint: fp.into(),
            result: ToolResult::success(id, "send_email", format!("sent {id}")),
            served: None,
        };
        Record {
            source: "s1".into(),
            at: 1,
            strict: false,
            calls: vec![call("a", "f1"), call("b", "f1"), call("c", "f2")],
        }
    }

    #[test]
    fn each_entry_serves_one_call_in_order() {
        let mut r = record();
        let first = r.serve("x", "send_email", "f1").unwrap();
        assert_eq!(first.id, "x");
        assert_eq!(first.metadata["replayed_from"], "a");
        assert_eq!(
            r.serve("y", "send_email", "f1").unwrap().metadata["replayed_from"],
            "b"
        );
        assert!(
            r.serve("z", "send_email", "f1").is_none(),
            "both f1 calls are used"
        );
        assert!(
            r.serve("z", "other_tool", "f2").is_none(),
            "the tool must match too"
        );
        assert_eq!(r.served_result("y").unwrap().0.result.id, "b");
        assert!(r.served_result("nope").is_none());
    }
}
