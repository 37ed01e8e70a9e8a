//! The hash chain: [`ChainEntry`], its canonical encoding and its hash.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The `prev` of a session's first entry: 64 zeros (no entry before it).
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// An audit-trail entry: a decision, a refusal, a grant use, a policy verdict, a
    /// reconcile — whatever the agent writes to the decision log.
    Decision,
    /// A tool call claimed in the ledger (first claim or takeover of an expired lease).
    Claim,
    /// A tool call's result recorded in the ledger.
    Finish,
    /// A signed [`Receipt`](crate::Receipt) (the body is a [`SignedReceipt`](crate::SignedReceipt)).
    Receipt,
}

impl EntryKind {
    /// The kind as written (`decision`, `claim`, `finish`, `receipt`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Decision => "decision",
            Self::Claim => "claim",
            Self::Finish => "finish",
            Self::Receipt => "receipt",
        }
    }
}

/// The last entry of a chain, as the next one links to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainHead {
    /// The last entry's sequence number (0 for an empty chain).
    pub seq: u64,
    /// The last entry's hash ([`GENESIS`] for an empty chain).
    pub hash: String,
}

impl ChainHead {
    /// The head of an empty chain.
    pub fn genesis() -> Self {
        Self {
            seq: 0,
            hash: GENESIS.to_owned(),
        }
    }
}

impl Default for ChainHead {
    fn default() -> Self {
        Self::genesis()
    }
}

/// One link of a session's chain.
///
/// `hash` is the lowercase hex SHA-256 of the RFC 8785 canonical JSON of the entry's
/// other members (`session`, `seq`, `kind`, `at`, `body`, `prev`); `prev` is the hash
/// of the entry before it ([`GENESIS`] for the first), so changing, removing or
/// reordering any entry breaks a link a verifier checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainEntry {
    /// The session the entry belongs to.
    pub session: String,
    /// Its position in the session's chain: 1, 2, ...
    pub seq: u64,
    /// What it records.
    pub kind: EntryKind,
    /// When it was written (RFC 3339, UTC, as the store formats it).
    pub at: String,
    /// What it records (see docs/evidence.md for each kind's members).
    pub body: Value,
    /// The hash of the entry before it.
    pub prev: String,
    /// The hash of this entry.
    pub hash: String,
}

/// The members an entry's hash covers (every member but `hash`).
#[derive(Serialize)]
struct Unsealed<'a> {
    session: &'a str,
    seq: u64,
    kind: EntryKind,
    at: &'a str,
    body: &'a Value,
    prev: &'a str,
}

impl ChainEntry {
    /// The entry that follows `head` in `session`'s chain, sealed (its hash computed).
    pub fn next(
        session: &str,
        head: &ChainHead,
        kind: EntryKind,
        at: impl Into<String>,
        body: Value,
    ) -> Result<Self> {
        let mut entry = Self {
            session: session.to_owned(),
            seq: head.seq + 1,
            kind,
            at: at.into(),
            body,
            prev: head.hash.clone(),
            hash: String::new(),
        };
        entry.hash = entry.content_hash()?;
        Ok(entry)
    }

    /// The hash this entry's members give (what `hash` must equal).
    pub fn content_hash(&self) -> Result<String> {
        let unsealed = Unsealed {
            session: &self.session,
            seq: self.seq,
            kind: self.kind,
            at: &self.at,
            body: &self.body,
            prev: &self.prev,
        };
        digest(&unsealed, "a chain entry")
    }

    /// The head this entry makes when it is the last one.
    pub fn head(&self) -> ChainHead {
        ChainHead {
            seq: self.seq,
            hash: self.hash.clone(),
        }
    }

    /// The entry as one JSON text (its stored form).
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|source| Error::Encode {
            what: "a chain entry",
            source,
        })
    }
}

/// The RFC 8785 canonical JSON of `value`.
pub fn canonical<T: Serialize + ?Sized>(value: &T, what: &'static str) -> Result<Vec<u8>> {
    serde_jcs::to_vec(value).map_err(|source| Error::Encode { what, source })
}

/// The lowercase hex SHA-256 of `value`'s canonical JSON: how every hash in the
/// evidence is taken (entries, a finished call's result).
pub fn digest<T: Serialize + ?Sized>(value: &T, what: &'static str) -> Result<String> {
    Ok(hex(&Sha256::digest(canonical(value, what)?)))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// The body of a [`EntryKind::Decision`] entry: the requirement it is about and what
/// the agent records (decision, actor, door, fingerprint ...).
pub fn decision_body(requirement_id: &str, record: &Value) -> Value {
    json!({ "requirement_id": requirement_id, "record": record })
}

/// The body of a [`EntryKind::Claim`] entry: the call, the fingerprint of the arguments
/// it is claimed with, and which lease this is (1 for the first, more for takeovers).
pub fn claim_body(tool_use_id: &str, fingerprint: &str, attempt: u32) -> Value {
    json!({ "tool_use_id": tool_use_id, "fingerprint": fingerprint, "attempt": attempt })
}

/// The body of a [`EntryKind::Finish`] entry: the call, its outcome kind (`success` or
/// `error`) and the [`digest`] of its recorded result.
pub fn finish_body(tool_use_id: &str, outcome: &str, result_digest: &str) -> Value {
    json!({ "tool_use_id": tool_use_id, "outcome": outcome, "result_digest": result_digest })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_hash_covers_every_member_but_itself() {
        let e = ChainEntry::next(
            "s",
            &ChainHead::genesis(),
            EntryKind::Claim,
            "2026-01-01T00:00:00.000000Z",
            claim_body("call_1", "fp", 1),
        )
        .unwrap();
        assert_eq!(e.seq, 1);
        assert_eq!(e.prev, GENESIS);
        assert_eq!(e.hash, e.content_hash().unwrap());
        // The canonical text the hash is taken over, keys sorted, no spaces.
        let text = String::from_utf8(
            canonical(
                &Unsealed {
                    session: &e.session,
                    seq: e.seq,
                    kind: e.kind,
                    at: &e.at,
                    body: &e.body,
                    prev: &e.prev,
                },
                "test",
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            text,
            format!(
                r#"{{"at":"2026-01-01T00:00:00.000000Z","body":{{"attempt":1,"fingerprint":"fp","tool_use_id":"call_1"}},"kind":"claim","prev":"{GENESIS}","seq":1,"session":"s"}}"#
            )
        );
        let mut other = e.clone();
        other.at.push('x');
        assert_ne!(other.content_hash().unwrap(), e.hash);
    }

    #[test]
    fn hex_is_lowercase_two_digits_a_byte() {
        assert_eq!(hex(&[0, 0xab, 0x0f]), "00ab0f");
    }
}
