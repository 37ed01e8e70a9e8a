//! The crate's error types: [`Error`] for registry mistakes and [`ToolError`] for what a
//! tool reports from a call.

use std::time::Duration;

/// A mistake made while building a [`Toolkit`](crate::Toolkit). These happen at
/// start-up, in the program's own code, never because of what a model sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tool with this name is already registered.
    #[error("a tool named `{name}` is already registered; tool names must be unique")]
    DuplicateTool {
        /// The name registered twice.
        name: String,
    },
    /// The name is not one a model provider accepts.
    #[error(
        "invalid tool name `{name}`: {reason} (use 1 to 64 characters from a-z, A-Z, 0-9, `_` and `-`)"
    )]
    InvalidName {
        /// The rejected name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The tool's argument schema cannot be used.
    #[error("invalid argument schema for tool `{tool}`: {message}")]
    InvalidSchema {
        /// The tool's name.
        tool: String,
        /// What is wrong with the schema.
        message: String,
    },
    /// A group with this name already exists.
    #[error("a tool group named `{group}` already exists")]
    DuplicateGroup {
        /// The group's name.
        group: String,
    },
    /// No group has this name.
    #[error(
        "no tool group named `{group}`; create it first with `create_group` (known groups: {known})"
    )]
    UnknownGroup {
        /// The name asked for.
        group: String,
        /// The groups that exist, comma-separated (`none` when there are none).
        known: String,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a tool call did not produce output.
///
/// Every variant ends up as a [`ToolResult`](reins_message::ToolResult) the model sees
/// (or, for [`ToolError::Suspend`], as a pause of the run), so messages should tell the
/// model what to do differently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The call failed; the text is shown to the model.
    #[error("{0}")]
    Failed(String),
    /// The arguments were wrong in a way the schema could not express; the text is
    /// shown to the model.
    #[error("invalid arguments: {0}")]
    InvalidArgs(String),
    /// The tool cannot finish here: the run pauses and the caller executes the call
    /// (or supplies its result) later. The text says why.
    #[error("suspended: {0}")]
    Suspend(String),
    /// The tool stopped because its [`ToolContext::cancel`](crate::ToolContext) token
    /// fired.
    #[error("cancelled")]
    Cancelled,
    /// The tool gave up after this long.
    #[error("timed out after {}", crate::exec::human_duration(*.0))]
    Timeout(Duration),
    /// The call may or may not have taken effect (e.g. the process serving it died, or
    /// the connection to it dropped, while it ran): the result is
    /// [`ToolOutcome::Unknown`](reins_message::ToolOutcome::Unknown). The text says
    /// what happened; it is shown to the model.
    #[error("outcome unknown: {0}")]
    Unknown(String),
}

impl ToolError {
    /// A failure whose message is shown to the model.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Failed(message.into())
    }

    /// Wrong arguments; the message is shown to the model.
    pub fn invalid_args(message: impl Into<String>) -> Self {
        Self::InvalidArgs(message.into())
    }

    /// Pauses the run so the caller can finish the call elsewhere.
    pub fn suspend(reason: impl Into<String>) -> Self {
        Self::Suspend(reason.into())
    }

    /// A failure made from any error, keeping its message and its sources
    /// (`outer: inner: innermost`).
    pub fn from_error(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        Self::Failed(message)
    }
}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        Self::Failed(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        Self::Failed(message.to_owned())
    }
}

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> Self {
        Self::from_error(&e)
    }
}

impl From<serde_json::Error> for ToolError {
    fn from(e: serde_json::Error) -> Self {
        Self::from_error(&e)
    }
}

impl From<std::fmt::Error> for ToolError {
    fn from(e: std::fmt::Error) -> Self {
        Self::from_error(&e)
    }
}

impl From<Box<dyn std::error::Error + Send + Sync>> for ToolError {
    fn from(e: Box<dyn std::error::Error + Send + Sync>) -> Self {
        Self::from_error(e.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_error_keeps_the_chain() {
        let inner = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let outer = std::io::Error::other(inner);
        let e = ToolError::from(outer);
        assert_eq!(e, ToolError::Failed("no such file".into()));
        let boxed: Box<dyn std::error::Error + Send + Sync> = "disk full".into();
        assert_eq!(ToolError::from(boxed).to_string(), "disk full");
    }

    #[test]
    fn messages_say_what_to_do() {
        let e = Error::UnknownGroup {
            group: "browser".into(),
            known: "none".into(),
        };
        assert!(e.to_string().contains("create_group"));
        assert_eq!(
            ToolError::Timeout(Duration::from_millis(1500)).to_string(),
            "timed out after 1.5 s"
        );
    }
}
