//! The caller's own tools for a turn (AG-UI's client tools, `TurnRequest::client_tools`):
//! offered to the model beside the toolkit's (a toolkit tool of the same name wins, as
//! `reins_agent::effects::request` does), and always external: a call of one pauses
//! the run with an `External` requirement, which the caller answers with the tool's
//! result (a decision), as on the local driver.

use reins_agent::run::GateDecision;
use reins_message::ToolUse;

use super::TurnDriver;

impl TurnDriver<'_, '_> {
    /// What the policy says about a call: the toolkit's, or external for a client tool
    /// the toolkit does not have.
    pub(super) fn gate(&self, tool_use: &ToolUse) -> GateDecision {
        let toolkit = self.agent().toolkit();
        if !toolkit.contains(&tool_use.name)
            && self.client_tools.iter().any(|t| t.name == tool_use.name)
        {
            return GateDecision::External;
        }
        toolkit.gate(tool_use)
    }
}
