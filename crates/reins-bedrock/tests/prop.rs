#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! For random human-in-the-loop histories (`reins_model::testing::histories`: reasoning
//! turns with calls, pauses, edited arguments, rejections, cancellations, interrupts that
//! left partial turns, compressions that cut the history anywhere, thinking from other
//! providers) the request `BedrockChat` builds passes Bedrock Converse's validity rules
//! (`reins_model::testing::rules`).

use proptest::prelude::*;
use reins_bedrock::BedrockChat;
use reins_bedrock::PROVIDER;
use reins_message::{ContentBlock, ToolSpec, signature};
use reins_model::ChatRequest;
use reins_model::testing::histories::{HistoryStep, history};
use reins_model::testing::rules::bedrock_request_problems;
use serde_json::json;

/// Bedrock's reasoning: one signed thinking block per item.
fn reasoning(positions: &[usize], n: &mut usize) -> Vec<ContentBlock> {
    positions
        .iter()
        .map(|_| {
            *n += 1;
            ContentBlock::Thinking {
                thinking: format!("thought {n}"),
                signature: Some(signature::seal(PROVIDER, &format!("SIG{n}"))),
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn every_hitl_history_gives_a_valid_request(seeds in prop::collection::vec(any::<u64>(), 0..12)) {
        let steps: Vec<HistoryStep> = seeds.into_iter().map(HistoryStep::from_seed).collect();
        let msgs = history(&steps, reasoning);
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
