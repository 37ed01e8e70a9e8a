//! Random human-in-the-loop histories for a provider's property tests: reasoning turns
//! with tool calls, pauses (calls still unanswered), edited arguments, rejections,
//! cancellations, interrupts that left partial turns, compressions that cut the history
//! anywhere, and thinking signed by another provider.
//!
//! A property test draws plain `u64` seeds (so it needs no strategy of this crate's and
//! shrinks toward the simplest step), turns each into a [`HistoryStep`] with
//! [`HistoryStep::from_seed`], and builds the messages with [`history`], handing it
//! how its provider stores reasoning ([`history`]'s `reasoning` argument). Then it
//! checks the request its model builds with the rules in [`rules`](super::rules):
//!
//! ```
//! use reins_message::ContentBlock;
//! use reins_model::testing::histories::{HistoryStep, history};
//!
//! let steps: Vec<HistoryStep> = [7u64, 12_345, 99, 3].into_iter().map(HistoryStep::from_seed).collect();
//! let msgs = history(&steps, |calls, n| {
//!     *n += 1;
//!     vec![ContentBlock::Thinking { thinking: format!("thought {n} for {} calls", calls.len()), signature: None }]
//! });
//! assert!(msgs.len() >= 2);
//! ```

use reins_message::{ContentBlock, Msg, Role, ToolResult, ToolUse};
use serde_json::json;

/// What became of one tool call in a generated history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Ran and succeeded.
    Success,
    /// A person edited the arguments, then it ran.
    Edited,
    /// A person rejected it.
    Rejected,
    /// An interrupt cancelled it before it ran.
    Cancelled,
    /// Still waiting for a person (the history ends in a pause).
    Pending,
}

/// One step of a generated history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryStep {
    /// A user message.
    User(String),
    /// An assistant turn.
    Turn {
        /// Reasoning items, each with a position among the turn's calls.
        reasoning: Vec<usize>,
        /// Whether the turn has text.
        text: bool,
        /// The turn's tool calls and their fates.
        calls: Vec<Fate>,
        /// Whether the turn carries thinking signed by another provider.
        foreign: bool,
    },
    /// An interrupt mid-reasoning that left a partial, unsigned turn (with text or not).
    Partial(bool),
    /// Compression: everything before this index is replaced by a summary.
    Compress(usize),
}

impl HistoryStep {
    /// The step a seed stands for. Seed 0 is the simplest step (an empty user message);
    /// every other step kind and shape is reachable.
    pub fn from_seed(seed: u64) -> Self {
        let mut bits = seed;
        let mut take = |n: u64| {
            let v = bits % n;
            bits /= n;
            v
        };
        match take(4) {
            0 => {
                let len = take(9);
                HistoryStep::User(
                    (0..len)
                        .map(|i| if i % 4 == 3 { ' ' } else { 'a' })
                        .collect(),
                )
            }
            1 => {
                let reasoning = (0..take(3)).map(|_| take(4) as usize).collect();
                let text = take(2) == 1;
                let calls = (0..take(4))
                    .map(|_| match take(5) {
                        0 => Fate::Success,
                        1 => Fate::Edited,
                        2 => Fate::Rejected,
                        3 => Fate::Cancelled,
                        _ => Fate::Pending,
                    })
                    .collect();
                let foreign = take(2) == 1;
                HistoryStep::Turn {
                    reasoning,
                    text,
                    calls,
                    foreign,
                }
            }
            2 => HistoryStep::Partial(take(2) == 1),
            _ => HistoryStep::Compress(take(20) as usize),
        }
    }
}

/// The messages of a history: a system message and a first user message, then `steps`.
///
/// `reasoning(positions, counter)` gives the blocks that carry a turn's reasoning the way
/// the provider under test stores it (it is called only for turns with reasoning, with
/// each item's position among the calls); `counter` is shared with the generator so ids
/// and signatures stay unique. Tool calls are to a tool named `t` with `{"x": n}`.
pub fn history(
    steps: &[HistoryStep],
    mut reasoning: impl FnMut(&[usize], &mut usize) -> Vec<ContentBlock>,
) -> Vec<Msg> {
    let mut msgs = vec![Msg::system("sys"), Msg::user("start")];
    let mut n = 0;
    for s in steps {
        match s {
            HistoryStep::User(t) => msgs.push(Msg::user(t.clone())),
            HistoryStep::Turn {
                reasoning: items,
                text,
                calls,
                foreign,
            } => {
                let mut blocks = Vec::new();
                if *foreign {
                    blocks.push(ContentBlock::Thinking {
                        thinking: "other".into(),
                        signature: Some("EqQBCgIYAh".into()),
                    });
                }
                if !items.is_empty() {
                    blocks.extend(reasoning(items, &mut n));
                }
                if *text {
                    blocks.push(ContentBlock::text("ok"));
                }
                let mut results = Vec::new();
                for f in calls {
                    n += 1;
                    let id = format!("call_{n}");
                    let mut u = ToolUse::new(&id, "t", json!({"x": n}));
                    match f {
                        Fate::Success => results.push(ToolResult::success(&id, "t", "done")),
                        Fate::Edited => {
                            u.input = json!({"x": "edited"});
                            results.push(ToolResult::success(&id, "t", "done"));
                        }
                        Fate::Rejected => {
                            results.push(ToolResult::rejected(&id, "t", Some("no".into())));
                        }
                        Fate::Cancelled => {
                            results.push(ToolResult::cancelled(&id, "t", "not run: interrupted"));
                        }
                        Fate::Pending => {}
                    }
                    blocks.push(ContentBlock::ToolUse(u));
                }
                msgs.push(Msg::new(Role::Assistant, blocks));
                if !results.is_empty() {
                    msgs.push(Msg::tool_results(results));
                }
            }
            HistoryStep::Partial(with_text) => {
                let mut blocks = vec![ContentBlock::thinking("half a thou")];
                if *with_text {
                    blocks.push(ContentBlock::text("Let me"));
                }
                msgs.push(Msg::new(Role::Assistant, blocks));
            }
            HistoryStep::Compress(k) => {
                let k = (*k).min(msgs.len());
                let rest = msgs.split_off(k);
                msgs = vec![Msg::user("summary of earlier turns")];
                msgs.extend(rest);
            }
        }
    }
    msgs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_kind_and_fate_is_reachable_from_a_seed() {
        let steps: Vec<_> = (0..4096).map(HistoryStep::from_seed).collect();
        assert_eq!(HistoryStep::from_seed(0), HistoryStep::User(String::new()));
        assert!(
            steps
                .iter()
                .any(|s| matches!(s, HistoryStep::Partial(true)))
        );
        assert!(
            steps
                .iter()
                .any(|s| matches!(s, HistoryStep::Compress(k) if *k > 0))
        );
        for fate in [
            Fate::Success,
            Fate::Edited,
            Fate::Rejected,
            Fate::Cancelled,
            Fate::Pending,
        ] {
            assert!(
                steps
                    .iter()
                    .any(|s| matches!(s, HistoryStep::Turn { calls, .. } if calls.contains(&fate))),
                "{fate:?}"
            );
        }
        assert!(steps.iter().any(|s| matches!(
            s,
            HistoryStep::Turn { reasoning, foreign: true, text: true, .. } if reasoning.len() == 2
        )));
    }

    #[test]
    fn a_pending_call_has_no_result_and_the_others_have_one() {
        let step = HistoryStep::Turn {
            reasoning: vec![],
            text: false,
            calls: vec![Fate::Success, Fate::Pending],
            foreign: false,
        };
        let msgs = history(&[step], |_, _| Vec::new());
        assert_eq!(msgs.len(), 4);
        let results = msgs[3].tool_results_iter().count();
        assert_eq!(results, 1);
    }
}
