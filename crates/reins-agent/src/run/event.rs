//! What a driver feeds a [`Run`](super::Run): one [`Event`] per outcome, and the
//! [`Call`] that starts a call with everything the run needs to know about the agent
//! for it (how to ask for a structured answer, the context budget).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use reins_message::{Msg, ToolResult, ToolSpec, Usage};
use reins_model::{ChatOptions, ModelCapabilities, ToolSpecs};

use super::{AfterReasoning, ExecOutcome, GateDecision, RunInput};
use crate::compression::{ContextPolicy, ContextSummary, TokenCounter};
use crate::error::AgentError;
use crate::requirement::Quorum;
use crate::structured::OutputSpec;
use crate::view::{Actor, DecisionRecord, ViewToken};

/// One outcome fed to `Run::apply`.
// Made and consumed once per step: boxing the large `Begin` would only add an
// allocation per call.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// A call starts with the caller's input. Validated first: a refused input
    /// changes nothing and comes back as a [`Refusal`].
    Begin(Call),
    /// The answer to a [`Step::Consult`](super::Step::Consult): the confirmations the
    /// application's approval policy or a standing grant decided without asking a
    /// person (see [`crate::approval`]), by requirement id (`Consulted` converts into
    /// it): applied as a person's decisions would be, within the current call, and
    /// recorded in the audit trail with how they were made; the run goes on instead of
    /// pausing for them. Empty: nothing was decided, the run pauses. A decision for a
    /// requirement the step did not ask about is refused.
    DecidedWithoutAsking {
        /// (requirement id, how it was decided).
        decisions: Vec<(String, super::AutoDecision)>,
        /// (requirement id, why a person is asked): added to the requirement's reason
        /// (see [`Consulted::asked`](super::Consulted::asked)).
        asked: Vec<(String, String)>,
        /// When.
        now: DateTime<Utc>,
    },
    /// What the child sessions of paused sub-agent calls wait for in the store (the
    /// answer to a [`Step::Follow`](super::Step::Follow)).
    Followed(super::Followed),
    /// The answer to a [`Step::Refuse`](super::Step::Refuse): the decision that took
    /// effect, when one of the refused input's requirements was decided by someone
    /// else. `Run::apply` answers it with the refusal to return
    /// ([`AgentError::AlreadyDecided`] then, otherwise the input's own).
    Refused {
        /// (requirement id, the decision that took effect).
        decided: Option<(String, crate::error::Decided)>,
    },
    /// Calls cut short by a crash, settled from the tool-call ledger before a new
    /// message closes their turn (the answer to a [`Step::Settle`](super::Step::Settle)):
    /// their recorded results, or `Unknown` ones.
    Settled {
        /// One result per call the ledger could settle.
        results: Vec<ToolResult>,
        /// When.
        now: DateTime<Utc>,
    },
    /// The model's final message for a [`Step::Reason`](super::Step::Reason), after
    /// the `PostReasoning` hooks, with each tool use's gate in order and the hooks'
    /// verdict.
    Reasoned {
        /// The message.
        message: Msg,
        /// What each tool use's policy says (`Toolkit::gate`), in order.
        gates: Vec<GateDecision>,
        /// `stop_agent()` / `goto_reasoning(..)` from the hooks.
        after: AfterReasoning,
        /// Tokens the call used.
        usage: Usage,
        /// When.
        now: DateTime<Utc>,
    },
    /// What the `PreActing` hooks made of the calls of a
    /// [`Step::Prepare`](super::Step::Prepare), in order.
    Prepared(Vec<super::Prepared>),
    /// The outcomes of a [`Step::Execute`](super::Step::Execute),
    /// [`Step::Delegate`](super::Step::Delegate) or [`Step::Ask`](super::Step::Ask),
    /// in any order, and whether a `PostActing` hook asked to stop.
    Acted {
        /// One outcome per execution that finished or paused.
        outcomes: Vec<ExecOutcome>,
        /// A `PostActing` hook called `stop_agent()`.
        stop: bool,
        /// Every outcome is a result exactly as the tool-call ledger records it (a
        /// crash before they are stored loses nothing: they may ride with the next
        /// commit).
        recorded: bool,
        /// When.
        now: DateTime<Utc>,
    },
    /// The summary made for a [`Step::Compress`](super::Step::Compress).
    Summarized(ContextSummary),
    /// Tokens spent outside a model call of the run (the summarizer's).
    Usage(Usage),
    /// The run was interrupted: every call without a result gets an honest one
    /// (these, from tools stopped mid-run; `Cancelled` for the rest), the turn is
    /// sanitized and the run ends `Cancelled`. Ignored when no run is in progress.
    Interrupted(Vec<ToolResult>),
}

/// The start of a call: the caller's input, who acts, on which view, and what the run
/// needs to know about the agent for this call.
///
/// Only the agent makes one ([`Agent::begin`](crate::Agent::begin)): every rule it
/// carries (quorums, approval lifetimes, the structured answer, the context budget,
/// what the model can do) comes from the agent's configuration, so no driver can
/// start a call with fewer of them. The caller's part is set with
/// [`Call::with_actor`], [`Call::with_view`] and [`Call::with_output`].
#[derive(Debug, Clone)]
pub struct Call {
    pub(super) session: String,
    pub(super) input: RunInput,
    pub(super) actor: Option<Actor>,
    pub(super) view: Option<ViewToken>,
    pub(super) output: Option<OutputSpec>,
    pub(super) model: ModelCapabilities,
    pub(super) compression: Option<Arc<Compression>>,
    pub(super) approval_ttls: Arc<BTreeMap<String, u64>>,
    pub(super) quorums: Arc<BTreeMap<String, Quorum>>,
    pub(super) eligibility: Option<crate::eligibility::Rules>,
    pub(super) budget: Option<Arc<crate::budget::BudgetRules>>,
    pub(super) session_budget: Option<crate::budget::Budget>,
    pub(super) notices: bool,
    pub(super) prompts: Arc<Prompts>,
    pub(super) tools: Tools,
    pub(super) client_tools: Vec<ToolSpec>,
    pub(super) listening: Listening,
    pub(super) concurrency: reins_tool::Concurrency,
    pub(super) defer_results: bool,
    pub(super) traceparent: Option<String>,
    pub(super) trace_parent: Option<String>,
    pub(super) now: DateTime<Utc>,
}

/// Which hook points an agent's hooks listen to (the run hands out a hook step only
/// for those).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Listening(u32);

/// The hook points a run hands out steps for, by bit.
const POINTS: [reins_hook::HookEventKind; 4] = [
    reins_hook::HookEventKind::PreCall,
    reins_hook::HookEventKind::PostCall,
    reins_hook::HookEventKind::PreActing,
    reins_hook::HookEventKind::ToolReplayed,
];

impl Listening {
    /// What `hooks` listen to.
    pub(crate) fn of(hooks: &reins_hook::Hooks) -> Self {
        if hooks.is_empty() {
            return Self(0);
        }
        let mut bits = 0;
        for (i, kind) in POINTS.iter().enumerate() {
            if hooks.wants(*kind) {
                bits |= 1 << i;
            }
        }
        Self(bits)
    }

    /// Whether a hook listens to `kind` (one of the points the run hands out steps
    /// for).
    pub(crate) fn wants(self, kind: reins_hook::HookEventKind) -> bool {
        POINTS
            .iter()
            .position(|k| *k == kind)
            .is_some_and(|i| self.0 & (1 << i) != 0)
    }
}

/// What every model request of an agent carries besides the transcript, made once
/// when the agent is built: the system prompt, the prompt of the summary at the
/// iteration limit, the options.
#[derive(Debug, Clone)]
pub(crate) struct Prompts {
    /// The system prompt, as the first message of every request.
    pub(crate) system: Option<Msg>,
    /// The summary prompt, as the last message of the summary request.
    pub(crate) summary: Msg,
    /// The options every request carries.
    pub(crate) options: ChatOptions,
}

impl Prompts {
    /// The prompts and options of an agent.
    pub(crate) fn new(system: Option<&str>, summary: &str, options: ChatOptions) -> Self {
        Self {
            system: system.map(|p| Msg::system(p).with_id("system-prompt")),
            summary: Msg::user(summary).with_id("summary-prompt"),
            options,
        }
    }
}

/// The agent's tools as a request offers them (the toolkit's specs, shared between
/// requests while no tool group is switched).
pub(crate) trait ToolCatalog: Send + Sync {
    /// The specs of the active tools.
    fn specs(&self) -> ToolSpecs;
    /// Whether the toolkit has a tool of this name (a caller's tool of the same name
    /// is not offered).
    fn contains(&self, name: &str) -> bool;
    /// Whether calls of this tool run a sub-agent in a child session.
    fn delegates(&self, name: &str) -> bool;
}

/// A shared [`ToolCatalog`].
#[derive(Clone)]
pub(crate) struct Tools(pub(crate) Arc<dyn ToolCatalog>);

impl fmt::Debug for Tools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Tools")
    }
}

/// No tools (a call made without an agent: the run's unit tests).
struct NoTools;

impl ToolCatalog for NoTools {
    fn specs(&self) -> ToolSpecs {
        ToolSpecs::default()
    }

    fn contains(&self, _name: &str) -> bool {
        false
    }

    fn delegates(&self, _name: &str) -> bool {
        false
    }
}

impl Default for Tools {
    fn default() -> Self {
        static NONE: std::sync::LazyLock<Arc<dyn ToolCatalog>> =
            std::sync::LazyLock::new(|| Arc::new(NoTools));
        Self(Arc::clone(&NONE))
    }
}

impl Default for Prompts {
    fn default() -> Self {
        Self::new(None, "", ChatOptions::default())
    }
}

/// The agent's part of a [`Call`] (what [`Agent::begin`](crate::Agent::begin) fills in).
pub(crate) struct AgentRules {
    /// The structured answer every run started by a message must end with.
    pub(crate) output: Option<OutputSpec>,
    /// What the model can do.
    pub(crate) model: ModelCapabilities,
    /// The context budget.
    pub(crate) compression: Option<Arc<Compression>>,
    /// Per-tool requirement lifetimes (seconds).
    pub(crate) approval_ttls: Arc<BTreeMap<String, u64>>,
    /// Per-tool quorums.
    pub(crate) quorums: Arc<BTreeMap<String, Quorum>>,
    /// Who may decide.
    pub(crate) eligibility: Option<crate::eligibility::Rules>,
    /// The default budget of the agent's sessions and its model's price.
    pub(crate) budget: Option<Arc<crate::budget::BudgetRules>>,
    /// Whether the store records notices of changes (its outbox): the run makes them
    /// only then.
    pub(crate) notices: bool,
    /// The prompts and options of every request.
    pub(crate) prompts: Arc<Prompts>,
    /// The tools every request offers.
    pub(crate) tools: Tools,
    /// The hook points the agent's hooks listen to.
    pub(crate) listening: Listening,
    /// Whether a batch's calls run at the same time.
    pub(crate) concurrency: reins_tool::Concurrency,
}

impl Call {
    /// A call of an agent with these rules (see [`Agent::begin`](crate::Agent::begin)).
    pub(crate) fn of_agent(
        session: String,
        input: RunInput,
        now: DateTime<Utc>,
        rules: AgentRules,
    ) -> Self {
        Self {
            session,
            input,
            actor: None,
            view: None,
            output: rules.output,
            model: rules.model,
            compression: rules.compression,
            approval_ttls: rules.approval_ttls,
            quorums: rules.quorums,
            eligibility: rules.eligibility,
            budget: rules.budget,
            session_budget: None,
            notices: rules.notices,
            prompts: rules.prompts,
            tools: rules.tools,
            client_tools: Vec::new(),
            listening: rules.listening,
            concurrency: rules.concurrency,
            defer_results: false,
            traceparent: None,
            trace_parent: None,
            now,
        }
    }

    /// A call with this input and no agent rules at all (the run's unit tests).
    #[cfg(test)]
    pub(crate) fn bare(session: impl Into<String>, input: RunInput, now: DateTime<Utc>) -> Self {
        Self::of_agent(
            session.into(),
            input,
            now,
            AgentRules {
                output: None,
                model: ModelCapabilities::default(),
                compression: None,
                approval_ttls: Arc::default(),
                quorums: Arc::default(),
                eligibility: None,
                budget: None,
                notices: true,
                prompts: Arc::default(),
                tools: Tools::default(),
                listening: Listening::default(),
                concurrency: reins_tool::Concurrency::Parallel,
            },
        )
    }

    /// Who the call acts for (recorded with every decision it makes; what quorums
    /// count and grants scoped to a principal match).
    #[must_use]
    pub fn with_actor(mut self, actor: Option<Actor>) -> Self {
        self.actor = actor;
        self
    }

    /// The view the caller acts on: a different one is refused
    /// ([`AgentError::StaleView`]) before anything changes.
    #[must_use]
    pub fn with_view(mut self, view: Option<ViewToken>) -> Self {
        self.view = view;
        self
    }

    /// The structured answer a run started by this call's message must end with,
    /// instead of the agent's (ignored for other inputs: a run in progress keeps its
    /// own).
    #[must_use]
    pub fn with_output(mut self, spec: OutputSpec) -> Self {
        self.output = Some(spec);
        self
    }

    /// Sets the session's own budget limit (stored with the session, over the
    /// agent's default) as the call starts; refused at the start when it is invalid.
    #[must_use]
    pub fn with_budget(mut self, limit: crate::budget::Budget) -> Self {
        self.session_budget = Some(limit);
        self
    }

    /// Offers the model these tools of the caller's beside the agent's (a toolkit
    /// tool of the same name wins). They are always external: a call of one pauses
    /// the run with an `External` requirement, which the caller answers with the
    /// tool's result (AG-UI's client tools).
    #[must_use]
    pub fn with_client_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.client_tools = tools;
        self
    }

    /// Lets a batch's results ride with the next commit when every one of them is
    /// the tool-call ledger's record (the driver's choice: it must find them in the
    /// ledger, or its journal, after a crash).
    pub(crate) fn with_deferred_results(mut self, defer: bool) -> Self {
        self.defer_results = defer;
        self
    }

    /// The W3C `traceparent` of the turn this call is: kept with the run state when
    /// it pauses, so that the turn that resumes it links to it (see
    /// [`crate::telemetry`]).
    pub(crate) fn with_traceparent(mut self, traceparent: Option<String>) -> Self {
        self.traceparent = traceparent;
        self
    }

    /// The caller's W3C `traceparent` (an HTTP `traceparent` header, an MCP request's
    /// `_meta`): the parent of this call's `invoke_agent` span (see
    /// [`crate::telemetry`]).
    #[must_use]
    pub fn with_trace_parent(mut self, traceparent: Option<String>) -> Self {
        self.trace_parent = traceparent;
        self
    }

    /// The caller's W3C `traceparent` (see [`Call::with_trace_parent`]).
    pub fn trace_parent(&self) -> Option<&str> {
        self.trace_parent.as_deref()
    }

    /// The caller's own tools for this call (see [`Call::with_client_tools`]).
    pub fn client_tools(&self) -> &[ToolSpec] {
        &self.client_tools
    }

    /// The agent's default budget and its model's price, when it has one.
    pub fn budget(&self) -> Option<&crate::budget::BudgetRules> {
        self.budget.as_deref()
    }

    /// The session the run belongs to.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The caller's input.
    pub fn input(&self) -> &RunInput {
        &self.input
    }

    /// Who the call acts for.
    pub fn actor(&self) -> Option<&Actor> {
        self.actor.as_ref()
    }

    /// The view the caller acts on.
    pub fn view(&self) -> Option<&ViewToken> {
        self.view.as_ref()
    }

    /// The structured answer a run started by this call's message must end with
    /// (`None`: free text).
    pub fn output(&self) -> Option<&OutputSpec> {
        self.output.as_ref()
    }

    /// What the model can do (how a structured answer is asked for).
    pub fn model(&self) -> ModelCapabilities {
        self.model
    }

    /// The agent's context budget, when it keeps one.
    pub fn compression(&self) -> Option<&Arc<Compression>> {
        self.compression.as_ref()
    }

    /// How long requirements of these tools stay answerable, in seconds (overrides
    /// [`RunConfig::requirement_ttl_secs`](super::RunConfig::requirement_ttl_secs) for
    /// them).
    pub fn approval_ttls(&self) -> &BTreeMap<String, u64> {
        &self.approval_ttls
    }

    /// Tools whose confirmations need approvals from several people.
    pub fn quorums(&self) -> &BTreeMap<String, Quorum> {
        &self.quorums
    }

    /// When.
    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }
}

/// An agent's context budget for one call: the policy, the token counter for its
/// model, and the tokens a request carries besides the transcript.
#[derive(Clone)]
pub struct Compression {
    /// The policy.
    pub policy: ContextPolicy,
    /// Counts tokens as the agent's model does.
    pub counter: Arc<dyn TokenCounter>,
    /// Tokens of a reasoning request without its transcript (system prompt, tools,
    /// options).
    pub overhead: usize,
    /// Tokens of the final summary request without its transcript.
    pub summary_overhead: usize,
}

impl fmt::Debug for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compression")
            .field("policy", &self.policy)
            .field("counter", &self.counter.name())
            .field("overhead", &self.overhead)
            .field("summary_overhead", &self.summary_overhead)
            .finish()
    }
}

/// An input the run refused, with the audit records of what it attempted (stale or
/// expired decisions are kept in the trail; the driver appends them without touching
/// the session's version, so other callers' views stay valid).
#[derive(Debug)]
pub struct Refusal {
    /// Why, fully formed.
    pub error: AgentError,
    /// The audit records to append (empty when there is nothing to record).
    pub audit: Vec<DecisionRecord>,
}

impl From<AgentError> for Refusal {
    fn from(error: AgentError) -> Self {
        Self {
            error,
            audit: Vec::new(),
        }
    }
}

impl From<Refusal> for AgentError {
    fn from(r: Refusal) -> Self {
        r.error
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

/// Which changes `Run::take_commit` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Everything written since the last commit, the run state included.
    All,
    /// Only when something besides the run state changed (messages, requirements,
    /// decisions): a step that only moves the state waits for the next commit.
    Recorded,
}
