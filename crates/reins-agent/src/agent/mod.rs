//! [`Agent`] and its builder.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins_memory::MemoryStore;
use reins_message::Msg;
use reins_model::{ChatModel, ChatOptions, ChatRequest};
use reins_tool::{Concurrency, Toolkit};

use crate::error::Result;
use crate::live::LiveCalls;
use crate::remote::RemoteInterrupts;
use crate::run::{AgentRules, Call, Compression, Prompts, RunConfig, Tools};
use crate::runtime::Runtime;
use crate::state::LiveSessions;

mod builder;
mod grants;

pub use builder::AgentBuilder;

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
