//! Structured output: a run whose final answer is JSON matching a schema.
//!
//! The schema ([`OutputSpec`]) is stored with the run state, so a run that pauses for
//! a person and is resumed in another process still ends with its typed answer, even
//! when that process's agent was built without one.
//!
//! How the model is asked ([`OutputMode`]):
//! - [`OutputMode::NativeSchema`]: the provider constrains the answer
//!   (`response_format: json_schema`, strict when the schema allows it); the final
//!   text is the JSON.
//! - [`OutputMode::AnswerTool`]: a `final_answer` tool whose parameters are the
//!   schema, with the tool choice forced (any tool when the agent has others — the
//!   model may still call them first — or `final_answer` itself when it has none).
//! - [`OutputMode::PromptedTool`]: the same tool, not forced, plus an instruction; for
//!   servers that support neither (a final text that is valid JSON is accepted too).
//! - [`OutputMode::Auto`] (default) picks from the model's
//!   [`ModelCapabilities`](reins_model::ModelCapabilities): native when it has JSON
//!   Schema support, else the forced tool, else the prompted one.
//!
//! Answers are validated with reins-tool's JSON Schema validator — the one that checks
//! tool arguments: it covers what schemars generates (local `$ref`s, combinators,
//! bounds), is property-tested, and keeps a heavy dependency out of the agent core.
//! An invalid answer is kept in the transcript (marked in its metadata), the model is
//! told exactly what was wrong and asked again, at most `max_retries` times; then the
//! call fails with [`AgentError::InvalidOutput`](crate::AgentError::InvalidOutput),
//! which carries the raw answer.

use reins_message::{Msg, Role, ToolSpec};
use reins_model::{ChatRequest, ResponseFormat, ToolChoice};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The name of the tool the answer-tool modes add.
pub const FINAL_ANSWER_TOOL: &str = "final_answer";

/// Metadata key on messages that took part in producing a structured answer:
/// `"invalid"` on a rejected answer, `"feedback"` on the message telling the model what
/// was wrong, `"answer"` on the accepted one.
pub const OUTPUT_MARK: &str = "reins.output";

/// How a run asks the model for its structured answer. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// Chosen from the model's capabilities at each request.
    #[default]
    Auto,
    /// Provider-native JSON Schema (`response_format`).
    NativeSchema,
    /// A forced `final_answer` tool call.
    AnswerTool,
    /// A `final_answer` tool the model is asked (not forced) to call.
    PromptedTool,
}

impl OutputMode {
    /// The concrete mode for a model with these capabilities.
    pub fn resolve(self, caps: reins_model::ModelCapabilities) -> Self {
        match self {
            Self::Auto if caps.json_schema => Self::NativeSchema,
            Self::Auto if caps.forced_tool_choice => Self::AnswerTool,
            Self::Auto => Self::PromptedTool,
            other => other,
        }
    }
}

/// The shape of a run's final answer, stored with the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputSpec {
    /// A name for the schema (sent to providers that name schemas).
    pub name: String,
    /// The JSON Schema the answer must match.
    pub schema: Value,
    /// How to ask for it.
    #[serde(default)]
    pub mode: OutputMode,
    /// How many times an invalid answer is sent back before the call fails.
    pub max_retries: u32,
}

impl OutputSpec {
    /// The spec of `T`'s JSON Schema (schemars), named after the type.
    pub fn of<T: JsonSchema>() -> Self {
        let name: String = T::schema_name()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        Self::new(
            if name.is_empty() {
                "answer".to_owned()
            } else {
                name
            },
            reins_tool::schema_for::<T>(),
        )
    }

    /// A spec from a schema written by hand (mode `Auto`, 2 retries).
    pub fn new(name: impl Into<String>, schema: Value) -> Self {
        Self {
            name: name.into(),
            schema,
            mode: OutputMode::Auto,
            max_retries: 2,
        }
    }

    /// Sets the mode.
    #[must_use]
    pub fn mode(mut self, mode: OutputMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets how many invalid answers are sent back before the call fails.
    #[must_use]
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// Checks that the schema is usable: an object (a JSON Schema document).
    pub(crate) fn check(&self) -> Result<(), String> {
        if !self.schema.is_object() {
            return Err(format!(
                "the output schema `{}` must be a JSON object (a JSON Schema), got {}",
                self.name,
                type_name(&self.schema)
            ));
        }
        if self.name.trim().is_empty() {
            return Err("the output schema needs a name".to_owned());
        }
        Ok(())
    }

    /// Whether the answer-tool modes wrap the schema in `{"value": ..}` (a tool's
    /// parameters must be an object).
    fn wrapped(&self) -> bool {
        self.schema.get("type").and_then(Value::as_str) != Some("object")
    }

    /// The `final_answer` tool.
    pub(crate) fn answer_tool(&self) -> ToolSpec {
        let parameters = if self.wrapped() {
            let mut defs = serde_json::Map::new();
            let mut inner = self.schema.clone();
            // Keep `$defs` at the root, where `#/$defs/..` references point.
            if let Some(d) = inner.as_object_mut().and_then(|o| o.remove("$defs")) {
                defs.insert("$defs".to_owned(), d);
            }
            let mut p = json!({
                "type": "object",
                "properties": {"value": inner},
                "required": ["value"],
                "additionalProperties": false,
            });
            if let Some(o) = p.as_object_mut() {
                o.extend(defs);
            }
            p
        } else {
            self.schema.clone()
        };
        ToolSpec::new(
            FINAL_ANSWER_TOOL,
            format!(
                "Give your final answer ({}). Call this once, alone, when you are done; \
                 the arguments are the answer.",
                self.name
            ),
            parameters,
        )
    }

    /// The answer carried by `final_answer` arguments.
    pub(crate) fn answer_from_args(&self, args: &Value) -> Value {
        if self.wrapped() {
            args.get("value").cloned().unwrap_or(Value::Null)
        } else {
            args.clone()
        }
    }

    /// The instruction added to the system prompt in the prompted-tool mode.
    pub(crate) fn instruction(&self) -> String {
        format!(
            "When you have the final answer, call the `{FINAL_ANSWER_TOOL}` tool with it \
             (matching its parameters exactly) instead of answering in text."
        )
    }

    /// Whether a provider may enforce the schema strictly (OpenAI's strict mode):
    /// every object lists all its properties as required and forbids others.
    pub fn strict_compatible(&self) -> bool {
        strict_ok(&self.schema, 0)
    }

    /// Validates an answer; the problems, each naming its path, when it does not fit.
    pub fn validate(&self, answer: &Value) -> Result<(), Vec<String>> {
        reins_tool::validate(&self.schema, answer)
    }
}

fn strict_ok(s: &Value, depth: usize) -> bool {
    if depth > 32 {
        return false;
    }
    let Some(o) = s.as_object() else {
        return true;
    };
    if o.get("type").and_then(Value::as_str) == Some("object") {
        let props = o.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = o
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if o.get("additionalProperties") != Some(&Value::Bool(false)) {
            return false;
        }
        if let Some(props) = props {
            if props.keys().any(|k| !required.contains(&k.as_str())) {
                return false;
            }
        }
    }
    o.values().all(|v| match v {
        Value::Object(_) => strict_ok(v, depth + 1),
        Value::Array(items) => items.iter().all(|i| strict_ok(i, depth + 1)),
        _ => true,
    })
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Shapes a request to ask for the run's structured answer in `mode`.
pub(crate) fn ask_for_output(request: &mut ChatRequest, mode: OutputMode, spec: &OutputSpec) {
    match mode {
        OutputMode::NativeSchema => {
            request.options.response_format = Some(ResponseFormat::JsonSchema {
                name: spec.name.clone(),
                schema: spec.schema.clone(),
                strict: spec.strict_compatible(),
            });
        }
        OutputMode::AnswerTool | OutputMode::PromptedTool | OutputMode::Auto => {
            let others = !request.tools.is_empty();
            request.tools.push(spec.answer_tool());
            if mode == OutputMode::PromptedTool {
                let note = spec.instruction();
                let last_text = request
                    .messages
                    .first_mut()
                    .filter(|m| m.role == Role::System)
                    .and_then(|m| {
                        m.content.iter_mut().rev().find_map(|b| match b {
                            reins_message::ContentBlock::Text { text } => Some(text),
                            _ => None,
                        })
                    });
                match last_text {
                    Some(text) => {
                        text.push_str("\n\n");
                        text.push_str(&note);
                    }
                    None => request
                        .messages
                        .insert(0, Msg::system(note).with_id("output-instruction")),
                }
            } else {
                request.tool_choice = if others {
                    ToolChoice::Required
                } else {
                    ToolChoice::Tool(FINAL_ANSWER_TOOL.to_owned())
                };
            }
        }
    }
}

/// What the model's answer text says, as JSON: the text itself, or the first fenced
/// code block in it (models often wrap JSON in ```json fences).
pub(crate) fn parse_text_answer(text: &str) -> Result<Value, String> {
    let t = text.trim();
    if let Ok(v) = serde_json::from_str(t) {
        return Ok(v);
    }
    if let Some(start) = t.find("```") {
        let body = &t[start + 3..];
        let body = body.strip_prefix("json").unwrap_or(body);
        if let Some(end) = body.find("```") {
            if let Ok(v) = serde_json::from_str(body[..end].trim()) {
                return Ok(v);
            }
        }
    }
    match serde_json::from_str::<Value>(t) {
        Ok(v) => Ok(v),
        Err(e) if t.is_empty() => Err(format!("the answer was empty ({e})")),
        Err(e) => Err(format!("the answer is not JSON: {e}")),
    }
}

/// The text sent back to the model after an invalid answer.
pub(crate) fn feedback(spec: &OutputSpec, problems: &[String], via_tool: bool) -> String {
    let mut s = format!(
        "Your answer does not match the required schema `{}`:\n",
        spec.name
    );
    for p in problems {
        s.push_str("- ");
        s.push_str(p);
        s.push('\n');
    }
    if via_tool {
        s.push_str(&format!(
            "Call `{FINAL_ANSWER_TOOL}` again with a corrected answer."
        ));
    } else {
        s.push_str("Answer again with only the corrected JSON.");
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Weather {
        city: String,
        celsius: f64,
    }

    #[test]
    fn modes_follow_capabilities_unless_chosen() {
        use reins_model::ModelCapabilities as C;
        assert_eq!(
            OutputMode::Auto.resolve(C::new(true, true)),
            OutputMode::NativeSchema
        );
        assert_eq!(
            OutputMode::Auto.resolve(C::new(false, true)),
            OutputMode::AnswerTool
        );
        assert_eq!(
            OutputMode::Auto.resolve(C::new(false, false)),
            OutputMode::PromptedTool
        );
        assert_eq!(
            OutputMode::PromptedTool.resolve(C::new(true, true)),
            OutputMode::PromptedTool
        );
    }

    #[test]
    fn a_type_spec_validates_and_names_problems() {
        let spec = OutputSpec::of::<Weather>();
        assert_eq!(spec.name, "Weather");
        spec.validate(&json!({"city": "Oslo", "celsius": -3.5}))
            .unwrap();
        let problems = spec.validate(&json!({"city": 7})).unwrap_err();
        assert!(
            problems.iter().any(|p| p.contains("celsius")),
            "{problems:?}"
        );
        // schemars does not forbid extra properties: not strict-compatible as is.
        assert!(!spec.strict_compatible());
        let strict = OutputSpec::new(
            "s",
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": false}),
        );
        assert!(strict.strict_compatible());
    }

    #[test]
    fn non_object_answers_are_wrapped_for_the_tool() {
        let spec = OutputSpec::new("n", json!({"type": "array", "items": {"type": "integer"}}));
        let tool = spec.answer_tool();
        assert_eq!(tool.parameters["required"], json!(["value"]));
        assert_eq!(
            spec.answer_from_args(&json!({"value": [1, 2]})),
            json!([1, 2])
        );
        let obj = OutputSpec::of::<Weather>();
        assert_eq!(obj.answer_tool().parameters, obj.schema);
    }

    #[test]
    fn text_answers_parse_with_or_without_fences() {
        assert_eq!(parse_text_answer(" {\"a\":1} ").unwrap(), json!({"a": 1}));
        assert_eq!(
            parse_text_answer("Here:\n```json\n{\"a\":2}\n```").unwrap(),
            json!({"a": 2})
        );
        assert!(
            parse_text_answer("sunny, 20 degrees")
                .unwrap_err()
                .contains("not JSON")
        );
        assert!(parse_text_answer("").unwrap_err().contains("empty"));
    }
}
