//! # reins-tool
//!
//! Tools for reins agents: typed arguments whose JSON Schema is generated from Rust
//! types, confirmation metadata ([`ToolPolicy`]), the [`Toolkit`] registry with tool
//! groups, and execution that never crashes the agent — timeouts, cancellation with a
//! grace period, self-suspension, partial output, and a readable error result for every
//! bad call.
//!
//! ```
//! use reins_message::{ToolOutcome, ToolUse};
//! use reins_tool::{ExecOptions, GateDecision, ToolContext, ToolError, ToolPolicy, Toolkit};
//! use serde_json::json;
//!
//! /// Arguments of `delete_file`.
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct DeleteArgs {
//!     /// The file to delete.
//!     filename: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), reins_tool::Error> {
//! let mut toolkit = Toolkit::new();
//! toolkit.add(
//!     Toolkit::function("delete_file", "Delete a file", |args: DeleteArgs, _ctx| async move {
//!         Ok::<_, ToolError>(format!("deleted {}", args.filename))
//!     })
//!     .policy(ToolPolicy::confirm_if(
//!         |a| !a["filename"].as_str().is_some_and(|f| f.starts_with("/tmp/")),
//!         "deletes a file outside /tmp",
//!     )),
//! )?;
//! assert_eq!(toolkit.specs()[0].parameters["required"], json!(["filename"]));
//!
//! let call = ToolUse::new("call_1", "delete_file", json!({ "filename": "/tmp/a.txt" }));
//! assert_eq!(toolkit.gate(&call), GateDecision::Run);
//! let outcome = toolkit
//!     .execute(&call, ToolContext::new("session-1", &call.id), &ExecOptions::default())
//!     .await;
//! assert_eq!(outcome.result().unwrap().text(), "deleted /tmp/a.txt");
//!
//! // Bad input never reaches the tool; the model is told what to fix.
//! let bad = ToolUse::new("call_2", "delete_file", json!({ "name": "a.txt" }));
//! let outcome = toolkit.execute(&bad, ToolContext::new("session-1", &bad.id), &ExecOptions::default()).await;
//! let result = outcome.result().unwrap();
//! assert_eq!(result.outcome, ToolOutcome::Error);
//! assert!(result.text().contains("missing field `filename`"));
//! # Ok(())
//! # }
//! ```
//!
//! ## Policies
//!
//! | Policy | What it does |
//! |---|---|
//! | [`ToolPolicy::auto`] | runs at once |
//! | [`ToolPolicy::confirm`] | every call waits for a person's approval |
//! | [`ToolPolicy::confirm_if`] | calls whose arguments satisfy a predicate wait for approval; others run |
//! | [`ToolPolicy::user_input`] | a person fills in values (a JSON Schema), merged into the arguments ([`merge_user_input`]) |
//! | [`ToolPolicy::external`] | the caller runs the call and hands back the result |
//! | `.idempotent(true)` | a call whose fate is unknown after a crash may be run again |
//! | [`FunctionTool::reconcile`] / [`Tool::reconcile`] | after a crash, the tool is asked whether the call took effect ([`Reconciliation`]) |
//! | `.timeout(d)` | the call is stopped and reported as an error after `d` |
//!
//! Every call's [`ToolContext`] carries an idempotency key
//! ([`ToolContext::idempotency_key`], derived by [`idempotency_key`]): the same for
//! every attempt at the call, so an API that dedupes by key (an `Idempotency-Key`
//! header, [`ToolContext::idempotency_header`]) makes a retry harmless.
//!
//! Every result's output is bounded by [`ExecOptions::max_output_bytes`] (1 MiB by
//! default): a larger one is cut, with a note telling the model how much was cut.
//!
//! ## Features
//!
//! This crate has no Cargo features.

mod context;
mod error;
mod exec;
mod idempotency;
mod output;
mod policy;
mod reconcile;
mod schema;
mod spec;
mod tool;
mod toolkit;

pub use context::{PendingQuestion, QuestionAnswer, ToolChunk, ToolContext, ToolQuestion};
pub use error::{Error, Result, ToolError};
pub use exec::{Concurrency, DEFAULT_MAX_OUTPUT_BYTES, ExecOptions, ToolCallOutcome};
pub use idempotency::{IDEMPOTENCY_KEY_HEADER, idempotency_key};
pub use output::{IntoToolOutput, Json, ToolOutput};
pub use policy::{ConfirmPredicate, Gate, GateDecision, ToolPolicy, merge_user_input};
pub use reconcile::{DEFAULT_RECONCILE_TIMEOUT, Reconciliation};
pub use schema::{schema_for, validate};
pub use tool::{DynamicTool, FunctionTool, NoArgs, Tool};
pub use toolkit::{ToolGroup, Toolkit};

/// Re-exported so tools can name the token type without depending on tokio-util.
pub use tokio_util::sync::CancellationToken;
