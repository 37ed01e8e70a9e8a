//! # reins-message
//!
//! The data every other reins crate speaks: [`Msg`], [`Role`], [`ContentBlock`],
//! [`ToolUse`], [`ToolResult`], [`ToolOutcome`], [`ToolSpec`] and [`Usage`].
//! Pure data and serde: no async runtime, no I/O.
//!
//! ```
//! use reins_message::{ContentBlock, Msg, ToolResult, ToolUse};
//! use serde_json::json;
//!
//! // The model asks for a tool ...
//! let call = ToolUse::new("call_1", "delete_file", json!({ "path": "temp.txt" }));
//! let assistant = Msg::assistant("Deleting it.").with_block(ContentBlock::ToolUse(call.clone()));
//! assert_eq!(assistant.tool_uses().count(), 1);
//!
//! // ... and a person declines.
//! let answer = Msg::tool_results([ToolResult::rejected(&call.id, &call.name, Some("keep it".into()))]);
//! assert!(answer.tool_results_iter().all(|r| r.is_error()));
//!
//! // Messages round-trip through their stored JSON.
//! let json = assistant.to_json()?;
//! assert_eq!(Msg::from_json(&json)?, assistant);
//! # Ok::<(), reins_message::MessageError>(())
//! ```
//!
//! Broken or foreign JSON gives a [`MessageError::InvalidJson`] naming the field:
//!
//! ```
//! let err = reins_message::Msg::from_json(r#"{"id":"1","role":"robot","content":[],"created_at":"2026-01-01T00:00:00Z"}"#)
//!     .unwrap_err();
//! assert!(err.to_string().contains("role"));
//! ```
//!
//! ## Features
//!
//! This crate has no Cargo features.

mod blocks;
mod content;
mod error;
mod fingerprint;
mod id;
mod msg;
pub mod signature;
mod tool;

pub use blocks::Blocks;
pub use content::{ContentBlock, MediaSource};
pub use error::{MessageError, Result, from_json_str, from_json_value};
pub use fingerprint::{canonical_json, fingerprint};
pub use id::new_id;
pub use msg::{Msg, Role};
pub use tool::{ToolAnswer, ToolOutcome, ToolResult, ToolSpec, ToolUse, Usage};
