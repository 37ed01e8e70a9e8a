//! Context compression: long conversations that stay within the model's context
//! window, under one name: the policy ([`ContextPolicy`], token counters, the summary
//! format and the summarizer's request), where to cut (`plan`), and, in the driver,
//! the summarizer call.
//!
//! A [`ContextPolicy`] on the builder gives every model request a token budget. Before
//! each model call the runner counts the request (system prompt, tool schemas, the
//! active summary and the messages after it). When it is over budget, the oldest
//! turns are summarized by a model into a **summary message** and the request carries
//! that summary plus the recent turns:
//!
//! - the cut is always between whole turns when that is enough (before a user
//!   message), otherwise between whole tool rounds (before an assistant message whose
//!   earlier tool uses all have their results): a tool use is never separated from its
//!   result, and the turn being worked on — with anything it waits for — is never
//!   summarized away by a turn cut;
//! - the store stays append-only: the summary is a new message (role `system`, marked
//!   [`SUMMARY_MARK`] in its metadata with the ids of the first and last message it
//!   covers), the originals stay where they are, and a later summary builds on the
//!   earlier one ([`ContextSummary::builds_on`]). [`Session::messages`] and a snapshot
//!   still see everything; requests never carry the originals a summary covers;
//! - the summarizer call fires the `PreSummary`/`PostSummary` hooks (with
//!   [`SummaryReason::Context`]) and the run emits [`RunEvent::ContextCompressed`]
//!   (or [`RunEvent::ContextOverBudget`] when even the smallest request it can build
//!   is over budget: it is sent anyway, and the provider decides).
//!
//! Tokens are counted with a [`TokenCounter`]: [`TiktokenCounter`] (feature
//! `tiktoken`, on by default) for models `tiktoken` knows (OpenAI's), and
//! [`EstimateCounter`] otherwise — one token per 4 ASCII characters plus one per other
//! character, rounded up, plus 4 per message and [`IMAGE_TOKENS`] per image or audio
//! block. The estimate errs on the high side for English and code; for exact budgets
//! with other models, give the policy a counter of your own.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use reins_agent::{Agent, ContextPolicy};
//! use reins_message::Msg;
//! use reins_model::{ScriptedModel, ScriptedResponse};
//!
//! let model = ScriptedModel::new([ScriptedResponse::text("Hello!")]);
//! let agent = Agent::builder()
//!     .model(model)
//!     .context(ContextPolicy::new(8_000).compress_to(4_000))
//!     .build()?;
//! agent.send(Msg::user("hi")).await?;
//! # Ok(()) }
//! ```
//!
//! [`Session::messages`]: crate::Session::messages
//! [`RunEvent::ContextCompressed`]: crate::RunEvent::ContextCompressed
//! [`RunEvent::ContextOverBudget`]: crate::RunEvent::ContextOverBudget

pub(crate) mod plan;
pub(crate) mod summarizer;

pub(crate) use summarizer::{chunks, summary_request};

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use reins_message::{ContentBlock, Msg, Role, ToolSpec};
use reins_model::{ChatModel, ChatRequest};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use reins_hook::SummaryReason;

use crate::error::{AgentError, Result};

/// The metadata key that marks a summary message (its value: the [`ContextSummary`]
/// fields other than the text).
pub const SUMMARY_MARK: &str = "reins.summary";

/// Tokens counted for an image or audio block by [`EstimateCounter`] (and by the
/// default [`TokenCounter::count_message`]): providers bill a typical image at a few
/// hundred to about 1,500 tokens; 1,000 keeps budgets safe for most.
pub const IMAGE_TOKENS: usize = 1_000;

/// The summarizer's instructions unless [`ContextPolicy::summary_prompt`] replaces
/// them.
pub const DEFAULT_SUMMARY_PROMPT: &str = "You compress the earlier part of a conversation between a user and an AI \
assistant, so that the assistant can go on without it. Write a summary that keeps: what the user \
wants and every constraint or preference they stated; decisions taken; facts learned (names, \
numbers, identifiers, file paths, URLs); each tool call that mattered and its outcome (done, \
failed, rejected by a person and why, interrupted, unknown); and what is still open. If an \
earlier summary is given, fold it in: the result replaces it. Be concise and factual, write in \
the third person, no preamble.";

/// The line that introduces a summary in a model request.
pub const SUMMARY_HEADER: &str =
    "Summary of the earlier conversation (its messages are not repeated here):";

/// Counts tokens the way a model's tokenizer does (or estimates them).
pub trait TokenCounter: Send + Sync + fmt::Debug {
    /// Tokens in a piece of text.
    fn count_text(&self, text: &str) -> usize;

    /// Tokens a message costs in a request: its text, thinking, tool calls (name and
    /// arguments), tool results, media, plus a per-message overhead.
    fn count_message(&self, msg: &Msg) -> usize {
        MESSAGE_OVERHEAD
            + msg
                .content
                .iter()
                .map(|b| self.count_block(b))
                .sum::<usize>()
    }

    /// Tokens one content block costs.
    fn count_block(&self, block: &ContentBlock) -> usize {
        match block {
            ContentBlock::Text { text } => self.count_text(text),
            ContentBlock::Thinking { thinking, .. } => self.count_text(thinking),
            ContentBlock::ToolUse(u) => {
                self.count_text(&u.name)
                    + match &u.raw_input {
                        Some(raw) => self.count_text(raw),
                        None => self.count_text(&u.input.to_string()),
                    }
            }
            ContentBlock::ToolResult(r) => {
                2 + r.output.iter().map(|b| self.count_block(b)).sum::<usize>()
            }
            ContentBlock::Image { .. } | ContentBlock::Audio { .. } => IMAGE_TOKENS,
        }
    }

    /// Tokens a tool's definition costs in a request (name, description, schema).
    fn count_tool(&self, spec: &ToolSpec) -> usize {
        MESSAGE_OVERHEAD
            + self.count_text(&spec.name)
            + self.count_text(&spec.description)
            + self.count_text(&spec.parameters.to_string())
    }

    /// A short name for logs and events, e.g. `tiktoken/o200k_base` or `estimate`.
    fn name(&self) -> &str;
}

/// The per-message overhead (role and separators), as OpenAI documents for its chat
/// format (3-4 tokens); used for every counter.
pub const MESSAGE_OVERHEAD: usize = 4;

/// A tokenizer-free estimate: `ceil(ascii / 4) + non_ascii` tokens for a text (one
/// token per 4 ASCII characters, one per other character, which over-counts most
/// non-English scripts a little rather than under-count them).
#[derive(Debug, Clone, Copy, Default)]
pub struct EstimateCounter;

impl TokenCounter for EstimateCounter {
    fn count_text(&self, text: &str) -> usize {
        let mut ascii = 0usize;
        let mut other = 0usize;
        for c in text.chars() {
            if c.is_ascii() {
                ascii += 1;
            } else {
                other += 1;
            }
        }
        ascii.div_ceil(4) + other
    }

    fn name(&self) -> &str {
        "estimate"
    }
}

/// Exact counts with OpenAI's tokenizers (`tiktoken-rs`; the vocabularies are compiled
/// in, loaded once per process on first use).
#[cfg(feature = "tiktoken")]
#[derive(Clone, Copy)]
pub struct TiktokenCounter {
    bpe: &'static tiktoken_rs::CoreBPE,
    encoding: &'static str,
}

#[cfg(feature = "tiktoken")]
impl fmt::Debug for TiktokenCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TiktokenCounter")
            .field("encoding", &self.encoding)
            .finish()
    }
}

#[cfg(feature = "tiktoken")]
impl TiktokenCounter {
    /// The tokenizer of an OpenAI model by name (`gpt-4o`, `gpt-4.1-mini`, `o3`,
    /// `gpt-3.5-turbo`, fine-tuned `ft:` names...), `None` for a model `tiktoken` does
    /// not know.
    pub fn for_model(model: &str) -> Option<Self> {
        use tiktoken_rs::tokenizer::Tokenizer;
        let tokenizer = tiktoken_rs::tokenizer::get_tokenizer(model)?;
        let encoding = match tokenizer {
            Tokenizer::O200kBase => "o200k_base",
            Tokenizer::O200kHarmony => "o200k_harmony",
            Tokenizer::Cl100kBase => "cl100k_base",
            Tokenizer::P50kBase => "p50k_base",
            Tokenizer::P50kEdit => "p50k_edit",
            Tokenizer::R50kBase | Tokenizer::Gpt2 => "r50k_base",
        };
        let bpe = tiktoken_rs::bpe_for_tokenizer(tokenizer).ok()?;
        Some(Self { bpe, encoding })
    }

    /// `o200k_base`, the encoding of the GPT-4o and later families.
    pub fn o200k() -> Self {
        Self {
            bpe: tiktoken_rs::o200k_base_singleton(),
            encoding: "o200k_base",
        }
    }

    /// `cl100k_base`, the encoding of GPT-4 and GPT-3.5.
    pub fn cl100k() -> Self {
        Self {
            bpe: tiktoken_rs::cl100k_base_singleton(),
            encoding: "cl100k_base",
        }
    }
}

#[cfg(feature = "tiktoken")]
impl TokenCounter for TiktokenCounter {
    fn count_text(&self, text: &str) -> usize {
        self.bpe.count_ordinary(text)
    }

    fn name(&self) -> &str {
        self.encoding
    }
}

/// The counter used for a model when the policy names none: `tiktoken` for models it
/// knows (feature `tiktoken`), [`EstimateCounter`] otherwise.
pub fn counter_for_model(model: &str) -> Arc<dyn TokenCounter> {
    #[cfg(feature = "tiktoken")]
    if let Some(c) = TiktokenCounter::for_model(model) {
        return Arc::new(c);
    }
    let _ = model;
    Arc::new(EstimateCounter)
}

/// How an agent keeps its requests within a token budget. See the [module
/// docs](self).
#[derive(Clone)]
pub struct ContextPolicy {
    pub(crate) budget: usize,
    pub(crate) target: Option<usize>,
    pub(crate) summary_tokens: Option<usize>,
    pub(crate) prompt: String,
    pub(crate) summarizer: Option<Arc<dyn ChatModel>>,
    pub(crate) counter: Option<Arc<dyn TokenCounter>>,
    /// Token counts of texts outside the transcript (system prompt, tool schemas),
    /// by a hash of the text.
    pub(crate) fixed: Arc<Mutex<HashMap<u64, usize>>>,
}

impl fmt::Debug for ContextPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContextPolicy")
            .field("budget", &self.budget)
            .field("target", &self.target())
            .field("summary_tokens", &self.max_summary_tokens())
            .field(
                "summarizer",
                &self.summarizer.as_ref().map(|m| m.model_name().to_owned()),
            )
            .field(
                "counter",
                &self.counter.as_ref().map(|c| c.name().to_owned()),
            )
            .finish_non_exhaustive()
    }
}

impl ContextPolicy {
    /// Requests of at most `budget` tokens (input: system prompt, tools, messages).
    /// Compression leaves them at [`compress_to`](Self::compress_to) (default: 60 %
    /// of the budget), so that it runs once every several turns, not on every one.
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            target: None,
            summary_tokens: None,
            prompt: DEFAULT_SUMMARY_PROMPT.to_owned(),
            summarizer: None,
            counter: None,
            fixed: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// After compressing, the request should be at most this many tokens (summary
    /// included). Must be below the budget.
    #[must_use]
    pub fn compress_to(mut self, tokens: usize) -> Self {
        self.target = Some(tokens);
        self
    }

    /// The longest summary to ask for (`max_tokens` of the summarizer's request;
    /// default: a fifth of [`compress_to`](Self::compress_to)).
    #[must_use]
    pub fn summary_tokens(mut self, tokens: usize) -> Self {
        self.summary_tokens = Some(tokens);
        self
    }

    /// Replaces the summarizer's instructions ([`DEFAULT_SUMMARY_PROMPT`]).
    #[must_use]
    pub fn summary_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.prompt = prompt.into();
        self
    }

    /// Summarizes with this model (e.g. a cheaper one) instead of the agent's.
    #[must_use]
    pub fn summarizer(mut self, model: impl ChatModel + 'static) -> Self {
        self.summarizer = Some(Arc::new(model));
        self
    }

    /// Counts tokens with this counter instead of the one chosen from the model's
    /// name ([`counter_for_model`]).
    #[must_use]
    pub fn counter(mut self, counter: impl TokenCounter + 'static) -> Self {
        self.counter = Some(Arc::new(counter));
        self
    }

    /// The budget per request, in tokens.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// What a compressed request aims at, in tokens.
    pub fn target(&self) -> usize {
        self.target.unwrap_or(self.budget / 5 * 3)
    }

    /// The summary's `max_tokens`.
    pub fn max_summary_tokens(&self) -> usize {
        self.summary_tokens.unwrap_or(self.target() / 5).max(1)
    }

    /// Checks the numbers fit together (called by `AgentBuilder::build`).
    pub(crate) fn validate(&self) -> Result<()> {
        let fail = |m: String| Err(AgentError::Config(format!("context policy: {m}")));
        if self.budget < 256 {
            return fail(format!(
                "a budget of {} tokens leaves no room for a conversation; use at least 256",
                self.budget
            ));
        }
        if self.target() >= self.budget {
            return fail(format!(
                "compress_to({}) must be below the budget ({})",
                self.target(),
                self.budget
            ));
        }
        if self.max_summary_tokens() >= self.target() {
            return fail(format!(
                "summary_tokens({}) must be below compress_to ({})",
                self.max_summary_tokens(),
                self.target()
            ));
        }
        if self.prompt.trim().is_empty() {
            return fail("the summary prompt is empty".to_owned());
        }
        Ok(())
    }

    /// The counter for requests to `model`.
    pub(crate) fn counter_for(&self, model: &str) -> Arc<dyn TokenCounter> {
        self.counter
            .clone()
            .unwrap_or_else(|| counter_for_model(model))
    }

    /// Tokens of a text outside the transcript, cached by the text's hash.
    pub(crate) fn fixed_tokens(&self, counter: &dyn TokenCounter, text: &str) -> usize {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut h);
        counter.name().hash(&mut h);
        let key = h.finish();
        let mut cache = match self.fixed.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        if let Some(n) = cache.get(&key) {
            return *n;
        }
        let n = counter.count_text(text);
        if cache.len() >= 1024 {
            cache.clear();
        }
        cache.insert(key, n);
        n
    }

    /// Tokens of a request outside its transcript part: system messages that are not
    /// summaries, the tools, and the answer format.
    pub(crate) fn overhead(&self, counter: &dyn TokenCounter, request: &ChatRequest) -> usize {
        let mut n = 3; // the reply's priming
        for m in &request.messages {
            if m.role == Role::System && !is_summary(m) {
                n += MESSAGE_OVERHEAD + self.fixed_tokens(counter, &m.text());
            }
        }
        for t in &request.tools {
            let text = format!("{}\n{}\n{}", t.name, t.description, t.parameters);
            n += MESSAGE_OVERHEAD + self.fixed_tokens(counter, &text);
        }
        if let Some(f) = &request.options.response_format {
            if let Ok(text) = serde_json::to_string(f) {
                n += self.fixed_tokens(counter, &text);
            }
        }
        n
    }

    /// Tokens the summarizer may read per call: the budget minus its instructions and
    /// the summary it writes.
    pub(crate) fn chunk_tokens(&self, counter: &dyn TokenCounter) -> usize {
        let prompt = self.fixed_tokens(counter, &self.prompt) + 3 * MESSAGE_OVERHEAD + 16;
        self.budget
            .saturating_sub(prompt)
            .saturating_sub(self.max_summary_tokens())
            .max(64)
    }
}

/// A summary message's description: what it covers and what it builds on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextSummary {
    /// The summary message's id.
    pub id: String,
    /// The id of the first message it covers.
    pub first: String,
    /// The id of the last message it covers (everything from `first` to `last` in the
    /// transcript, earlier summaries aside).
    pub last: String,
    /// How many messages it covers (since the summary it builds on, if any).
    pub messages: usize,
    /// The earlier summary this one folds in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builds_on: Option<String>,
    /// Tokens of the messages it covers (and of the summary it builds on), as counted.
    pub covered_tokens: usize,
    /// Tokens of the summary itself.
    pub summary_tokens: usize,
    /// The counter that counted (e.g. `o200k_base`, `estimate`).
    pub counter: String,
    /// When it was written.
    pub created_at: DateTime<Utc>,
    /// The summary.
    pub text: String,
}

/// What a summary message's metadata holds under [`SUMMARY_MARK`].
#[derive(Serialize, Deserialize)]
struct SummaryMeta {
    first: String,
    last: String,
    messages: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    builds_on: Option<String>,
    covered_tokens: usize,
    summary_tokens: usize,
    counter: String,
}

impl ContextSummary {
    /// The summary a message holds, `None` for any other message.
    pub fn from_msg(msg: &Msg) -> Option<Self> {
        if msg.role != Role::System {
            return None;
        }
        let meta: SummaryMeta =
            serde_json::from_value(msg.metadata.get(SUMMARY_MARK)?.clone()).ok()?;
        Some(Self {
            id: msg.id.clone(),
            first: meta.first,
            last: meta.last,
            messages: meta.messages,
            builds_on: meta.builds_on,
            covered_tokens: meta.covered_tokens,
            summary_tokens: meta.summary_tokens,
            counter: meta.counter,
            created_at: msg.created_at,
            text: msg.text(),
        })
    }

    /// The message to store for this summary (role `system`, named `context-summary`,
    /// marked [`SUMMARY_MARK`]); it takes the summary's id and time.
    pub fn to_msg(&self) -> Msg {
        let mut msg = Msg::system(self.text.clone());
        msg.id.clone_from(&self.id);
        msg.created_at = self.created_at;
        msg.name = Some("context-summary".to_owned());
        let meta = SummaryMeta {
            first: self.first.clone(),
            last: self.last.clone(),
            messages: self.messages,
            builds_on: self.builds_on.clone(),
            covered_tokens: self.covered_tokens,
            summary_tokens: self.summary_tokens,
            counter: self.counter.clone(),
        };
        let meta = serde_json::to_value(meta).unwrap_or(Value::Null);
        msg.metadata.insert(SUMMARY_MARK.to_owned(), meta);
        msg
    }
}

/// Whether a message is a stored summary.
pub(crate) fn is_summary(m: &Msg) -> bool {
    m.role == Role::System && m.metadata.contains_key(SUMMARY_MARK)
}

/// A summary as a request carries it: a system message right after the system prompt
/// when the recent part starts with a user message (Anthropic folds it into the system
/// prompt), a user message when it starts with the assistant (a request may not start
/// with the assistant's turn).
pub(crate) fn summary_for_request(summary: &Msg, first_kept: Option<&Msg>) -> Msg {
    let role = match first_kept.map(|m| m.role) {
        Some(Role::Assistant) => Role::User,
        _ => Role::System,
    };
    Msg {
        id: summary.id.clone(),
        name: None,
        role,
        content: vec![ContentBlock::text(format!(
            "{SUMMARY_HEADER}\n\n{}",
            summary.text()
        ))]
        .into(),
        metadata: serde_json::Map::new(),
        created_at: summary.created_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_counts_ascii_by_four_and_other_characters_by_one() {
        let c = EstimateCounter;
        assert_eq!(c.count_text(""), 0);
        assert_eq!(c.count_text("abcd"), 1);
        assert_eq!(c.count_text("abcde"), 2);
        assert_eq!(c.count_text("日本語"), 3);
        assert_eq!(c.count_message(&Msg::user("abcd")), 1 + MESSAGE_OVERHEAD);
    }

    #[cfg(feature = "tiktoken")]
    #[test]
    fn tiktoken_knows_openai_models_and_counts_exactly() {
        let c = TiktokenCounter::for_model("gpt-4o").unwrap();
        assert_eq!(c.name(), "o200k_base");
        // "hello world" is two tokens in both encodings.
        assert_eq!(c.count_text("hello world"), 2);
        assert_eq!(TiktokenCounter::cl100k().count_text("hello world"), 2);
        assert!(TiktokenCounter::for_model("claude-sonnet-4").is_none());
        assert_eq!(counter_for_model("scripted").name(), "estimate");
        assert_eq!(counter_for_model("gpt-4.1-mini").name(), "o200k_base");
    }

    #[test]
    fn a_summary_round_trips_through_its_message() {
        let s = ContextSummary {
            id: "s1".into(),
            first: "a".into(),
            last: "b".into(),
            messages: 2,
            builds_on: None,
            covered_tokens: 10,
            summary_tokens: 3,
            counter: "estimate".into(),
            created_at: Utc::now(),
            text: "they talked".into(),
        };
        let m = s.to_msg();
        assert!(is_summary(&m));
        let back = ContextSummary::from_msg(&m).unwrap();
        assert_eq!(back.text, "they talked");
        assert_eq!(back, s);
        assert_eq!(back.first, "a");
        assert!(ContextSummary::from_msg(&Msg::system("plain")).is_none());
    }

    #[test]
    fn policies_that_cannot_work_are_refused_with_the_numbers() {
        let e = ContextPolicy::new(100).validate().unwrap_err().to_string();
        assert!(e.contains("at least 256"), "{e}");
        let e = ContextPolicy::new(1000)
            .compress_to(1000)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("compress_to(1000) must be below the budget (1000)"),
            "{e}"
        );
        let e = ContextPolicy::new(1000)
            .summary_tokens(700)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("summary_tokens(700)"), "{e}");
        ContextPolicy::new(1000).validate().unwrap();
        assert_eq!(ContextPolicy::new(1000).target(), 600);
        assert_eq!(ContextPolicy::new(1000).max_summary_tokens(), 120);
    }
}
