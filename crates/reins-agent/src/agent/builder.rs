//! [`AgentBuilder`]: what an [`Agent`] is made of, checked once at [`AgentBuilder::build`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_hook::{Hook, Hooks};
use reins_memory::{InMemoryStore, MemoryStore};
use reins_model::{ChatModel, ChatOptions};
use reins_tool::{Concurrency, Toolkit};

use super::{Agent, AgentConfig};
use crate::delegate::SubAgents;
use crate::error::{AgentError, Result};
use crate::live::LiveCalls;
use crate::remote::RemoteInterrupts;
use crate::run::{Prompts, RunConfig};
use crate::runtime::Runtime;
use crate::state::LiveSessions;

/// Builds an [`Agent`]; see [`Agent::builder`].
#[must_use]
pub struct AgentBuilder {
    name: String,
    system_prompt: Option<String>,
    model: Option<Arc<dyn ChatModel>>,
    toolkit: Toolkit,
    store: Option<Arc<dyn MemoryStore>>,
    hooks: Hooks,
    config: RunConfig,
    options: ChatOptions,
    concurrency: Concurrency,
    grace: Duration,
    tool_lease: Duration,
    session_lease: Duration,
    summary_prompt: String,
    pub(crate) subagents: SubAgents,
    output: Option<crate::structured::OutputSpec>,
    context: Option<crate::compression::ContextPolicy>,
    approval_ttls: std::collections::BTreeMap<String, u64>,
    quorums: std::collections::BTreeMap<String, crate::requirement::Quorum>,
    policy: Option<Arc<dyn crate::approval::ApprovalPolicy>>,
    eligibility: Option<crate::eligibility::Rules>,
    budget: Option<crate::budget::Budget>,
    prices: crate::budget::PriceTable,
    evidence: Option<(reins_evidence::Signer, reins_evidence::Keyring)>,
}

impl Default for AgentBuilder {
    fn default() -> Self {
        Self {
            name: "agent".to_owned(),
            system_prompt: None,
            model: None,
            toolkit: Toolkit::new(),
            store: None,
            hooks: Hooks::new(),
            config: RunConfig::default(),
            options: ChatOptions::default(),
            concurrency: Concurrency::Parallel,
            grace: Duration::from_secs(2),
            tool_lease: Duration::from_secs(300),
            session_lease: Duration::from_secs(60),
            summary_prompt: "You have reached the maximum number of reasoning steps for this \
                             request. Do not call tools. Summarize what was done, what is left, \
                             and what the user should do next."
                .to_owned(),
            output: None,
            context: None,
            subagents: SubAgents::default(),
            approval_ttls: std::collections::BTreeMap::new(),
            quorums: std::collections::BTreeMap::new(),
            policy: None,
            eligibility: None,
            budget: None,
            prices: crate::budget::PriceTable::new(),
            evidence: None,
        }
    }
}

impl AgentBuilder {
    /// The agent's name (used as the assistant messages' `name`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The system prompt, sent first with every model request (not stored in sessions).
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// The model (required).
    pub fn model(mut self, model: impl ChatModel + 'static) -> Self {
        self.model = Some(Arc::new(model));
        self
    }

    /// The model, already shared.
    pub fn model_arc(mut self, model: Arc<dyn ChatModel>) -> Self {
        self.model = Some(model);
        self
    }

    /// The tools.
    pub fn toolkit(mut self, toolkit: Toolkit) -> Self {
        self.toolkit = toolkit;
        self
    }

    /// Where sessions live (default: a fresh [`InMemoryStore`]).
    pub fn store(mut self, store: impl MemoryStore) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// The store, already shared.
    pub fn store_arc(mut self, store: Arc<dyn MemoryStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Adds a hook (hooks run in `priority()` order, ties in the order added).
    pub fn hook(mut self, hook: impl Hook + 'static) -> Self {
        self.hooks.add(hook);
        self
    }

    /// Reasoning steps per run before the agent summarizes and stops (default 10).
    pub fn max_iters(mut self, n: u32) -> Self {
        self.config.max_iters = n;
        self
    }

    /// How long a requirement can be answered (default: no expiry). A decision made
    /// after that is refused ([`AgentError::RequirementExpired`](crate::AgentError::RequirementExpired));
    /// a new message still closes the call.
    pub fn requirement_ttl(mut self, ttl: Duration) -> Self {
        self.config.requirement_ttl_secs = Some(ttl.as_secs().max(1));
        self
    }

    /// How long a requirement of tool `tool` can be answered, overriding
    /// [`requirement_ttl`](Self::requirement_ttl) for that tool (an approval for
    /// `send_email` may be good for ten minutes while one for `search_web` is good
    /// for a day). Whole seconds, at least one.
    pub fn approval_ttl(mut self, tool: impl Into<String>, ttl: Duration) -> Self {
        self.approval_ttls.insert(tool.into(), ttl.as_secs().max(1));
        self
    }

    /// Calls of `tool` that need confirmation need it from `quorum.needed` distinct
    /// approvers (optionally with given roles): the requirement stays pending, showing
    /// the approvals so far, until the count is reached; one rejection closes it. See
    /// docs/human-in-the-loop.md ("Quorum").
    pub fn quorum(mut self, tool: impl Into<String>, quorum: crate::requirement::Quorum) -> Self {
        self.quorums.insert(tool.into(), quorum);
        self
    }

    /// Who may approve or reject a tool call, and who may create a grant: asked by the
    /// run before any decision on a tool call changes anything, through every door and
    /// on every driver (see [`crate::eligibility`]).
    pub fn eligibility_policy(
        mut self,
        policy: impl crate::eligibility::EligibilityPolicy,
    ) -> Self {
        self.eligibility = Some(crate::eligibility::Rules(Arc::new(policy)));
        self
    }

    /// The application's rule engine, asked before the standing grants and before a
    /// person whenever a call needs confirmation (see [`crate::approval`]).
    pub fn approval_policy(mut self, policy: impl crate::approval::ApprovalPolicy) -> Self {
        self.policy = Some(Arc::new(policy));
        self
    }

    /// Sends only the latest `turns` turns of history to the model (default: all of
    /// it). The store keeps the whole transcript either way.
    pub fn history_turns(mut self, turns: u32) -> Self {
        self.config.history_turns = Some(turns.max(1));
        self
    }

    /// Keeps every model request within a token budget: when the history grows past
    /// it, the oldest turns are summarized into a stored summary message that stands
    /// in for them (the originals stay in the store). See [`ContextPolicy`].
    ///
    /// With [`history_turns`](Self::history_turns) as well, requests carry at most
    /// that many turns after the summary, and the summaries cover the turns it leaves
    /// out too.
    ///
    /// [`ContextPolicy`]: crate::ContextPolicy
    pub fn context(mut self, policy: crate::compression::ContextPolicy) -> Self {
        self.context = Some(policy);
        self
    }

    /// Sampling options for every model request.
    pub fn chat_options(mut self, options: ChatOptions) -> Self {
        self.options = options;
        self
    }

    /// Parallel (default) or sequential tool execution.
    pub fn tool_concurrency(mut self, c: Concurrency) -> Self {
        self.concurrency = c;
        self
    }

    /// How long an interrupted tool may take to stop on its own before it is aborted
    /// (default 2 s).
    pub fn interrupt_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How long a tool call's ledger claim lasts before another process may consider
    /// it dead (default 5 min; make it longer than your slowest tool).
    pub fn tool_lease(mut self, lease: Duration) -> Self {
        self.tool_lease = lease;
        self
    }

    /// How long a run's session lock lasts without renewal (default 60 s; renewed
    /// while the run is alive).
    pub fn session_lease(mut self, lease: Duration) -> Self {
        self.session_lease = lease;
        self
    }

    /// Every run started by a message ends with a structured answer of type `T`
    /// (its JSON Schema from schemars): `out.parsed::<T>()`. The model may call tools,
    /// and pause for people, before it answers. See [`OutputSpec`](crate::OutputSpec)
    /// and `docs/structured-output.md`.
    pub fn output<T: schemars::JsonSchema>(self) -> Self {
        self.output_spec(crate::structured::OutputSpec::of::<T>())
    }

    /// Every run started by a message ends with an answer matching `spec` (a schema
    /// written by hand, a mode, a retry bound).
    pub fn output_spec(mut self, spec: crate::structured::OutputSpec) -> Self {
        self.output = Some(spec);
        self
    }

    /// How the structured answer is asked for (default `Auto`: from the model's
    /// capabilities). Applies to the spec set with `output`/`output_spec`.
    pub fn output_mode(mut self, mode: crate::structured::OutputMode) -> Self {
        if let Some(o) = self.output.take() {
            self.output = Some(o.mode(mode));
        }
        self
    }

    /// How many times an invalid structured answer is sent back before the call fails
    /// (default 2). Applies to the spec set with `output`/`output_spec`.
    pub fn max_output_retries(mut self, n: u32) -> Self {
        if let Some(o) = self.output.take() {
            self.output = Some(o.max_retries(n));
        }
        self
    }

    /// The default budget of this agent's sessions (a session may have its own,
    /// [`Call::with_budget`](crate::run::Call::with_budget)): when one of its limits is
    /// reached the run pauses with a `budget` requirement before the next model call
    /// or tool, for a person to extend it or end the run. See [`crate::budget`].
    pub fn budget(mut self, limit: crate::budget::Budget) -> Self {
        self.budget = Some(limit);
        self
    }

    /// What a model's tokens cost, for the cost limit of [`AgentBuilder::budget`]: the
    /// price of the model named `model` (as `ChatModel::model_name` reports it).
    pub fn price(mut self, model: impl Into<String>, price: crate::budget::Price) -> Self {
        self.prices.insert(model.into(), price);
        self
    }

    /// The instruction sent for the final summary when `max_iters` is reached.
    pub fn summary_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.summary_prompt = prompt.into();
        self
    }

    /// Signs a receipt for every decision applied and every call that finishes, with
    /// `signer` (an Ed25519 key read from the configuration — a file or the
    /// environment — never from the store), and turns on the store's evidence chain
    /// ([`MemoryStore::record_evidence`]). `published` are the other verifying keys to
    /// publish beside the signer's (keys rotated out, kept to check older receipts;
    /// revoked ones marked). Export with [`Agent::evidence`]; see docs/evidence.md.
    ///
    /// Off by default, and then it costs nothing: no receipt, no chain entry.
    pub fn evidence_signer(
        mut self,
        signer: reins_evidence::Signer,
        published: reins_evidence::Keyring,
    ) -> Self {
        self.evidence = Some((signer, published));
        self
    }

    /// Builds the agent.
    pub fn build(mut self) -> Result<Agent> {
        let model = self.model.ok_or_else(|| {
            AgentError::Config("no model: call .model(..) with any ChatModel".to_owned())
        })?;
        if self.config.max_iters == 0 {
            return Err(AgentError::Config(
                "max_iters must be at least 1".to_owned(),
            ));
        }
        if let Some(policy) = &self.context {
            policy.validate()?;
        }
        if self.name.trim().is_empty() {
            return Err(AgentError::Config(
                "the agent's name cannot be empty".to_owned(),
            ));
        }
        if self.session_lease < Duration::from_millis(100) {
            return Err(AgentError::Config(
                "session_lease must be at least 100 ms".to_owned(),
            ));
        }
        if let Some(spec) = &self.output {
            spec.check().map_err(AgentError::Config)?;
        }
        if self
            .toolkit
            .names()
            .iter()
            .any(|n| n == crate::structured::FINAL_ANSWER_TOOL)
        {
            return Err(AgentError::Config(format!(
                "a tool is named `{}`, which reins reserves for structured answers; rename it",
                crate::structured::FINAL_ANSWER_TOOL
            )));
        }
        if let Some((tool, q)) = self.quorums.iter().find(|(_, q)| q.needed < 2) {
            return Err(AgentError::Config(format!(
                "the quorum for `{tool}` needs {} approvals; a quorum needs at least 2 \
                 (one approval is the default)",
                q.needed
            )));
        }
        // With prices but no default limit, the rules still carry the price: a
        // session's own cost limit is counted with it.
        let budget = match self.budget {
            Some(limit) => Some(limit),
            None if !self.prices.is_empty() => Some(crate::budget::Budget::new()),
            None => None,
        };
        let budget = match budget {
            Some(limit) => Some(Arc::new(crate::budget::BudgetRules::new(
                limit,
                &self.prices,
                model.model_name(),
            )?)),
            None => None,
        };
        let store = match self.store {
            Some(s) => s,
            None => Arc::new(InMemoryStore::new()),
        };
        if !self.subagents.is_empty() {
            self.subagents
                .install(&self.name, &mut self.toolkit, &store)?;
        }
        let evidence = self.evidence.map(|(signer, keys)| {
            // Receipts bind the chain: the store keeps it from now on.
            store.record_evidence(true);
            Arc::new(crate::evidence::Evidence::new(signer, keys))
        });
        let owner = reins_message::new_id();
        let listening = crate::run::Listening::of(&self.hooks);
        let prompts = Arc::new(Prompts::new(
            self.system_prompt.as_deref(),
            &self.summary_prompt,
            self.options.clone(),
        ));
        Ok(Agent {
            config: Arc::new(AgentConfig {
                prompts,
                name: self.name,
                system_prompt: self.system_prompt,
                run: self.config,
                options: self.options,
                concurrency: self.concurrency,
                grace: self.grace,
                tool_lease: self.tool_lease,
                session_lease: self.session_lease,
                summary_prompt: self.summary_prompt,
                output: self.output,
                context: self.context,
                approval_ttls: Arc::new(self.approval_ttls),
                quorums: Arc::new(self.quorums),
                eligibility: self.eligibility,
                budget,
            }),
            runtime: Arc::new(Runtime {
                remote: RemoteInterrupts::default(),
                model,
                toolkit: self.toolkit,
                store,
                hooks: self.hooks,
                owner,
                sessions: Mutex::new(LiveSessions::default()),
                subagents: self.subagents,
                live_calls: LiveCalls::default(),
                compression: std::sync::OnceLock::new(),
                card: std::sync::OnceLock::new(),
                specs: Mutex::default(),
                policy: self.policy,
                listening,
                evidence,
            }),
        })
    }
}
