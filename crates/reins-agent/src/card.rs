//! [`AgentCard`]: what a door says about the agent behind the port.

use reins_message::ToolSpec;

use crate::budget::BudgetRules;

/// The agent the sessions run with, as doors describe it: an A2A agent card, an MCP
/// tool's description and annotations, an ACP agent's name, the budget a run may ask
/// for. Read once from the agent's configuration; no door needs the agent itself.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AgentCard {
    /// The agent's name.
    pub name: String,
    /// Its tools (the toolkit's specs, in registration order).
    pub tools: Vec<ToolSpec>,
    /// The tools declared idempotent (safe to run twice).
    pub idempotent: Vec<String>,
    /// Its budget rules: the default limit a session's own may not exceed without
    /// the admin role, and the model prices (`None`: no budget).
    pub budget: Option<BudgetRules>,
}

impl AgentCard {
    /// Whether the agent has a tool of this name.
    pub fn has_tool(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name)
    }

    /// The tools' names.
    pub fn tool_names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.name.as_str()).collect()
    }

    /// Whether every tool is idempotent (vacuously, with none).
    pub fn all_idempotent(&self) -> bool {
        self.tools.iter().all(|t| self.idempotent.contains(&t.name))
    }
}
