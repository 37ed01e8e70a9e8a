//! The summarizer's side of context compression: the messages to summarize as plain
//! text (no tool definitions needed, long outputs clipped), split into chunks it can
//! read at once, and the request for each chunk, folding in the summary so far. The
//! driver (`drive::compress`) makes the calls.

use reins_message::{ContentBlock, Msg, Role, ToolOutcome};
use reins_model::{ChatOptions, ChatRequest, ToolChoice};

use super::{ContextPolicy, TokenCounter};

/// Longest text of one block the summarizer is shown (tool outputs are clipped).
const BLOCK_CHARS: usize = 4_000;

/// The messages to summarize as plain text, one line group per message: the
/// summarizer needs no tool definitions this way, and long outputs are clipped.
pub(crate) fn render(messages: &[Msg]) -> String {
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::System => "system",
        };
        for b in &m.content {
            match b {
                ContentBlock::Text { text } if !text.trim().is_empty() => {
                    out.push_str(&format!("[{who}] {}\n", clip(text)));
                }
                ContentBlock::ToolUse(u) => {
                    out.push_str(&format!(
                        "[assistant calls {}] {}\n",
                        u.name,
                        clip(&u.input.to_string())
                    ));
                }
                ContentBlock::ToolResult(r) => {
                    let outcome = match &r.outcome {
                        ToolOutcome::Success => "ok".to_owned(),
                        ToolOutcome::Error => "error".to_owned(),
                        ToolOutcome::Rejected { note } => match note {
                            Some(n) => format!("rejected by a person: {n}"),
                            None => "rejected by a person".to_owned(),
                        },
                        ToolOutcome::Cancelled => "not run".to_owned(),
                        ToolOutcome::Interrupted => "interrupted".to_owned(),
                        ToolOutcome::Unknown => "outcome unknown".to_owned(),
                    };
                    let text: Vec<String> = r
                        .output
                        .iter()
                        .map(|b| match b {
                            ContentBlock::Text { text } => clip(text),
                            ContentBlock::Image { .. } => "(image)".to_owned(),
                            ContentBlock::Audio { .. } => "(audio)".to_owned(),
                            _ => String::new(),
                        })
                        .collect();
                    out.push_str(&format!(
                        "[result of {} ({outcome})] {}\n",
                        r.name,
                        text.join(" ")
                    ));
                }
                ContentBlock::Image { .. } => out.push_str(&format!("[{who}] (an image)\n")),
                ContentBlock::Audio { .. } => out.push_str(&format!("[{who}] (an audio clip)\n")),
                _ => {}
            }
        }
    }
    out
}

fn clip(s: &str) -> String {
    match s.char_indices().nth(BLOCK_CHARS) {
        None => s.to_owned(),
        Some((at, _)) => format!("{}… (clipped)", &s[..at]),
    }
}

/// The summarizer's request for one chunk of messages, folding in the summary so far.
pub(crate) fn summary_request(
    policy: &ContextPolicy,
    earlier: Option<&str>,
    chunk: &[Msg],
) -> ChatRequest {
    let mut body = String::new();
    if let Some(e) = earlier {
        body.push_str("Earlier summary:\n");
        body.push_str(e);
        body.push_str("\n\n");
    }
    body.push_str("Conversation to summarize:\n");
    body.push_str(&render(chunk));
    let mut req = ChatRequest::new(vec![
        Msg::system(policy.prompt.clone()).with_id("context-summary-prompt"),
        Msg::user(body).with_id("context-summary-input"),
    ]);
    req.tool_choice = ToolChoice::None;
    req.options = ChatOptions {
        max_tokens: u32::try_from(policy.max_summary_tokens()).ok(),
        ..ChatOptions::default()
    };
    req
}

/// Splits the messages to summarize into chunks the summarizer can read at once
/// (whole messages; a single larger message is a chunk of its own, clipped when
/// rendered).
pub(crate) fn chunks(
    messages: Vec<Msg>,
    counter: &dyn TokenCounter,
    limit: usize,
) -> Vec<Vec<Msg>> {
    let mut out: Vec<Vec<Msg>> = Vec::new();
    let mut current: Vec<Msg> = Vec::new();
    let mut used = 0usize;
    for m in messages {
        let n = counter.count_message(&m);
        if !current.is_empty() && used + n > limit {
            out.push(std::mem::take(&mut current));
            used = 0;
        }
        used += n;
        current.push(m);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rendering_names_tools_outcomes_and_clips_long_outputs() {
        let m = Msg::tool_results(vec![reins_message::ToolResult::new(
            "c1",
            "search",
            ToolOutcome::Rejected {
                note: Some("too broad".into()),
            },
            vec![ContentBlock::text("x".repeat(10_000))],
        )]);
        let text = render(&[Msg::user("find it"), m]);
        assert!(text.starts_with("[user] find it\n"));
        assert!(text.contains("[result of search (rejected by a person: too broad)]"));
        assert!(text.len() < 5_000, "{}", text.len());
    }
}
