//! Helpers shared by the reins-tool integration tests.

use reins_message::{ToolResult, ToolUse};
use reins_tool::{ExecOptions, ToolCallOutcome, ToolContext, Toolkit};
use serde_json::Value;

/// A tool use with id `call_1`.
pub fn call(name: &str, input: Value) -> ToolUse {
    ToolUse::new("call_1", name, input)
}

/// Executes one call with a fresh context and default options.
pub async fn run(tk: &Toolkit, tool_use: &ToolUse) -> ToolCallOutcome {
    tk.execute(
        tool_use,
        ToolContext::new("s1", &tool_use.id),
        &ExecOptions::default(),
    )
    .await
}

/// Executes one call and expects a result (not a suspension).
pub async fn result(tk: &Toolkit, tool_use: &ToolUse) -> ToolResult {
    match run(tk, tool_use).await {
        ToolCallOutcome::Done(r) => r,
        other => panic!("expected a result, got {other:?}"),
    }
}
