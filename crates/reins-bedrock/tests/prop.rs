#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! For random human-in-the-loop histories — reasoning turns with calls, pauses
//! (calls still unanswered), edited arguments, rejections, cancellations,
//! interrupts that left partial turns, compressions that cut the history anywhere,
//! thinking from other providers — the request `BedrockChat` builds passes
//! Bedrock Converse's validity rules (`reins_model::testing::rules`).

use proptest::prelude::*;
use reins_bedrock::BedrockChat;
use reins_bedrock::PROVIDER;
use reins_message::ToolSpec;
use reins_message::{ContentBlock, Msg, Role, ToolResult, ToolUse, signature};
use reins_model::ChatRequest;
use reins_model::testing::rules::bedrock_request_problems;
use serde_json::json;

#[derive(Debug, Clone)]
enum Fate {
    Success,
    Edited,
    Rejected,
    Cancelled,
    /// Still waiting for a person (a pause).
    Pending,
}

#[derive(Debug, Clone)]
enum Step {
    User(String),
    Turn {
        reasoning: Vec<usize>,
        text: bool,
        calls: Vec<Fate>,
        foreign: bool,
    },
    /// An interrupt mid-reasoning that left a partial, unsigned turn.
    Partial(bool),
    /// Compression: everything before this point is replaced by a summary.
    Compress(usize),
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        Just(Fate::Success),
        Just(Fate::Edited),
        Just(Fate::Rejected),
        Just(Fate::Cancelled),
        Just(Fate::Pending),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        "[a-z ]{0,8}".prop_map(Step::User),
        (
            prop::collection::vec(0usize..4, 0..3),
            any::<bool>(),
            prop::collection::vec(fate(), 0..4),
            any::<bool>()
        )
            .prop_map(|(reasoning, text, calls, foreign)| Step::Turn {
                reasoning,
                text,
                calls,
                foreign
            }),
        any::<bool>().prop_map(Step::Partial),
        (0usize..20).prop_map(Step::Compress),
    ]
}

fn history(steps: &[Step]) -> Vec<Msg> {
    let mut msgs = vec![Msg::system("sys"), Msg::user("start")];
    let mut n = 0;
    for s in steps {
        match s {
            Step::User(t) => msgs.push(Msg::user(t.clone())),
            Step::Turn {
                reasoning,
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
                for _ in reasoning {
                    n += 1;
                    blocks.push(ContentBlock::Thinking {
                        thinking: format!("thought {n}"),
                        signature: Some(signature::seal(PROVIDER, &format!("SIG{n}"))),
                    });
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
            Step::Partial(with_text) => {
                let mut blocks = vec![ContentBlock::thinking("half a thou")];
                if *with_text {
                    blocks.push(ContentBlock::text("Let me"));
                }
                msgs.push(Msg::new(Role::Assistant, blocks));
            }
            Step::Compress(k) => {
                let k = (*k).min(msgs.len());
                let rest = msgs.split_off(k);
                msgs = vec![Msg::user("summary of earlier turns")];
                msgs.extend(rest);
            }
        }
    }
    msgs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn every_hitl_history_gives_a_valid_request(steps in prop::collection::vec(step(), 0..12)) {
        let msgs = history(&steps);
        let body = BedrockChat::new("anthropic.claude-test-v1:0")
            .request_body(&ChatRequest::new(msgs).with_tools(vec![ToolSpec::new(
                "t",
                "a tool",
                json!({"type": "object", "properties": {"x": {}}}),
            )]))
            .unwrap();
        let problems = bedrock_request_problems(&body);
        prop_assert!(problems.is_empty(), "{problems:#?}\n{body:#}");
    }
}
