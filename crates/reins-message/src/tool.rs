//! Tool calls, their results and their specs.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::content::ContentBlock;

/// A model's request to call a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolUse {
    /// The provider's id for this call; the matching [`ToolResult`] carries the same id.
    pub id: String,
    /// The name of the tool to call.
    pub name: String,
    /// The arguments, as JSON. `Value::Null` when the model's arguments were not JSON
    /// (see [`ToolUse::raw_input`]).
    #[serde(default)]
    pub input: Value,
    /// What the model sent, kept verbatim when it was not valid JSON, so the model can
    /// be told exactly what was wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<String>,
}

impl ToolUse {
    /// A tool use with valid JSON arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            input,
            raw_input: None,
        }
    }

    /// Whether the model's arguments failed to parse as JSON.
    pub fn has_malformed_input(&self) -> bool {
        self.raw_input.is_some()
    }
}

/// What happened to a tool call. The model sees the truth: a tool that never ran is
/// not reported as failed, and a tool whose fate is unknown is not reported as done.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ToolOutcome {
    /// The tool ran and succeeded.
    #[default]
    Success,
    /// The tool ran (or was asked to run) and failed; the output says why.
    Error,
    /// A person declined the call; it never ran.
    Rejected {
        /// Why, in the person's words, when they gave a reason.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// The call never started (the run was interrupted or ended before it, or the call
    /// was cancelled).
    Cancelled,
    /// The call started and was stopped mid-run; its side effects may be partial.
    Interrupted,
    /// The process died while the call ran; whether it took effect is unknown.
    Unknown,
}

impl ToolOutcome {
    /// Whether this outcome should be flagged to the model as an error
    /// (everything except [`ToolOutcome::Success`]).
    pub fn is_error(&self) -> bool {
        !matches!(self, Self::Success)
    }

    /// A short lowercase label: `success`, `error`, `rejected`, `cancelled`,
    /// `interrupted` or `unknown`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Rejected { .. } => "rejected",
            Self::Cancelled => "cancelled",
            Self::Interrupted => "interrupted",
            Self::Unknown => "unknown",
        }
    }
}

/// The result of a tool call, answering the [`ToolUse`] with the same id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the [`ToolUse`] this answers.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// What the model is shown.
    #[serde(default)]
    pub output: Vec<ContentBlock>,
    /// What happened.
    #[serde(default)]
    pub outcome: ToolOutcome,
    /// Extra facts, e.g. `executed_input` when a person edited the arguments.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

impl ToolResult {
    /// A result with the given outcome and content.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        outcome: ToolOutcome,
        output: Vec<ContentBlock>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            output,
            outcome,
            metadata: Map::new(),
        }
    }

    /// A successful result with text output.
    pub fn success(
        id: impl Into<String>,
        name: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        Self::new(
            id,
            name,
            ToolOutcome::Success,
            vec![ContentBlock::text(text)],
        )
    }

    /// A failed result; `message` tells the model what went wrong.
    pub fn error(
        id: impl Into<String>,
        name: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::new(
            id,
            name,
            ToolOutcome::Error,
            vec![ContentBlock::text(message)],
        )
    }

    /// A call a person declined, with their note.
    pub fn rejected(id: impl Into<String>, name: impl Into<String>, note: Option<String>) -> Self {
        let text = match &note {
            Some(n) if !n.is_empty() => format!("not run: rejected by the user: {n}"),
            _ => "not run: rejected by the user".to_owned(),
        };
        Self::new(
            id,
            name,
            ToolOutcome::Rejected { note },
            vec![ContentBlock::text(text)],
        )
    }

    /// A call that never started; `reason` is shown to the model
    /// (e.g. `"not run: interrupted"`).
    pub fn cancelled(
        id: impl Into<String>,
        name: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Self::new(
            id,
            name,
            ToolOutcome::Cancelled,
            vec![ContentBlock::text(reason)],
        )
    }

    /// A call stopped mid-run.
    pub fn interrupted(
        id: impl Into<String>,
        name: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Self::new(
            id,
            name,
            ToolOutcome::Interrupted,
            vec![ContentBlock::text(reason)],
        )
    }

    /// A call whose fate is unknown (the process died while it ran).
    pub fn unknown(
        id: impl Into<String>,
        name: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Self::new(
            id,
            name,
            ToolOutcome::Unknown,
            vec![ContentBlock::text(reason)],
        )
    }

    /// Starts a result answering the call `id` without naming the tool: when a
    /// caller answers a pending call (cancels it, or returns an external result),
    /// the session fills in the name from the call itself.
    ///
    /// ```
    /// use reins_message::{ToolOutcome, ToolResult};
    ///
    /// let r = ToolResult::answering("call_1").cancelled("cancelled by the user");
    /// assert_eq!(r.outcome, ToolOutcome::Cancelled);
    /// assert_eq!(r.name, "");
    /// let r = ToolResult::answering("call_2").named("lookup").success("paid on 3 March");
    /// assert_eq!(r.name, "lookup");
    /// ```
    pub fn answering(id: impl Into<String>) -> ToolAnswer {
        ToolAnswer {
            id: id.into(),
            name: String::new(),
        }
    }

    /// A result answering `tool_use`, with the given outcome and text.
    pub fn for_use(tool_use: &ToolUse, outcome: ToolOutcome, text: impl Into<String>) -> Self {
        Self::new(
            tool_use.id.clone(),
            tool_use.name.clone(),
            outcome,
            vec![ContentBlock::text(text)],
        )
    }

    /// Adds a metadata entry.
    #[must_use]
    pub fn with_metadata(mut self, key: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }

    /// The text blocks of the output, joined with newlines.
    pub fn text(&self) -> String {
        crate::msg::join_text(&self.output)
    }

    /// Whether the model should see this result flagged as an error.
    pub fn is_error(&self) -> bool {
        self.outcome.is_error()
    }
}

/// A [`ToolResult`] in the making: the id of the call it answers and, optionally,
/// the tool's name. Made by [`ToolResult::answering`]; each outcome method finishes
/// it with the same text its [`ToolResult`] namesake writes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an answer does nothing until it is finished with an outcome"]
pub struct ToolAnswer {
    id: String,
    name: String,
}

impl ToolAnswer {
    /// Names the tool (optional: a session fills it in from the pending call).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// A successful result with text output.
    pub fn success(self, text: impl Into<String>) -> ToolResult {
        ToolResult::success(self.id, self.name, text)
    }

    /// A failed result; `message` tells the model what went wrong.
    pub fn error(self, message: impl Into<String>) -> ToolResult {
        ToolResult::error(self.id, self.name, message)
    }

    /// A call a person declined, with their note.
    pub fn rejected(self, note: Option<String>) -> ToolResult {
        ToolResult::rejected(self.id, self.name, note)
    }

    /// A call that never started; `reason` is shown to the model.
    pub fn cancelled(self, reason: impl Into<String>) -> ToolResult {
        ToolResult::cancelled(self.id, self.name, reason)
    }

    /// A call stopped mid-run.
    pub fn interrupted(self, reason: impl Into<String>) -> ToolResult {
        ToolResult::interrupted(self.id, self.name, reason)
    }

    /// A call whose fate is unknown.
    pub fn unknown(self, reason: impl Into<String>) -> ToolResult {
        ToolResult::unknown(self.id, self.name, reason)
    }

    /// A result with any outcome and output (images included).
    pub fn with_outcome(self, outcome: ToolOutcome, output: Vec<ContentBlock>) -> ToolResult {
        ToolResult::new(self.id, self.name, outcome, output)
    }
}

/// What a model is told about a tool: its name, what it does, and a JSON Schema of its
/// arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// A JSON Schema (an object schema) of the arguments.
    pub parameters: Value,
}

impl ToolSpec {
    /// A spec from its parts.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
}

/// Token counts reported by a provider. Fields a provider does not report stay 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt.
    #[serde(default)]
    pub input_tokens: u64,
    /// Tokens generated.
    #[serde(default)]
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// Generated tokens spent on reasoning (part of `output_tokens` where the provider
    /// counts it so).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Input plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, o: Self) {
        self.input_tokens = self.input_tokens.saturating_add(o.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(o.output_tokens);
        self.cache_read_tokens = self.cache_read_tokens.saturating_add(o.cache_read_tokens);
        self.cache_write_tokens = self.cache_write_tokens.saturating_add(o.cache_write_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(o.reasoning_tokens);
    }
}

impl std::ops::Add for Usage {
    type Output = Self;
    fn add(mut self, o: Self) -> Self {
        self += o;
        self
    }
}
