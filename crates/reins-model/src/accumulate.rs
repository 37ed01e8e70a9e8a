//! [`MessageAccumulator`]: folds a stream of [`ChatChunk`]s into the final assistant
//! [`Msg`].

use reins_message::{ContentBlock, Msg, Role, ToolUse, Usage};
use serde_json::Value;

use crate::{ChatChunk, FinishReason, ModelError, Result};

/// Folds streamed [`ChatChunk`]s into the final assistant message.
///
/// Any chunking of the same stream gives the same message: text and argument deltas
/// are concatenated, signature pieces are concatenated onto the current thinking
/// block, and tool calls are ordered by their `index`. Empty text deltas are ignored.
///
/// The final message holds its blocks in this order: thinking blocks (each with its
/// signature), one text block, then the tool uses by index.
///
/// ```
/// use reins_model::{ChatChunk, FinishReason, MessageAccumulator};
///
/// let mut acc = MessageAccumulator::new();
/// acc.push(&ChatChunk::TextDelta { text: "Let me look.".into() })?;
/// acc.push(&ChatChunk::ToolCallStart { index: 0, id: "call_1".into(), name: "search".into() })?;
/// acc.push(&ChatChunk::ToolArgsDelta { index: 0, fragment: r#"{"q":"ru"#.into() })?;
/// acc.push(&ChatChunk::ToolArgsDelta { index: 0, fragment: r#"st"}"#.into() })?;
/// acc.push(&ChatChunk::Finish { reason: FinishReason::ToolUse })?;
/// let done = acc.finish();
/// assert_eq!(done.message.text(), "Let me look.");
/// assert_eq!(done.message.tool_uses().next().unwrap().input["q"], "rust");
/// # Ok::<(), reins_model::ModelError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct MessageAccumulator {
    thinking: Vec<ThinkingPart>,
    text: String,
    tools: Vec<ToolPart>,
    usage: Usage,
    finish_reason: Option<FinishReason>,
}

#[derive(Debug, Clone)]
struct ThinkingPart {
    text: String,
    signature: Option<String>,
}

#[derive(Debug, Clone)]
struct ToolPart {
    index: usize,
    id: String,
    name: String,
    args: String,
}

/// The result of [`MessageAccumulator::finish`].
#[derive(Debug, Clone, PartialEq)]
pub struct Accumulated {
    /// The assistant message ([`Role::Assistant`]): thinking blocks, text, tool uses.
    pub message: Msg,
    /// The token counts the provider reported (zeros when it reported none).
    pub usage: Usage,
    /// Why the model stopped, when the stream said.
    pub finish_reason: Option<FinishReason>,
}

impl Accumulated {
    /// Whether the model gave no answer: no text (whitespace aside) and no tool
    /// call. Thinking alone does not count as an answer. Some servers end a turn
    /// this way (`content: ""` then `finish_reason: "stop"`); an agent should tell
    /// the person rather than finish silently.
    ///
    /// ```
    /// use reins_model::{ChatChunk, FinishReason, MessageAccumulator};
    ///
    /// let mut acc = MessageAccumulator::new();
    /// acc.push(&ChatChunk::TextDelta { text: " \n".into() })?;
    /// acc.push(&ChatChunk::Finish { reason: FinishReason::Stop })?;
    /// assert!(acc.finish().is_empty_answer());
    /// # Ok::<(), reins_model::ModelError>(())
    /// ```
    pub fn is_empty_answer(&self) -> bool {
        !self.message.has_tool_uses() && self.message.text().trim().is_empty()
    }
}

impl MessageAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds one chunk in.
    ///
    /// # Errors
    /// [`ModelError::MalformedStream`] when a [`ChatChunk::ToolArgsDelta`] names an
    /// index no [`ChatChunk::ToolCallStart`] began, or when an index is started twice
    /// with a different id or name. The accumulator is unchanged in that case.
    pub fn push(&mut self, chunk: &ChatChunk) -> Result<()> {
        match chunk {
            ChatChunk::TextDelta { text } => self.text.push_str(text),
            ChatChunk::ThinkingDelta { text } => {
                if text.is_empty() {
                    return Ok(());
                }
                match self.thinking.last_mut() {
                    Some(part) if part.signature.is_none() => part.text.push_str(text),
                    _ => self.thinking.push(ThinkingPart {
                        text: text.clone(),
                        signature: None,
                    }),
                }
            }
            ChatChunk::ThinkingSignature { signature } => {
                if signature.is_empty() {
                    return Ok(());
                }
                match self.thinking.last_mut() {
                    Some(part) => part
                        .signature
                        .get_or_insert_with(String::new)
                        .push_str(signature),
                    None => self.thinking.push(ThinkingPart {
                        text: String::new(),
                        signature: Some(signature.clone()),
                    }),
                }
            }
            ChatChunk::ToolCallStart { index, id, name } => {
                if let Some(existing) = self.tool_mut(*index) {
                    if existing.id == *id && existing.name == *name {
                        return Ok(());
                    }
                    return Err(ModelError::MalformedStream(format!(
                        "tool call index {index} started twice (`{}` then `{name}`)",
                        existing.name
                    )));
                }
                self.tools.push(ToolPart {
                    index: *index,
                    id: id.clone(),
                    name: name.clone(),
                    args: String::new(),
                });
            }
            ChatChunk::ToolArgsDelta { index, fragment } => match self.tool_mut(*index) {
                Some(part) => part.args.push_str(fragment),
                None => {
                    return Err(ModelError::MalformedStream(format!(
                        "arguments for tool call index {index}, which never started"
                    )));
                }
            },
            ChatChunk::Usage(u) => merge_usage(&mut self.usage, u),
            ChatChunk::Finish { reason } => self.finish_reason = Some(reason.clone()),
        }
        Ok(())
    }

    fn tool_mut(&mut self, index: usize) -> Option<&mut ToolPart> {
        // Deltas almost always continue the most recent call: check it first.
        if self.tools.last().is_some_and(|t| t.index == index) {
            return self.tools.last_mut();
        }
        self.tools.iter_mut().find(|t| t.index == index)
    }

    /// The answer text so far (for live displays and `ReasoningChunk` hooks).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The token counts reported so far.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Why the model stopped, once the stream said.
    pub fn finish_reason(&self) -> Option<&FinishReason> {
        self.finish_reason.as_ref()
    }

    /// Whether any text, thinking or tool call has arrived.
    pub fn has_content(&self) -> bool {
        !self.text.is_empty() || !self.thinking.is_empty() || !self.tools.is_empty()
    }

    /// Whether an answer has arrived: text other than whitespace, or a tool call
    /// (see [`Accumulated::is_empty_answer`]).
    pub fn has_answer(&self) -> bool {
        !self.text.trim().is_empty() || !self.tools.is_empty()
    }

    /// Builds the final message. Never fails: tool arguments that are not valid JSON
    /// become `input: Value::Null` with the text kept in
    /// [`ToolUse::raw_input`]; empty arguments become `{}`.
    pub fn finish(self) -> Accumulated {
        let mut content = Vec::with_capacity(self.thinking.len() + 1 + self.tools.len());
        for part in self.thinking {
            content.push(ContentBlock::Thinking {
                thinking: part.text,
                signature: part.signature,
            });
        }
        if !self.text.is_empty() {
            content.push(ContentBlock::Text { text: self.text });
        }
        let mut tools = self.tools;
        tools.sort_by_key(|t| t.index);
        for t in tools {
            content.push(ContentBlock::ToolUse(tool_use(t)));
        }
        Accumulated {
            message: Msg::new(Role::Assistant, content),
            usage: self.usage,
            finish_reason: self.finish_reason,
        }
    }
}

fn tool_use(t: ToolPart) -> ToolUse {
    if t.args.trim().is_empty() {
        return ToolUse::new(t.id, t.name, Value::Object(Default::default()));
    }
    match serde_json::from_str::<Value>(&t.args) {
        Ok(input) => ToolUse::new(t.id, t.name, input),
        Err(_) => ToolUse {
            id: t.id,
            name: t.name,
            input: Value::Null,
            raw_input: Some(t.args),
        },
    }
}

/// Later usage reports replace earlier ones field by field where they are non-zero.
fn merge_usage(into: &mut Usage, u: &Usage) {
    fn set(dst: &mut u64, src: u64) {
        if src != 0 {
            *dst = src;
        }
    }
    set(&mut into.input_tokens, u.input_tokens);
    set(&mut into.output_tokens, u.output_tokens);
    set(&mut into.cache_read_tokens, u.cache_read_tokens);
    set(&mut into.cache_write_tokens, u.cache_write_tokens);
    set(&mut into.reasoning_tokens, u.reasoning_tokens);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(t: &str) -> ChatChunk {
        ChatChunk::TextDelta { text: t.into() }
    }

    #[test]
    fn orders_thinking_text_then_tools_by_index() {
        let mut acc = MessageAccumulator::new();
        for c in [
            ChatChunk::ToolCallStart {
                index: 1,
                id: "b".into(),
                name: "two".into(),
            },
            ChatChunk::ToolCallStart {
                index: 0,
                id: "a".into(),
                name: "one".into(),
            },
            ChatChunk::ToolArgsDelta {
                index: 1,
                fragment: "{\"x\":".into(),
            },
            ChatChunk::ToolArgsDelta {
                index: 0,
                fragment: "".into(),
            },
            ChatChunk::ToolArgsDelta {
                index: 1,
                fragment: "2}".into(),
            },
            text("hi"),
            ChatChunk::ThinkingDelta { text: "hmm".into() },
            ChatChunk::ThinkingSignature {
                signature: "sig".into(),
            },
            ChatChunk::ThinkingDelta {
                text: "again".into(),
            },
        ] {
            acc.push(&c).unwrap();
        }
        let m = acc.finish().message;
        assert_eq!(m.role, Role::Assistant);
        assert_eq!(
            m.content[0],
            ContentBlock::Thinking {
                thinking: "hmm".into(),
                signature: Some("sig".into())
            }
        );
        assert_eq!(m.content[1], ContentBlock::thinking("again"));
        assert_eq!(m.content[2], ContentBlock::text("hi"));
        let uses: Vec<_> = m.tool_uses().collect();
        assert_eq!(uses[0].id, "a");
        assert_eq!(uses[0].input, json!({}));
        assert_eq!(uses[1].input, json!({"x": 2}));
    }

    #[test]
    fn args_for_unknown_index_are_malformed() {
        let mut acc = MessageAccumulator::new();
        let err = acc
            .push(&ChatChunk::ToolArgsDelta {
                index: 3,
                fragment: "{}".into(),
            })
            .unwrap_err();
        assert!(matches!(err, ModelError::MalformedStream(m) if m.contains("index 3")));
        assert!(!acc.has_content());
    }

    #[test]
    fn a_second_start_with_another_name_is_malformed_but_a_repeat_is_fine() {
        let mut acc = MessageAccumulator::new();
        let start = ChatChunk::ToolCallStart {
            index: 0,
            id: "a".into(),
            name: "one".into(),
        };
        acc.push(&start).unwrap();
        acc.push(&start).unwrap();
        let other = ChatChunk::ToolCallStart {
            index: 0,
            id: "b".into(),
            name: "two".into(),
        };
        assert!(acc.push(&other).is_err());
        assert_eq!(acc.finish().message.tool_uses().count(), 1);
    }

    #[test]
    fn invalid_json_arguments_are_kept_raw() {
        let mut acc = MessageAccumulator::new();
        acc.push(&ChatChunk::ToolCallStart {
            index: 0,
            id: "a".into(),
            name: "one".into(),
        })
        .unwrap();
        acc.push(&ChatChunk::ToolArgsDelta {
            index: 0,
            fragment: "{\"path\": ".into(),
        })
        .unwrap();
        let m = acc.finish().message;
        let u = m.tool_uses().next().unwrap();
        assert_eq!(u.input, Value::Null);
        assert_eq!(u.raw_input.as_deref(), Some("{\"path\": "));
    }

    #[test]
    fn usage_merges_field_by_field_and_finish_is_kept() {
        let mut acc = MessageAccumulator::new();
        acc.push(&ChatChunk::Usage(Usage {
            input_tokens: 10,
            ..Usage::default()
        }))
        .unwrap();
        acc.push(&ChatChunk::Usage(Usage {
            output_tokens: 5,
            ..Usage::default()
        }))
        .unwrap();
        acc.push(&ChatChunk::Finish {
            reason: FinishReason::Stop,
        })
        .unwrap();
        assert_eq!(acc.usage().input_tokens, 10);
        assert_eq!(acc.usage().output_tokens, 5);
        assert_eq!(acc.finish_reason(), Some(&FinishReason::Stop));
        let done = acc.finish();
        assert!(done.message.content.is_empty());
        assert!(done.is_empty_answer());
        assert_eq!(done.usage.total_tokens(), 15);
    }

    #[test]
    fn empty_answers_are_flagged_and_real_ones_are_not() {
        let answer = |chunks: &[ChatChunk]| {
            let mut acc = MessageAccumulator::new();
            for c in chunks {
                acc.push(c).unwrap();
            }
            let has = acc.has_answer();
            let done = acc.finish();
            assert_eq!(has, !done.is_empty_answer());
            has
        };
        let stop = ChatChunk::Finish {
            reason: FinishReason::Stop,
        };
        assert!(!answer(&[text(""), stop.clone()]));
        assert!(!answer(&[text("\n  "), stop.clone()]));
        assert!(!answer(&[
            ChatChunk::ThinkingDelta { text: "hmm".into() },
            stop.clone()
        ]));
        assert!(answer(&[text("ok"), stop.clone()]));
        assert!(answer(&[ChatChunk::ToolCallStart {
            index: 0,
            id: "a".into(),
            name: "t".into()
        }]));
    }
}
