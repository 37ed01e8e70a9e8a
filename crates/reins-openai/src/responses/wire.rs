//! Request bodies: reins messages and options as a Responses API request.

use std::collections::{HashMap, HashSet};

use reins_message::{ContentBlock, MediaSource, Msg, Role, ToolResult, signature};
use reins_model::{ChatRequest, ModelError, ResponseFormat, Result, ToolChoice};
use serde_json::{Map, Value, json};

use super::decode::{KeptResponse, PROVIDER};

/// What the caller chose about server-side state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WireOptions {
    /// `store` (default `false`: nothing depends on state kept by the server).
    pub store: bool,
}

/// The JSON body of a streamed Responses API request.
pub(crate) fn request_body(model: &str, req: &ChatRequest, wire: WireOptions) -> Result<Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    let instructions: Vec<String> = req
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(Msg::text)
        .filter(|t| !t.is_empty())
        .collect();
    if !instructions.is_empty() {
        body.insert("instructions".into(), json!(instructions.join("\n\n")));
    }
    body.insert("input".into(), Value::Array(input(&req.messages)?));
    body.insert("stream".into(), json!(true));
    body.insert("store".into(), json!(wire.store));
    // The encrypted reasoning comes back so the next request can carry it without
    // server-side state.
    body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                let mut tool = Map::new();
                tool.insert("type".into(), json!("function"));
                tool.insert("name".into(), json!(t.name));
                if !t.description.is_empty() {
                    tool.insert("description".into(), json!(t.description));
                }
                tool.insert("parameters".into(), t.parameters.clone());
                // Left out, `strict` is `true`: optional arguments would be forced.
                tool.insert(
                    "strict".into(),
                    json!(super::strict::strict_compatible(&t.parameters)),
                );
                Value::Object(tool)
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &req.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::None => Some(json!("none")),
            ToolChoice::Required => Some(json!("required")),
            ToolChoice::Tool(name) => Some(json!({ "type": "function", "name": name })),
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
    if let Some(n) = o.max_tokens {
        body.insert("max_output_tokens".into(), json!(n));
    }
    // `stop` and `seed` have no equivalent in the Responses API and are left out.
    match &o.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => {
            body.insert(
                "text".into(),
                json!({ "format": { "type": "json_object" } }),
            );
        }
        Some(ResponseFormat::JsonSchema {
            name,
            schema,
            strict,
        }) => {
            body.insert(
                "text".into(),
                json!({ "format": {
                    "type": "json_schema", "name": name, "schema": schema, "strict": strict
                } }),
            );
        }
    }
    for (k, v) in &o.extra {
        body.insert(k.clone(), v.clone());
    }
    Ok(Value::Object(body))
}

/// The conversation as input items. Function calls and their outputs are kept only
/// in pairs (the API refuses either one alone), and a reasoning item only where an
/// item of its own response follows it.
fn input(msgs: &[Msg]) -> Result<Vec<Value>> {
    // Where each call's last result is: a call is sent only when a result follows it.
    let mut last_result: HashMap<&str, usize> = HashMap::new();
    for (i, m) in msgs.iter().enumerate() {
        if m.role != Role::Assistant {
            for r in m.tool_results_iter() {
                last_result.insert(r.id.as_str(), i);
            }
        }
    }
    let mut items = Vec::with_capacity(msgs.len() * 2);
    let mut sent_calls: HashSet<&str> = HashSet::new();
    let mut sent_outputs: HashSet<&str> = HashSet::new();
    for (i, m) in msgs.iter().enumerate() {
        match m.role {
            Role::System => {}
            Role::Assistant => {
                let answered = |id: &str| last_result.get(id).is_some_and(|j| *j > i);
                assistant(m, &answered, &mut sent_calls, &mut items);
            }
            Role::User | Role::Tool => {
                let mut content = Vec::new();
                for b in m.content.iter() {
                    match b {
                        ContentBlock::ToolResult(r) => {
                            if sent_calls.contains(r.id.as_str())
                                && sent_outputs.insert(r.id.as_str())
                            {
                                items.push(function_call_output(r));
                            } else {
                                tracing::info!(
                                    call_id = %r.id,
                                    "leaving out a tool result whose call is not in the request (or answered already)"
                                );
                            }
                        }
                        other => {
                            if let Some(part) = input_part(other)? {
                                content.push(part);
                            }
                        }
                    }
                }
                if !content.is_empty() {
                    items.push(json!({ "role": "user", "content": content }));
                }
            }
        }
    }
    Ok(items)
}

fn assistant<'a>(
    m: &'a Msg,
    answered: &dyn Fn(&str) -> bool,
    sent_calls: &mut HashSet<&'a str>,
    items: &mut Vec<Value>,
) {
    let mut reasoning = Vec::new();
    for b in m.content.iter() {
        if let ContentBlock::Thinking {
            signature: Some(sig),
            ..
        } = b
        {
            match signature::unseal(sig, PROVIDER) {
                Some(payload) => match serde_json::from_str::<KeptResponse>(payload) {
                    Ok(kept) => reasoning.extend(kept.items),
                    Err(e) => tracing::warn!(
                        message_id = %m.id,
                        "leaving out reasoning items whose kept form could not be read: {e}"
                    ),
                },
                None => tracing::info!(
                    provider = signature::provider_of(sig).unwrap_or("anthropic"),
                    message_id = %m.id,
                    "leaving out a thinking block signed by another provider: the Responses API cannot accept its token"
                ),
            }
        }
    }
    let text = m.text();
    let calls: Vec<_> = m
        .tool_uses()
        .filter(|u| {
            let keep = answered(&u.id) && !sent_calls.contains(u.id.as_str());
            if !keep {
                tracing::info!(call_id = %u.id, "leaving out a tool call that has no result");
            }
            keep
        })
        .collect();
    // Items in the order the response gave them: each reasoning item before the
    // function call it preceded, the text after the first reasoning items.
    let mut out: Vec<Value> = Vec::new();
    let original_calls: Vec<&str> = m.tool_uses().map(|u| u.id.as_str()).collect();
    for k in 0..=original_calls.len() {
        for r in reasoning
            .iter()
            .filter(|r| r.at.min(original_calls.len()) == k)
        {
            let mut item = Map::new();
            item.insert("type".into(), json!("reasoning"));
            item.insert("id".into(), json!(r.id));
            item.insert("summary".into(), Value::Array(r.summary.clone()));
            if let Some(enc) = &r.encrypted_content {
                item.insert("encrypted_content".into(), json!(enc));
            }
            out.push(Value::Object(item));
        }
        if k == 0 && !text.is_empty() {
            out.push(json!({ "role": "assistant", "content": text }));
        }
        if let Some(id) = original_calls.get(k) {
            if let Some(u) = calls.iter().find(|u| u.id == *id) {
                let arguments = match (&u.raw_input, &u.input) {
                    (Some(raw), _) => raw.clone(),
                    (None, Value::Null) => "{}".to_owned(),
                    (None, v) => v.to_string(),
                };
                out.push(json!({
                    "type": "function_call",
                    "call_id": u.id,
                    "name": u.name,
                    "arguments": arguments,
                }));
                sent_calls.insert(u.id.as_str());
            }
        }
    }
    // A reasoning item must be followed by an item of its response: drop those that
    // are not (the rest of their turn was left out, or it was only reasoning), and
    // those without encrypted content (with `store: false` the server has no copy).
    let mut kept = Vec::with_capacity(out.len());
    for (i, item) in out.iter().enumerate() {
        if item["type"] == "reasoning" {
            let followed = out[i + 1..].iter().any(|n| n["type"] != "reasoning");
            if !followed || item.get("encrypted_content").is_none() {
                tracing::info!(
                    message_id = %m.id,
                    "leaving out a reasoning item with nothing of its turn after it, or no encrypted content"
                );
                continue;
            }
        }
        kept.push(item.clone());
    }
    items.extend(kept);
}

fn function_call_output(r: &ToolResult) -> Value {
    json!({ "type": "function_call_output", "call_id": r.id, "output": r.text() })
}

fn input_part(b: &ContentBlock) -> Result<Option<Value>> {
    Ok(match b {
        ContentBlock::Text { text } if !text.is_empty() => {
            Some(json!({ "type": "input_text", "text": text }))
        }
        ContentBlock::Image { source } => {
            let url = match source {
                MediaSource::Url { url } => url.clone(),
                MediaSource::Base64 { media_type, data } => {
                    format!("data:{media_type};base64,{data}")
                }
            };
            Some(json!({ "type": "input_image", "image_url": url }))
        }
        ContentBlock::Audio { .. } => {
            return Err(ModelError::InvalidRequest(
                "the Responses API does not accept audio input; use OpenAiChat for input_audio"
                    .into(),
            ));
        }
        _ => None,
    })
}
