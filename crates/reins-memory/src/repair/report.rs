//! [`RepairReport`]: what a repair changed, so nothing is silent.

use serde::{Deserialize, Serialize};

/// Why a tool result was removed from a transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemovalReason {
    /// No tool use of the assistant message before it has this id.
    Orphan,
    /// Another result for the same tool use was kept.
    Duplicate,
    /// The result sat inside an assistant message, where no provider accepts it.
    Misplaced,
}

impl std::fmt::Display for RemovalReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Orphan => "orphan",
            Self::Duplicate => "duplicate",
            Self::Misplaced => "misplaced",
        })
    }
}

/// One tool result a repair removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedResult {
    /// The message that held the result.
    pub message_id: String,
    /// The id of the tool use the result claimed to answer.
    pub tool_use_id: String,
    /// Why it was removed.
    pub reason: RemovalReason,
}

/// What a repair changed. An empty report means the transcript came back unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RepairReport {
    /// Ids of messages removed whole (partially streamed messages, and messages left
    /// empty once their results were removed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_messages: Vec<String>,
    /// Tool results removed from messages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_results: Vec<RemovedResult>,
    /// Ids of messages kept but rewritten (some of their results were removed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewritten_messages: Vec<String>,
    /// Ids of the tool uses that received a synthesized `Cancelled` result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub synthesized: Vec<String>,
    /// Ids of the messages added to hold the synthesized results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added_messages: Vec<String>,
}

impl RepairReport {
    /// Whether the repair changed nothing.
    pub fn is_empty(&self) -> bool {
        self.removed_messages.is_empty()
            && self.removed_results.is_empty()
            && self.rewritten_messages.is_empty()
            && self.synthesized.is_empty()
            && self.added_messages.is_empty()
    }

    /// Adds the changes of `other` after this report's.
    pub fn merge(&mut self, other: RepairReport) {
        self.removed_messages.extend(other.removed_messages);
        self.removed_results.extend(other.removed_results);
        self.rewritten_messages.extend(other.rewritten_messages);
        self.synthesized.extend(other.synthesized);
        self.added_messages.extend(other.added_messages);
    }
}

impl std::fmt::Display for RepairReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return f.write_str("transcript unchanged");
        }
        write!(
            f,
            "removed {} message(s) and {} tool result(s), rewrote {} message(s), synthesized {} result(s)",
            self.removed_messages.len(),
            self.removed_results.len(),
            self.rewritten_messages.len(),
            self.synthesized.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_appends_and_empty_reports_say_so() {
        let mut a = RepairReport::default();
        assert!(a.is_empty());
        assert_eq!(a.to_string(), "transcript unchanged");
        let b = RepairReport {
            synthesized: vec!["t1".into()],
            removed_results: vec![RemovedResult {
                message_id: "m".into(),
                tool_use_id: "t0".into(),
                reason: RemovalReason::Orphan,
            }],
            ..Default::default()
        };
        a.merge(b.clone());
        a.merge(b);
        assert!(!a.is_empty());
        assert_eq!(a.synthesized, vec!["t1", "t1"]);
        assert_eq!(a.removed_results.len(), 2);
        assert!(a.to_string().contains("synthesized 2"));
    }
}
