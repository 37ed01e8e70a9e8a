//! # reins-hook
//!
//! Lifecycle hooks for reins agents. The agent fires one [`HookEvent`] per point of a
//! run — `PreCall`, `PreReasoning`, `ReasoningChunk`, `PostReasoning`, `PreActing`,
//! `ActingChunk`, `PostActing`, `PreSummary`, `PostSummary`, `PostCall`, `Error` —
//! through an ordered chain of [`Hook`]s ([`Hooks`]). Hooks change the run by mutating
//! the event (requests, messages, tool uses, results) and by asking, through
//! [`Control`], to stop the agent, go back to reasoning, or reject a tool call.
//!
//! ```
//! use reins_hook::{Control, Hook, HookContext, HookError, HookEvent, Hooks, TracingHook};
//! use reins_message::{ToolUse, ToolResult};
//!
//! /// Refuses to touch anything under /etc.
//! struct Guard;
//!
//! #[async_trait::async_trait]
//! impl Hook for Guard {
//!     fn priority(&self) -> i32 { -10 } // before the others
//!     async fn on_event(&self, event: &mut HookEvent, _: &HookContext, control: &mut Control) -> Result<(), HookError> {
//!         if let HookEvent::PreActing { tool_use } = event {
//!             if tool_use.input["path"].as_str().is_some_and(|p| p.starts_with("/etc")) {
//!                 control.reject("system files are off limits");
//!             }
//!         }
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), HookError> {
//! let hooks = Hooks::new().with(TracingHook::new()).with(Guard);
//! let ctx = HookContext::new("agent", "session-1");
//! let mut event = HookEvent::PreActing {
//!     tool_use: ToolUse::new("c1", "delete_file", serde_json::json!({ "path": "/etc/hosts" })),
//! };
//! let control = hooks.run(&mut event, &ctx).await?;
//! assert_eq!(control.rejection(), Some("system files are off limits"));
//! # Ok(())
//! # }
//! ```
//!
//! ## Features
//!
//! This crate has no Cargo features.

mod builtin;
mod control;
mod event;
mod hook;

pub use builtin::{ToolConfirmationHook, TracingHook};
pub use control::Control;
pub use event::{HookContext, HookEvent, HookEventKind, SummaryReason};
pub use hook::{Hook, HookError, Hooks, Result};
