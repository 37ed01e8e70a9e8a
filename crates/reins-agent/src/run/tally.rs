//! What one call of a run tallies beside the stored state ([`CallTally`]: the rules
//! the call carries, its usage, its answer so far) and the requirement operations the
//! next commit writes ([`ReqOps`]).

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use reins_memory::{RepairReport, RequirementRecord};
use reins_message::{Msg, ToolResult, Usage};
use serde_json::Value;

use super::{Compressed, Compression};
use crate::view::{Actor, DecisionRecord, ViewToken};

/// Requirement store operations for the next commit.
#[derive(Debug, Clone, Default)]
pub(super) struct ReqOps {
    pub(super) clear: bool,
    pub(super) add: Vec<RequirementRecord>,
    /// Requirement rows to mark decided, with the decision's record; each gets its
    /// `requirement.decided` notice in the commit.
    pub(super) decide: Vec<(String, Value)>,
    /// Decisions applied since the last commit whose rows `clear` superseded (the turn
    /// ended, or the requirements were written anew, before the commit): no row to
    /// mark, but their notices are still due — a rejection or an external result that
    /// ends the turn in the same step is reported like an approval.
    pub(super) decided: Vec<(String, Value)>,
    /// Audit trail entries for the next commit.
    pub(super) log: Vec<DecisionRecord>,
    /// Notices of requirements that started waiting, for the next commit.
    pub(super) waiting: Vec<reins_memory::Notice>,
}

impl ReqOps {
    /// The rows are about to be cleared: what was decided on them is kept for the
    /// notices (`decided`), not written as row updates.
    pub(super) fn supersede_decided(&mut self) {
        let decide = std::mem::take(&mut self.decide);
        self.decided.extend(decide);
    }
}

/// What one call tallies: the rules it carries, its usage and its answer so far.
#[derive(Debug, Clone)]
pub(super) struct CallTally {
    /// The session the call runs on (named in errors and the output).
    pub(super) session: String,
    /// What the call's model can do.
    pub(super) model: reins_model::ModelCapabilities,
    /// The agent's context budget for this call.
    pub(super) compression: Option<std::sync::Arc<Compression>>,
    /// A [`Step::Compress`](super::Step::Compress) was handed out for the coming request: the request's
    /// tokens before it.
    pub(super) compress_asked: Option<usize>,
    /// The summary fed back for it.
    pub(super) compressed: Option<Compressed>,
    pub(super) usage: Usage,
    pub(super) repairs: RepairReport,
    pub(super) iterations: u32,
    pub(super) last_assistant: Option<Msg>,
    /// Who the call acts for, and the view it acts on (for the audit trail).
    pub(super) actor: Option<Actor>,
    pub(super) view: Option<ViewToken>,
    /// The validated structured answer, once given.
    pub(super) structured: Option<Value>,
    /// The structured answer stayed invalid after every retry: (raw, problems, attempts).
    pub(super) output_failure: Option<(String, Vec<String>, u32)>,
    /// The model's last answer had no text and no tool call.
    pub(super) empty_answer: bool,
    /// Calls served from the fork's record and not yet announced ([`Step::Replayed`](super::Step::Replayed)).
    pub(super) replayed: Vec<ToolResult>,
    /// Per-tool requirement lifetimes (seconds), overriding the run's default.
    pub(super) approval_ttls: std::sync::Arc<std::collections::BTreeMap<String, u64>>,
    /// Per-tool quorums.
    pub(super) quorums:
        std::sync::Arc<std::collections::BTreeMap<String, crate::requirement::Quorum>>,
    /// Who may decide (the agent's eligibility policy).
    pub(super) eligibility: Option<crate::eligibility::Rules>,
    /// Confirmations this call's reasoning raised, not yet put to the approval policy
    /// and the standing grants (the next [`Step::Consult`](super::Step::Consult)).
    pub(super) consult: Vec<String>,
    /// The requirements of the [`Step::Consult`](super::Step::Consult) handed out and not yet answered.
    pub(super) consulting: Option<Vec<String>>,
    /// The agent's default budget and its model's price.
    pub(super) budget: Option<std::sync::Arc<crate::budget::BudgetRules>>,
    /// Whether the store records notices: the commits carry them only then (a
    /// notice copies the requirement, the decision or the answer).
    pub(super) notices: bool,
    /// The prompts and options of the agent's requests.
    pub(super) prompts: Arc<super::event::Prompts>,
    /// The agent's tools.
    pub(super) tools: super::event::Tools,
    /// The caller's own tools for this call.
    pub(super) client_tools: Vec<reins_message::ToolSpec>,
    /// The hook points the agent's hooks listen to.
    pub(super) listening: super::event::Listening,
    /// Whether a batch's calls run at the same time.
    pub(super) concurrency: reins_tool::Concurrency,
    /// Whether a batch's results may ride with the next commit.
    pub(super) defer_results: bool,
    /// The turn's W3C `traceparent`, kept when it pauses.
    pub(super) traceparent: Option<String>,
}

/// The empty per-tool tables every call without its own shares (a call's tally is
/// made twice per run: copying an `Arc` costs no allocation, making one does).
static NO_TTLS: LazyLock<Arc<BTreeMap<String, u64>>> = LazyLock::new(Arc::default);
static NO_QUORUMS: LazyLock<Arc<BTreeMap<String, crate::requirement::Quorum>>> =
    LazyLock::new(Arc::default);
static NO_PROMPTS: LazyLock<Arc<super::event::Prompts>> = LazyLock::new(Arc::default);

impl Default for CallTally {
    fn default() -> Self {
        Self {
            session: String::new(),
            model: reins_model::ModelCapabilities::default(),
            compression: None,
            compress_asked: None,
            compressed: None,
            usage: Usage::default(),
            repairs: RepairReport::default(),
            iterations: 0,
            last_assistant: None,
            actor: None,
            view: None,
            structured: None,
            output_failure: None,
            empty_answer: false,
            replayed: Vec::new(),
            approval_ttls: Arc::clone(&NO_TTLS),
            quorums: Arc::clone(&NO_QUORUMS),
            eligibility: None,
            consult: Vec::new(),
            consulting: None,
            budget: None,
            notices: true,
            prompts: Arc::clone(&NO_PROMPTS),
            tools: super::event::Tools::default(),
            client_tools: Vec::new(),
            listening: super::event::Listening::default(),
            concurrency: reins_tool::Concurrency::Parallel,
            defer_results: false,
            traceparent: None,
        }
    }
}
