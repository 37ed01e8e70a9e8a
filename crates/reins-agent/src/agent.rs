//! [`Agent`] and its builder.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_hook::{Hook, Hooks};
use reins_memory::{InMemoryStore, MemoryStore};
use reins_message::Msg;
use reins_model::{ChatModel, ChatOptions, ChatRequest};
use reins_tool::{Concurrency, Toolkit};

use crate::delegate::SubAgents;
use crate::error::{AgentError, Result};
use crate::live::LiveCalls;
use crate::remote::RemoteInterrupts;
use crate::run::{AgentRules, Call, Compression, Prompts, RunConfig, Tools};
use crate::runtime::Runtime;
use crate::state::LiveSessions;

/// The id of the session [`Agent::send`] uses.
pub const DEFAULT_SESSION: &str = "default";

/// An agent: a model, tools, hooks and a store. Cheap to clone, `Send + Sync`; share
/// it across tasks. Conversations live in [`Session`](crate::Session)s.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), reins_agent::AgentError> {
/// use reins_agent::{Agent, RunStatus};
/// use reins_message::Msg;
/// use reins_model::{ScriptedModel, ScriptedResponse};
///
/// let model = ScriptedModel::new([ScriptedResponse::text("Hello!")]);
/// let agent = Agent::builder().name("Greeter").model(model).build()?;
/// let out = agent.send(Msg::user("hi")).await?;
/// assert_eq!(out.status, RunStatus::Completed);
/// assert_eq!(out.message.text(), "Hello!");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Agent {
    /// What the agent is: its name, prompts, limits and options.
    pub(crate) config: Arc<AgentConfig>,
    /// What runs it: the store, the model, the tools, the hooks, its owner id and its
    /// registries.
    pub(crate) runtime: Arc<Runtime>,
}

/// An agent's configuration: plain values, fixed when it is built.
pub(crate) struct AgentConfig {
    pub(crate) name: String,
    pub(crate) system_prompt: Option<String>,
    /// The run's limits.
    pub(crate) run: RunConfig,
    pub(crate) options: ChatOptions,
    pub(crate) concurrency: Concurrency,
    pub(crate) grace: Duration,
    pub(crate) tool_lease: Duration,
    pub(crate) session_lease: Duration,
    pub(crate) summary_prompt: String,
    /// The structured answer every run started by a message must end with, if any.
    pub(crate) output: Option<crate::structured::OutputSpec>,
    /// Keeps requests within a token budget by summarizing older turns.
    pub(crate) context: Option<crate::compression::ContextPolicy>,
    /// Per-tool requirement lifetimes in seconds ([`AgentBuilder::approval_ttl`]).
    pub(crate) approval_ttls: Arc<std::collections::BTreeMap<String, u64>>,
    /// Per-tool quorums ([`AgentBuilder::quorum`]).
    pub(crate) quorums: Arc<std::collections::BTreeMap<String, crate::requirement::Quorum>>,
    /// Who may decide and grant ([`AgentBuilder::eligibility_policy`]).
    pub(crate) eligibility: Option<crate::eligibility::Rules>,
    /// The default budget of the agent's sessions, with its model's price.
    pub(crate) budget: Option<Arc<crate::budget::BudgetRules>>,
    /// The prompts and options every request carries, as the run puts them in.
    pub(crate) prompts: Arc<Prompts>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.config.name)
            .field("model", &self.runtime.model.model_name())
            .field("tools", &self.runtime.toolkit.names())
            .field("hooks", &self.runtime.hooks.len())
            .field("max_iters", &self.config.run.max_iters)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Starts building an agent.
    pub fn builder() -> AgentBuilder {
        AgentBuilder::default()
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The tools.
    pub fn toolkit(&self) -> &Toolkit {
        &self.runtime.toolkit
    }

    /// The default budget of the agent's sessions and its model's price
    /// ([`AgentBuilder::budget`], [`AgentBuilder::price`]); `None` when it has neither.
    pub fn budget(&self) -> Option<&crate::budget::BudgetRules> {
        self.config.budget.as_deref()
    }

    /// What doors say about the agent (made once, on first use).
    pub fn card(&self) -> &crate::card::AgentCard {
        self.runtime.card.get_or_init(|| {
            let toolkit = &self.runtime.toolkit;
            crate::card::AgentCard {
                name: self.config.name.clone(),
                tools: toolkit.specs(),
                idempotent: toolkit
                    .names()
                    .into_iter()
                    .filter(|n| toolkit.is_idempotent(n))
                    .collect(),
                budget: self.config.budget.as_deref().cloned(),
            }
        })
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn MemoryStore> {
        &self.runtime.store
    }

    /// The same agent (configuration, model, tools, hooks) on another store, with
    /// its own sessions and lock-owner id: what a [`replay`](crate::replay) of a
    /// production session runs on, so that its scratch session never touches the
    /// production store. Sub-agents keep the store they were built with.
    pub fn with_store(&self, store: Arc<dyn MemoryStore>) -> Agent {
        let rt = &self.runtime;
        Agent {
            config: self.config.clone(),
            runtime: Arc::new(Runtime {
                remote: RemoteInterrupts::default(),
                model: rt.model.clone(),
                toolkit: rt.toolkit.clone(),
                store,
                hooks: rt.hooks.clone(),
                owner: reins_message::new_id(),
                sessions: Mutex::new(LiveSessions::default()),
                subagents: rt.subagents.clone(),
                live_calls: LiveCalls::default(),
                compression: std::sync::OnceLock::new(),
                card: std::sync::OnceLock::new(),
                specs: Mutex::default(),
                policy: rt.policy.clone(),
                listening: rt.listening,
                // A scratch store (a replay) signs nothing.
                evidence: None,
            }),
        }
    }

    // What a driver other than the local one (reins-restate's) needs to perform a
    // `Run`'s steps as the local driver does: the model and what every request
    // carries, the run's limits and the tool-call ledger's lease.

    /// The model.
    pub fn model(&self) -> &Arc<dyn ChatModel> {
        &self.runtime.model
    }

    /// The system prompt every request starts with, if any.
    pub fn system_prompt(&self) -> Option<&str> {
        self.config.system_prompt.as_deref()
    }

    /// The prompt the last request of a run that reached `max_iters` ends with.
    pub fn summary_prompt(&self) -> &str {
        &self.config.summary_prompt
    }

    /// The options every request carries.
    pub fn chat_options(&self) -> &ChatOptions {
        &self.config.options
    }

    /// The run's limits (what [`Run::restore`](crate::Run::restore) is given).
    pub fn run_config(&self) -> RunConfig {
        self.config.run
    }

    /// How long a tool call's ledger claim lasts (see [`AgentBuilder::tool_lease`]).
    pub fn tool_lease(&self) -> Duration {
        self.config.tool_lease
    }

    /// Whether the tool calls of one batch run at the same time (see
    /// [`AgentBuilder::tool_concurrency`]).
    pub fn tool_concurrency(&self) -> Concurrency {
        self.config.concurrency
    }

    /// How many hooks the agent has (a driver that runs no hooks refuses an agent
    /// that has some).
    pub fn hook_count(&self) -> usize {
        self.runtime.hooks.len()
    }

    /// The agent's context policy, when it keeps requests within a token budget (a
    /// driver that cannot summarize refuses an agent that has one).
    pub fn context_policy(&self) -> Option<&crate::compression::ContextPolicy> {
        self.config.context.as_ref()
    }

    /// The structured answer every run started by a message must end with, when the
    /// agent asks for one.
    pub fn output_spec(&self) -> Option<&crate::structured::OutputSpec> {
        self.config.output.as_ref()
    }

    /// The start of a call on `session` with the caller's `input`, at `now`: the one
    /// place a [`Call`] is made. It carries every rule of this agent the run applies
    /// (per-tool quorums and approval lifetimes, the structured answer, the context
    /// budget, the model's capabilities); the caller adds who acts, the view acted
    /// on and a structured answer of its own ([`Call::with_actor`],
    /// [`Call::with_view`], [`Call::with_output`]). Every driver starts its calls
    /// with this, so none can run one with fewer rules.
    ///
    /// ```
    /// use chrono::Utc;
    /// use reins_agent::run::RunInput;
    /// use reins_agent::{Agent, Quorum};
    /// use reins_message::Msg;
    /// # let model = reins_model::ScriptedModel::new([reins_model::ScriptedResponse::text("hi")]);
    ///
    /// let agent = Agent::builder().model(model).quorum("wire_money", Quorum::of(2)).build()?;
    /// let call = agent.begin("chat-1", RunInput::Message(Msg::user("pay the rent")), Utc::now());
    /// assert_eq!(call.quorums()["wire_money"], Quorum::of(2));
    /// # Ok::<(), reins_agent::AgentError>(())
    /// ```
    pub fn begin(
        &self,
        session: impl Into<String>,
        input: crate::run::RunInput,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Call {
        let cfg = &*self.config;
        Call::of_agent(
            session.into(),
            input,
            now,
            AgentRules {
                output: cfg.output.clone(),
                model: self.runtime.model.capabilities(),
                compression: self.compression(),
                approval_ttls: Arc::clone(&cfg.approval_ttls),
                quorums: Arc::clone(&cfg.quorums),
                eligibility: cfg.eligibility.clone(),
                budget: cfg.budget.clone(),
                notices: self.runtime.store.records_notices(),
                prompts: Arc::clone(&cfg.prompts),
                tools: Tools(Arc::clone(&self.runtime) as Arc<dyn crate::run::ToolCatalog>),
                listening: self.runtime.listening,
                concurrency: cfg.concurrency,
            },
        )
    }

    /// The agent's context budget, when it keeps one: its policy, the counter for its
    /// model and what a request carries besides the transcript. All of that is fixed
    /// when the agent is built, so it is counted once, on the first call that needs it.
    pub(crate) fn compression(&self) -> Option<Arc<Compression>> {
        let (cfg, rt) = (&*self.config, &*self.runtime);
        let policy = cfg.context.as_ref()?;
        let budget = rt.compression.get_or_init(|| {
            let counter = policy.counter_for(rt.model.model_name());
            let skeleton = |summary: bool| {
                let mut msgs = Vec::new();
                if let Some(p) = &cfg.system_prompt {
                    msgs.push(Msg::system(p.clone()));
                }
                if summary {
                    msgs.push(Msg::system(cfg.summary_prompt.clone()));
                }
                let mut request = ChatRequest::new(msgs).with_options(cfg.options.clone());
                if !summary {
                    request.tools = rt.tool_specs();
                }
                request
            };
            Arc::new(Compression {
                overhead: policy.overhead(&*counter, &skeleton(false)),
                summary_overhead: policy.overhead(&*counter, &skeleton(true)),
                policy: policy.clone(),
                counter,
            })
        });
        Some(Arc::clone(budget))
    }
}

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

impl Agent {
    /// Creates a standing grant (see [`Grant`](crate::approval::Grant)) made by `by`: validated, stored, and
    /// returned with its id. Creation is recorded in the grant itself (`created_by`,
    /// `created_at`).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use std::time::Duration;
    /// use reins_agent::Agent;
    /// use reins_agent::approval::{ArgCondition, GrantFilter, NewGrant};
    /// use reins_model::ScriptedModel;
    ///
    /// let agent = Agent::builder().model(ScriptedModel::new([])).build()?;
    /// let g = agent
    ///     .create_grant(
    ///         NewGrant {
    ///             session: Some("user-7/chat-1".into()),
    ///             conditions: vec![ArgCondition::ends_with("/to", "@example.com")],
    ///             ttl: Some(Duration::from_secs(3600)),
    ///             ..NewGrant::tool("send_email")
    ///         },
    ///         Some("ana"),
    ///     )
    ///     .await?;
    /// assert_eq!(agent.grants(&GrantFilter::all()).await?, vec![g.clone()]);
    /// let revoked = agent.revoke_grant(&g.id, Some("ana")).await?;
    /// assert!(revoked.is_revoked());
    /// assert!(agent.grants(&GrantFilter::all()).await?.is_empty());
    /// # Ok::<(), reins_agent::AgentError>(()) }).unwrap();
    /// ```
    pub async fn create_grant(
        &self,
        new: crate::approval::NewGrant,
        by: Option<&str>,
    ) -> Result<crate::approval::Grant> {
        let actor = crate::Actor::new(by.unwrap_or_default());
        self.check_grant(&new, &actor)?;
        self.insert_grant(new, by).await
    }

    fn check_grant(&self, new: &crate::approval::NewGrant, actor: &crate::Actor) -> Result<()> {
        if let Some(rules) = &self.config.eligibility {
            let ask = crate::eligibility::GrantRequest::new(new, actor);
            if let crate::eligibility::Eligibility::Refused { reason } = rules.0.may_grant(ask) {
                return Err(AgentError::NotEligible {
                    id: format!("grant of `{}`", new.tool),
                    reason: format!(
                        "{} may not create a grant for `{}`: {reason}",
                        if actor.principal.is_empty() {
                            "a caller who names no one".to_owned()
                        } else {
                            format!("`{}`", actor.principal)
                        },
                        new.tool
                    ),
                });
            }
        }
        Ok(())
    }

    async fn insert_grant(
        &self,
        new: crate::approval::NewGrant,
        by: Option<&str>,
    ) -> Result<crate::approval::Grant> {
        let now = chrono::Utc::now();
        let expires_at = match new.ttl {
            None => None,
            Some(ttl) => Some(
                chrono::Duration::from_std(ttl)
                    .ok()
                    .filter(|d| *d > chrono::Duration::zero())
                    .and_then(|d| now.checked_add_signed(d))
                    .ok_or_else(|| {
                        AgentError::InvalidInput(
                            "a grant's ttl must be a positive, representable duration".to_owned(),
                        )
                    })?,
            ),
        };
        let grant = crate::approval::Grant {
            id: reins_message::new_id(),
            tool: new.tool,
            effect: new.effect,
            principal: new.principal,
            session: new.session,
            conditions: new.conditions,
            expires_at,
            note: new.note,
            created_at: now,
            created_by: by.map(str::to_owned),
            revoked_at: None,
            revoked_by: None,
        };
        self.runtime.store.create_grant(&grant).await?;
        tracing::info!(grant = %grant.id, tool = %grant.tool, effect = ?grant.effect, by = ?by, "standing grant created");
        Ok(grant)
    }

    /// [`Agent::create_grant`] on behalf of `actor` (its roles and metadata are what the
    /// policy sees), after the agent's eligibility
    /// policy ([`AgentBuilder::eligibility_policy`]) agreed that `actor` may create it;
    /// a refusal is [`AgentError::NotEligible`] and nothing is stored.
    pub async fn create_grant_as(
        &self,
        new: crate::approval::NewGrant,
        actor: &crate::Actor,
    ) -> Result<crate::approval::Grant> {
        self.check_grant(&new, actor)?;
        self.insert_grant(new, Some(&actor.principal)).await
    }

    /// The grants `filter` admits, oldest first.
    pub async fn grants(
        &self,
        filter: &crate::approval::GrantFilter,
    ) -> Result<Vec<crate::approval::Grant>> {
        Ok(self.runtime.store.list_grants(filter).await?)
    }

    /// Revokes a grant (recording who and when); it never matches again.
    pub async fn revoke_grant(&self, id: &str, by: Option<&str>) -> Result<crate::approval::Grant> {
        let g = self
            .runtime
            .store
            .revoke_grant(id, by, chrono::Utc::now())
            .await?;
        tracing::info!(grant = %g.id, by = ?by, "standing grant revoked");
        Ok(g)
    }
}

impl Agent {
    /// The session's evidence as a self-contained [`reins_evidence::Bundle`]: its chain (receipts
    /// included) and the agent's verifying keys. Write it with
    /// [`reins_evidence::Bundle::to_jsonl`]; check it with [`reins_evidence::verify`] or
    /// `cargo xtask audit verify`. See docs/evidence.md.
    ///
    /// # Errors
    /// The store's ([`reins_memory::Error::Unsupported`] for a store without a chain).
    pub async fn evidence(&self, session: &str) -> Result<reins_evidence::Bundle> {
        let chain = self.runtime.store.evidence(session).await?;
        Ok(reins_evidence::Bundle::new(
            session,
            chain,
            self.evidence_keys(),
        ))
    }

    /// The verifying keys of the agent's receipts (empty without a signer): publish
    /// them as a JWKS with [`reins_evidence::Keyring::jwks`].
    pub fn evidence_keys(&self) -> reins_evidence::Keyring {
        self.runtime
            .evidence
            .as_ref()
            .map(|e| e.keys.clone())
            .unwrap_or_default()
    }
}
