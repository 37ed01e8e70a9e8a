//! # reins-agent
//!
//! The agent core: a sans-IO run state machine ([`Run`]) and the async runner
//! ([`Session`]) that performs its steps — streaming the model, firing hooks,
//! consulting the tool-call ledger, running tools, writing to the store — so that a
//! run can be stopped, approved, rejected, interrupted and resumed, in this process or
//! another, without corrupting the conversation or running a tool twice.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use reins_agent::{Agent, Decision, RunStatus};
//! use reins_message::Msg;
//! use reins_model::{ScriptedModel, ScriptedResponse};
//! use reins_tool::{ToolPolicy, Toolkit};
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct DeleteArgs {
//!     /// The file to delete.
//!     path: String,
//! }
//!
//! let mut tools = Toolkit::new();
//! tools.add(
//!     Toolkit::function("delete_file", "Delete a file", |a: DeleteArgs, _ctx| async move {
//!         Ok::<_, reins_tool::ToolError>(format!("deleted {}", a.path))
//!     })
//!     .policy(ToolPolicy::confirm()),
//! )?;
//! let model = ScriptedModel::new([
//!     ScriptedResponse::tool_call_with_id("call_1", "delete_file", json!({"path": "temp.txt"})),
//!     ScriptedResponse::text("temp.txt is gone."),
//! ]);
//! let agent = Agent::builder().model(model).toolkit(tools).build()?;
//! let session = agent.session("user-7/chat-1").await?;
//!
//! // The model wants to delete a file: the run pauses for a person.
//! let out = session.send(Msg::user("delete temp.txt")).await?;
//! assert_eq!(out.status, RunStatus::Paused);
//! assert_eq!(out.requirements[0].tool_use.name, "delete_file");
//!
//! // The person approves; the tool runs once and the model answers.
//! let out = session.resolve(vec![Decision::approve("call_1")]).await?;
//! assert_eq!(out.status, RunStatus::Completed);
//! assert_eq!(out.message.text(), "temp.txt is gone.");
//! # Ok(()) }
//! ```
//!
//! ## Features
//!
//! | feature    | default | what it adds |
//! |------------|---------|--------------|
//! | `sqlite`   | yes     | `reins_memory::SqliteStore` (the embedded default store) |
//! | `postgres` | no      | `reins_memory::PostgresStore` |
//! | `testing`  | no      | `reins_model::ScriptedModel`, for tests and offline demos; the `testing` module: behaviour scenarios every driver's tests run |
//! | `tiktoken` | yes     | exact token counts for OpenAI models in [`ContextPolicy`] (`tiktoken-rs`) |

mod agent;
pub mod approval;
mod backend;
mod boxed;
pub mod budget;
mod card;
pub mod compression;
mod delegate;
mod drive;
pub mod effects;
pub mod eligibility;
mod error;
mod evidence;
mod follow;
mod fork;
mod handle;
pub mod interpret;
mod live;
mod lock;
mod output;
pub mod port;
mod remote;
mod requirement;
pub mod run;
mod runtime;
mod session;
mod snapshot;
mod state;
mod structured;
pub mod subagent;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
mod transcript;
mod view;
mod watch;

pub use agent::{Agent, AgentBuilder, DEFAULT_SESSION};
pub use approval::{ApprovalPolicy, PolicyRequest, PolicyVerdict};
pub use backend::{SessionBackend, Started, Submission};
pub use compression::{ContextPolicy, ContextSummary, TokenCounter};
pub use effects::{ASKED_ELSEWHERE, UNKNOWN_OUTCOME};
pub use eligibility::{Eligibility, EligibilityPolicy};
pub use error::{AgentError, Decided, Result};
pub use follow::{
    BUSY_DECISION_WAIT, busy_refusal, late_refusal, record_refusal, stored_output, stored_view,
};
pub use fork::{
    Divergence, ForkBuilder, ForkOrigin, ForkPoint, ReplayReport, ReplayTurn, Turn, fork_len,
    replay, replay_streaming, turns,
};
pub use handle::{Interrupter, RunEvents, RunHandle};
pub use output::{RunEvent, RunOutput, RunStatus};
pub use port::{AgentCard, Decide, Interrupted, Relayed, Sessions};
pub use reins_tool::Concurrency;
pub use requirement::{Approval, Decision, Quorum, QuorumState, Requirement, RequirementKind};
pub use run::{Run, RunInput, RunState, Step};
pub use session::{ResolveBuilder, ResumeBuilder, SendBuilder, Session};
pub use snapshot::{SNAPSHOT_SCHEMA_VERSION, SessionSnapshot};
pub use state::SessionView;
pub use structured::{FINAL_ANSWER_TOOL, OUTPUT_MARK, OutputMode, OutputSpec};
pub use subagent::{SubAgentTool, child_session_id, pending_requirements};
pub use view::{Actor, DecisionRecord, QuorumCount, Verdict, ViewToken};
pub use watch::SessionWatch;
