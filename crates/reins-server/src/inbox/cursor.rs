//! The page cursor of the inbox's lists and of A2A's `ListTasks`: the sort key of the
//! last item of a page — newest first, then two strings (a session and a requirement
//! id; a session and the tag `sessions`; a task id and a tag bound to the listing) —
//! as hex-encoded JSON. Opaque to clients; a cursor this server did not give out
//! decodes to nothing.

use std::cmp::Reverse;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

/// Where an item sorts: newest first; ties by the first string, then the second.
pub(crate) type Key = (Reverse<DateTime<Utc>>, String, String);

/// The cursor of the page that follows the item with this key.
pub(crate) fn encode(k: &Key) -> String {
    let raw = json!([k.0.0.to_rfc3339(), k.1, k.2]).to_string();
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The key a cursor names, if it is one [`encode`] made.
pub(crate) fn decode(c: &str) -> Option<Key> {
    if c.len() % 2 != 0 || c.len() > 4096 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..c.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(c.get(i..i + 2)?, 16).ok())
        .collect();
    let v: Value = serde_json::from_slice(&bytes?).ok()?;
    let at = DateTime::parse_from_rfc3339(v.get(0)?.as_str()?).ok()?;
    Some((
        Reverse(at.with_timezone(&Utc)),
        v.get(1)?.as_str()?.to_owned(),
        v.get(2)?.as_str()?.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_cursor_names_the_key_it_was_made_from() {
        let at = DateTime::parse_from_rfc3339("2025-03-04T05:06:07.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        let key = (Reverse(at), "alice/chat-1".to_owned(), "call_ü".to_owned());
        let c = encode(&key);
        assert!(c.bytes().all(|b| b.is_ascii_hexdigit()), "{c}");
        assert_eq!(decode(&c), Some(key));
    }

    #[test]
    fn anything_else_decodes_to_nothing() {
        let long = "a".repeat(4098);
        let not_a_key = json!(["yesterday", "s", "r"])
            .to_string()
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect::<String>();
        for bad in [
            "",
            "zz",
            "abc",
            "üü",
            "7b7d",
            long.as_str(),
            not_a_key.as_str(),
        ] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
