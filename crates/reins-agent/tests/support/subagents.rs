//! A lead agent with a `research` sub-agent, and the scripts the sub-agent tests share.
#![allow(dead_code)]

use reins_agent::Agent;
use reins_model::ScriptedModel;
use reins_tool::ToolPolicy;
use serde_json::json;

use super::*;

/// The store the sub-agent tests run on.
pub type Store = SharedStore;

/// A `research` sub-agent (the demo tools; `send_email` and `delete_file` gated by
/// `gated`) under a `lead` agent, both on `store`.
pub fn team(
    store: &Store,
    lead_model: ScriptedModel,
    research_model: ScriptedModel,
    counter: &Counter,
    gated: ToolPolicy,
) -> Agent {
    let research = Agent::builder()
        .name("research")
        .model(research_model)
        .toolkit(toolkit(counter, gated))
        .store_arc(store.clone())
        .build()
        .unwrap();
    Agent::builder()
        .name("lead")
        .model(lead_model)
        .store_arc(store.clone())
        .subagent(research.as_tool("research", "Researches and reports by email"))
        .build()
        .unwrap()
}

pub fn lead_script() -> ScriptedModel {
    ScriptedModel::new([
        call("p1", "research", json!({"task": "email ops the report"})),
        text("research reports: done"),
    ])
}

pub fn research_script() -> ScriptedModel {
    ScriptedModel::new([
        call("c1", "send_email", json!({"to": "ops", "body": "report"})),
        text("the report went out"),
    ])
}

pub fn sid() -> String {
    format!("sub-{}", reins_message::new_id())
}
