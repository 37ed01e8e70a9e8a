#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! For random human-in-the-loop histories (`reins_model::testing::histories`: reasoning
//! turns with calls, pauses, edited arguments, rejections, cancellations, interrupts that
//! left partial turns, compressions that cut the history anywhere, thinking from other
//! providers) the request `OpenAiResponses` builds passes the Responses API's validity rules
//! (`reins_model::testing::rules`).

use proptest::prelude::*;
use reins_message::{ContentBlock, signature};
use reins_model::ChatRequest;
use reins_model::testing::histories::{HistoryStep, history};
use reins_model::testing::rules::responses_request_problems;
use reins_openai::OpenAiResponses;
use reins_openai::responses::PROVIDER;
use serde_json::json;

/// The Responses API's reasoning: one sealed block holding the encrypted reasoning items.
fn reasoning(positions: &[usize], n: &mut usize) -> Vec<ContentBlock> {
    let items: Vec<_> = positions
        .iter()
        .map(|at| {
            *n += 1;
            json!({"id": format!("rs_{n}"), "summary": [], "encrypted_content": format!("enc{n}"), "at": at})
        })
        .collect();
    vec![ContentBlock::Thinking {
        thinking: String::new(),
        signature: Some(signature::seal(
            PROVIDER,
            &json!({ "items": items }).to_string(),
        )),
    }]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn every_hitl_history_gives_a_valid_request(seeds in prop::collection::vec(any::<u64>(), 0..12)) {
        let steps: Vec<HistoryStep> = seeds.into_iter().map(HistoryStep::from_seed).collect();
        let msgs = history(&steps, reasoning);
        let body = OpenAiResponses::openai("gpt-test")
            .request_body(&ChatRequest::new(msgs))
            .unwrap();
        let problems = responses_request_problems(&body);
        prop_assert!(problems.is_empty(), "{problems:#?}\n{body:#}");
    }
}
