//! The scenarios of the live conformance run. Each returns `Ok(detail)` or
//! `Err(the exact error)`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use reins::message::{Msg, Role, ToolOutcome, ToolResult, ToolSpec};
use reins::model::{
    Accumulated, ChatChunk, ChatModel, ChatOptions, ChatRequest, MessageAccumulator, ToolChoice,
};
use reins::prelude::*;
use serde_json::{Value, json};

use crate::{Provider, Target};

type Outcome = Result<String, String>;
type Run = fn(Target) -> Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// One scenario: a short id (for `--only`), a title, and what it does.
pub struct Scenario {
    pub id: &'static str,
    pub title: &'static str,
    pub run: Run,
}

/// Every scenario, in the order they run.
pub const ALL: &[Scenario] = &[
    Scenario {
        id: "chat",
        title: "plain chat",
        run: |t| Box::pin(chat(t)),
    },
    Scenario {
        id: "stream",
        title: "streamed chat",
        run: |t| Box::pin(streamed(t)),
    },
    Scenario {
        id: "tool-stream",
        title: "forced tool call, streamed",
        run: |t| Box::pin(forced_tool_streamed(t)),
    },
    Scenario {
        id: "tool-plain",
        title: "forced tool call, not streamed",
        run: |t| Box::pin(forced_tool_plain(t)),
    },
    Scenario {
        id: "round-trip",
        title: "tool round trip",
        run: |t| Box::pin(round_trip(t)),
    },
    Scenario {
        id: "parallel",
        title: "two tools in parallel",
        run: |t| Box::pin(parallel(t)),
    },
    Scenario {
        id: "approve",
        title: "agent: pause, approve, complete",
        run: |t| Box::pin(agent_approve(t)),
    },
    Scenario {
        id: "reject",
        title: "agent: reject with a note",
        run: |t| Box::pin(agent_reject(t)),
    },
    Scenario {
        id: "interrupt",
        title: "interrupt mid-stream",
        run: |t| Box::pin(interrupt(t)),
    },
    Scenario {
        id: "usage",
        title: "usage reported",
        run: |t| Box::pin(usage(t)),
    },
];

fn options(max_tokens: u32) -> ChatOptions {
    ChatOptions {
        max_tokens: Some(max_tokens),
        temperature: Some(0.0),
        ..ChatOptions::default()
    }
}

fn weather_tool() -> ToolSpec {
    ToolSpec::new(
        "get_weather",
        "Get the current weather for a city",
        json!({
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"]
        }),
    )
}

fn clip(s: &str, n: usize) -> String {
    let s = s.trim().replace('\n', " ");
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// Streams `req` to its end, counting the chunks of each kind.
async fn stream_all(t: &Target, req: ChatRequest) -> Result<(Accumulated, usize), String> {
    let mut stream = t.model.stream(req).await.map_err(|e| e.to_string())?;
    let mut acc = MessageAccumulator::new();
    let mut deltas = 0;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        if matches!(
            chunk,
            ChatChunk::TextDelta { .. } | ChatChunk::ToolArgsDelta { .. }
        ) {
            deltas += 1;
        }
        acc.push(&chunk).map_err(|e| e.to_string())?;
    }
    Ok((acc.finish(), deltas))
}

fn describe_answer(done: &Accumulated) -> String {
    let calls: Vec<String> = done
        .message
        .tool_uses()
        .map(|u| format!("{}({})", u.name, u.input))
        .collect();
    if calls.is_empty() {
        format!("text: \"{}\"", clip(&done.message.text(), 60))
    } else {
        format!("calls: {}", clip(&calls.join(", "), 80))
    }
}

async fn chat(t: Target) -> Outcome {
    let req = ChatRequest::new(vec![
        Msg::system("You are a helpful assistant. Answer briefly."),
        Msg::user("What is the capital of France? Answer in one short sentence."),
    ])
    .with_options(options(48));
    let done = t.model.complete(req).await.map_err(|e| e.to_string())?;
    if done.is_empty_answer() {
        return Err(format!(
            "the model returned an empty answer (finish: {:?})",
            done.finish_reason
        ));
    }
    Ok(describe_answer(&done))
}

async fn streamed(t: Target) -> Outcome {
    let req = ChatRequest::new(vec![Msg::user(
        "Name three colours of the rainbow, separated by commas.",
    )])
    .with_options(options(48));
    let (done, deltas) = stream_all(&t, req).await?;
    if done.is_empty_answer() {
        return Err("the model returned an empty answer".into());
    }
    let Some(finish) = done.finish_reason.clone() else {
        return Err("the stream gave no finish reason".into());
    };
    Ok(format!(
        "{deltas} text chunks, finish {finish:?}; {}",
        describe_answer(&done)
    ))
}

fn forced_request() -> ChatRequest {
    ChatRequest::new(vec![Msg::user("What is the weather in Paris right now?")])
        .with_tools(vec![weather_tool()])
        .with_tool_choice(ToolChoice::Tool("get_weather".into()))
        .with_options(options(96))
}

fn check_weather_call(name: &str, input: &Value) -> Result<(), String> {
    if name != "get_weather" {
        return Err(format!("called `{name}` instead of get_weather"));
    }
    if !input.is_object() {
        return Err(format!("arguments are not a JSON object: {input}"));
    }
    Ok(())
}

async fn forced_tool_streamed(t: Target) -> Outcome {
    let (done, deltas) = stream_all(&t, forced_request()).await?;
    let uses: Vec<_> = done.message.tool_uses().collect();
    let Some(u) = uses.first() else {
        return Err(format!(
            "no tool call (finish {:?}); {}",
            done.finish_reason,
            describe_answer(&done)
        ));
    };
    if let Some(raw) = &u.raw_input {
        return Err(format!("arguments are not valid JSON: {}", clip(raw, 80)));
    }
    check_weather_call(&u.name, &u.input)?;
    Ok(format!(
        "get_weather({}) in {deltas} argument chunks, finish {:?}",
        u.input, done.finish_reason
    ))
}

/// The same request with `stream: false`, sent by hand: reins always streams, so
/// this checks the server's other path (diagnostics for the table).
async fn forced_tool_plain(t: Target) -> Outcome {
    let req = forced_request();
    let key = t.http.api_key().map_err(|e| e.to_string())?;
    let client = reqwest::Client::builder()
        .timeout(t.args.timeout)
        .build()
        .map_err(|e| e.to_string())?;
    let (mut body, path) = match t.args.provider {
        Provider::OpenAi => {
            let m = t.openai.as_ref().ok_or("no openai model")?;
            (
                m.request_body(&req).map_err(|e| e.to_string())?,
                "/chat/completions",
            )
        }
        Provider::Anthropic => {
            let m = t.anthropic.as_ref().ok_or("no anthropic model")?;
            (
                m.request_body(&req).map_err(|e| e.to_string())?,
                "/v1/messages",
            )
        }
        Provider::Responses => {
            let m = t.responses.as_ref().ok_or("no responses model")?;
            (
                m.request_body(&req).map_err(|e| e.to_string())?,
                "/responses",
            )
        }
        Provider::Gemini => {
            let m = t.gemini.as_ref().ok_or("no gemini model")?;
            (m.request_body(&req).map_err(|e| e.to_string())?, "")
        }
        Provider::Bedrock => {
            let m = t.bedrock.as_ref().ok_or("no bedrock model")?;
            (m.request_body(&req).map_err(|e| e.to_string())?, "")
        }
    };
    let by_path = match (t.args.provider, &t.bedrock) {
        (Provider::Gemini, _) => Some(format!("/models/{}:generateContent", t.args.model)),
        (Provider::Bedrock, Some(m)) => Some(m.converse_path()),
        _ => None,
    };
    let path = by_path.as_deref().unwrap_or(path);
    // Gemini and Bedrock stream by path (`streamGenerateContent`, `converse-stream`),
    // not by a body field.
    if let Some(o) = body.as_object_mut().filter(|_| by_path.is_none()) {
        o.insert("stream".into(), json!(false));
        o.remove("stream_options");
    }
    let url = t.http.endpoint(path);
    let bytes = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
    let mut http = client
        .post(&url)
        .header("content-type", "application/json")
        .body(bytes.clone());
    if let Some(m) = &t.bedrock {
        for (name, value) in m.sign_headers(&url, &bytes).map_err(|e| e.to_string())? {
            http = http.header(name, value);
        }
    }
    match (t.args.provider, key) {
        (Provider::OpenAi | Provider::Responses, Some(k)) => http = http.bearer_auth(k),
        (Provider::Anthropic, Some(k)) => http = http.header("x-api-key", k),
        (Provider::Gemini, Some(k)) => http = http.header("x-goog-api-key", k),
        (Provider::Bedrock, _) | (_, None) => {}
    }
    if t.args.provider == Provider::Anthropic {
        http = http.header("anthropic-version", reins::anthropic::ANTHROPIC_VERSION);
    }
    let resp = http
        .send()
        .await
        .map_err(|e| t.http.redact(e.without_url().to_string()))?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(t
            .http
            .redact(format!("HTTP {status}: {}", clip(&text, 200))));
    }
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| format!("the body is not JSON ({e}): {}", clip(&text, 120)))?;
    let (name, args) = match t.args.provider {
        Provider::OpenAi => {
            let call = &v["choices"][0]["message"]["tool_calls"][0]["function"];
            let args = call["arguments"].as_str().unwrap_or("");
            let parsed: Value = serde_json::from_str(args).map_err(|_| {
                format!("no tool call with JSON arguments in: {}", clip(&text, 200))
            })?;
            (call["name"].as_str().unwrap_or("").to_owned(), parsed)
        }
        Provider::Gemini => {
            let call = v["candidates"][0]["content"]["parts"]
                .as_array()
                .and_then(|parts| parts.iter().find_map(|p| p.get("functionCall")))
                .ok_or_else(|| format!("no functionCall part in: {}", clip(&text, 200)))?;
            (
                call["name"].as_str().unwrap_or("").to_owned(),
                call["args"].clone(),
            )
        }
        Provider::Bedrock => {
            let call = v["output"]["message"]["content"]
                .as_array()
                .and_then(|blocks| blocks.iter().find_map(|b| b.get("toolUse")))
                .ok_or_else(|| format!("no toolUse block in: {}", clip(&text, 200)))?;
            (
                call["name"].as_str().unwrap_or("").to_owned(),
                call["input"].clone(),
            )
        }
        Provider::Responses => {
            let call = v["output"]
                .as_array()
                .and_then(|items| items.iter().find(|i| i["type"] == "function_call"))
                .ok_or_else(|| format!("no function_call item in: {}", clip(&text, 200)))?;
            let args = call["arguments"].as_str().unwrap_or("");
            let parsed: Value = serde_json::from_str(args).map_err(|_| {
                format!(
                    "function_call arguments are not JSON in: {}",
                    clip(&text, 200)
                )
            })?;
            (call["name"].as_str().unwrap_or("").to_owned(), parsed)
        }
        Provider::Anthropic => {
            let block = v["content"]
                .as_array()
                .and_then(|bs| bs.iter().find(|b| b["type"] == "tool_use"))
                .ok_or_else(|| format!("no tool_use block in: {}", clip(&text, 200)))?;
            (
                block["name"].as_str().unwrap_or("").to_owned(),
                block["input"].clone(),
            )
        }
    };
    check_weather_call(&name, &args)?;
    Ok(format!("get_weather({args})"))
}

async fn round_trip(t: Target) -> Outcome {
    let first = t
        .model
        .complete(forced_request())
        .await
        .map_err(|e| format!("first request: {e}"))?;
    let uses: Vec<_> = first.message.tool_uses().cloned().collect();
    if uses.is_empty() {
        return Err(format!(
            "first request: no tool call; {}",
            describe_answer(&first)
        ));
    }
    let results = uses
        .iter()
        .map(|u| ToolResult::success(&u.id, &u.name, "18°C and sunny"));
    let mut messages = forced_request().messages;
    messages.push(first.message.clone());
    messages.push(Msg::tool_results(results));
    let second = ChatRequest::new(messages)
        .with_tools(vec![weather_tool()])
        .with_options(options(64));
    let done = t
        .model
        .complete(second)
        .await
        .map_err(|e| format!("second request (with the tool result): {e}"))?;
    if done.is_empty_answer() {
        return Err("second request: the model returned an empty answer".into());
    }
    Ok(format!(
        "answered after the result; {}",
        describe_answer(&done)
    ))
}

async fn parallel(t: Target) -> Outcome {
    let req = ChatRequest::new(vec![Msg::user(
        "What is the weather in Paris and in Tokyo? Call get_weather once for each city.",
    )])
    .with_tools(vec![weather_tool()])
    .with_tool_choice(ToolChoice::Required)
    .with_options(options(160));
    let (done, _) = stream_all(&t, req).await?;
    let calls: Vec<_> = done.message.tool_uses().collect();
    let ids: std::collections::HashSet<_> = calls.iter().map(|u| u.id.as_str()).collect();
    if calls.len() < 2 {
        return Err(format!(
            "{} tool call(s) in one answer, 2 expected; {}",
            calls.len(),
            describe_answer(&done)
        ));
    }
    if ids.len() != calls.len() {
        return Err("two calls share one id".into());
    }
    Ok(describe_answer(&done))
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct DeleteArgs {
    /// The file to delete.
    path: String,
}

/// An agent whose `delete_file` needs a person's confirmation; counts its runs.
fn agent(t: &Target, runs: Arc<AtomicUsize>) -> Result<Agent, String> {
    let mut tools = Toolkit::new();
    tools
        .add(
            Toolkit::function(
                "delete_file",
                "Delete a file by its path",
                move |a: DeleteArgs, _ctx| {
                    let runs = runs.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, ToolError>(format!("deleted {}", a.path))
                    }
                },
            )
            .policy(ToolPolicy::confirm()),
        )
        .map_err(|e| e.to_string())?;
    Agent::builder()
        .name("live")
        .system_prompt(
            "You are a careful assistant. Use the delete_file tool when asked to delete a file.",
        )
        .model_arc(t.model.clone())
        .toolkit(tools)
        .chat_options(options(128))
        .max_iters(4)
        .build()
        .map_err(|e| e.to_string())
}

async fn paused_on_delete(
    t: &Target,
    runs: Arc<AtomicUsize>,
) -> Result<(Agent, Session, Requirement), String> {
    let agent = agent(t, runs)?;
    let session = agent
        .session(&format!("live-{}", reins::message::new_id()))
        .await
        .map_err(|e| e.to_string())?;
    let out = session
        .send(Msg::user("Delete the file temp.txt."))
        .await
        .map_err(|e| format!("first call: {e}"))?;
    if out.status != RunStatus::Paused {
        return Err(format!(
            "expected a pause for delete_file, got {:?}: \"{}\"",
            out.status,
            clip(&out.message.text(), 80)
        ));
    }
    let req = out
        .requirements
        .first()
        .cloned()
        .ok_or("paused with no requirement")?;
    if req.tool_use.name != "delete_file" {
        return Err(format!("paused on `{}`", req.tool_use.name));
    }
    Ok((agent, session, req))
}

async fn agent_approve(t: Target) -> Outcome {
    let runs = Arc::new(AtomicUsize::new(0));
    let (_agent, session, req) = paused_on_delete(&t, runs.clone()).await?;
    let out = session
        .resolve(vec![Decision::approve(&req.id)])
        .await
        .map_err(|e| format!("after approval: {e}"))?;
    let ran = runs.load(Ordering::SeqCst);
    if ran != 1 {
        return Err(format!("the tool ran {ran} times, once expected"));
    }
    match out.status {
        RunStatus::Completed if !out.message.text().trim().is_empty() => Ok(format!(
            "paused on delete_file({}), ran once, answered \"{}\"",
            req.tool_use.input,
            clip(&out.message.text(), 50)
        )),
        RunStatus::Completed => Err("completed, but the model returned an empty answer".into()),
        other => Err(format!(
            "after approval: {other:?} (requirements: {})",
            out.requirements
                .iter()
                .map(|r| r.tool_use.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

async fn agent_reject(t: Target) -> Outcome {
    let runs = Arc::new(AtomicUsize::new(0));
    let (_agent, session, req) = paused_on_delete(&t, runs.clone()).await?;
    let out = session
        .resolve(vec![Decision::reject(&req.id, "keep that file")])
        .await
        .map_err(|e| format!("after rejection: {e}"))?;
    if runs.load(Ordering::SeqCst) != 0 {
        return Err("the rejected tool ran".into());
    }
    let messages = session.messages().await.map_err(|e| e.to_string())?;
    let rejected = messages
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .any(|r| {
            matches!(r.outcome, ToolOutcome::Rejected { .. }) && r.text().contains("keep that file")
        });
    if !rejected {
        return Err("the transcript has no rejected result carrying the note".into());
    }
    match out.status {
        RunStatus::Completed | RunStatus::Paused => Ok(format!(
            "not run; the model was told \"keep that file\" and answered: {:?} \"{}\"",
            out.status,
            clip(&out.message.text(), 50)
        )),
        other => Err(format!("after rejection: {other:?}")),
    }
}

async fn interrupt(t: Target) -> Outcome {
    let agent = Agent::builder()
        .name("live")
        .model_arc(t.model.clone())
        .chat_options(options(200))
        .build()
        .map_err(|e| e.to_string())?;
    let session = agent
        .session(&format!("live-{}", reins::message::new_id()))
        .await
        .map_err(|e| e.to_string())?;
    let mut run = session
        .send(Msg::user("Count from 1 to 100, one number per line."))
        .start()
        .await
        .map_err(|e| e.to_string())?;
    let mut deltas = 0;
    while let Some(ev) = run.next_event().await {
        if let RunEvent::TextDelta { .. } = ev {
            deltas += 1;
            run.interrupt();
            break;
        }
    }
    let out = run.wait().await.map_err(|e| e.to_string())?;
    if deltas == 0 {
        return Err(format!(
            "no text streamed to interrupt (status {:?})",
            out.status
        ));
    }
    if out.status != RunStatus::Cancelled {
        return Err(format!(
            "interrupted after the first chunk, but the run says {:?}",
            out.status
        ));
    }
    let messages = session.messages().await.map_err(|e| e.to_string())?;
    if messages.iter().any(|m| m.role == Role::Assistant) {
        return Err("the partial answer was kept in the transcript".into());
    }
    Ok("cancelled after the first chunk; the partial answer was dropped".into())
}

async fn usage(t: Target) -> Outcome {
    let req = ChatRequest::new(vec![Msg::user("Say OK.")]).with_options(options(8));
    let done = t.model.complete(req).await.map_err(|e| e.to_string())?;
    let u = done.usage;
    if u.input_tokens == 0 && u.output_tokens == 0 {
        Ok("not reported (the stream carried no usage)".into())
    } else {
        Ok(format!(
            "reported: {} in, {} out",
            u.input_tokens, u.output_tokens
        ))
    }
}
