//! What a model streams back: [`ChatChunk`] and [`FinishReason`].

use reins_message::Usage;
use serde::{Deserialize, Serialize};

/// One piece of a streamed model response.
///
/// Tool calls arrive as a [`ChatChunk::ToolCallStart`] followed by any number of
/// [`ChatChunk::ToolArgsDelta`]s with the same `index`; parallel calls interleave by
/// index. [`MessageAccumulator`](crate::MessageAccumulator) folds the chunks into the
/// final message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ChatChunk {
    /// More answer text.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// More reasoning text.
    ThinkingDelta {
        /// The new reasoning text.
        text: String,
    },
    /// The signature of the current thinking block (Anthropic).
    ThinkingSignature {
        /// The signature (or a piece of it; pieces are concatenated).
        signature: String,
    },
    /// A tool call begins.
    ToolCallStart {
        /// The call's position in this response (0-based).
        index: usize,
        /// The provider's id for the call.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// More of a tool call's JSON arguments.
    ToolArgsDelta {
        /// Which call (the `index` of its [`ChatChunk::ToolCallStart`]).
        index: usize,
        /// The next fragment of the arguments' JSON text.
        fragment: String,
    },
    /// Token counts (may arrive more than once; later values replace earlier ones
    /// field by field where non-zero).
    Usage(Usage),
    /// Why the model stopped.
    Finish {
        /// The reason.
        reason: FinishReason,
    },
}

/// Why a model stopped generating.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end of the answer (or a stop sequence).
    Stop,
    /// The model wants tools called.
    ToolUse,
    /// The token limit was reached.
    Length,
    /// The provider filtered the answer.
    ContentFilter,
    /// Anything else, as the provider named it.
    Other(String),
}
