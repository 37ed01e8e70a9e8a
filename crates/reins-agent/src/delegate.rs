//! Tools whose calls run in a child session of another agent, as the driver sees them:
//! the [`Delegate`] trait and the agent's registry of them ([`SubAgents`]). The
//! sub-agent tool itself (the `subagent` module) implements the trait; keeping the trait
//! here lets the agent hold its sub-agents, and the driver dispatch to them, without
//! either depending on the module that opens child sessions.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use reins_memory::MemoryStore;
use reins_message::ToolUse;
use reins_tool::{DynamicTool, Toolkit};
use tokio_util::sync::CancellationToken;

use reins_message::{Msg, ToolResult};
use serde::{Deserialize, Serialize};

use crate::error::{AgentError, Result};
use crate::output::RunOutput;
use crate::requirement::{Decision, Requirement};
use crate::run::{ChildInput, Phase, RunInput};
use crate::view::{Actor, ViewToken};

/// A tool whose calls run in a child session.
#[async_trait]
pub(crate) trait Delegate: Send + Sync {
    /// The tool's name.
    fn tool_name(&self) -> &str;

    /// The name of the agent behind it.
    fn agent_name(&self) -> &str;

    /// Where the agent behind it keeps its sessions.
    fn store(&self) -> &Arc<dyn MemoryStore>;

    /// The tool itself, to reach its concrete type.
    fn as_any(&self) -> &dyn std::any::Any;

    /// The tool a toolkit holds (for calls made outside an agent run).
    fn tool(self: Arc<Self>) -> DynamicTool;

    /// Serves one dispatch of a call on its child session in this process (see
    /// `effects::delegate::serve_child`): the child's turn runs until it pauses or
    /// ends; `cancel` interrupts it.
    async fn serve(&self, call: ChildCall, cancel: CancellationToken) -> Result<ChildAnswer>;

    /// Closes the child session of the call `tool_use` made in the parent's `session`,
    /// because the parent closed the call (a new message): whatever the child waits
    /// for is rejected with `note`, recorded in its transcript and audit trail (by
    /// `actor`), and its run ends without asking its model again.
    async fn close(
        &self,
        session: &str,
        tool_use: &ToolUse,
        note: &str,
        actor: Option<Actor>,
    ) -> Result<()>;
}

/// One dispatch of a sub-agent call, as the parent hands it to the child session's
/// side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildCall {
    /// The parent session.
    pub parent: String,
    /// The parent's call (its id names the child session; its `task` starts it).
    pub tool_use: ToolUse,
    /// Answers routed from the parent, for the child.
    pub routed: Option<ChildInput>,
}

impl ChildCall {
    /// The child session's id.
    pub fn child(&self) -> String {
        crate::follow::child_session_id(&self.parent, &self.tool_use.id)
    }
}

/// Where a child session is after one dispatch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildAnswer {
    /// Its run's phase.
    pub phase: Phase,
    /// What it waits for (paused), with its own ids.
    pub waiting: Vec<Requirement>,
    /// Its last assistant message.
    pub last: Option<Msg>,
    /// The call's result when the child could not start (no `task`).
    pub invalid: Option<ToolResult>,
    /// What became of the answers routed from the parent.
    pub routed: Option<Routed>,
}

/// Answers routed to a child, and whether it took them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Routed {
    /// The decisions, with the child's ids.
    pub decisions: Vec<Decision>,
    /// The child's requirements when they arrived.
    pub shown: Vec<Requirement>,
    /// Why the child refused them (`None`: it took them): the audit reason
    /// (`stale_view`, `expired`, `fingerprint_mismatch`, `already_decided`) and the
    /// child's error.
    pub refused: Option<(String, String)>,
}

/// A child session as stored (its own sub-agents' children followed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildState {
    /// Its run's phase.
    pub phase: Phase,
    /// What it waits for (paused).
    pub waiting: Vec<Requirement>,
    /// Its last assistant message.
    pub last: Option<Msg>,
    /// It has no messages yet.
    pub empty: bool,
    /// The view to act on it.
    pub token: ViewToken,
}

/// Where a driver runs a child session's turns (see `effects::delegate::serve_child`).
#[async_trait]
pub trait ChildTurns: Send {
    /// The child session as stored (`effects::delegate::child_state`).
    async fn state(&mut self) -> Result<ChildState>;

    /// Runs one turn of the child session with `input`, acting on the view `token`,
    /// until it pauses or ends.
    async fn turn(&mut self, input: RunInput, token: ViewToken) -> Result<RunOutput>;
}

/// The sub-agents registered on an agent, by tool name.
#[derive(Clone, Default)]
pub(crate) struct SubAgents(HashMap<String, Arc<dyn Delegate>>);

impl SubAgents {
    pub(crate) fn add(&mut self, tool: Arc<dyn Delegate>) {
        self.0.insert(tool.tool_name().to_owned(), tool);
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<dyn Delegate>> {
        self.0.get(name)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Checks that every sub-agent keeps its sessions in `store`, and registers their
    /// tools in `toolkit`.
    pub(crate) fn install(
        &self,
        parent: &str,
        toolkit: &mut Toolkit,
        store: &Arc<dyn MemoryStore>,
    ) -> Result<()> {
        let mut names: Vec<&String> = self.0.keys().collect();
        names.sort();
        for name in names {
            let Some(sub) = self.0.get(name) else {
                continue;
            };
            if !std::ptr::addr_eq(Arc::as_ptr(sub.store()), Arc::as_ptr(store)) {
                return Err(AgentError::Config(format!(
                    "sub-agent `{name}` (agent `{}`) keeps its sessions in another store than \
                     `{parent}`; build both with .store_arc(..) on the same store so the child \
                     sessions live beside the parent's",
                    sub.agent_name()
                )));
            }
            toolkit.add_dynamic(Arc::clone(sub).tool()).map_err(|e| {
                AgentError::Config(format!("cannot register sub-agent `{name}`: {e}"))
            })?;
        }
        Ok(())
    }
}
