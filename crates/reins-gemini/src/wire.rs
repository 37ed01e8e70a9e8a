//! Request bodies: reins messages and options as a `generateContent` request.

use std::collections::HashSet;

use reins_message::{ContentBlock, MediaSource, Msg, Role, ToolResult, ToolUse, signature};
use reins_model::{ChatRequest, ModelError, ResponseFormat, Result, ToolChoice};
use serde_json::{Map, Value, json};

use crate::decode::{KeptSignatures, LOCAL_ID_PREFIX, PROVIDER};
use crate::schema::gemini_schema;

/// The thought signature Gemini's documentation gives for function calls that did
/// not come from Gemini (another provider's transcript, an injected call): it
/// passes the validation that a missing signature fails.
pub const PLACEHOLDER_SIGNATURE: &str = "context_engineering_is_the_way_to_go";

/// The JSON body of a `streamGenerateContent` request.
pub(crate) fn request_body(req: &ChatRequest) -> Result<Value> {
    let mut body = Map::new();
    let system: Vec<String> = req
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(Msg::text)
        .filter(|t| !t.is_empty())
        .collect();
    if !system.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({ "parts": [{ "text": system.join("\n\n") }] }),
        );
    }
    body.insert("contents".into(), Value::Array(contents(&req.messages)?));
    if !req.tools.is_empty() {
        let decls: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut d = Map::new();
                d.insert("name".into(), json!(t.name));
                if !t.description.is_empty() {
                    d.insert("description".into(), json!(t.description));
                }
                let params = gemini_schema(&t.parameters);
                let empty_object = params
                    .get("properties")
                    .is_none_or(|p| p.as_object().is_some_and(Map::is_empty));
                if !empty_object {
                    d.insert("parameters".into(), params);
                }
                Value::Object(d)
            })
            .collect();
        body.insert("tools".into(), json!([{ "functionDeclarations": decls }]));
        let config = match &req.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::None => Some(json!({ "mode": "NONE" })),
            ToolChoice::Required => Some(json!({ "mode": "ANY" })),
            ToolChoice::Tool(name) => {
                Some(json!({ "mode": "ANY", "allowedFunctionNames": [name] }))
            }
        };
        if let Some(config) = config {
            body.insert(
                "toolConfig".into(),
                json!({ "functionCallingConfig": config }),
            );
        }
    } else if let ToolChoice::Tool(name) = &req.tool_choice {
        return Err(ModelError::InvalidRequest(format!(
            "tool_choice names `{name}` but the request offers no tools"
        )));
    }
    let o = &req.options;
    let mut generation = Map::new();
    if let Some(t) = o.temperature {
        generation.insert("temperature".into(), json!(t));
    }
    if let Some(n) = o.max_tokens {
        generation.insert("maxOutputTokens".into(), json!(n));
    }
    if !o.stop.is_empty() {
        generation.insert("stopSequences".into(), json!(o.stop));
    }
    if let Some(seed) = o.seed {
        generation.insert("seed".into(), json!(seed));
    }
    match &o.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => {
            generation.insert("responseMimeType".into(), json!("application/json"));
        }
        Some(ResponseFormat::JsonSchema { schema, .. }) => {
            generation.insert("responseMimeType".into(), json!("application/json"));
            generation.insert("responseSchema".into(), gemini_schema(schema));
        }
    }
    if !generation.is_empty() {
        body.insert("generationConfig".into(), Value::Object(generation));
    }
    for (k, v) in &o.extra {
        match (k.as_str(), body.get_mut(k)) {
            // `generationConfig` fields (e.g. `thinkingConfig`) join the ones set above.
            ("generationConfig", Some(Value::Object(existing))) => {
                if let Value::Object(more) = v {
                    for (mk, mv) in more {
                        existing.insert(mk.clone(), mv.clone());
                    }
                }
            }
            _ => {
                body.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(Value::Object(body))
}

/// The conversation as `user` / `model` turns. A model turn's function calls are
/// sent only when the messages up to the next model turn answer them (Gemini wants
/// the responses in the very next turn), and each answer only once, right after its
/// call; the user content between two model turns becomes one user turn.
fn contents(msgs: &[Msg]) -> Result<Vec<Value>> {
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
                let (parts, kept) = model_parts(m, &answers);
                if !parts.is_empty() {
                    turns.push(("model", parts));
                }
                let mut user = Vec::new();
                let mut answered: HashSet<&str> = HashSet::new();
                for u in &kept {
                    if let Some(r) = answers.iter().find(|r| r.id == u.id) {
                        if answered.insert(r.id.as_str()) {
                            user.push(function_response(r, u));
                        }
                    }
                }
                for r in &answers {
                    if !answered.contains(r.id.as_str()) {
                        tracing::info!(call_id = %r.id, "leaving out a tool result whose call is not in the request");
                    }
                }
                for w in window {
                    user.extend(user_parts(w)?);
                }
                push_user(&mut turns, user);
                i = next;
            }
            Role::User | Role::Tool => {
                for r in m.tool_results_iter() {
                    tracing::info!(call_id = %r.id, "leaving out a tool result whose call is not in the request");
                }
                let parts = user_parts(m)?;
                push_user(&mut turns, parts);
                i += 1;
            }
        }
    }
    Ok(turns
        .into_iter()
        .map(|(role, parts)| json!({ "role": role, "parts": parts }))
        .collect())
}

fn push_user(turns: &mut Vec<(&'static str, Vec<Value>)>, parts: Vec<Value>) {
    if parts.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some(("user", existing)) => existing.extend(parts),
        _ => turns.push(("user", parts)),
    }
}

/// The model turn's parts (text, then the answered calls with their signatures)
/// and the calls that were kept.
fn model_parts<'a>(m: &'a Msg, answers: &[&ToolResult]) -> (Vec<Value>, Vec<&'a ToolUse>) {
    let mut kept_sigs = KeptSignatures::default();
    for b in m.content.iter() {
        if let ContentBlock::Thinking {
            signature: Some(sig),
            ..
        } = b
        {
            match signature::unseal(sig, PROVIDER) {
                Some(payload) => match serde_json::from_str::<KeptSignatures>(payload) {
                    Ok(k) => {
                        kept_sigs.calls.extend(k.calls);
                        if k.text.is_some() {
                            kept_sigs.text = k.text;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(message_id = %m.id, "leaving out thought signatures whose kept form could not be read: {e}")
                    }
                },
                None => tracing::info!(
                    provider = signature::provider_of(sig).unwrap_or("anthropic"),
                    message_id = %m.id,
                    "leaving out a thinking block signed by another provider: the Gemini API cannot accept its token"
                ),
            }
        }
    }
    let mut parts = Vec::new();
    let text = m.text();
    if !text.is_empty() {
        let mut p = Map::new();
        p.insert("text".into(), json!(text));
        if let Some(sig) = &kept_sigs.text {
            p.insert("thoughtSignature".into(), json!(sig));
        }
        parts.push(Value::Object(p));
    }
    let mut kept = Vec::new();
    let mut first_call = true;
    for (k, u) in m.tool_uses().enumerate() {
        if !answers.iter().any(|r| r.id == u.id) {
            tracing::info!(call_id = %u.id, "leaving out a tool call that has no result in the next turn");
            continue;
        }
        let mut call = Map::new();
        if !u.id.starts_with(LOCAL_ID_PREFIX) {
            call.insert("id".into(), json!(u.id));
        }
        call.insert("name".into(), json!(u.name));
        let args = match &u.input {
            Value::Object(_) => u.input.clone(),
            // The API wants an object; arguments that did not parse are sent as `{}`
            // and the tool result tells the model what was wrong.
            _ => json!({}),
        };
        call.insert("args".into(), args);
        let mut part = Map::new();
        part.insert("functionCall".into(), Value::Object(call));
        let sig = kept_sigs
            .calls
            .iter()
            .find(|(i, _)| *i == k)
            .map(|(_, s)| s.clone());
        match (sig, first_call) {
            (Some(sig), _) => {
                part.insert("thoughtSignature".into(), json!(sig));
            }
            // The first call of a step must carry a signature (Gemini 3): one that
            // did not come from Gemini carries the documented placeholder.
            (None, true) => {
                part.insert("thoughtSignature".into(), json!(PLACEHOLDER_SIGNATURE));
            }
            (None, false) => {}
        }
        first_call = false;
        parts.push(Value::Object(part));
        kept.push(u);
    }
    (parts, kept)
}

fn function_response(r: &ToolResult, call: &ToolUse) -> Value {
    let key = if r.is_error() { "error" } else { "output" };
    let mut resp = Map::new();
    if !call.id.starts_with(LOCAL_ID_PREFIX) {
        resp.insert("id".into(), json!(call.id));
    }
    resp.insert("name".into(), json!(call.name));
    resp.insert("response".into(), json!({ key: r.text() }));
    json!({ "functionResponse": resp })
}

fn user_parts(m: &Msg) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for b in m.content.iter() {
        match b {
            ContentBlock::Text { text } if !text.is_empty() => out.push(json!({ "text": text })),
            ContentBlock::Image { source } | ContentBlock::Audio { source } => {
                out.push(media(source));
            }
            _ => {}
        }
    }
    Ok(out)
}

fn media(source: &MediaSource) -> Value {
    match source {
        MediaSource::Base64 { media_type, data } => {
            json!({ "inlineData": { "mimeType": media_type, "data": data } })
        }
        MediaSource::Url { url } => {
            let lower = url.to_ascii_lowercase();
            let mime = [
                (".png", "image/png"),
                (".jpg", "image/jpeg"),
                (".jpeg", "image/jpeg"),
                (".webp", "image/webp"),
                (".gif", "image/gif"),
                (".wav", "audio/wav"),
                (".mp3", "audio/mp3"),
                (".pdf", "application/pdf"),
            ]
            .iter()
            .find(|(ext, _)| lower.split('?').next().unwrap_or("").ends_with(ext))
            .map(|(_, m)| *m);
            match mime {
                Some(m) => json!({ "fileData": { "mimeType": m, "fileUri": url } }),
                None => json!({ "fileData": { "fileUri": url } }),
            }
        }
    }
}
