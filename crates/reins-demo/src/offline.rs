//! The built-in offline model: a [`ScriptedModel`] whose rules understand the demo's
//! requests, wrapped so that text streams at a readable pace and every tool call gets
//! an id that stays unique across restarts.

use std::time::Duration;

use futures::StreamExt;
use reins::message::{Msg, Role, ToolOutcome, ToolResult, ToolUse};
use reins::model::{
    ChatChunk, ChatModel, ChatRequest, ChatStream, ScriptedModel, ScriptedResponse,
};
use serde_json::{Value, json};

use crate::intent::{self, Intent};

/// The name the banner shows.
pub const NAME: &str = "offline (built-in rules, no network)";

/// The offline model.
#[derive(Clone)]
pub struct OfflineModel {
    inner: ScriptedModel,
    pace: Duration,
}

impl OfflineModel {
    /// `think`: the wait before each answer; `pace`: the pause between text chunks.
    pub fn new(think: Duration, pace: Duration) -> Self {
        let inner = ScriptedModel::from_fn(respond)
            .with_name(NAME)
            .with_latency(think)
            .with_chunk_size(6)
            .with_recording(false);
        Self { inner, pace }
    }
}

#[async_trait::async_trait]
impl ChatModel for OfflineModel {
    fn model_name(&self) -> &str {
        NAME
    }

    /// `offline`: the demo's built-in rules (a name of its own).
    fn provider_name(&self) -> Option<&str> {
        Some("offline")
    }

    async fn stream(&self, request: ChatRequest) -> reins::model::Result<ChatStream> {
        let pace = self.pace;
        let stream = self.inner.stream(request).await?;
        Ok(Box::pin(stream.then(move |chunk| async move {
            match chunk {
                Ok(ChatChunk::TextDelta { text }) => {
                    if !pace.is_zero() {
                        tokio::time::sleep(pace).await;
                    }
                    Ok(ChatChunk::TextDelta { text })
                }
                // ScriptedModel numbers calls per instance; a restarted demo would reuse
                // `call_1`. Ids must be unique within a session, so make them so.
                Ok(ChatChunk::ToolCallStart { index, name, .. }) => Ok(ChatChunk::ToolCallStart {
                    index,
                    id: unique_call_id(),
                    name,
                }),
                other => other,
            }
        })))
    }
}

fn unique_call_id() -> String {
    let id = reins::message::new_id().replace('-', "");
    let tail = id.get(id.len().saturating_sub(12)..).unwrap_or(&id);
    format!("call_{tail}")
}

const HELP: &str = "I'm SafeAgent, running on the offline model built into this demo, so I only \
understand a few kinds of requests. Here is what I can do in the demo's sandbox:\n\
- delete a file: \"delete temp.txt\" (I will ask for your approval first)\n\
- send an email: \"email bob@example.com about the report\" (approval first; it lands in outbox/)\n\
- search the web: \"search for rust agents\" (canned results; add \"slow\" to make it take a few \
seconds, then press ESC to interrupt it)\n\
- tell you what happened to your last request: \"what happened?\"\n\
You can combine requests with \"and\", e.g. \"search for tea and delete temp.txt\". \
When I ask to run a risky tool you can approve it, reject it with a note, or edit its arguments.";

/// The offline model's one rule: answer tool results with a truthful summary, and a
/// person's message with tool calls (or help).
fn respond(req: &ChatRequest) -> ScriptedResponse {
    let msgs = &req.messages;
    match msgs.iter().rev().find(|m| m.role != Role::System) {
        Some(m) if m.role == Role::Tool => {
            ScriptedResponse::text(summarize(msgs).unwrap_or_else(|| HELP.to_owned()))
        }
        Some(m) if m.role == Role::User => answer(&m.text(), msgs),
        _ => ScriptedResponse::text(HELP),
    }
}

fn answer(text: &str, msgs: &[Msg]) -> ScriptedResponse {
    let intents = intent::parse(text);
    if intents.is_empty() {
        return ScriptedResponse::text(HELP);
    }
    let mut lead = Vec::new();
    let mut calls: Vec<(&str, Value)> = Vec::new();
    for i in intents {
        match i {
            Intent::Delete { path } => {
                lead.push(format!("I'll delete `{path}` — that needs your approval."));
                calls.push(("delete_file", json!({ "path": path })));
            }
            Intent::Email { to, subject, body } => {
                lead.push(format!("I'll email {to} — that needs your approval."));
                calls.push((
                    "send_email",
                    json!({ "to": to, "subject": subject, "body": body }),
                ));
            }
            Intent::Search { query, slow } => {
                lead.push(if slow {
                    format!("Searching for \"{query}\" (slowly: press ESC to interrupt).")
                } else {
                    format!("Searching for \"{query}\".")
                });
                let mut args = json!({ "query": query });
                if slow {
                    args["slow"] = json!(true);
                }
                calls.push(("search_web", args));
            }
            Intent::Recap => lead.push(recap(msgs)),
            Intent::Clarify(q) => lead.push(q),
        }
    }
    let mut resp = ScriptedResponse::text(lead.join(" "));
    for (name, args) in calls {
        resp = resp.then_tool_call(name, args);
    }
    resp
}

/// The tool uses of the latest assistant message that made calls, with their results.
fn last_calls(msgs: &[Msg]) -> Option<Vec<(&ToolUse, Option<&ToolResult>)>> {
    let at = msgs
        .iter()
        .rposition(|m| m.role == Role::Assistant && m.has_tool_uses())?;
    let results: Vec<&ToolResult> = msgs[at + 1..]
        .iter()
        .flat_map(Msg::tool_results_iter)
        .collect();
    Some(
        msgs[at]
            .tool_uses()
            .map(|u| (u, results.iter().copied().find(|r| r.id == u.id)))
            .collect(),
    )
}

fn summarize(msgs: &[Msg]) -> Option<String> {
    let calls = last_calls(msgs)?;
    let lines: Vec<String> = calls
        .into_iter()
        .map(|(u, r)| match r {
            Some(r) => describe(u, r),
            None => format!("`{}` has no result yet.", u.name),
        })
        .collect();
    Some(lines.join("\n"))
}

fn recap(msgs: &[Msg]) -> String {
    match summarize(msgs) {
        Some(s) => format!("Here is what happened to the last tool calls:\n{s}"),
        None => "Nothing has happened yet in this session: no tool was called.".to_owned(),
    }
}

/// One truthful sentence about a tool call's outcome.
pub fn describe(u: &ToolUse, r: &ToolResult) -> String {
    let ran = r.metadata.get("executed_input").unwrap_or(&u.input);
    let edited = r.metadata.contains_key("executed_input");
    let arg = |k: &str| ran.get(k).and_then(Value::as_str).unwrap_or("?").to_owned();
    let what = match u.name.as_str() {
        "delete_file" => format!("deleting `{}`", arg("path")),
        "send_email" => format!("the email to {}", arg("to")),
        "search_web" => format!("the search for \"{}\"", arg("query")),
        other => format!("`{other}`"),
    };
    let mut s = match &r.outcome {
        ToolOutcome::Success => match u.name.as_str() {
            "delete_file" => format!("Done: {}.", r.text()),
            "send_email" => format!("Sent: {}.", r.text()),
            "search_web" => format!("Here is what I found: {}", r.text()),
            _ => format!("`{}` succeeded: {}", u.name, r.text()),
        },
        ToolOutcome::Error => format!("That failed — {what}: {}", r.text()),
        ToolOutcome::Rejected { note } => match note {
            Some(n) => format!("You rejected {what}, so I did not do it. Your note: \"{n}\"."),
            None => format!("You rejected {what}, so I did not do it."),
        },
        ToolOutcome::Cancelled => {
            format!(
                "{} never ran: the request was interrupted first.",
                cap(&what)
            )
        }
        ToolOutcome::Interrupted => format!(
            "{} was interrupted while it ran, so I have no result from it.",
            cap(&what)
        ),
        ToolOutcome::Unknown => {
            format!("I don't know whether {what} took effect: the program stopped while it ran.")
        }
    };
    if edited {
        s.push_str(&format!(
            " (You edited the arguments before approving: I had proposed {}.)",
            u.input
        ));
    }
    s
}

fn cap(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(msgs: Vec<Msg>) -> ChatRequest {
        ChatRequest::new(msgs)
    }

    /// docs/observability.md draws the demo's span tree: its `chat` spans carry the
    /// name the telemetry gives them, `chat {model_name}`, with this model's name.
    #[test]
    fn the_observability_guide_names_this_models_chat_span() {
        let m = OfflineModel::new(Duration::ZERO, Duration::ZERO);
        let span = format!("chat {}", m.model_name());
        let guide = include_str!("../../../docs/observability.md");
        let tree = guide
            .split("### Span tree of a paused-and-approved run")
            .nth(1)
            .unwrap_or("");
        let chats: Vec<&str> = tree
            .lines()
            .take_while(|l| !l.starts_with("### "))
            .filter_map(|l| l.split_once("── chat ").map(|(_, rest)| rest))
            .collect();
        assert!(!chats.is_empty(), "no chat span in the guide's tree");
        for c in chats {
            assert!(
                c.starts_with(&span["chat ".len()..]),
                "the guide draws `chat {c}`, the demo's span is `{span}`"
            );
        }
        assert_eq!(m.provider_name(), Some("offline"));
    }

    #[tokio::test]
    async fn a_request_becomes_tool_calls_with_unique_ids() {
        let m = OfflineModel::new(Duration::ZERO, Duration::ZERO);
        let a = m
            .complete(req(vec![Msg::user("delete temp.txt and search for tea")]))
            .await
            .unwrap();
        let uses: Vec<&ToolUse> = a.message.tool_uses().collect();
        assert_eq!(uses.len(), 2);
        assert_eq!(uses[0].name, "delete_file");
        assert_eq!(uses[0].input, json!({"path": "temp.txt"}));
        assert_eq!(uses[1].input, json!({"query": "tea"}));
        assert_ne!(uses[0].id, uses[1].id);
        let b = m
            .complete(req(vec![Msg::user("delete temp.txt")]))
            .await
            .unwrap();
        assert_ne!(b.message.tool_uses().next().unwrap().id, uses[0].id);
    }

    fn asked(u: &ToolUse) -> Msg {
        Msg::assistant("").with_block(reins::message::ContentBlock::ToolUse(u.clone()))
    }

    #[tokio::test]
    async fn after_tool_results_the_reply_tells_the_truth() {
        let m = OfflineModel::new(Duration::ZERO, Duration::ZERO);
        let u = ToolUse::new("c1", "delete_file", json!({"path": "notes.md"}));
        let rejected = ToolResult::rejected("c1", "delete_file", Some("keep it".into()));
        let msgs = vec![
            Msg::user("delete notes.md"),
            asked(&u),
            Msg::tool_results([rejected]),
        ];
        let reply = m.complete(req(msgs)).await.unwrap().message.text();
        assert!(
            reply.contains("rejected") && reply.contains("keep it"),
            "{reply}"
        );

        let interrupted = ToolResult::interrupted("c1", "delete_file", "stopped");
        let s = summarize(&[asked(&u), Msg::tool_results([interrupted])]).unwrap();
        assert!(s.contains("interrupted"), "{s}");

        let ok = ToolResult::success("c1", "delete_file", "deleted `x.md` (3 bytes)")
            .with_metadata("executed_input", json!({"path": "x.md"}));
        let s = summarize(&[asked(&u), Msg::tool_results([ok])]).unwrap();
        assert!(s.contains("x.md") && s.contains("edited"), "{s}");
    }

    #[tokio::test]
    async fn anything_else_gets_help_and_recaps_work() {
        let m = OfflineModel::new(Duration::ZERO, Duration::ZERO);
        let reply = m
            .complete(req(vec![Msg::user("hello")]))
            .await
            .unwrap()
            .message;
        assert!(reply.text().contains("delete temp.txt"));
        assert_eq!(reply.tool_uses().count(), 0);
        let reply = m
            .complete(req(vec![Msg::user("what happened?")]))
            .await
            .unwrap();
        assert!(reply.message.text().contains("Nothing has happened yet"));
    }
}
