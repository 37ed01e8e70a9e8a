//! Providers' request validity rules, written down from their documentation as
//! checkers: a request body that breaks one of them is refused by the provider with
//! HTTP 400. Provider crates run them on the bodies they build — for documented
//! examples and for random human-in-the-loop histories (property tests) — so a
//! history that a pause, an edit, a rejection, an interrupt, a fork or a compression
//! produced never turns into a request the provider refuses.
//!
//! Each checker returns the rules the body breaks, in words (empty when it passes).

use std::collections::{HashMap, HashSet};

use serde_json::Value;

pub use super::rules_bedrock::bedrock_request_problems;

/// OpenAI Responses API (`POST /v1/responses`), as its API reference and error
/// messages state them:
///
/// - `model` is a string, `input` an array of items, each a `message` (role
///   `user`, `assistant`, `system` or `developer`, non-empty content), a
///   `reasoning`, a `function_call` or a `function_call_output` item.
/// - A `function_call_output` answers a `function_call` earlier in `input` with
///   the same `call_id` ("No tool call found for function call output"), at most
///   once; every `function_call` is answered later ("No tool output found for
///   function call"); call ids are unique.
/// - A `function_call` has a non-empty `call_id` and `name`, and `arguments` as a
///   string.
/// - A `reasoning` item has an `id` and a `summary` array, is followed (after any
///   other reasoning items of its response) by an output item of that response — an assistant `message` or a `function_call`
///   ("was provided without its required following item") — and, with `store:
///   false`, carries its `encrypted_content` (the server kept no copy).
/// - A named `tool_choice` names a tool in `tools`.
/// - A `function` tool has a `name` and says `strict` (left out, `strict` is `true`,
///   the API reference's default, and a schema not written for strict mode has its
///   optional arguments made required). A strict tool's `parameters` follow strict
///   mode ("Invalid schema for function"): every object schema in them has
///   `additionalProperties: false` and lists every property in `required`.
pub fn responses_request_problems(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if !body.get("model").is_some_and(Value::is_string) {
        problems.push("`model` is not a string".to_owned());
    }
    let Some(items) = body.get("input").and_then(Value::as_array) else {
        problems.push("`input` is not an array".to_owned());
        return problems;
    };
    let stored = body.get("store").and_then(Value::as_bool).unwrap_or(true);
    let mut calls: HashSet<&str> = HashSet::new();
    let mut answered: HashSet<&str> = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => {
                let role = item.get("role").and_then(Value::as_str).unwrap_or("");
                if !["user", "assistant", "system", "developer"].contains(&role) {
                    problems.push(format!("input[{i}]: message role `{role}` is not allowed"));
                }
                let empty = match item.get("content") {
                    Some(Value::String(s)) => s.is_empty(),
                    Some(Value::Array(a)) => a.is_empty(),
                    _ => true,
                };
                if empty {
                    problems.push(format!("input[{i}]: message content is empty"));
                }
            }
            "function_call" => {
                let id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
                if id.is_empty() {
                    problems.push(format!("input[{i}]: function_call without a call_id"));
                }
                if item
                    .get("name")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    problems.push(format!("input[{i}]: function_call without a name"));
                }
                if !item.get("arguments").is_some_and(Value::is_string) {
                    problems.push(format!("input[{i}]: function_call arguments not a string"));
                }
                if !calls.insert(id) {
                    problems.push(format!("input[{i}]: call_id `{id}` used twice"));
                }
                let later_output = items[i + 1..].iter().any(|n| {
                    n.get("type").and_then(Value::as_str) == Some("function_call_output")
                        && n.get("call_id").and_then(Value::as_str) == Some(id)
                });
                if !later_output {
                    problems.push(format!(
                        "input[{i}]: no tool output found for function call `{id}`"
                    ));
                }
            }
            "function_call_output" => {
                let id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
                if !calls.contains(id) {
                    problems.push(format!(
                        "input[{i}]: no tool call found for function call output `{id}`"
                    ));
                }
                if !answered.insert(id) {
                    problems.push(format!("input[{i}]: call `{id}` answered twice"));
                }
                if !item.get("output").is_some_and(Value::is_string) {
                    problems.push(format!("input[{i}]: function_call_output without output"));
                }
            }
            "reasoning" => {
                if !item.get("id").is_some_and(Value::is_string) {
                    problems.push(format!("input[{i}]: reasoning item without an id"));
                }
                if !item.get("summary").is_some_and(Value::is_array) {
                    problems.push(format!("input[{i}]: reasoning item without a summary"));
                }
                if !stored && !item.get("encrypted_content").is_some_and(Value::is_string) {
                    problems.push(format!(
                        "input[{i}]: reasoning item without encrypted_content while store is false"
                    ));
                }
                // Several reasoning items of one response may come together.
                let next = items[i + 1..]
                    .iter()
                    .find(|n| n.get("type").and_then(Value::as_str) != Some("reasoning"));
                let follows = next.is_some_and(|n| {
                    let t = n.get("type").and_then(Value::as_str).unwrap_or("message");
                    t == "function_call"
                        || (t == "message"
                            && n.get("role").and_then(Value::as_str) == Some("assistant"))
                });
                if !follows {
                    problems.push(format!(
                        "input[{i}]: reasoning item provided without its required following item"
                    ));
                }
            }
            other => problems.push(format!("input[{i}]: unknown item type `{other}`")),
        }
    }
    named_tool_choice(body, &mut problems, |t| {
        t.get("name").and_then(Value::as_str).map(str::to_owned)
    });
    let tools = body.get("tools").and_then(Value::as_array);
    for (i, tool) in tools.into_iter().flatten().enumerate() {
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            continue;
        }
        if tool
            .get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            problems.push(format!("tools[{i}]: a function tool without a name"));
        }
        match tool.get("strict") {
            Some(Value::Bool(false)) => {}
            Some(Value::Bool(true)) => {
                let params = tool.get("parameters").unwrap_or(&Value::Null);
                strict_schema_problems(params, &format!("tools[{i}].parameters"), &mut problems);
            }
            Some(_) => problems.push(format!("tools[{i}]: `strict` is not a boolean")),
            None => problems.push(format!(
                "tools[{i}]: no `strict` (it defaults to true: optional arguments become required)"
            )),
        }
    }
    problems
}

/// What makes `schema` invalid for a strict function tool: an object schema that is
/// open to other properties or leaves one of its properties out of `required`,
/// anywhere in it (properties, items, `anyOf` branches, `$defs`).
fn strict_schema_problems(schema: &Value, at: &str, problems: &mut Vec<String>) {
    let Some(s) = schema.as_object() else {
        problems.push(format!("{at}: not a schema object"));
        return;
    };
    let is_object = s.get("type").and_then(Value::as_str) == Some("object")
        || s.get("type")
            .and_then(Value::as_array)
            .is_some_and(|ts| ts.iter().any(|t| t == "object"))
        || s.contains_key("properties");
    if is_object {
        if s.get("additionalProperties") != Some(&Value::Bool(false)) {
            problems.push(format!(
                "{at}: strict mode needs `additionalProperties: false` on every object"
            ));
        }
        let required: Vec<&str> = s
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            for (name, p) in props {
                if !required.contains(&name.as_str()) {
                    problems.push(format!(
                        "{at}: strict mode needs every property in `required`; `{name}` is not"
                    ));
                }
                strict_schema_problems(p, &format!("{at}.properties.{name}"), problems);
            }
        }
    }
    if let Some(items) = s.get("items") {
        strict_schema_problems(items, &format!("{at}.items"), problems);
    }
    for (j, b) in s
        .get("anyOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        strict_schema_problems(b, &format!("{at}.anyOf[{j}]"), problems);
    }
    if let Some(defs) = s.get("$defs").and_then(Value::as_object) {
        for (name, d) in defs {
            strict_schema_problems(d, &format!("{at}.$defs.{name}"), problems);
        }
    }
}

/// The Gemini API (`generateContent` / `streamGenerateContent`), as its API
/// reference and function-calling and thought-signature guides state them:
///
/// - `contents` is a non-empty array of turns with role `user` or `model`, each
///   with at least one part; a part holds exactly one of `text`, `inlineData`,
///   `fileData`, `functionCall`, `functionResponse`.
/// - A turn of `functionResponse` parts answers the `model` turn just before it:
///   one response per `functionCall` of that turn, by name (and by `id` when the
///   call had one), and every `functionCall` turn is answered by the next turn.
/// - In the current turn (everything after the last `user` turn with text),
///   the first `functionCall` part of each `model` turn carries a
///   `thoughtSignature` (Gemini 3 refuses the request otherwise; calls that did
///   not come from Gemini carry the documented placeholder).
/// - `thoughtSignature` only appears on parts, next to content.
/// - `functionDeclarations` names are unique; a named `allowedFunctionNames` tool
///   config names a declared function.
pub fn gemini_request_problems(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(contents) = body.get("contents").and_then(Value::as_array) else {
        problems.push("`contents` is not an array".to_owned());
        return problems;
    };
    if contents.is_empty() {
        problems.push("`contents` is empty".to_owned());
    }
    let parts_of = |c: &Value| -> Vec<Value> {
        c.get("parts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    for (i, turn) in contents.iter().enumerate() {
        let role = turn.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "user" && role != "model" {
            problems.push(format!("contents[{i}]: role `{role}` is not user or model"));
        }
        let parts = parts_of(turn);
        if parts.is_empty() {
            problems.push(format!("contents[{i}]: a turn without parts"));
        }
        for (j, p) in parts.iter().enumerate() {
            let data = [
                "text",
                "inlineData",
                "fileData",
                "functionCall",
                "functionResponse",
            ]
            .iter()
            .filter(|k| p.get(**k).is_some())
            .count();
            if data != 1 {
                problems.push(format!(
                    "contents[{i}].parts[{j}]: {data} kinds of data in one part (one is required)"
                ));
            }
            if p.get("functionCall").is_some() && role != "model" {
                problems.push(format!(
                    "contents[{i}].parts[{j}]: functionCall outside a model turn"
                ));
            }
            if p.get("functionResponse").is_some() && role != "user" {
                problems.push(format!(
                    "contents[{i}].parts[{j}]: functionResponse outside a user turn"
                ));
            }
        }
        let calls: Vec<&Value> = parts.iter().filter_map(|p| p.get("functionCall")).collect();
        let responses: Vec<Value> = parts
            .iter()
            .filter_map(|p| p.get("functionResponse").cloned())
            .collect();
        if !responses.is_empty() {
            let prev: Vec<Value> = i
                .checked_sub(1)
                .map(|k| parts_of(&contents[k]))
                .unwrap_or_default()
                .iter()
                .filter_map(|p| p.get("functionCall").cloned())
                .collect();
            let mut want: HashMap<String, usize> = HashMap::new();
            for c in &prev {
                *want.entry(call_key(c)).or_default() += 1;
            }
            let mut got: HashMap<String, usize> = HashMap::new();
            for r in &responses {
                *got.entry(call_key(r)).or_default() += 1;
            }
            if want != got {
                problems.push(format!(
                    "contents[{i}]: function responses {got:?} do not answer the previous turn's calls {want:?}"
                ));
            }
        }
        if !calls.is_empty() {
            let next_answers = contents
                .get(i + 1)
                .map(parts_of)
                .unwrap_or_default()
                .iter()
                .any(|p| p.get("functionResponse").is_some());
            if !next_answers {
                problems.push(format!(
                    "contents[{i}]: function calls not answered by the next turn"
                ));
            }
        }
    }
    // The current turn: after the last user turn that is not only function responses.
    let start = contents
        .iter()
        .rposition(|c| {
            c.get("role").and_then(Value::as_str) == Some("user")
                && parts_of(c)
                    .iter()
                    .any(|p| p.get("functionResponse").is_none())
        })
        .map_or(0, |k| k + 1);
    for (i, turn) in contents.iter().enumerate().skip(start) {
        let parts = parts_of(turn);
        if let Some(first) = parts.iter().find(|p| p.get("functionCall").is_some()) {
            if !first.get("thoughtSignature").is_some_and(Value::is_string) {
                problems.push(format!(
                    "contents[{i}]: the first function call of a model turn in the current turn has no thoughtSignature"
                ));
            }
        }
    }
    let mut names = HashSet::new();
    for tool in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for d in tool
            .get("functionDeclarations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = d.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty() || !names.insert(name.to_owned()) {
                problems.push(format!(
                    "function declaration `{name}` is empty or repeated"
                ));
            }
        }
    }
    if let Some(allowed) = body
        .pointer("/toolConfig/functionCallingConfig/allowedFunctionNames")
        .and_then(Value::as_array)
    {
        for n in allowed.iter().filter_map(Value::as_str) {
            if !names.contains(n) {
                problems.push(format!(
                    "allowedFunctionNames names `{n}`, which is not declared"
                ));
            }
        }
    }
    problems
}

fn call_key(c: &Value) -> String {
    let name = c.get("name").and_then(Value::as_str).unwrap_or("");
    match c.get("id").and_then(Value::as_str) {
        Some(id) => format!("{name}#{id}"),
        None => name.to_owned(),
    }
}

fn named_tool_choice(
    body: &Value,
    problems: &mut Vec<String>,
    tool_name: impl Fn(&Value) -> Option<String>,
) {
    let Some(choice) = body.get("tool_choice").filter(|c| c.is_object()) else {
        return;
    };
    let Some(name) = choice.get("name").and_then(Value::as_str) else {
        return;
    };
    let offered = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(&tool_name)
        .any(|n| n == name);
    if !offered {
        problems.push(format!("tool_choice names `{name}`, which is not in tools"));
    }
}
