//! Amazon Bedrock's Converse / ConverseStream request rules (see [`super::rules`]).

use std::collections::HashSet;

use serde_json::Value;

const BLOCK_KINDS: [&str; 9] = [
    "text",
    "image",
    "document",
    "video",
    "toolUse",
    "toolResult",
    "reasoningContent",
    "guardContent",
    "cachePoint",
];

/// Amazon Bedrock Converse / ConverseStream
/// (`POST /model/{modelId}/converse-stream`), as its API reference and validation
/// errors state them:
///
/// - `messages` is a non-empty array whose first message is from `user`; roles are
///   `user` or `assistant` and alternate; every message has non-empty `content`,
///   each block holding exactly one kind (`text`, `image`, `toolUse`,
///   `toolResult`, `reasoningContent`, …); text blocks are not blank.
/// - `toolUse` blocks appear only in assistant messages, with a non-empty
///   `toolUseId` (unique in the conversation) and `name`, and an object `input`;
///   every one is answered by a `toolResult` with its id in the very next message,
///   which is from the user ("The number of toolResult blocks … exceeds / is less
///   than the number of toolUse blocks of previous turn").
/// - `toolResult` blocks appear only in user messages, answer a `toolUse` of the
///   message right before, once, with non-empty `content` and `status` `success`
///   or `error` when given.
/// - `reasoningContent` appears only in assistant messages, before their other
///   blocks, as `reasoningText` with `text` and a non-empty `signature` (exactly
///   as Bedrock gave it: a reins-sealed `bedrock:` prefix is refused) or as
///   `redactedContent`.
/// - A conversation with `toolUse` or `toolResult` blocks has `toolConfig`
///   ("The toolConfig field must be defined when using toolUse and toolResult
///   content blocks"); tool names are unique; a `toolChoice.tool` names one of them.
pub fn bedrock_request_problems(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        problems.push("`messages` is not an array".to_owned());
        return problems;
    };
    if messages.is_empty() {
        problems.push("`messages` is empty".to_owned());
    }
    let mut ids_seen: HashSet<String> = HashSet::new();
    let mut uses_tools = false;
    let mut prev_role = "";
    let mut prev_uses: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "user" && role != "assistant" {
            problems.push(format!(
                "messages[{i}]: role `{role}` is not user or assistant"
            ));
        }
        if i == 0 && role != "user" {
            problems.push("messages[0]: the conversation must start with a user message".into());
        }
        if role == prev_role {
            problems.push(format!("messages[{i}]: two `{role}` messages in a row"));
        }
        let content = m
            .get("content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if content.is_empty() {
            problems.push(format!("messages[{i}]: empty content"));
        }
        let mut uses = Vec::new();
        let mut results = Vec::new();
        let mut seen_other = false;
        for (j, b) in content.iter().enumerate() {
            let at = format!("messages[{i}].content[{j}]");
            let kinds = BLOCK_KINDS.iter().filter(|k| b.get(**k).is_some()).count();
            if kinds != 1 || b.as_object().is_some_and(|o| o.len() != 1) {
                problems.push(format!("{at}: a block must hold exactly one kind"));
            }
            if let Some(t) = b.get("text") {
                if t.as_str().is_none_or(|t| t.trim().is_empty()) {
                    problems.push(format!("{at}: blank text"));
                }
            }
            if let Some(u) = b.get("toolUse") {
                uses_tools = true;
                if role != "assistant" {
                    problems.push(format!("{at}: toolUse outside an assistant message"));
                }
                let id = u.get("toolUseId").and_then(Value::as_str).unwrap_or("");
                if id.is_empty() {
                    problems.push(format!("{at}: toolUse without toolUseId"));
                } else if !ids_seen.insert(id.to_owned()) {
                    problems.push(format!("{at}: toolUseId `{id}` used twice"));
                }
                if u.get("name")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    problems.push(format!("{at}: toolUse without name"));
                }
                if !u.get("input").is_some_and(Value::is_object) {
                    problems.push(format!("{at}: toolUse input is not an object"));
                }
                uses.push(id.to_owned());
            }
            if let Some(r) = b.get("toolResult") {
                uses_tools = true;
                if role != "user" {
                    problems.push(format!("{at}: toolResult outside a user message"));
                }
                let id = r.get("toolUseId").and_then(Value::as_str).unwrap_or("");
                if !prev_uses.iter().any(|u| u == id) {
                    problems.push(format!(
                        "{at}: toolResult `{id}` answers no toolUse of the previous message"
                    ));
                }
                if results.contains(&id.to_owned()) {
                    problems.push(format!("{at}: toolResult `{id}` twice"));
                }
                if r.get("content")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty)
                {
                    problems.push(format!("{at}: toolResult without content"));
                }
                if let Some(s) = r.get("status") {
                    if s != "success" && s != "error" {
                        problems.push(format!("{at}: toolResult status {s}"));
                    }
                }
                results.push(id.to_owned());
            }
            match b.get("reasoningContent") {
                Some(rc) => {
                    if role != "assistant" {
                        problems.push(format!(
                            "{at}: reasoningContent outside an assistant message"
                        ));
                    }
                    if seen_other {
                        problems.push(format!("{at}: reasoningContent after other blocks"));
                    }
                    match (rc.get("reasoningText"), rc.get("redactedContent")) {
                        (Some(t), None) => {
                            let sig = t.get("signature").and_then(Value::as_str).unwrap_or("");
                            if sig.is_empty() {
                                problems.push(format!("{at}: reasoningText without its signature"));
                            } else if sig.starts_with("bedrock:") {
                                problems.push(format!(
                                    "{at}: signature still sealed (`bedrock:` prefix)"
                                ));
                            }
                            if !t.get("text").is_some_and(Value::is_string) {
                                problems.push(format!("{at}: reasoningText without text"));
                            }
                        }
                        (None, Some(r)) if r.as_str().is_some_and(|s| !s.is_empty()) => {}
                        _ => problems.push(format!(
                            "{at}: reasoningContent needs reasoningText or redactedContent"
                        )),
                    }
                }
                None => seen_other = true,
            }
        }
        for id in &prev_uses {
            if !results.contains(id) {
                problems.push(format!(
                    "messages[{i}]: toolUse `{id}` of the previous message has no toolResult here"
                ));
            }
        }
        prev_uses = uses;
        prev_role = role;
    }
    for id in &prev_uses {
        problems.push(format!(
            "toolUse `{id}` in the last message has no toolResult"
        ));
    }
    let names: Vec<String> = body
        .pointer("/toolConfig/tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.pointer("/toolSpec/name").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    if uses_tools && names.is_empty() {
        problems.push(
            "toolConfig must be defined when using toolUse and toolResult content blocks".into(),
        );
    }
    let unique: HashSet<&String> = names.iter().collect();
    if unique.len() != names.len() {
        problems.push("toolConfig.tools: a name declared twice".into());
    }
    if let Some(name) = body
        .pointer("/toolConfig/toolChoice/tool/name")
        .and_then(Value::as_str)
    {
        if !names.iter().any(|n| n == name) {
            problems.push(format!("toolChoice names `{name}`, which is not in tools"));
        }
    }
    problems
}
