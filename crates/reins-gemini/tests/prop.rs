#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! For random human-in-the-loop histories (`reins_model::testing::histories`: reasoning
//! turns with calls, pauses, edited arguments, rejections, cancellations, interrupts that
//! left partial turns, compressions that cut the history anywhere, thinking from other
//! providers) the request `GeminiChat` builds passes the Gemini API's validity rules
//! (`reins_model::testing::rules`).

use proptest::prelude::*;
use reins_gemini::GeminiChat;
use reins_gemini::PROVIDER;
use reins_message::{ContentBlock, signature};
use reins_model::ChatRequest;
use reins_model::testing::histories::{HistoryStep, history};
use reins_model::testing::rules::gemini_request_problems;
use serde_json::json;

/// Gemini's reasoning: one sealed block with signatures on some of the calls (by
/// position) and on the text.
fn reasoning(positions: &[usize], n: &mut usize) -> Vec<ContentBlock> {
    let calls_sigs: Vec<_> = positions
        .iter()
        .map(|at| {
            *n += 1;
            json!([at, format!("SIG{n}")])
        })
        .collect();
    vec![ContentBlock::Thinking {
        thinking: String::new(),
        signature: Some(signature::seal(
            PROVIDER,
            &json!({ "calls": calls_sigs, "text": "TSIG" }).to_string(),
        )),
    }]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn every_hitl_history_gives_a_valid_request(seeds in prop::collection::vec(any::<u64>(), 0..12)) {
        let steps: Vec<HistoryStep> = seeds.into_iter().map(HistoryStep::from_seed).collect();
        let msgs = history(&steps, reasoning);
        let body = GeminiChat::new("gemini-test")
            .request_body(&ChatRequest::new(msgs))
            .unwrap();
        let problems = gemini_request_problems(&body);
        prop_assert!(problems.is_empty(), "{problems:#?}\n{body:#}");
    }
}
