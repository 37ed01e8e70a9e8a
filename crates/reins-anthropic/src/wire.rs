//! Request bodies: reins messages and options in the Messages API wire format.

use reins_message::{ContentBlock, MediaSource, Msg, Role, ToolResult, signature};
use reins_model::{ChatRequest, ModelError, ResponseFormat, Result, ToolChoice};
use serde_json::{Map, Value, json};

/// The JSON body of a streamed Messages API request.
pub(crate) fn request_body(
    model: &str,
    default_max_tokens: u32,
    req: &ChatRequest,
) -> Result<Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "max_tokens".into(),
        json!(req.options.max_tokens.unwrap_or(default_max_tokens)),
    );
    let mut system: Vec<String> = req
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(Msg::text)
        .filter(|t| !t.is_empty())
        .collect();
    match &req.options.response_format {
        None | Some(ResponseFormat::Text) => {}
        // The Messages API has no JSON mode: ask for it in the system prompt.
        Some(ResponseFormat::JsonObject) => {
            system.push("Answer with a single JSON object and nothing else.".into());
        }
        Some(ResponseFormat::JsonSchema { schema, .. }) => system.push(format!(
            "Answer with a single JSON object and nothing else, matching this JSON Schema: {}",
            reins_message::canonical_json(schema)
        )),
    }
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    body.insert("messages".into(), Value::Array(messages(&req.messages)?));
    body.insert("stream".into(), json!(true));
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                let mut tool = Map::new();
                tool.insert("name".into(), json!(t.name));
                if !t.description.is_empty() {
                    tool.insert("description".into(), json!(t.description));
                }
                tool.insert("input_schema".into(), t.parameters.clone());
                Value::Object(tool)
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        // `auto` is the API's default when tools are offered: not sent, as the
        // official SDKs do not send what the caller did not set.
        let choice = match &req.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::None => Some(json!({ "type": "none" })),
            ToolChoice::Required => Some(json!({ "type": "any" })),
            ToolChoice::Tool(name) => Some(json!({ "type": "tool", "name": name })),
        };
        if let Some(choice) = choice {
            body.insert("tool_choice".into(), choice);
        }
    } else if let ToolChoice::Tool(name) = &req.tool_choice {
        return Err(ModelError::InvalidRequest(format!(
            "tool_choice names `{name}` but the request offers no tools"
        )));
    }
    let o = &req.options;
    if let Some(t) = o.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if !o.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(o.stop));
    }
    // `seed` has no equivalent in the Messages API and is left out.
    for (k, v) in &o.extra {
        body.insert(k.clone(), v.clone());
    }
    Ok(Value::Object(body))
}

/// The conversation as alternating `user` / `assistant` turns: tool results go in
/// user turns (first, as the API requires), consecutive messages of the same side
/// are merged, system messages are left out (they go to `system`).
fn messages(msgs: &[Msg]) -> Result<Vec<Value>> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::with_capacity(msgs.len());
    for m in msgs {
        let (role, blocks) = match m.role {
            Role::System => continue,
            Role::Assistant => ("assistant", assistant_blocks(m)),
            Role::User | Role::Tool => ("user", user_blocks(&m.content)?),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((r, existing)) if *r == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    Ok(turns
        .into_iter()
        .map(|(role, mut blocks)| {
            if role == "user" {
                // Tool results must open the user turn that answers the tool uses.
                blocks.sort_by_key(|b| b.get("type") != Some(&json!("tool_result")));
            }
            json!({ "role": role, "content": blocks })
        })
        .collect())
}

fn assistant_blocks(m: &Msg) -> Vec<Value> {
    let mut out = Vec::with_capacity(m.content.len());
    for b in &m.content {
        match b {
            // Only thinking signed by Anthropic can be sent back; unsigned thinking
            // (cut short, or from a provider without signatures) is left out, and so
            // is thinking another provider signed (the API would refuse its token).
            ContentBlock::Thinking {
                thinking,
                signature: Some(sig),
            } => match signature::provider_of(sig) {
                None => {
                    out.push(json!({ "type": "thinking", "thinking": thinking, "signature": sig }))
                }
                Some(other) => tracing::info!(
                    provider = other,
                    message_id = %m.id,
                    "leaving out a thinking block signed by another provider: the Messages API cannot accept its token"
                ),
            },
            ContentBlock::Text { text } if !text.is_empty() => {
                out.push(json!({ "type": "text", "text": text }));
            }
            ContentBlock::ToolUse(u) => {
                let input = match &u.input {
                    Value::Object(_) => u.input.clone(),
                    // The API wants an object; arguments that did not parse are sent
                    // as `{}` and the tool result tells the model what was wrong.
                    _ => json!({}),
                };
                out.push(json!({ "type": "tool_use", "id": u.id, "name": u.name, "input": input }));
            }
            _ => {}
        }
    }
    out
}

fn user_blocks(content: &[ContentBlock]) -> Result<Vec<Value>> {
    let mut out = Vec::with_capacity(content.len());
    for b in content {
        match b {
            ContentBlock::ToolResult(r) => out.push(tool_result(r)?),
            other => {
                if let Some(v) = media_or_text(other)? {
                    out.push(v);
                }
            }
        }
    }
    Ok(out)
}

fn tool_result(r: &ToolResult) -> Result<Value> {
    let mut content = Vec::with_capacity(r.output.len());
    for b in &r.output {
        if let Some(v) = media_or_text(b)? {
            content.push(v);
        }
    }
    let mut obj = Map::new();
    obj.insert("type".into(), json!("tool_result"));
    obj.insert("tool_use_id".into(), json!(r.id));
    let only_text = content
        .iter()
        .all(|b| b.get("type") == Some(&json!("text")));
    obj.insert(
        "content".into(),
        if only_text {
            json!(r.text())
        } else {
            Value::Array(content)
        },
    );
    if r.is_error() {
        obj.insert("is_error".into(), json!(true));
    }
    Ok(Value::Object(obj))
}

fn media_or_text(b: &ContentBlock) -> Result<Option<Value>> {
    Ok(match b {
        ContentBlock::Text { text } if !text.is_empty() => {
            Some(json!({ "type": "text", "text": text }))
        }
        ContentBlock::Image { source } => {
            Some(json!({ "type": "image", "source": source_json(source) }))
        }
        ContentBlock::Audio { .. } => {
            return Err(ModelError::InvalidRequest(
                "the Anthropic Messages API does not accept audio".into(),
            ));
        }
        _ => None,
    })
}

fn source_json(source: &MediaSource) -> Value {
    match source {
        MediaSource::Url { url } => json!({ "type": "url", "url": url }),
        MediaSource::Base64 { media_type, data } => {
            json!({ "type": "base64", "media_type": media_type, "data": data })
        }
    }
}
