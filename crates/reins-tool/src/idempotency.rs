//! Idempotency keys: one stable key per tool execution, for APIs that dedupe retries.
//!
//! A tool that changes something outside (sends an email, charges a card) may be cut
//! off mid-call: the process dies, the connection drops. Whoever runs the call again
//! cannot know whether the first attempt reached the far end. An API that dedupes by
//! key (Stripe's and most payment APIs' `Idempotency-Key` header, many mail APIs)
//! makes the retry harmless — if the retry carries the same key. reins gives every
//! execution such a key ([`ToolContext::idempotency_key`]):
//!
//! ```text
//! key = uuid_v8( sha256( ["reins.idempotency.v1", session_id, tool_use_id, args_fingerprint] ) )
//! ```
//!
//! - the input is the JSON array above, written compactly (each string JSON-escaped,
//!   so no two different triples hash alike);
//! - `args_fingerprint` is [`reins_message::fingerprint`] of the arguments that *run*
//!   (after an approver's edit, merged user input, a `PreActing` hook), the same
//!   fingerprint the tool-call ledger records for the call;
//! - the first 16 bytes of the SHA-256 become an RFC 9562 version-8 UUID (version and
//!   variant bits set), written lowercase with hyphens: 36 characters, which fits every
//!   idempotency-key limit we know of (Square's 45 is the tightest).
//!
//! The key is the same in every process that runs or resumes the call (nothing
//! random or time-based goes in), and it changes when a person edits the arguments
//! before approving: an edited call is a different request, and an API must not
//! answer it with the original's stored response.

use reins_message::ToolUse;
use sha2::{Digest, Sha256};

/// The HTTP header an idempotency key travels in (the IETF `Idempotency-Key` draft,
/// and Stripe's, Adyen's and most payment APIs' header).
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// The key for one execution of `tool_use_id` in `session_id` with arguments whose
/// [`fingerprint`](reins_message::fingerprint) is `args_fingerprint`: the SHA-256 of
/// the compact JSON array `["reins.idempotency.v1", session_id, tool_use_id,
/// args_fingerprint]`, its first 16 bytes written as an RFC 9562 version-8 UUID
/// (lowercase, with hyphens; 36 characters). Nothing random or time-based goes in, so
/// every process computes the same key for the same call; edited arguments make
/// another key. docs/human-in-the-loop.md ("Idempotency keys") says how to use it.
///
/// ```
/// use reins_tool::idempotency_key;
/// use serde_json::json;
///
/// let fp = reins_message::fingerprint(&json!({ "to": "a@example.com" }));
/// let key = idempotency_key("session-1", "call_1", &fp);
/// assert_eq!(key.len(), 36);
/// assert_eq!(&key[14..15], "8"); // a version-8 UUID
/// assert_eq!(key, idempotency_key("session-1", "call_1", &fp));
/// let edited = reins_message::fingerprint(&json!({ "to": "b@example.com" }));
/// assert_ne!(key, idempotency_key("session-1", "call_1", &edited));
/// ```
pub fn idempotency_key(session_id: &str, tool_use_id: &str, args_fingerprint: &str) -> String {
    // The compact JSON array, hashed as it is written (no `Value`, no buffer): the
    // bytes are those of `json!([...]).to_string()`, which `known_key` pins.
    let mut h = Sha256::new();
    h.update(b"[\"reins.idempotency.v1\"");
    for part in [session_id, tool_use_id, args_fingerprint] {
        h.update(b",");
        // A `&str` always serializes; writing into a hasher cannot fail.
        let _ = serde_json::to_writer(&mut h, part);
    }
    h.update(b"]");
    let digest = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x80; // version 8
    b[8] = (b[8] & 0x3f) | 0x80; // variant 10
    let mut out = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    out
}

/// The key of `tool_use` run in `session_id` with the arguments it carries.
pub(crate) fn key_for_use(session_id: &str, tool_use: &ToolUse) -> String {
    idempotency_key(
        session_id,
        &tool_use.id,
        &reins_message::fingerprint(&tool_use.input),
    )
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn known_key() {
        // Pinned: the derivation is a contract (keys must survive upgrades, or a
        // retry after an upgrade would not be deduplicated).
        // Computed independently: sha256 of
        // `["reins.idempotency.v1","s","c","44136fa3…"]` (the fingerprint of `{}`), its
        // first 16 bytes with the version-8 and variant bits set.
        let fp = reins_message::fingerprint(&json!({}));
        assert_eq!(
            idempotency_key("s", "c", &fp),
            "1ac43a02-05b9-8e07-b145-cb8a3edaf670"
        );
    }

    #[test]
    fn every_part_counts_and_parts_do_not_run_together() {
        let fp = reins_message::fingerprint(&json!({"a": 1}));
        let base = idempotency_key("s1", "c1", &fp);
        assert_ne!(base, idempotency_key("s2", "c1", &fp));
        assert_ne!(base, idempotency_key("s1", "c2", &fp));
        assert_ne!(
            idempotency_key("ab", "c", &fp),
            idempotency_key("a", "bc", &fp)
        );
        assert_ne!(
            idempotency_key("a\",\"b", "c", &fp),
            idempotency_key("a", "b\",\"c", &fp)
        );
    }

    #[test]
    fn the_key_is_a_version_8_uuid() {
        let k = idempotency_key("s", "c", "f");
        let parts: Vec<&str> = k.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('8'));
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"));
        assert!(k.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
    }
}
