//! JSON Schemas: generating them from Rust types, and checking arguments against them.
//!
//! Generation uses schemars (draft 2020-12, subschemas inlined, no `$schema` or
//! top-level `title`), so doc comments become `description`s. The validator is small and
//! covers what tool schemas use: `type`, `properties`, `required`,
//! `additionalProperties`, `items`/`prefixItems`, `enum`, `const`, `anyOf`/`oneOf`/
//! `allOf`/`not`, local `$ref`s, and the numeric, length and size bounds. Other
//! keywords (`pattern`, `format`, ...) are accepted and not checked.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

use crate::error::Error;

/// The most problems one validation reports.
const MAX_PROBLEMS: usize = 10;
/// How deep the validator follows nested schemas (guards against `$ref` cycles).
const MAX_DEPTH: usize = 64;

/// The JSON Schema of `T`, as sent to models.
///
/// ```
/// #[derive(schemars::JsonSchema)]
/// struct Args {
///     /// The file to read.
///     path: String,
/// }
/// let s = reins_tool::schema_for::<Args>();
/// assert_eq!(s["type"], "object");
/// assert_eq!(s["properties"]["path"]["description"], "The file to read.");
/// assert_eq!(s["required"][0], "path");
/// ```
pub fn schema_for<T: JsonSchema + ?Sized>() -> Value {
    let settings = SchemaSettings::draft2020_12().with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    });
    let mut value = settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    if let Value::Object(map) = &mut value {
        map.remove("title");
    }
    value
}

/// Checks that a tool's argument schema describes a JSON object.
pub(crate) fn check_parameters(tool: &str, schema: &Value) -> Result<(), Error> {
    let invalid = |message: &str| Error::InvalidSchema {
        tool: tool.to_owned(),
        message: message.to_owned(),
    };
    let Value::Object(map) = schema else {
        return Err(invalid("the schema must be a JSON object"));
    };
    match map.get("type") {
        Some(Value::String(t)) if t == "object" => Ok(()),
        Some(other) => Err(invalid(&format!(
            "the arguments must be an object (`\"type\": \"object\"`), not {other}; \
             wrap them in a struct (or use `NoArgs` for a tool without arguments)"
        ))),
        None => Err(invalid("the schema has no `\"type\": \"object\"`")),
    }
}

/// Checks `value` against `schema`. On failure, returns each problem as a sentence that
/// names where it is (`items[2].name: expected string, got number`), at most ten.
///
/// ```
/// use serde_json::json;
/// let schema = json!({
///     "type": "object",
///     "properties": { "filename": { "type": "string" } },
///     "required": ["filename"]
/// });
/// assert!(reins_tool::validate(&schema, &json!({ "filename": "a.txt" })).is_ok());
/// let problems = reins_tool::validate(&schema, &json!({})).unwrap_err();
/// assert_eq!(problems, ["missing field `filename`"]);
/// ```
pub fn validate(schema: &Value, value: &Value) -> Result<(), Vec<String>> {
    let mut v = Validator {
        root: schema,
        problems: Vec::new(),
    };
    v.check(schema, value, "", 0);
    if v.problems.is_empty() {
        Ok(())
    } else {
        Err(v.problems)
    }
}

struct Validator<'a> {
    root: &'a Value,
    problems: Vec<String>,
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(value: &Value, ty: &str) -> bool {
    match ty {
        "integer" => match value {
            Value::Number(n) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            _ => false,
        },
        "number" => value.is_number(),
        other => type_name(value) == other,
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn short(value: &Value) -> String {
    let s = value.to_string();
    if s.chars().count() > 40 {
        let cut: String = s.chars().take(40).collect();
        format!("{cut}…")
    } else {
        s
    }
}

impl Validator<'_> {
    fn report(&mut self, path: &str, problem: String) {
        if self.problems.len() < MAX_PROBLEMS {
            if path.is_empty() {
                self.problems.push(problem);
            } else {
                self.problems.push(format!("{path}: {problem}"));
            }
        }
    }

    /// Whether `value` matches `schema`, without reporting.
    fn matches(&self, schema: &Value, value: &Value, depth: usize) -> bool {
        let mut probe = Validator {
            root: self.root,
            problems: Vec::new(),
        };
        probe.check(schema, value, "", depth);
        probe.problems.is_empty()
    }

    fn check(&mut self, schema: &Value, value: &Value, path: &str, depth: usize) {
        if depth > MAX_DEPTH || self.problems.len() >= MAX_PROBLEMS {
            return;
        }
        let s = match schema {
            Value::Bool(true) => return,
            Value::Bool(false) => {
                self.report(path, "no value is allowed here".to_owned());
                return;
            }
            Value::Object(s) => s,
            _ => return,
        };

        if let Some(Value::String(r)) = s.get("$ref") {
            match r.strip_prefix('#').and_then(|p| self.root.pointer(p)) {
                Some(target) => self.check(target, value, path, depth + 1),
                None => self.report(
                    path,
                    format!("the schema refers to `{r}`, which it does not define"),
                ),
            }
        }

        if let Some(ty) = s.get("type") {
            let allowed: Vec<&str> = match ty {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !allowed.is_empty() && !allowed.iter().any(|t| has_type(value, t)) {
                self.report(
                    path,
                    format!(
                        "expected {}, got {} {}",
                        allowed.join(" or "),
                        type_name(value),
                        short(value)
                    ),
                );
                return;
            }
        }

        if let Some(Value::Array(options)) = s.get("enum") {
            if !options.contains(value) {
                let list: Vec<String> = options.iter().map(short).collect();
                self.report(
                    path,
                    format!("{} is not one of {}", short(value), list.join(", ")),
                );
            }
        }
        if let Some(c) = s.get("const") {
            if c != value {
                self.report(path, format!("expected {}, got {}", short(c), short(value)));
            }
        }

        self.check_combinators(s, value, path, depth);

        match value {
            Value::Object(obj) => self.check_object(s, obj, path, depth),
            Value::Array(items) => self.check_array(s, items, path, depth),
            Value::String(text) => self.check_string(s, text, path),
            Value::Number(n) => self.check_number(s, n.as_f64(), value, path),
            _ => {}
        }
    }

    fn check_combinators(
        &mut self,
        s: &Map<String, Value>,
        value: &Value,
        path: &str,
        depth: usize,
    ) {
        if let Some(Value::Array(all)) = s.get("allOf") {
            for sub in all {
                self.check(sub, value, path, depth + 1);
            }
        }
        if let Some(Value::Array(any)) = s.get("anyOf") {
            if !any.iter().any(|sub| self.matches(sub, value, depth + 1)) {
                self.report(
                    path,
                    format!("{} matches none of the allowed shapes", short(value)),
                );
            }
        }
        if let Some(Value::Array(one)) = s.get("oneOf") {
            let n = one
                .iter()
                .filter(|sub| self.matches(sub, value, depth + 1))
                .count();
            if n != 1 {
                let why = if n == 0 { "none" } else { "more than one" };
                self.report(
                    path,
                    format!(
                        "{} matches {why} of the allowed shapes (exactly one is required)",
                        short(value)
                    ),
                );
            }
        }
        if let Some(not) = s.get("not") {
            if self.matches(not, value, depth + 1) {
                self.report(path, format!("{} is not allowed here", short(value)));
            }
        }
    }

    fn check_object(
        &mut self,
        s: &Map<String, Value>,
        obj: &Map<String, Value>,
        path: &str,
        depth: usize,
    ) {
        if let Some(Value::Array(required)) = s.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(name) {
                    self.report(path, format!("missing field `{name}`"));
                }
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        // Fields in key order, whatever order the map keeps (serde_json's
        // `preserve_order` may be on in the program), so that the same arguments always
        // give the same problems in the same order.
        let mut fields: Vec<(&String, &Value)> = obj.iter().collect();
        fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (key, val) in fields {
            match props.and_then(|p| p.get(key)) {
                Some(sub) => self.check(sub, val, &join(path, key), depth + 1),
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        let mut known: Vec<&str> = props
                            .map(|p| p.keys().map(String::as_str).collect())
                            .unwrap_or_default();
                        known.sort_unstable();
                        self.report(
                            path,
                            format!(
                                "unknown field `{key}`, expected one of: {}",
                                known.join(", ")
                            ),
                        );
                    }
                    Some(sub @ Value::Object(_)) => {
                        self.check(sub, val, &join(path, key), depth + 1)
                    }
                    _ => {}
                },
            }
        }
        if let Some(min) = s.get("minProperties").and_then(Value::as_u64) {
            if (obj.len() as u64) < min {
                self.report(
                    path,
                    format!("expected at least {min} fields, got {}", obj.len()),
                );
            }
        }
    }

    fn check_array(&mut self, s: &Map<String, Value>, items: &[Value], path: &str, depth: usize) {
        let prefix = s.get("prefixItems").and_then(Value::as_array);
        let skip = prefix.map_or(0, Vec::len);
        if let Some(prefix) = prefix {
            for (i, (sub, item)) in prefix.iter().zip(items).enumerate() {
                self.check(sub, item, &format!("{path}[{i}]"), depth + 1);
            }
        }
        if let Some(sub) = s.get("items").filter(|i| i.is_object() || i.is_boolean()) {
            for (i, item) in items.iter().enumerate().skip(skip) {
                self.check(sub, item, &format!("{path}[{i}]"), depth + 1);
            }
        }
        let len = items.len() as u64;
        if let Some(min) = s.get("minItems").and_then(Value::as_u64) {
            if len < min {
                self.report(path, format!("expected at least {min} items, got {len}"));
            }
        }
        if let Some(max) = s.get("maxItems").and_then(Value::as_u64) {
            if len > max {
                self.report(path, format!("expected at most {max} items, got {len}"));
            }
        }
    }

    fn check_string(&mut self, s: &Map<String, Value>, text: &str, path: &str) {
        let len = text.chars().count() as u64;
        if let Some(min) = s.get("minLength").and_then(Value::as_u64) {
            if len < min {
                self.report(
                    path,
                    format!("expected at least {min} characters, got {len}"),
                );
            }
        }
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64) {
            if len > max {
                self.report(
                    path,
                    format!("expected at most {max} characters, got {len}"),
                );
            }
        }
    }

    fn check_number(&mut self, s: &Map<String, Value>, n: Option<f64>, value: &Value, path: &str) {
        let Some(n) = n else { return };
        let bound = |k: &str| s.get(k).and_then(Value::as_f64);
        if let Some(min) = bound("minimum").filter(|m| n < *m) {
            self.report(
                path,
                format!("{} is less than the minimum {min}", short(value)),
            );
        }
        if let Some(max) = bound("maximum").filter(|m| n > *m) {
            self.report(
                path,
                format!("{} is greater than the maximum {max}", short(value)),
            );
        }
        if let Some(min) = bound("exclusiveMinimum").filter(|m| n <= *m) {
            self.report(path, format!("{} must be greater than {min}", short(value)));
        }
        if let Some(max) = bound("exclusiveMaximum").filter(|m| n >= *m) {
            self.report(path, format!("{} must be less than {max}", short(value)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(schema: &Value, value: Value) -> Vec<String> {
        validate(schema, &value).err().unwrap_or_default()
    }

    fn file_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "filename": { "type": "string", "minLength": 1 },
                "mode": { "type": "string", "enum": ["read", "write"] },
                "lines": { "type": ["integer", "null"], "minimum": 0, "maximum": 1000 },
                "tags": { "type": "array", "items": { "type": "string" }, "maxItems": 2 },
                "owner": {
                    "type": "object",
                    "properties": { "name": { "type": "string" } },
                    "required": ["name"],
                    "additionalProperties": false
                }
            },
            "required": ["filename"]
        })
    }

    #[test]
    fn accepts_valid_arguments() {
        let s = file_schema();
        let ok = json!({
            "filename": "a.txt", "mode": "read", "lines": 3, "tags": ["x"],
            "owner": { "name": "ann" }, "extra": true
        });
        assert_eq!(validate(&s, &ok), Ok(()));
        assert_eq!(
            validate(&s, &json!({ "filename": "a", "lines": null })),
            Ok(())
        );
        assert_eq!(
            validate(&s, &json!({ "filename": "a", "lines": 2.0 })),
            Ok(())
        );
    }

    #[test]
    fn names_each_problem_and_where_it_is() {
        let s = file_schema();
        assert_eq!(problems(&s, json!({})), ["missing field `filename`"]);
        assert_eq!(
            problems(&s, json!({ "filename": 7 })),
            ["filename: expected string, got integer 7"]
        );
        assert_eq!(
            problems(&s, json!({ "filename": "a", "mode": "delete" })),
            [r#"mode: "delete" is not one of "read", "write""#]
        );
        assert_eq!(
            problems(&s, json!({ "filename": "a", "lines": 1.5 })),
            ["lines: expected integer or null, got number 1.5"]
        );
        assert_eq!(
            problems(&s, json!({ "filename": "a", "lines": 5000 })),
            ["lines: 5000 is greater than the maximum 1000"]
        );
        assert_eq!(
            problems(&s, json!({ "filename": "a", "tags": ["x", 2, "z"] })),
            [
                "tags[1]: expected string, got integer 2",
                "tags: expected at most 2 items, got 3"
            ]
        );
        assert_eq!(
            problems(&s, json!({ "filename": "", "owner": { "nom": "x" } })),
            [
                "filename: expected at least 1 characters, got 0",
                "owner: missing field `name`",
                "owner: unknown field `nom`, expected one of: name"
            ]
        );
        assert_eq!(problems(&s, json!([1])), ["expected object, got array [1]"]);
    }

    #[test]
    fn follows_local_refs_and_combinators() {
        let s = json!({
            "type": "object",
            "properties": {
                "node": { "$ref": "#/$defs/Node" },
                "either": { "anyOf": [{ "type": "string" }, { "type": "integer" }] },
                "exactly": { "oneOf": [{ "type": "integer" }, { "type": "number", "minimum": 10 }] },
                "missing": { "$ref": "#/$defs/Nope" }
            },
            "$defs": {
                "Node": {
                    "type": "object",
                    "properties": { "next": { "anyOf": [{ "$ref": "#/$defs/Node" }, { "type": "null" }] } },
                    "required": ["next"]
                }
            }
        });
        assert_eq!(
            validate(
                &s,
                &json!({ "node": { "next": { "next": null } }, "either": 3, "exactly": 12.5 })
            ),
            Ok(())
        );
        assert_eq!(
            problems(&s, json!({ "node": { "next": { "nxt": null } } })),
            [r#"node.next: {"nxt":null} matches none of the allowed shapes"#]
        );
        assert_eq!(
            problems(&s, json!({ "either": true })),
            ["either: true matches none of the allowed shapes"]
        );
        assert_eq!(
            problems(&s, json!({ "exactly": 12 })),
            ["exactly: 12 matches more than one of the allowed shapes (exactly one is required)"]
        );
        assert_eq!(
            problems(&s, json!({ "missing": 1 })),
            ["missing: the schema refers to `#/$defs/Nope`, which it does not define"]
        );
    }

    #[test]
    fn reports_at_most_ten_problems_and_survives_ref_cycles() {
        let s = json!({ "type": "array", "items": { "type": "string" } });
        assert_eq!(
            problems(&s, json!((0..50).collect::<Vec<_>>())).len(),
            MAX_PROBLEMS
        );
        let cyclic = json!({ "$ref": "#" });
        assert_eq!(validate(&cyclic, &json!(1)), Ok(()));
    }

    #[test]
    fn parameters_must_be_an_object_schema() {
        assert!(check_parameters("t", &json!({ "type": "object" })).is_ok());
        let e = check_parameters("t", &json!({ "type": "string" })).unwrap_err();
        assert!(e.to_string().contains("NoArgs"), "{e}");
        assert!(check_parameters("t", &json!({})).is_err());
        assert!(check_parameters("t", &json!(true)).is_err());
    }
}
