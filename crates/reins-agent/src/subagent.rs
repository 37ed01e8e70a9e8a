//! Sub-agents: an [`Agent`] used as a tool of another agent, with its pauses bubbling
//! up to the parent.
//!
//! [`Agent::as_tool`] wraps an agent as a [`SubAgentTool`]; register it on the parent
//! with [`AgentBuilder::subagent`](crate::AgentBuilder::subagent). The model sees a
//! tool taking one argument, `task`. Each call runs the sub-agent in its own *child
//! session*, stored in the same store as the parent, whose id is derived from the
//! parent session and the tool use id ([`child_session_id`]) — so it is durable and
//! can be opened, read and audited like any session.
//!
//! - When the child pauses, the parent pauses too. The parent's requirements include
//!   the child's, each with its [`Requirement::path`](crate::Requirement::path) (the parent's tool use id, then
//!   the child's requirement id) and [`Requirement::agent`](crate::Requirement::agent); its `id` is the path
//!   joined with `/`.
//! - `resolve` on the parent routes each decision down to the child (with the child's
//!   id); `resume` approves the child's confirmations the parent showed. The parent
//!   then dispatches the sub-agent call again, which hands the answers to the child
//!   and waits for it, so both runs go on. A rejection's note reaches the child's
//!   model as the rejected tool's result.
//! - Interrupting the parent interrupts the running child (its turn is sanitized as
//!   any interrupted turn is); the parent's result for the call is `Interrupted`.
//! - At most once, through the nesting: the child's tools are claimed in the child
//!   session's ledger, the child session's lock refuses a second concurrent run, and a
//!   dispatch that finds the child already finished returns its answer instead of
//!   asking again.

use std::sync::Arc;

use reins_memory::MemoryStore;
use reins_message::{Msg, ToolUse};
use reins_tool::{DynamicTool, ToolError, ToolPolicy};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentBuilder};
use crate::delegate::{ChildAnswer, ChildCall, ChildState, ChildTurns, Delegate};
use crate::error::Result;
use crate::output::RunOutput;
use crate::run::{ExecOutcome, RunInput};
use crate::view::ViewToken;

pub use crate::follow::{child_session_id, pending_requirements};

/// An [`Agent`] packaged as a tool of another agent; see [`Agent::as_tool`] and the
/// [module docs](self).
#[derive(Clone)]
#[must_use]
pub struct SubAgentTool {
    agent: Agent,
    name: String,
    description: String,
    policy: ToolPolicy,
}

impl std::fmt::Debug for SubAgentTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubAgentTool")
            .field("name", &self.name)
            .field("agent", &self.agent.name())
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// This agent as a tool named `name` of another agent (register it with
    /// [`AgentBuilder::subagent`](crate::AgentBuilder::subagent)). The model calls it
    /// with `{"task": "..."}`; the task is the child session's first user message and
    /// the sub-agent's final answer is the tool's result.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), reins_agent::AgentError> {
    /// use std::sync::Arc;
    /// use reins_agent::{Agent, RunStatus};
    /// use reins_memory::{InMemoryStore, MemoryStore};
    /// use reins_message::Msg;
    /// use reins_model::{ScriptedModel, ScriptedResponse};
    /// use serde_json::json;
    ///
    /// let store: Arc<dyn MemoryStore> = Arc::new(InMemoryStore::new());
    /// let research = Agent::builder()
    ///     .name("research")
    ///     .model(ScriptedModel::new([ScriptedResponse::text("Rust 1.0 shipped in 2015.")]))
    ///     .store_arc(store.clone())
    ///     .build()?;
    /// let lead = Agent::builder()
    ///     .name("lead")
    ///     .model(ScriptedModel::new([
    ///         ScriptedResponse::tool_call_with_id("call_1", "research", json!({"task": "When did Rust 1.0 ship?"})),
    ///         ScriptedResponse::text("2015."),
    ///     ]))
    ///     .store_arc(store)
    ///     .subagent(research.as_tool("research", "Looks facts up"))
    ///     .build()?;
    /// let out = lead.send(Msg::user("When did Rust 1.0 ship?")).await?;
    /// assert_eq!(out.status, RunStatus::Completed);
    /// // The sub-agent's conversation is a session of its own.
    /// let child = lead.subagent("research").expect("registered").session("default/call_1").await?;
    /// assert_eq!(child.messages().await?.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn as_tool(&self, name: impl Into<String>, description: impl Into<String>) -> SubAgentTool {
        SubAgentTool {
            agent: self.clone(),
            name: name.into(),
            description: description.into(),
            policy: ToolPolicy::auto(),
        }
    }

    /// The agent registered as sub-agent tool `name`, if any (to open its child
    /// sessions).
    pub fn subagent(&self, name: &str) -> Option<&Agent> {
        self.runtime
            .subagents
            .get(name)
            .and_then(|s| s.as_any().downcast_ref::<SubAgentTool>())
            .map(|s| &s.agent)
    }
}

impl Agent {
    /// The agent whose session `session_id` is: this agent, or — for the child session
    /// of a sub-agent call (`parent/tool_use_id`, see [`child_session_id`]) — the
    /// sub-agent that runs it, found through the parent's stored call (at any depth).
    /// A service that serves one agent opens child sessions with it, so a decision
    /// made directly on a child session runs with the child's tools and model.
    pub async fn owner_of(&self, session_id: &str) -> Result<Agent> {
        Box::pin(self.owner_at(session_id, 0)).await
    }

    async fn owner_at(&self, session_id: &str, depth: usize) -> Result<Agent> {
        if self.runtime.subagents.is_empty() || depth > 32 {
            return Ok(self.clone());
        }
        // The parent is a prefix of the id ending before a `/`; the call id follows.
        for (i, _) in session_id.rmatch_indices('/') {
            let (parent, call) = (&session_id[..i], &session_id[i + 1..]);
            if parent.is_empty() || call.is_empty() {
                continue;
            }
            let owner = Box::pin(self.owner_at(parent, depth + 1)).await?;
            let state = match owner.store().load_session(parent).await {
                Ok(s) => s,
                Err(reins_memory::Error::SessionNotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            let name = state
                .messages
                .iter()
                .flat_map(Msg::tool_uses)
                .find(|u| u.id == call)
                .map(|u| u.name.clone());
            if let Some(sub) = name.as_deref().and_then(|n| owner.subagent(n)) {
                return Ok(sub.clone());
            }
        }
        Ok(self.clone())
    }
}

impl SubAgentTool {
    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The agent behind the tool.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// How calls of the sub-agent itself are gated at the parent (default: they run
    /// without asking; the sub-agent's own tools keep their policies either way).
    pub fn policy(mut self, policy: ToolPolicy) -> Self {
        self.policy = policy;
        self
    }

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "task": {
                    "type": "string",
                    "description": "What the sub-agent should do, stated fully: it sees nothing else of this conversation."
                }
            },
            "required": ["task"]
        })
    }

    /// The tool the parent's toolkit holds. Its handler serves calls made outside an
    /// agent run (a toolkit executed on its own): it runs the child to its end, and
    /// suspends the call when the child pauses.
    fn dynamic_tool(self: &Arc<Self>) -> DynamicTool {
        let me = Arc::clone(self);
        DynamicTool::new(
            &self.name,
            &self.description,
            Self::schema(),
            move |input: Value, ctx: reins_tool::ToolContext| {
                let me = Arc::clone(&me);
                async move {
                    let tool_use = ToolUse::new(ctx.tool_use_id.clone(), me.name.clone(), input);
                    let call = ChildCall {
                        parent: ctx.session_id.clone(),
                        tool_use: tool_use.clone(),
                        routed: None,
                    };
                    let answer = me
                        .serve(call, ctx.cancel.clone())
                        .await
                        .map_err(|e| ToolError::failed(e.to_string()))?;
                    if let Some(r) = answer.invalid {
                        return Err(ToolError::failed(r.text()));
                    }
                    let out = crate::effects::delegate::outcome_of(
                        &ctx.session_id,
                        &tool_use,
                        Some(me.agent.name()),
                        answer.phase,
                        answer.waiting,
                        answer.last.as_ref(),
                    );
                    match out {
                        ExecOutcome::Done(r) if r.is_error() => Err(ToolError::failed(r.text())),
                        ExecOutcome::Done(r) => Ok(reins_tool::ToolOutput::text(r.text())),
                        ExecOutcome::Delegated { requirements, .. } => {
                            Err(ToolError::suspend(format!(
                                "sub-agent `{}` waits for {} requirement(s)",
                                me.name,
                                requirements.len()
                            )))
                        }
                        ExecOutcome::Suspended { reason, .. } => Err(ToolError::suspend(reason)),
                        ExecOutcome::Asking { requirement, .. } => {
                            Err(ToolError::suspend(requirement.reason))
                        }
                    }
                }
            },
        )
        .policy(self.policy.clone())
    }
}

#[async_trait::async_trait]
impl Delegate for SubAgentTool {
    fn tool_name(&self) -> &str {
        &self.name
    }

    fn agent_name(&self) -> &str {
        self.agent.name()
    }

    fn store(&self) -> &Arc<dyn MemoryStore> {
        self.agent.store()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn tool(self: Arc<Self>) -> DynamicTool {
        self.dynamic_tool()
    }

    async fn serve(&self, call: ChildCall, cancel: CancellationToken) -> Result<ChildAnswer> {
        let mut turns = LocalChild {
            agent: &self.agent,
            session: call.child(),
            cancel,
        };
        crate::effects::delegate::serve_child(&mut turns, call).await
    }

    async fn close(
        &self,
        session: &str,
        tool_use: &ToolUse,
        note: &str,
        actor: Option<crate::view::Actor>,
    ) -> Result<()> {
        let child = self
            .agent
            .session(&child_session_id(session, &tool_use.id))
            .await?;
        child.close_for_parent(session, note, actor).await
    }
}

impl AgentBuilder {
    /// Adds another agent as a tool (see [`Agent::as_tool`] and
    /// [`crate::subagent`]). Both agents must use the same store.
    pub fn subagent(mut self, tool: SubAgentTool) -> Self {
        self.subagents.add(Arc::new(tool));
        self
    }
}

/// A child session's turns in this process: through the sub-agent's own session
/// handle, acting on the view the dispatch read, interrupted with the parent.
struct LocalChild<'a> {
    agent: &'a Agent,
    session: String,
    cancel: CancellationToken,
}

#[async_trait::async_trait]
impl ChildTurns for LocalChild<'_> {
    async fn state(&mut self) -> Result<ChildState> {
        crate::effects::delegate::child_state(self.agent, &self.session).await
    }

    async fn turn(&mut self, input: RunInput, token: ViewToken) -> Result<RunOutput> {
        let child = self.agent.session(&self.session).await?;
        let handle = match input {
            RunInput::Message(m) => child.send(m).start().await?,
            RunInput::Resume => child.resume().at(&token).start().await?,
            RunInput::Decisions(ds) => child.resolve(ds).at(&token).start().await?,
        };
        let interrupter = handle.interrupter();
        let wait = handle.wait();
        tokio::pin!(wait);
        tokio::select! {
            biased;
            out = &mut wait => out,
            () = self.cancel.cancelled() => {
                interrupter.interrupt();
                wait.await
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::requirement::{Decision, Requirement, RequirementKind};
    use crate::run::{
        AfterReasoning, ChildInput, GateDecision, Run, RunConfig, RunInput, SlotStatus, Step,
    };
    use chrono::Utc;
    use reins_message::Role;
    use reins_message::{ContentBlock, ToolOutcome, Usage};

    fn nested(parent: &str, child: &str, kind: RequirementKind) -> Requirement {
        Requirement {
            id: format!("{parent}/{child}"),
            tool_use: ToolUse::new(child, "send_email", json!({"to": "ops"})),
            kind,
            reason: "sub-agent `research`: needs confirmation".to_owned(),
            created_at: Utc::now(),
            expires_at: None,
            path: vec![parent.to_owned(), child.to_owned()],
            agent: Some("research".to_owned()),
            quorum: None,
        }
    }

    /// A run whose sub-agent call `p1` came back paused with `reqs`.
    fn delegated_run(reqs: Vec<Requirement>) -> Run {
        let mut run = Run::new(RunConfig::default());
        run.begin(RunInput::Message(Msg::user("go")), Utc::now())
            .unwrap();
        assert!(matches!(run.next_core(), Step::Reason(r) if !r.summary));
        let call = Msg::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse(ToolUse::new(
                "p1",
                "research",
                json!({"task": "t"}),
            ))],
        );
        run.on_model_message(
            call,
            vec![GateDecision::Run],
            AfterReasoning::default(),
            Usage::default(),
            Utc::now(),
        );
        let Step::Execute(batch) = run.next_core() else {
            panic!("expected the sub-agent call to be dispatched");
        };
        assert_eq!(batch.calls.len(), 1);
        run.on_tool_results(
            vec![ExecOutcome::Delegated {
                id: "p1".to_owned(),
                requirements: reqs,
            }],
            false,
            Utc::now(),
        );
        run
    }

    #[test]
    fn a_delegated_call_pauses_the_run_with_the_childs_requirements() {
        let mut run = delegated_run(vec![
            nested("p1", "c1", RequirementKind::Confirmation),
            nested("p1", "c2", RequirementKind::External),
        ]);
        let Step::Pause(reqs) = run.next_core() else {
            panic!("expected a pause");
        };
        let ids: Vec<_> = reqs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["p1/c1", "p1/c2"]);
        assert_eq!(run.view().requirement_ids(), ["p1/c1", "p1/c2"]);

        // A partial answer is routed with the child's id; the call is dispatched again
        // and its other requirement is not shown meanwhile.
        run.begin(
            RunInput::Decisions(vec![Decision::reject("p1/c2", "no").by("bob")]),
            Utc::now(),
        )
        .unwrap();
        match run.routed_input("p1") {
            Some(ChildInput::Decisions { decisions }) => {
                assert_eq!(decisions, vec![Decision::reject("c2", "no").by("bob")]);
            }
            other => panic!("unexpected routing: {other:?}"),
        }
        assert!(run.requirements().is_empty());
        let Step::Delegate(batch) = run.next_core() else {
            panic!("expected a dispatch");
        };
        assert_eq!(batch.calls[0].tool_use.id, "p1");
    }

    #[test]
    fn resume_routes_approvals_of_exactly_the_confirmations_shown() {
        let mut run = delegated_run(vec![
            nested("p1", "c1", RequirementKind::Confirmation),
            nested("p1", "c2", RequirementKind::External),
        ]);
        let _ = run.next_core();
        run.begin(RunInput::Resume, Utc::now()).unwrap();
        match run.routed_input("p1") {
            Some(ChildInput::Decisions { decisions }) => {
                assert_eq!(decisions, vec![Decision::approve("c1")]);
            }
            other => panic!("unexpected routing: {other:?}"),
        }

        // A child stopped by a hook (no requirements) is resumed as such.
        let mut run = delegated_run(Vec::new());
        assert_eq!(run.next_core(), Step::Pause(Vec::new()));
        run.begin(RunInput::Resume, Utc::now()).unwrap();
        assert_eq!(run.routed_input("p1"), Some(ChildInput::Resume));
    }

    #[test]
    fn a_new_message_closes_a_delegated_call_as_rejected() {
        let mut run = delegated_run(vec![nested("p1", "c1", RequirementKind::Confirmation)]);
        let _ = run.next_core();
        run.begin(RunInput::Message(Msg::user("never mind")), Utc::now())
            .unwrap();
        let closed = run
            .messages()
            .iter()
            .flat_map(|m| m.tool_results_iter())
            .find(|r| r.id == "p1")
            .map(|r| r.outcome.clone());
        assert!(matches!(closed, Some(ToolOutcome::Rejected { .. })));
        assert!(run.state().slots.is_empty());
    }

    #[test]
    fn the_delegated_slot_round_trips_through_json() {
        let run = delegated_run(vec![nested("p1", "c1", RequirementKind::Confirmation)]);
        let v = serde_json::to_value(run.state()).unwrap();
        assert_eq!(v["slots"][0]["status"]["slot"], "delegated");
        assert_eq!(
            v["slots"][0]["status"]["requirements"][0]["path"],
            json!(["p1", "c1"])
        );
        let back: crate::run::RunState = serde_json::from_value(v).unwrap();
        assert!(matches!(
            back.slots[0].status,
            SlotStatus::Delegated { routed: None, .. }
        ));
        // A plain requirement serializes without the new fields.
        let mut plain = nested("p1", "c1", RequirementKind::Confirmation);
        plain.path.clear();
        plain.agent = None;
        let v = serde_json::to_value(&plain).unwrap();
        assert!(v.get("path").is_none() && v.get("agent").is_none());
    }

    #[test]
    fn child_ids_join_parent_and_call() {
        assert_eq!(
            child_session_id("user-7/chat", "call_1"),
            "user-7/chat/call_1"
        );
    }

    #[test]
    fn child_requirement_ids_drop_the_parents_hop() {
        use crate::run::child_id;
        let one = vec!["call_a".to_owned(), "call_b".to_owned()];
        assert_eq!(child_id(&one, "call_a/call_b"), "call_b");
        let two = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        assert_eq!(child_id(&two, "a/b/c"), "b/c");
        assert_eq!(child_id(&[], "x"), "x");
    }
}
