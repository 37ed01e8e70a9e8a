//! A paused sub-agent call keeps a copy of what its child session waits for. The child
//! is an ordinary session: someone may answer it directly, and then the copy is stale.
//! The driver reads the child from the store and hands the run what the child waits
//! for now ([`Run::follow_child`]); the run shows that, so a decision is only ever
//! validated against the child's stored state, never against an old copy of it.

use reins_message::ToolUse;

use super::{Run, RunState, SlotStatus};
use crate::requirement::Requirement;

impl RunState {
    /// The sub-agent calls that wait for their child session (answers not yet routed):
    /// the ones whose copies of the child's requirements the driver brings up to date,
    /// and whose child sessions a new message closes.
    pub fn delegated_calls(&self) -> Vec<ToolUse> {
        self.slots
            .iter()
            .filter(|s| matches!(s.status, SlotStatus::Delegated { routed: None, .. }))
            .map(|s| (*s.tool_use).clone())
            .collect()
    }
}

impl Run {
    /// What the child session of sub-agent call `id` waits for now (its own ids, as the
    /// child shows them; empty when the child is not paused): replaces the call's
    /// copy when the ids differ, and records the run's requirements again for the
    /// store. Returns whether anything changed.
    pub(crate) fn follow_child(&mut self, id: &str, child: Vec<Requirement>) -> bool {
        let Some(slot) = self.state.slots.get_mut(id) else {
            return false;
        };
        let tool = slot.tool_use.name.clone();
        let SlotStatus::Delegated {
            requirements,
            routed: None,
            ..
        } = &mut slot.status
        else {
            return false;
        };
        let agent = requirements
            .iter()
            .find(|r| r.path.len() == 2)
            .and_then(|r| r.agent.clone());
        let now = qualify(id, &tool, agent.as_deref(), child);
        let old: Vec<&str> = requirements.iter().map(|r| r.id.as_str()).collect();
        let new: Vec<&str> = now.iter().map(|r| r.id.as_str()).collect();
        if old == new {
            return false;
        }
        // Copies of requirements still pending keep what the parent showed of them.
        let kept: Vec<Requirement> = now
            .into_iter()
            .map(|n| {
                requirements
                    .iter()
                    .find(|o| o.id == n.id)
                    .cloned()
                    .unwrap_or(n)
            })
            .collect();
        *requirements = kept;
        if self.is_paused() {
            let waiting = self.requirements();
            self.record_requirements(&waiting);
        }
        true
    }
}

/// A child's requirements as its parent shows them: each path starts with the parent's
/// tool use id `call`, the id is the path joined with `/`, the reason names the
/// sub-agent tool, and `agent` names the agent whose model made the call.
pub(crate) fn qualify(
    call: &str,
    tool: &str,
    agent: Option<&str>,
    requirements: Vec<Requirement>,
) -> Vec<Requirement> {
    requirements
        .into_iter()
        .map(|r| {
            let mut path = Vec::with_capacity(r.path.len().max(1) + 1);
            path.push(call.to_owned());
            if r.path.is_empty() {
                path.push(r.id.clone());
            } else {
                path.extend(r.path.iter().cloned());
            }
            Requirement {
                id: path.join("/"),
                reason: format!("sub-agent `{tool}`: {}", r.reason),
                agent: r
                    .agent
                    .clone()
                    .or_else(|| agent.map(str::to_owned))
                    .or_else(|| Some(tool.to_owned())),
                path,
                ..r
            }
        })
        .collect()
}
