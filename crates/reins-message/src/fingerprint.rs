//! Argument fingerprints: what the tool-call ledger records, and what idempotency keys
//! are made from.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The SHA-256 (lowercase hex) of `input` written as canonical JSON: object keys
/// sorted, no whitespace. Two argument objects that differ only in key order have the
/// same fingerprint, whatever `serde_json` features the build enables.
///
/// ```
/// use serde_json::json;
/// let a = reins_message::fingerprint(&json!({ "path": "a.txt", "force": true }));
/// let b = reins_message::fingerprint(&json!({ "force": true, "path": "a.txt" }));
/// assert_eq!(a, b);
/// assert_eq!(a.len(), 64);
/// ```
pub fn fingerprint(input: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(input, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    hex
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `value` written as canonical JSON: object keys sorted, no whitespace — the same
/// text whatever `serde_json` features the build enables (with `preserve_order`,
/// `Value::to_string` keeps insertion order). For JSON that goes into text a model
/// reads, such as a schema in a prompt.
///
/// ```
/// use serde_json::json;
/// assert_eq!(reins_message::canonical_json(&json!({"b": [1, {"d": 1, "c": 2}], "a": null})),
///            r#"{"a":null,"b":[1,{"c":2,"d":1}]}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// Writes `value` as JSON with object keys sorted.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_form_sorts_nested_keys() {
        let mut s = String::new();
        write_canonical(&json!({"b": [{"z": 1, "a": null}], "a": "x\"y"}), &mut s);
        assert_eq!(s, r#"{"a":"x\"y","b":[{"a":null,"z":1}]}"#);
    }

    #[test]
    fn known_digest() {
        // sha256 of the two bytes `{}`
        assert_eq!(
            fingerprint(&json!({})),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert_ne!(fingerprint(&json!({"a": 1})), fingerprint(&json!({"a": 2})));
    }
}
