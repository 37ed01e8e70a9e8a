//! A small JSON reader: flat objects (and arrays of them), enough for the benchmarks'
//! output, criterion's estimates and the MCP conformance suite's `checks.json` (xtask
//! keeps few dependencies, so no serde_json here).

use std::collections::BTreeMap;

/// A flat JSON object, by key.
pub(crate) type Obj = BTreeMap<String, Value>;

/// A JSON value as the benchmarks print them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Number(f64),
    Str(String),
    Bool(bool),
    Null,
    /// A nested object or array, kept as text.
    Other,
}

impl Value {
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(*n),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

struct Reader<'a> {
    s: &'a [u8],
    i: usize,
}

impl Reader<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected `{}` at byte {}", c as char, self.i))
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        while let Some(&c) = self.s.get(self.i) {
            self.i += 1;
            match c {
                b'"' => return String::from_utf8(out).map_err(|e| e.to_string()),
                b'\\' => {
                    let e = *self.s.get(self.i).ok_or("unterminated escape")?;
                    self.i += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'u' => {
                            // Keep \uXXXX as is: the benchmarks' keys are ASCII.
                            out.extend_from_slice(b"\\u");
                        }
                        other => out.push(other),
                    }
                }
                _ => out.push(c),
            }
        }
        Err("unterminated string".to_owned())
    }

    /// Skips a nested object or array.
    fn skip_nested(&mut self) -> Result<(), String> {
        let mut depth = 0usize;
        while let Some(&c) = self.s.get(self.i) {
            match c {
                b'"' => {
                    self.string()?;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        self.i += 1;
                        return Ok(());
                    }
                }
                _ => {}
            }
            self.i += 1;
        }
        Err("unterminated object".to_owned())
    }

    fn value(&mut self) -> Result<Value, String> {
        match self.peek().ok_or("unexpected end")? {
            b'"' => Ok(Value::Str(self.string()?)),
            b'{' | b'[' => {
                self.skip_nested()?;
                Ok(Value::Other)
            }
            _ => {
                let start = self.i;
                while self.i < self.s.len() && !matches!(self.s[self.i], b',' | b'}' | b']') {
                    self.i += 1;
                }
                let word = std::str::from_utf8(&self.s[start..self.i])
                    .map_err(|e| e.to_string())?
                    .trim();
                match word {
                    "null" | "NaN" => Ok(Value::Null),
                    "true" => Ok(Value::Bool(true)),
                    "false" => Ok(Value::Bool(false)),
                    w => w
                        .parse()
                        .map(Value::Number)
                        .map_err(|_| format!("not a JSON value: `{w}`")),
                }
            }
        }
    }
}

impl Reader<'_> {
    /// One object's top-level members (nested values are skipped).
    fn object(&mut self) -> Result<Obj, String> {
        let mut out = Obj::new();
        self.expect(b'{')?;
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(out);
        }
        loop {
            let k = self.string()?;
            self.expect(b':')?;
            let v = self.value()?;
            out.insert(k, v);
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(out);
                }
                _ => return Err(format!("expected `,` or `}}` at byte {}", self.i)),
            }
        }
    }
}

/// Parses one JSON object's top-level members.
pub(crate) fn parse_object(text: &str) -> Result<Obj, String> {
    Reader {
        s: text.as_bytes(),
        i: 0,
    }
    .object()
}

/// Parses an array of objects (each one's top-level members).
pub(crate) fn parse_objects(text: &str) -> Result<Vec<Obj>, String> {
    let mut r = Reader {
        s: text.as_bytes(),
        i: 0,
    };
    let mut out = Vec::new();
    r.expect(b'[')?;
    if r.peek() == Some(b']') {
        return Ok(out);
    }
    loop {
        out.push(r.object()?);
        match r.peek() {
            Some(b',') => r.i += 1,
            Some(b']') => return Ok(out),
            _ => return Err(format!("expected `,` or `]` at byte {}", r.i)),
        }
    }
}

/// The string member `key` anywhere in `text` (first occurrence).
pub(crate) fn json_string(text: &str, key: &str) -> Option<String> {
    let at = text.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = text[at..].trim_start().strip_prefix(':')?;
    let mut r = Reader {
        s: rest.as_bytes(),
        i: 0,
    };
    r.string().ok()
}

/// The number member `inner` of the object member `outer` (criterion's estimates:
/// `"median": { ..., "point_estimate": 123.4, ... }`).
pub(crate) fn json_number_in(text: &str, outer: &str, inner: &str) -> Option<f64> {
    let at = text.find(&format!("\"{outer}\""))?;
    let rest = &text[at..];
    let open = rest.find('{')?;
    // The member's object ends at its matching brace.
    let mut depth = 0usize;
    let mut end = None;
    for (i, c) in rest[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    end = Some(open + i + 1);
                    break;
                }
            }
            _ => {}
        }
    }
    let body = &rest[open..end?];
    // Top-level members only: nested objects (confidence_interval) are skipped.
    let obj = parse_object(body).ok()?;
    obj.get(inner)?.as_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_peer_output() {
        let text = r#"{
  "framework": "agno",
  "version": "2.1.0",
  "construct_us": 13.9,
  "sqlite_growth_turns": 100,
  "peak_rss_mb": null,
  "nested": {"a": [1, {"b": "}"}]},
  "ok": true
}"#;
        let o = parse_object(text).unwrap();
        assert_eq!(o["framework"].as_str(), Some("agno"));
        assert_eq!(o["construct_us"].as_f64(), Some(13.9));
        assert_eq!(o["sqlite_growth_turns"].as_f64(), Some(100.0));
        assert_eq!(o["peak_rss_mb"], Value::Null);
        assert_eq!(o["nested"], Value::Other);
        assert_eq!(o["ok"], Value::Bool(true));
        assert!(parse_object("{\"a\": }").is_err());
    }

    #[test]
    fn reads_an_array_of_objects() {
        let text = r#"[
  {"id": "a", "status": "SUCCESS", "details": {"x": [1, "]"]}},
  {"id": "b", "status": "FAILURE", "errorMessage": "said \"no\""}
]"#;
        let v = parse_objects(text).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0]["id"].as_str(), Some("a"));
        assert_eq!(v[1]["status"].as_str(), Some("FAILURE"));
        assert_eq!(v[1]["errorMessage"].as_str(), Some("said \"no\""));
        assert!(parse_objects("[]").unwrap().is_empty());
        assert!(parse_objects("[{\"a\": 1} {}]").is_err());
    }

    #[test]
    fn reads_criterion_estimates() {
        let text = r#"{"mean":{"confidence_interval":{"confidence_level":0.95,"lower_bound":1.0,"upper_bound":3.0},"point_estimate":2.0,"standard_error":0.1},"median":{"confidence_interval":{"confidence_level":0.95,"lower_bound":4.0,"upper_bound":6.0},"point_estimate":5.5,"standard_error":0.2}}"#;
        assert_eq!(json_number_in(text, "median", "point_estimate"), Some(5.5));
        assert_eq!(json_number_in(text, "mean", "point_estimate"), Some(2.0));
        let bench = r#"{"group_id":"agent","function_id":"construct","value_str":null,"full_id":"agent/construct","directory_name":"agent/construct"}"#;
        assert_eq!(
            json_string(bench, "full_id").as_deref(),
            Some("agent/construct")
        );
    }
}
