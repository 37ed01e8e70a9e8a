//! Whether a function tool goes out with `strict: true`.
//!
//! The Responses API takes a function tool's `strict` as `true` when it is left out,
//! and a strict tool's arguments are generated to fit its schema as strict mode reads
//! it: every property required, no other property allowed. A schema written for
//! ordinary JSON Schema (optional properties, open objects) would have its optional
//! arguments forced on the model. So `strict` is always sent, and it is `true` only
//! for a schema that already means the same thing in strict mode.

use serde_json::{Map, Value};

/// Keywords strict mode does not take (or that this check does not vouch for): a
/// schema that uses one anywhere is sent with `strict: false`.
const UNSUPPORTED: &[&str] = &[
    "allOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "patternProperties",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "prefixItems",
    "contains",
    "minContains",
    "maxContains",
    "minProperties",
    "maxProperties",
    "uniqueItems",
];

/// The deepest nesting of schemas (properties, items, `anyOf` branches, `$defs`)
/// sent strict: strict mode allows 10 levels, and a deeper schema is sent non-strict
/// (and not followed further).
const MAX_DEPTH: usize = 10;

/// Whether `parameters` (a function tool's JSON Schema) can be sent with
/// `strict: true` and mean what it says: the root is an object schema (not an
/// `anyOf`); every object schema in it, however deep (properties, array items,
/// `anyOf` branches, `$defs`), has `additionalProperties: false` and lists every one
/// of its properties in `required`; it uses no keyword strict mode refuses
/// (`allOf`, `oneOf`, `not`, `if`/`then`/`else`, `patternProperties`, ...), no
/// `$ref` outside the document, and nests at most 10 levels deep.
///
/// An optional argument is written as a required property whose type allows
/// `null` (`{"type": ["string", "null"]}`); a property left out of `required` makes
/// the tool non-strict. [`OpenAiResponses`](super::OpenAiResponses) sends `strict`
/// on every function tool, with this answer.
pub fn strict_compatible(parameters: &Value) -> bool {
    let Value::Object(root) = parameters else {
        return false;
    };
    root.get("type").and_then(Value::as_str) == Some("object")
        && !root.contains_key("anyOf")
        && fits(root, 0)
}

fn fits(schema: &Map<String, Value>, depth: usize) -> bool {
    if depth > MAX_DEPTH || UNSUPPORTED.iter().any(|k| schema.contains_key(*k)) {
        return false;
    }
    if let Some(r) = schema.get("$ref") {
        if !r.as_str().is_some_and(|r| r.starts_with('#')) {
            return false;
        }
    }
    if describes_object(schema) {
        if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
            return false;
        }
        let required: Vec<&str> = match schema.get("required") {
            None => Vec::new(),
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            Some(_) => return false,
        };
        let properties_fit = match schema.get("properties") {
            None => true,
            Some(Value::Object(props)) => props
                .iter()
                .all(|(k, p)| required.contains(&k.as_str()) && sub(p, depth)),
            Some(_) => false,
        };
        if !properties_fit {
            return false;
        }
    }
    if let Some(items) = schema.get("items") {
        if !sub(items, depth) {
            return false;
        }
    }
    if let Some(any_of) = schema.get("anyOf") {
        let Value::Array(branches) = any_of else {
            return false;
        };
        if !branches.iter().all(|b| sub(b, depth)) {
            return false;
        }
    }
    ["$defs", "definitions"]
        .iter()
        .all(|defs| match schema.get(*defs) {
            None => true,
            Some(Value::Object(d)) => d.values().all(|s| sub(s, depth)),
            Some(_) => false,
        })
}

/// A nested schema: an object (a boolean schema has no strict meaning).
fn sub(schema: &Value, depth: usize) -> bool {
    match schema {
        Value::Object(s) => fits(s, depth + 1),
        _ => false,
    }
}

/// An object schema: `type` is (or includes) `object`, or it lists properties.
fn describes_object(schema: &Map<String, Value>) -> bool {
    let typed = match schema.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => false,
    };
    typed || schema.contains_key("properties") || schema.contains_key("additionalProperties")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_closed_schema_with_every_property_required_is_strict() {
        assert!(strict_compatible(&json!({
            "type": "object",
            "properties": {
                "to": { "type": "string" },
                "subject": { "type": ["string", "null"] },
                "cc": { "type": "array", "items": {
                    "type": "object",
                    "properties": { "address": { "type": "string" } },
                    "required": ["address"],
                    "additionalProperties": false
                }},
                "priority": { "anyOf": [{ "type": "integer" }, { "type": "null" }] },
                "when": { "$ref": "#/$defs/time" }
            },
            "required": ["to", "subject", "cc", "priority", "when"],
            "additionalProperties": false,
            "$defs": { "time": { "type": "string", "format": "date-time" } }
        })));
        assert!(strict_compatible(
            &json!({"type": "object", "properties": {}, "additionalProperties": false})
        ));
    }

    #[test]
    fn optional_or_open_or_unsupported_is_not() {
        let not = |s: Value| assert!(!strict_compatible(&s), "{s}");
        // An optional property.
        not(json!({
            "type": "object",
            "properties": { "to": { "type": "string" }, "subject": { "type": "string" } },
            "required": ["to"],
            "additionalProperties": false
        }));
        // Open to other properties (the default).
        not(json!({
            "type": "object",
            "properties": { "to": { "type": "string" } },
            "required": ["to"]
        }));
        // A nested object that is open.
        not(json!({
            "type": "object",
            "properties": { "cc": { "type": "array", "items": {
                "type": "object", "properties": { "a": { "type": "string" } }, "required": ["a"]
            }}},
            "required": ["cc"],
            "additionalProperties": false
        }));
        // Keywords strict mode refuses; a root that is no object; a remote $ref.
        not(json!({
            "type": "object",
            "properties": { "x": { "oneOf": [{ "type": "string" }, { "type": "integer" }] } },
            "required": ["x"],
            "additionalProperties": false
        }));
        not(json!({"anyOf": [{"type": "object"}]}));
        not(json!({"type": "string"}));
        not(json!(true));
        not(json!({
            "type": "object",
            "properties": { "x": { "$ref": "https://example.com/x.json" } },
            "required": ["x"],
            "additionalProperties": false
        }));
    }

    #[test]
    fn a_property_named_like_a_keyword_is_a_property() {
        assert!(strict_compatible(&json!({
            "type": "object",
            "properties": { "not": { "type": "boolean" }, "if": { "type": "string" } },
            "required": ["not", "if"],
            "additionalProperties": false
        })));
    }

    #[test]
    fn a_deep_schema_is_not_followed_forever() {
        let mut s = json!({"type": "string"});
        for _ in 0..200 {
            s = json!({"type": "object", "properties": {"x": s}, "required": ["x"], "additionalProperties": false});
        }
        assert!(!strict_compatible(&s));
    }
}
