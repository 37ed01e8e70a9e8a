//! What runs an agent: the store, the model, the toolkit, the hooks, the agent
//! instance's lock-owner id, and its registries (each defined by the module it
//! belongs to). An [`Agent`](crate::Agent) is its configuration plus an `Arc` of this.

use std::sync::{Arc, Mutex, OnceLock};

use reins_hook::Hooks;
use reins_memory::MemoryStore;
use reins_model::ChatModel;
use reins_tool::Toolkit;

use crate::delegate::SubAgents;
use crate::live::LiveCalls;
use crate::remote::RemoteInterrupts;
use crate::run::Compression;
use crate::state::LiveSessions;

/// What runs an agent.
pub(crate) struct Runtime {
    /// Where sessions live.
    pub(crate) store: Arc<dyn MemoryStore>,
    /// The model.
    pub(crate) model: Arc<dyn ChatModel>,
    /// The tools (sub-agents' tools included).
    pub(crate) toolkit: Toolkit,
    /// The hooks, in order.
    pub(crate) hooks: Hooks,
    /// Identifies this agent instance as a lock owner in the store.
    pub(crate) owner: String,
    /// Live sessions of this agent, so that two handles on one id share one state.
    pub(crate) sessions: Mutex<LiveSessions>,
    /// Runs in flight, for interrupts requested from elsewhere.
    pub(crate) remote: RemoteInterrupts,
    /// Agents used as tools, by tool name.
    pub(crate) subagents: SubAgents,
    /// Calls in flight that asked a question and wait for the answer.
    pub(crate) live_calls: LiveCalls,
    /// The context budget as a run needs it, counted on the first call that needs it
    /// (see `drive`).
    pub(crate) compression: OnceLock<Arc<Compression>>,
    /// What doors say about the agent ([`crate::card::AgentCard`]), made on first use.
    pub(crate) card: OnceLock<crate::card::AgentCard>,
    /// The application's approval policy, when set.
    pub(crate) policy: Option<Arc<dyn crate::approval::ApprovalPolicy>>,
    /// The toolkit's specs as last offered, with the group activity they were made
    /// for: every request shares them until a group is switched.
    pub(crate) specs: Mutex<(Vec<bool>, Option<reins_model::ToolSpecs>)>,
    /// The hook points the hooks listen to (the run hands out hook steps for those).
    pub(crate) listening: crate::run::Listening,
    /// The receipts' signer and published keys, when the agent signs receipts.
    pub(crate) evidence: crate::evidence::Shared,
}

impl Runtime {
    /// The specs of the active tools, shared with earlier requests while no group was
    /// switched since (see [`reins_model::ToolSpecs`]).
    pub(crate) fn tool_specs(&self) -> reins_model::ToolSpecs {
        let activity = self.toolkit.group_activity();
        let mut cache = self.specs.lock().unwrap_or_else(|p| p.into_inner());
        if let (true, Some(specs)) = (cache.0 == activity, &cache.1) {
            return specs.clone();
        }
        let specs = reins_model::ToolSpecs::from(self.toolkit.specs());
        *cache = (activity, Some(specs.clone()));
        specs
    }
}

/// What a request offers of the agent's tools (see [`crate::run::Reason`]).
impl crate::run::ToolCatalog for Runtime {
    fn specs(&self) -> reins_model::ToolSpecs {
        self.tool_specs()
    }

    fn contains(&self, name: &str) -> bool {
        self.toolkit.contains(name)
    }

    fn delegates(&self, name: &str) -> bool {
        self.subagents.get(name).is_some()
    }
}
