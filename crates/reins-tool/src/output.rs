//! Tool output: [`ToolOutput`] and the conversions tools return.

use reins_message::ContentBlock;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::ToolError;

/// What a tool produced: the blocks the model sees, plus metadata kept with the result.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutput {
    /// The content the model is shown.
    pub content: Vec<ContentBlock>,
    /// Extra facts stored with the result (never sent to a model).
    pub metadata: Map<String, Value>,
}

impl ToolOutput {
    /// Output made of these blocks.
    pub fn new(content: Vec<ContentBlock>) -> Self {
        Self {
            content,
            metadata: Map::new(),
        }
    }

    /// Output made of one text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new(vec![ContentBlock::text(text)])
    }

    /// Adds a metadata entry.
    #[must_use]
    pub fn with_metadata(mut self, key: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }
}

/// Wraps any serializable value so a tool can return it; the model sees its JSON.
///
/// ```
/// use reins_tool::{IntoToolOutput, Json};
///
/// #[derive(serde::Serialize)]
/// struct Weather { city: &'static str, celsius: i32 }
///
/// let out = Json(Weather { city: "Oslo", celsius: -3 }).into_tool_output().unwrap();
/// assert_eq!(out.content[0].as_text(), Some(r#"{"city":"Oslo","celsius":-3}"#));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Json<T>(pub T);

/// Turns a tool's return value into [`ToolOutput`].
///
/// Implemented for `String`, `&'static str`, [`serde_json::Value`] (strings as they
/// are, anything else as compact JSON), [`ContentBlock`], `Vec<ContentBlock>`, `()`
/// (the text `ok`), [`Json<T>`] and [`ToolOutput`] itself.
pub trait IntoToolOutput: Send + 'static {
    /// Converts; fails only when a value cannot be serialized.
    fn into_tool_output(self) -> Result<ToolOutput, ToolError>;
}

impl IntoToolOutput for ToolOutput {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(self)
    }
}

impl IntoToolOutput for String {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(self))
    }
}

impl IntoToolOutput for &'static str {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(self))
    }
}

impl IntoToolOutput for Value {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(match self {
            Value::String(s) => ToolOutput::text(s),
            other => ToolOutput::text(other.to_string()),
        })
    }
}

impl IntoToolOutput for ContentBlock {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::new(vec![self]))
    }
}

impl IntoToolOutput for Vec<ContentBlock> {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::new(self))
    }
}

impl IntoToolOutput for () {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("ok"))
    }
}

impl<T: Serialize + Send + 'static> IntoToolOutput for Json<T> {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        serde_json::to_string(&self.0)
            .map(ToolOutput::text)
            .map_err(|e| {
                ToolError::Failed(format!(
                    "the tool's output could not be encoded as JSON: {e}"
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    fn text_of(o: impl IntoToolOutput) -> String {
        let out = o.into_tool_output().unwrap();
        reins_message::ToolResult::new("i", "n", Default::default(), out.content).text()
    }

    #[test]
    fn conversions() {
        assert_eq!(text_of("hi"), "hi");
        assert_eq!(text_of(String::from("hi")), "hi");
        assert_eq!(text_of(json!("plain")), "plain");
        assert_eq!(text_of(json!({ "a": [1, 2] })), r#"{"a":[1,2]}"#);
        assert_eq!(text_of(()), "ok");
        assert_eq!(text_of(ContentBlock::text("b")), "b");
        assert_eq!(
            text_of(vec![ContentBlock::text("a"), ContentBlock::text("b")]),
            "a\nb"
        );
        assert_eq!(text_of(Json(vec![1, 2])), "[1,2]");
    }

    #[test]
    fn unserializable_json_is_a_failure_not_a_panic() {
        let mut map = HashMap::new();
        map.insert(vec![1u8], 1); // JSON object keys must be strings
        let err = Json(map).into_tool_output().unwrap_err();
        assert!(matches!(err, ToolError::Failed(m) if m.contains("could not be encoded")));
    }
}
