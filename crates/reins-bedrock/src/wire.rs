//! Request bodies: reins messages and options as a Converse request.

use std::collections::HashSet;

use reins_message::{ContentBlock, MediaSource, Msg, Role, ToolResult, signature};
use reins_model::{ChatRequest, ModelError, ResponseFormat, Result, ToolChoice};
use serde_json::{Map, Value, json};

use crate::decode::{PROVIDER, REDACTED};

/// The text of the user turn put before an assistant message that would otherwise
/// begin the conversation or follow another assistant message (Converse wants the
/// first message from the user, and the roles to alternate).
pub const CONTINUE_TEXT: &str = "(continuing the conversation)";

/// The JSON body of a Converse / ConverseStream request.
pub(crate) fn request_body(req: &ChatRequest) -> Result<Value> {
    let mut body = Map::new();
    let system: Vec<Value> = req
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(Msg::text)
        .filter(|t| !t.trim().is_empty())
        .map(|t| json!({ "text": t }))
        .collect();
    let messages = messages(&req.messages)?;
    let uses_tools = messages.iter().any(|m| {
        m["content"].as_array().is_some_and(|c| {
            c.iter()
                .any(|b| b.get("toolUse").is_some() || b.get("toolResult").is_some())
        })
    });
    body.insert("messages".into(), Value::Array(messages));
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    if let Some(format) = &req.options.response_format {
        if !matches!(format, ResponseFormat::Text) {
            return Err(ModelError::InvalidRequest(
                "Bedrock's Converse API has no structured-output parameter: describe the shape in a tool, or in the prompt".into(),
            ));
        }
    }
    let o = &req.options;
    let mut inference = Map::new();
    if let Some(n) = o.max_tokens {
        inference.insert("maxTokens".into(), json!(n));
    }
    if let Some(t) = o.temperature {
        inference.insert("temperature".into(), json!(t));
    }
    if !o.stop.is_empty() {
        inference.insert("stopSequences".into(), json!(o.stop));
    }
    if !inference.is_empty() {
        body.insert("inferenceConfig".into(), Value::Object(inference));
    }
    if req.tools.is_empty() {
        if let ToolChoice::Tool(name) = &req.tool_choice {
            return Err(ModelError::InvalidRequest(format!(
                "tool_choice names `{name}` but the request offers no tools"
            )));
        }
        if uses_tools {
            return Err(ModelError::InvalidRequest(
                "the conversation holds tool calls but the request offers no tools: Converse needs toolConfig then".into(),
            ));
        }
    } else {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut spec = Map::new();
                spec.insert("name".into(), json!(t.name));
                if !t.description.is_empty() {
                    spec.insert("description".into(), json!(t.description));
                }
                spec.insert("inputSchema".into(), json!({ "json": t.parameters }));
                json!({ "toolSpec": spec })
            })
            .collect();
        let mut config = Map::new();
        config.insert("tools".into(), Value::Array(tools));
        match &req.tool_choice {
            ToolChoice::Auto => {}
            // Converse has no "none": the tools stay declared (past calls need them)
            // and the model may still call one.
            ToolChoice::None => {
                tracing::info!("Converse has no tool choice `none`: sending the default (auto)");
            }
            ToolChoice::Required => {
                config.insert("toolChoice".into(), json!({ "any": {} }));
            }
            ToolChoice::Tool(name) => {
                config.insert("toolChoice".into(), json!({ "tool": { "name": name } }));
            }
        }
        body.insert("toolConfig".into(), Value::Object(config));
    }
    for (k, v) in &o.extra {
        body.insert(k.clone(), v.clone());
    }
    Ok(Value::Object(body))
}

/// The conversation as alternating `user` / `assistant` messages. An assistant
/// message's tool calls are sent only when the messages up to the next assistant
/// message answer them, and each answer once, first in the next user message
/// (Converse wants a `toolResult` for every `toolUse` there); reasoning blocks go
/// back only with the signature Bedrock gave them.
fn messages(msgs: &[Msg]) -> Result<Vec<Value>> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::with_capacity(msgs.len());
    let mut i = 0;
    while i < msgs.len() {
        let m = &msgs[i];
        match m.role {
            Role::System => i += 1,
            Role::Assistant => {
                let next = msgs[i + 1..]
                    .iter()
                    .position(|n| n.role == Role::Assistant)
                    .map_or(msgs.len(), |p| i + 1 + p);
                let window = &msgs[i + 1..next];
                let answers: Vec<&ToolResult> =
                    window.iter().flat_map(Msg::tool_results_iter).collect();
                let (content, kept) = assistant_content(m, &answers);
                if !content.is_empty() {
                    // Converse starts with the user and alternates; two assistant
                    // messages in a row (an interrupted turn, then a new one) stay
                    // apart, or the second one's reasoning would follow the first's
                    // text.
                    if turns.last().is_none_or(|(role, _)| *role == "assistant") {
                        turns.push(("user", vec![json!({ "text": CONTINUE_TEXT })]));
                    }
                    turns.push(("assistant", content));
                }
                let mut user = Vec::new();
                let mut answered: HashSet<&str> = HashSet::new();
                for id in &kept {
                    if let Some(r) = answers.iter().find(|r| r.id == *id) {
                        if answered.insert(r.id.as_str()) {
                            user.push(tool_result(r));
                        }
                    }
                }
                for r in &answers {
                    if !answered.contains(r.id.as_str()) {
                        tracing::info!(call_id = %r.id, "leaving out a tool result whose call is not in the request");
                    }
                }
                for w in window {
                    user.extend(user_content(w)?);
                }
                push(&mut turns, "user", user);
                i = next;
            }
            Role::User | Role::Tool => {
                for r in m.tool_results_iter() {
                    tracing::info!(call_id = %r.id, "leaving out a tool result whose call is not in the request");
                }
                let content = user_content(m)?;
                push(&mut turns, "user", content);
                i += 1;
            }
        }
    }
    Ok(turns
        .into_iter()
        .map(|(role, content)| json!({ "role": role, "content": content }))
        .collect())
}

fn push(turns: &mut Vec<(&'static str, Vec<Value>)>, role: &'static str, content: Vec<Value>) {
    if content.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some((r, existing)) if *r == role => existing.extend(content),
        _ => turns.push((role, content)),
    }
}

/// The assistant message's content (reasoning with its signature, text, the
/// answered calls) and the ids of the calls kept.
fn assistant_content(m: &Msg, answers: &[&ToolResult]) -> (Vec<Value>, Vec<String>) {
    let mut out = Vec::new();
    let mut kept = Vec::new();
    for b in m.content.iter() {
        match b {
            ContentBlock::Thinking {
                thinking,
                signature: Some(sig),
            } => match signature::unseal(sig, PROVIDER) {
                Some(payload) => match payload.strip_prefix(REDACTED) {
                    Some(data) => out.push(json!({
                        "reasoningContent": { "redactedContent": data }
                    })),
                    None => out.push(json!({
                        "reasoningContent": {
                            "reasoningText": { "text": thinking, "signature": payload }
                        }
                    })),
                },
                None => tracing::info!(
                    provider = signature::provider_of(sig).unwrap_or("anthropic"),
                    message_id = %m.id,
                    "leaving out a thinking block signed by another provider: Bedrock cannot accept its token"
                ),
            },
            ContentBlock::Thinking { .. } => {
                tracing::info!(message_id = %m.id, "leaving out an unsigned thinking block (an interrupted stream)");
            }
            ContentBlock::Text { text } if !text.trim().is_empty() => {
                out.push(json!({ "text": text }));
            }
            ContentBlock::ToolUse(u) => {
                if !answers.iter().any(|r| r.id == u.id) {
                    tracing::info!(call_id = %u.id, "leaving out a tool call that has no result in the next turn");
                    continue;
                }
                let input = match &u.input {
                    Value::Object(_) => u.input.clone(),
                    // Converse wants an object; arguments that did not parse go as `{}`
                    // and the tool result tells the model what was wrong.
                    _ => json!({}),
                };
                out.push(json!({
                    "toolUse": { "toolUseId": u.id, "name": u.name, "input": input }
                }));
                kept.push(u.id.clone());
            }
            _ => {}
        }
    }
    // Reasoning alone (every call and the text left out) cannot close a turn.
    if out.iter().all(|b| b.get("reasoningContent").is_some()) {
        out.clear();
    }
    (out, kept)
}

fn tool_result(r: &ToolResult) -> Value {
    let status = if r.is_error() { "error" } else { "success" };
    let mut text = r.text();
    if text.trim().is_empty() {
        text = "(no output)".to_owned();
    }
    json!({
        "toolResult": {
            "toolUseId": r.id,
            "content": [{ "text": text }],
            "status": status,
        }
    })
}

fn user_content(m: &Msg) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for b in m.content.iter() {
        match b {
            ContentBlock::Text { text } if !text.trim().is_empty() => {
                out.push(json!({ "text": text }));
            }
            ContentBlock::Image { source } => out.push(image(source)?),
            ContentBlock::Audio { .. } => {
                tracing::info!(message_id = %m.id, "Converse takes no audio: sending a note in its place");
                out.push(json!({ "text": "[audio left out: this model takes no audio]" }));
            }
            _ => {}
        }
    }
    Ok(out)
}

fn image(source: &MediaSource) -> Result<Value> {
    match source {
        MediaSource::Base64 { media_type, data } => {
            let format = match media_type.as_str() {
                "image/png" => "png",
                "image/jpeg" | "image/jpg" => "jpeg",
                "image/gif" => "gif",
                "image/webp" => "webp",
                other => {
                    return Err(ModelError::InvalidRequest(format!(
                        "Bedrock takes png, jpeg, gif or webp images, not `{other}`"
                    )));
                }
            };
            Ok(json!({ "image": { "format": format, "source": { "bytes": data } } }))
        }
        MediaSource::Url { url } => {
            // Converse takes image bytes (or S3 locations), not web URLs.
            tracing::info!(%url, "Converse takes no image URLs: sending the URL as text");
            Ok(json!({ "text": format!("[image at {url}]") }))
        }
    }
}
