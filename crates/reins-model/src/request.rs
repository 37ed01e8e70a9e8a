//! What is sent to a model: [`ChatRequest`], [`ChatOptions`], [`ToolChoice`].

use reins_message::Msg;

use crate::ToolSpecs;

fn no_tools(t: &ToolSpecs) -> bool {
    t.is_empty()
}
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One request to a chat model.
///
/// A system prompt is a [`Role::System`](reins_message::Role::System) message at the
/// start of `messages`; providers move it where their wire format wants it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The conversation, oldest first.
    pub messages: Vec<Msg>,
    /// The tools the model may call (shared between requests; see [`ToolSpecs`]).
    #[serde(default, skip_serializing_if = "no_tools")]
    pub tools: ToolSpecs,
    /// Whether and which tool the model must call.
    #[serde(default)]
    pub tool_choice: ToolChoice,
    /// Sampling and provider options.
    #[serde(default)]
    pub options: ChatOptions,
}

impl ChatRequest {
    /// A request with these messages, no tools and default options.
    pub fn new(messages: Vec<Msg>) -> Self {
        Self {
            messages,
            ..Self::default()
        }
    }

    /// Sets the tools.
    #[must_use]
    pub fn with_tools(mut self, tools: impl Into<ToolSpecs>) -> Self {
        self.tools = tools.into();
        self
    }

    /// Sets the tool choice.
    #[must_use]
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = choice;
        self
    }

    /// Sets the options.
    #[must_use]
    pub fn with_options(mut self, options: ChatOptions) -> Self {
        self.options = options;
        self
    }
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "type", content = "name", rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call at least one tool.
    Required,
    /// The model must call this tool.
    Tool(String),
}

/// The shape of the answer a model is asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text (the default).
    Text,
    /// Any JSON object ("JSON mode").
    JsonObject,
    /// JSON matching a schema.
    JsonSchema {
        /// A name for the schema.
        name: String,
        /// The JSON Schema.
        schema: Value,
        /// Whether the provider must follow the schema strictly.
        #[serde(default)]
        strict: bool,
    },
}

/// Sampling and provider options. Unset fields are left to the provider.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatOptions {
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// The most tokens to generate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// A seed, for providers that support reproducible sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The answer's format (JSON mode and structured output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Provider-specific fields merged into the request body as they are
    /// (e.g. `{"enable_thinking": true}` for DashScope, `{"thinking": {...}}` for
    /// Anthropic).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}
