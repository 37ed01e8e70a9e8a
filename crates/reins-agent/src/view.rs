//! What a caller was shown, who decided, and the record of what was decided.
//!
//! - [`ViewToken`]: the pending requirements a caller saw. `resume()` approves exactly
//!   those; when the store holds a different set by the time the run commits, the call
//!   is refused with [`AgentError::StaleView`](crate::AgentError::StaleView) and nothing
//!   runs. A [`Session`](crate::Session) handle keeps its own view (updated by every
//!   read and every run it makes); callers that keep the view elsewhere (a web page
//!   between two requests) pass the token explicitly: `session.resume().at(&token)`,
//!   `session.resolve(decisions).at(&token)`.
//! - [`Actor`]: the principal a decision is made by.
//! - [`DecisionRecord`]: one entry of a session's append-only audit trail.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::AgentError;
use crate::requirement::Requirement;

/// The pending requirements a caller was shown: whether the session was paused, and
/// the ids it waited for. Compared as a set; opaque to callers, who pass it back as it
/// came (a string in JSON, `Display`/`FromStr` in Rust).
///
/// ```
/// use reins_agent::ViewToken;
///
/// let t: ViewToken = "v1p.63616c6c5f31".parse()?;
/// assert!(t.is_paused());
/// assert_eq!(t.requirement_ids(), ["call_1"]);
/// assert_eq!(t.to_string().parse::<ViewToken>()?, t);
/// assert!("not a token".parse::<ViewToken>().is_err());
/// # Ok::<(), reins_agent::AgentError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ViewToken {
    paused: bool,
    /// Sorted, without duplicates.
    ids: Vec<String>,
}

impl ViewToken {
    /// The view of a session that is (or is not) paused on these requirement ids.
    pub fn new<I, S>(paused: bool, ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut ids: Vec<String> = ids.into_iter().map(Into::into).collect();
        ids.sort_unstable();
        ids.dedup();
        Self { paused, ids }
    }

    /// The view of these requirements (paused when `paused`).
    pub fn of(paused: bool, requirements: &[Requirement]) -> Self {
        Self::new(paused, requirements.iter().map(|r| r.id.clone()))
    }

    /// Whether the session was paused in this view.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// The requirement ids the view holds, sorted.
    pub fn requirement_ids(&self) -> &[String] {
        &self.ids
    }
}

impl fmt::Display for ViewToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.paused { "v1p" } else { "v1n" })?;
        for id in &self.ids {
            f.write_str(".")?;
            for b in id.as_bytes() {
                write!(f, "{b:02x}")?;
            }
        }
        Ok(())
    }
}

impl FromStr for ViewToken {
    type Err = AgentError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| {
            AgentError::InvalidInput(format!(
                "`{}` is not a view token ({why}); pass back the token a read returned",
                crate::error::clip(s, 60)
            ))
        };
        let mut parts = s.split('.');
        let paused = match parts.next() {
            Some("v1p") => true,
            Some("v1n") => false,
            _ => return Err(bad("it must start with v1p or v1n")),
        };
        let mut ids = Vec::new();
        for part in parts {
            if part.is_empty() || part.len() % 2 != 0 {
                return Err(bad("an id is not hex"));
            }
            let bytes = (0..part.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&part[i..i + 2], 16))
                .collect::<Result<Vec<u8>, _>>()
                .map_err(|_| bad("an id is not hex"))?;
            ids.push(String::from_utf8(bytes).map_err(|_| bad("an id is not UTF-8"))?);
        }
        Ok(Self::new(paused, ids))
    }
}

impl Serialize for ViewToken {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ViewToken {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Who makes a decision: an opaque principal (a user name, an account id, a service)
/// plus optional metadata (an IP address, a ticket, a display name). Recorded in the
/// audit trail with every decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// Who.
    pub principal: String,
    /// Anything else worth keeping with the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl Actor {
    /// An actor with no metadata.
    pub fn new(principal: impl Into<String>) -> Self {
        Self {
            principal: principal.into(),
            metadata: None,
        }
    }

    /// Adds metadata.
    #[must_use]
    pub fn with_metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// The tools it may decide on, when a door scoped it: the strings of its
    /// metadata's `tools` array (`None`: no scope, every tool). The run refuses its
    /// decisions on calls of other tools ([`AgentError::NotEligible`](crate::AgentError::NotEligible)), whichever
    /// door they came through and whichever driver runs the session.
    pub fn decides_on(&self) -> Option<Vec<String>> {
        self.metadata
            .as_ref()
            .and_then(|m| m.get("tools"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
    }

    /// Scopes it to deciding on calls of these tools only (see [`Actor::decides_on`]).
    #[must_use]
    pub fn deciding_on<S: Into<String>>(mut self, tools: impl IntoIterator<Item = S>) -> Self {
        let tools: Vec<Value> = tools.into_iter().map(|t| Value::String(t.into())).collect();
        let mut metadata = match self.metadata.take() {
            Some(Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        metadata.insert("tools".to_owned(), Value::Array(tools));
        self.metadata = Some(Value::Object(metadata));
        self
    }

    /// Its roles: the strings of its metadata's `roles` array (what a
    /// [`Quorum`](crate::Quorum) with roles checks).
    pub fn roles(&self) -> Vec<String> {
        self.metadata
            .as_ref()
            .and_then(|m| m.get("roles"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Whether a recorded decision took effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// It was applied.
    Applied,
    /// It was refused and changed nothing.
    Refused {
        /// Why (`stale_view` or `expired`).
        reason: String,
        /// The error the caller got.
        detail: String,
    },
}

/// One entry of a session's audit trail ([`Session::decisions`](crate::Session::decisions)):
/// a decision about one requirement, applied or refused. Entries are append-only and
/// survive the end of the turn, export and import.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// Its position in the session's trail (1, 2, ...).
    #[serde(default)]
    pub seq: u64,
    /// When it was made.
    pub at: DateTime<Utc>,
    /// The requirement (tool use) it was about.
    pub requirement_id: String,
    /// The tool.
    pub tool_name: String,
    /// What the requirement asked for (`confirmation`, `user_input`, `external`).
    pub kind: String,
    /// `approve`, `reject`, `input`, `external_result` or `tool_result`.
    pub decision: String,
    /// How it was given: `resolve`, `resume`, `tool_results` or `message` (a new user
    /// message closed the pending call).
    pub via: String,
    /// Applied or refused.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// Who decided, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<Actor>,
    /// The arguments as the model made them (what the person was shown).
    pub shown_input: Value,
    /// The arguments that ran, when they differ (an edit, or merged user input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executed_input: Option<Value>,
    /// The note for the model (rejections) or the values supplied (input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The view the decision was made on, when the caller named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<ViewToken>,
    /// The fingerprint of `shown_input` (what the person was shown; an approval bound
    /// to it with [`Decision::shown`](crate::Decision::shown) must match it). Absent
    /// in records written before fingerprints were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown_fingerprint: Option<String>,
    /// The fingerprint of `executed_input`, when the arguments that ran differ from
    /// those shown (an edit makes a new fingerprint, recorded as such).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executed_fingerprint: Option<String>,
    /// The standing grant that allowed the call without asking (`via: "grant"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
    /// The hash of the policy set that decided (`via: "policy"`), when the approval
    /// policy names one ([`ApprovalPolicy::decide_hashed`](crate::ApprovalPolicy::decide_hashed);
    /// a Cedar policy set's, see docs/evidence.md). Signed into the decision's receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_hash: Option<String>,
    /// For an approval under a quorum: the count after it (`approvals` of `needed`).
    /// The call runs when they are equal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<QuorumCount>,
}

/// Where a quorum stood after one approval ([`DecisionRecord::quorum`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumCount {
    /// Approvals counted so far, this one included.
    pub approvals: u32,
    /// Approvals needed.
    pub needed: u32,
}

impl DecisionRecord {
    pub(crate) fn to_entry(&self) -> reins_memory::DecisionEntry {
        reins_memory::DecisionEntry {
            seq: 0,
            requirement_id: self.requirement_id.clone(),
            at: self.at,
            record: serde_json::to_value(self).unwrap_or(Value::Null),
        }
    }

    pub(crate) fn from_entry(
        session: &str,
        e: reins_memory::DecisionEntry,
    ) -> Result<Self, AgentError> {
        let mut r: Self = serde_json::from_value(e.record).map_err(|err| {
            AgentError::Store(reins_memory::Error::Corrupt {
                session: session.to_owned(),
                detail: format!(
                    "decision log entry {} (`{}`) does not parse: {err}",
                    e.seq, e.requirement_id
                ),
            })
        })?;
        r.seq = e.seq;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tokens_compare_as_sets_and_round_trip() {
        let a = ViewToken::new(true, ["b", "a", "a"]);
        let b = ViewToken::new(true, ["a", "b"]);
        assert_eq!(a, b);
        assert_ne!(a, ViewToken::new(false, ["a", "b"]));
        assert_ne!(a, ViewToken::new(true, ["a"]));
        for t in [
            a,
            ViewToken::new(false, Vec::<String>::new()),
            ViewToken::new(true, ["toolu_01.ü/x"]),
        ] {
            let s = t.to_string();
            assert_eq!(s.parse::<ViewToken>().unwrap(), t);
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(serde_json::from_str::<ViewToken>(&json).unwrap(), t);
        }
    }

    #[test]
    fn bad_tokens_are_refused_with_a_reason() {
        for bad in ["", "v2p", "v1p.zz", "v1p.6", "v1p..61", "v1p.ff"] {
            let err = bad.parse::<ViewToken>().unwrap_err();
            assert!(err.to_string().contains("not a view token"), "{bad}: {err}");
        }
    }
}
