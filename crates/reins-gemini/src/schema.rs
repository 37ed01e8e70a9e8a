//! JSON Schema (as tools and structured output declare it) in the shape of the
//! Gemini API's `Schema` object: the subset of OpenAPI 3.0 it documents, with
//! upper-case `type` names.

use serde_json::{Map, Value};

/// The `Schema` fields the Gemini API documents; anything else is left out (the API
/// refuses unknown fields such as `$schema` or `additionalProperties`).
const KEPT: &[&str] = &[
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "default",
    "minimum",
    "maximum",
    "propertyOrdering",
];

/// `schema` as a Gemini `Schema`: `type` upper-cased (a `["string", "null"]` type
/// becomes `STRING` with `nullable: true`), `properties`, `items` and `anyOf`
/// converted in turn, `const` as a one-value `enum`, and fields the API does not
/// know left out.
pub(crate) fn gemini_schema(schema: &Value) -> Value {
    let Value::Object(obj) = schema else {
        return Value::Object(Map::new());
    };
    let mut out = Map::new();
    match obj.get("type") {
        Some(Value::String(t)) => {
            out.insert("type".into(), Value::String(t.to_ascii_uppercase()));
        }
        Some(Value::Array(types)) => {
            let names: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
            if names.contains(&"null") {
                out.insert("nullable".into(), Value::Bool(true));
            }
            if let Some(t) = names.iter().find(|t| **t != "null") {
                out.insert("type".into(), Value::String(t.to_ascii_uppercase()));
            }
        }
        _ => {}
    }
    for key in KEPT {
        if let Some(v) = obj.get(*key) {
            out.insert((*key).to_owned(), v.clone());
        }
    }
    if let Some(c) = obj.get("const") {
        out.insert("enum".into(), Value::Array(vec![c.clone()]));
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        let props: Map<String, Value> = props
            .iter()
            .map(|(k, v)| (k.clone(), gemini_schema(v)))
            .collect();
        out.insert("properties".into(), Value::Object(props));
    }
    if let Some(items) = obj.get("items") {
        out.insert("items".into(), gemini_schema(items));
    }
    if let Some(Value::Array(any)) = obj.get("anyOf").or_else(|| obj.get("oneOf")) {
        out.insert(
            "anyOf".into(),
            Value::Array(any.iter().map(gemini_schema).collect()),
        );
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_schema_becomes_the_documented_subset() {
        let s = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "city": {"type": "string", "description": "where"},
                "days": {"type": ["integer", "null"], "minimum": 1},
                "tags": {"type": "array", "items": {"type": "string", "const": "x"}}
            },
            "required": ["city"]
        });
        assert_eq!(
            gemini_schema(&s),
            json!({
                "type": "OBJECT",
                "required": ["city"],
                "properties": {
                    "city": {"type": "STRING", "description": "where"},
                    "days": {"type": "INTEGER", "nullable": true, "minimum": 1},
                    "tags": {"type": "ARRAY", "items": {"type": "STRING", "enum": ["x"]}}
                }
            })
        );
    }
}
