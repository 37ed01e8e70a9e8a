//! [`Msg`] and [`Role`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::blocks::Blocks;
use crate::content::ContentBlock;
use crate::error::{MessageError, Result};
use crate::id::new_id;
use crate::tool::{ToolResult, ToolUse};

/// Who a message is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// A person (or the program speaking for one).
    User,
    /// The model.
    Assistant,
    /// Tool results, answering the tool uses of the assistant message before them.
    Tool,
}

impl Role {
    /// The lowercase name: `system`, `user`, `assistant` or `tool`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One message of a conversation.
///
/// ```
/// use reins_message::{Msg, Role};
///
/// let m = Msg::user("delete temp.txt");
/// assert_eq!(m.role, Role::User);
/// assert_eq!(m.text(), "delete temp.txt");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Msg {
    /// A unique id (UUIDv7 for messages made here; any string for imported ones).
    pub id: String,
    /// The speaker's name (an agent's or a person's), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Who is speaking.
    pub role: Role,
    /// What is said: blocks shared between copies of the message (copied when one
    /// copy changes them; see [`Blocks`]).
    pub content: Blocks,
    /// Free-form facts about the message (never sent to a model).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// When the message was made.
    pub created_at: DateTime<Utc>,
}

impl Msg {
    /// A message with the given role and content, a fresh id, and the current time.
    pub fn new(role: Role, content: Vec<ContentBlock>) -> Self {
        Self {
            id: new_id(),
            name: None,
            role,
            content: content.into(),
            metadata: Map::new(),
            created_at: Utc::now(),
        }
    }

    /// A user message holding one text block.
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Role::User, vec![ContentBlock::text(text)])
    }

    /// A system message holding one text block.
    pub fn system(text: impl Into<String>) -> Self {
        Self::new(Role::System, vec![ContentBlock::text(text)])
    }

    /// An assistant message holding one text block.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(Role::Assistant, vec![ContentBlock::text(text)])
    }

    /// A tool message holding the given results, in order.
    pub fn tool_results(results: impl IntoIterator<Item = ToolResult>) -> Self {
        Self::new(
            Role::Tool,
            results.into_iter().map(ContentBlock::ToolResult).collect(),
        )
    }

    /// Sets the speaker's name.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets the id.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Adds a metadata entry.
    #[must_use]
    pub fn with_metadata(mut self, key: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }

    /// Appends a content block.
    #[must_use]
    pub fn with_block(mut self, block: ContentBlock) -> Self {
        self.content.push(block);
        self
    }

    /// The text blocks, joined with newlines (thinking, tool and media blocks are
    /// left out).
    pub fn text(&self) -> String {
        join_text(&self.content)
    }

    /// The thinking blocks' text, joined with newlines.
    pub fn thinking(&self) -> String {
        let mut out = String::new();
        for b in &self.content {
            if let ContentBlock::Thinking { thinking, .. } = b {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(thinking);
            }
        }
        out
    }

    /// The tool uses in this message, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = &ToolUse> {
        self.content.iter().filter_map(ContentBlock::as_tool_use)
    }

    /// The tool results in this message, in order.
    ///
    /// (`Msg::tool_results(..)` is the constructor, as ARCHITECTURE.md's API shape
    /// names it, so the accessor carries the `_iter` suffix.)
    pub fn tool_results_iter(&self) -> impl Iterator<Item = &ToolResult> {
        self.content.iter().filter_map(ContentBlock::as_tool_result)
    }

    /// Whether the message holds at least one tool use.
    pub fn has_tool_uses(&self) -> bool {
        self.content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolUse(_)))
    }

    /// Whether the message holds at least one tool result.
    pub fn has_tool_results(&self) -> bool {
        self.content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult(_)))
    }

    /// Serializes to JSON (the stored format).
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|e| MessageError::Encode(e.to_string()))
    }

    /// Parses one message from JSON. On failure the error names the path of the field
    /// that was wrong (e.g. `content[0].type`).
    pub fn from_json(json: &str) -> Result<Self> {
        crate::error::from_json_str(json)
    }

    /// Parses a list of messages from JSON (an array), naming the failing field's path.
    pub fn list_from_json(json: &str) -> Result<Vec<Self>> {
        crate::error::from_json_str(json)
    }
}

pub(crate) fn join_text(blocks: &[ContentBlock]) -> String {
    let mut out = String::new();
    let mut first = true;
    for b in blocks {
        if let ContentBlock::Text { text } = b {
            if !first {
                out.push('\n');
            }
            out.push_str(text);
            first = false;
        }
    }
    out
}
