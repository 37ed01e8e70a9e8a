//! Content blocks: the pieces a [`Msg`](crate::Msg) is made of.

use serde::{Deserialize, Serialize};

use crate::tool::{ToolResult, ToolUse};

/// One piece of a message's content.
///
/// Serialized with a `type` tag in snake_case, e.g. `{"type":"text","text":"hi"}`.
/// This JSON is a stored format (sessions and snapshots keep it); changing it needs a
/// migration note in `docs/persistence.md`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text itself.
        text: String,
    },
    /// A model's visible reasoning. Some providers (Anthropic) sign it and require the
    /// block, signature included, to be sent back unchanged on the next turn.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// The provider's signature over the reasoning, when it gives one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// A request by the model to call a tool.
    ToolUse(ToolUse),
    /// The result of a tool call, answering a [`ToolUse`] with the same id.
    ToolResult(ToolResult),
    /// An image.
    Image {
        /// Where the image's bytes are.
        source: MediaSource,
    },
    /// An audio clip.
    Audio {
        /// Where the audio's bytes are.
        source: MediaSource,
    },
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// A thinking block without a signature.
    pub fn thinking(thinking: impl Into<String>) -> Self {
        Self::Thinking {
            thinking: thinking.into(),
            signature: None,
        }
    }

    /// The text of a [`ContentBlock::Text`] block, `None` for any other block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text { text } => Some(text),
            _ => None,
        }
    }

    /// The tool use of a [`ContentBlock::ToolUse`] block.
    pub fn as_tool_use(&self) -> Option<&ToolUse> {
        match self {
            Self::ToolUse(u) => Some(u),
            _ => None,
        }
    }

    /// The tool result of a [`ContentBlock::ToolResult`] block.
    pub fn as_tool_result(&self) -> Option<&ToolResult> {
        match self {
            Self::ToolResult(r) => Some(r),
            _ => None,
        }
    }
}

impl From<&str> for ContentBlock {
    fn from(text: &str) -> Self {
        Self::text(text)
    }
}

impl From<String> for ContentBlock {
    fn from(text: String) -> Self {
        Self::text(text)
    }
}

/// Where the bytes of an image or audio block come from.
///
/// Serialized with a `type` tag: `{"type":"url","url":"..."}` or
/// `{"type":"base64","media_type":"image/png","data":"..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MediaSource {
    /// A URL the provider fetches itself.
    Url {
        /// The address.
        url: String,
    },
    /// Inline bytes, base64-encoded.
    Base64 {
        /// The IANA media type, e.g. `image/png` or `audio/wav`.
        media_type: String,
        /// The base64-encoded bytes.
        data: String,
    },
}

impl MediaSource {
    /// A source that points at a URL.
    pub fn url(url: impl Into<String>) -> Self {
        Self::Url { url: url.into() }
    }

    /// An inline base64 source.
    pub fn base64(media_type: impl Into<String>, data: impl Into<String>) -> Self {
        Self::Base64 {
            media_type: media_type.into(),
            data: data.into(),
        }
    }
}
