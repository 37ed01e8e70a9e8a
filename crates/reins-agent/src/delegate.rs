//! Tools whose calls run in a child session of another agent, as the driver sees them:
//! the [`Delegate`] trait and the agent's registry of them ([`SubAgents`]). The
//! sub-agent tool itself (the `subagent` module) implements the trait; keeping the trait
//! here lets the agent hold its sub-agents, and the driver dispatch to them, without
//! either depending on the module that opens child sessions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reins_memory::MemoryStore;
use reins_message::ToolUse;
use reins_tool::{DynamicTool, Toolkit};
use tokio_util::sync::CancellationToken;

use crate::error::{AgentError, Result};
use crate::run::{ChildInput, ExecOutcome};
use crate::view::Actor;

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

    /// Serves one dispatch of a call in the parent's `session`: consults the
    /// parent's ledger in `store` (claims leased for `lease`), then starts, answers,
    /// continues or reads the child session.
    async fn execute(
        &self,
        store: &Arc<dyn MemoryStore>,
        lease: Duration,
        session: &str,
        tool_use: &ToolUse,
        routed: Option<ChildInput>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome>;

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
