//! Request bodies: reins messages and options in the Chat Completions wire format.

use reins_message::{ContentBlock, MediaSource, Msg, Role, ToolResult, ToolUse};
use reins_model::{ChatRequest, ModelError, ResponseFormat, Result, ToolChoice};
use serde_json::{Map, Value, json};

/// How messages are written for a given server.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WireOptions {
    /// Send assistant thinking back as `reasoning_content` (DeepSeek's thinking mode
    /// with tool calls wants it; most servers reject or ignore it).
    pub replay_reasoning: bool,
    /// Ask for a trailing usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
    /// The `content` of an assistant message that only calls tools.
    pub tool_call_content: ToolCallContent,
}

/// The `content` of an assistant message that has tool calls and no text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum ToolCallContent {
    /// `"content": null`, as the OpenAI reference documents it.
    Null,
    /// `"content": ""`, which every compatible server we know of accepts (some
    /// reject `null`).
    #[default]
    EmptyString,
}

/// The JSON body of a streamed Chat Completions request. Optional fields the caller
/// did not set are left out, as the official SDKs do: several compatible servers
/// act differently when a default is spelled out (llama-cpp-python answers an
/// explicit `"tool_choice": "auto"` on a streamed request with an empty body).
pub(crate) fn request_body(model: &str, req: &ChatRequest, opts: WireOptions) -> Result<Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "messages".into(),
        Value::Array(messages(&req.messages, opts)?),
    );
    body.insert("stream".into(), json!(true));
    if opts.include_usage {
        body.insert("stream_options".into(), json!({ "include_usage": true }));
    }
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                let mut function = Map::new();
                function.insert("name".into(), json!(t.name));
                if !t.description.is_empty() {
                    function.insert("description".into(), json!(t.description));
                }
                function.insert("parameters".into(), t.parameters.clone());
                json!({ "type": "function", "function": function })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        // `auto` is every server's default when tools are offered: not sent.
        let choice = match &req.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::None => Some(json!("none")),
            ToolChoice::Required => Some(json!("required")),
            ToolChoice::Tool(name) => {
                Some(json!({ "type": "function", "function": { "name": name } }))
            }
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
    if let Some(m) = o.max_tokens {
        body.insert("max_tokens".into(), json!(m));
    }
    if !o.stop.is_empty() {
        body.insert("stop".into(), json!(o.stop));
    }
    if let Some(s) = o.seed {
        body.insert("seed".into(), json!(s));
    }
    match &o.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => {
            body.insert("response_format".into(), json!({ "type": "json_object" }));
        }
        Some(ResponseFormat::JsonSchema {
            name,
            schema,
            strict,
        }) => {
            body.insert(
                "response_format".into(),
                json!({
                    "type": "json_schema",
                    "json_schema": { "name": name, "schema": schema, "strict": strict }
                }),
            );
        }
    }
    for (k, v) in &o.extra {
        body.insert(k.clone(), v.clone());
    }
    Ok(Value::Object(body))
}

fn messages(msgs: &[Msg], opts: WireOptions) -> Result<Vec<Value>> {
    let mut out = Vec::with_capacity(msgs.len());
    for m in msgs {
        match m.role {
            Role::System => out.push(json!({ "role": "system", "content": m.text() })),
            Role::Assistant => out.push(assistant(m, opts)),
            Role::User | Role::Tool => {
                // Tool results become one `tool` message each; anything else in the
                // message follows as a user message.
                let mut rest = Vec::new();
                for b in &m.content {
                    match b {
                        ContentBlock::ToolResult(r) => out.push(tool_message(r)?),
                        other => rest.push(other),
                    }
                }
                if !rest.is_empty() {
                    out.push(json!({ "role": "user", "content": user_content(&rest)? }));
                }
            }
        }
    }
    Ok(out)
}

fn assistant(m: &Msg, opts: WireOptions) -> Value {
    let mut obj = Map::new();
    obj.insert("role".into(), json!("assistant"));
    let text = m.text();
    obj.insert(
        "content".into(),
        if text.is_empty() && m.has_tool_uses() && opts.tool_call_content == ToolCallContent::Null {
            Value::Null
        } else {
            json!(text)
        },
    );
    if opts.replay_reasoning {
        let thinking = m.thinking();
        if !thinking.is_empty() {
            obj.insert("reasoning_content".into(), json!(thinking));
        }
    }
    let calls: Vec<Value> = m.tool_uses().map(tool_call).collect();
    if !calls.is_empty() {
        obj.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(obj)
}

fn tool_call(u: &ToolUse) -> Value {
    // Arguments that were not valid JSON are sent as `{}`: several servers refuse
    // history whose arguments do not parse; the tool result tells the model what
    // was wrong with what it sent.
    let args = match &u.input {
        Value::Null => "{}".to_owned(),
        v => v.to_string(),
    };
    json!({
        "id": u.id,
        "type": "function",
        "function": { "name": u.name, "arguments": args }
    })
}

fn tool_message(r: &ToolResult) -> Result<Value> {
    let has_media = r
        .output
        .iter()
        .any(|b| matches!(b, ContentBlock::Image { .. } | ContentBlock::Audio { .. }));
    let content = if has_media {
        let blocks: Vec<&ContentBlock> = r.output.iter().collect();
        user_content(&blocks)?
    } else {
        json!(r.text())
    };
    Ok(json!({ "role": "tool", "tool_call_id": r.id, "content": content }))
}

/// A user message's `content`: a plain string when it is only text, otherwise an
/// array of `text` / `image_url` / `input_audio` parts.
fn user_content(blocks: &[&ContentBlock]) -> Result<Value> {
    let only_text = blocks
        .iter()
        .all(|b| matches!(b, ContentBlock::Text { .. }));
    if only_text {
        let texts: Vec<&str> = blocks.iter().filter_map(|b| b.as_text()).collect();
        return Ok(json!(texts.join("\n")));
    }
    let mut parts = Vec::with_capacity(blocks.len());
    for b in blocks {
        match b {
            ContentBlock::Text { text } => parts.push(json!({ "type": "text", "text": text })),
            ContentBlock::Image { source } => {
                let url = match source {
                    MediaSource::Url { url } => url.clone(),
                    MediaSource::Base64 { media_type, data } => {
                        format!("data:{media_type};base64,{data}")
                    }
                };
                parts.push(json!({ "type": "image_url", "image_url": { "url": url } }));
            }
            ContentBlock::Audio { source } => match source {
                MediaSource::Base64 { media_type, data } => {
                    let format = media_type.rsplit('/').next().unwrap_or("wav");
                    let format = if format == "mpeg" { "mp3" } else { format };
                    parts.push(json!({
                        "type": "input_audio",
                        "input_audio": { "data": data, "format": format }
                    }));
                }
                MediaSource::Url { .. } => {
                    return Err(ModelError::InvalidRequest(
                        "audio by URL cannot be sent to a Chat Completions server; use base64"
                            .into(),
                    ));
                }
            },
            // Thinking, tool uses and nested results have no place in user content.
            ContentBlock::Thinking { .. }
            | ContentBlock::ToolUse(_)
            | ContentBlock::ToolResult(_) => {}
        }
    }
    Ok(Value::Array(parts))
}
