#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! reins-model's provider conformance suite on the Responses API fixture
//! (`support::responses`): rate limits, 5xx, resets and silence before and after
//! output, cut-off tool calls, malformed events, empty bodies, an unreachable
//! server — each counting the requests the server got.

#[path = "support/responses.rs"]
mod responses;

reins_model::provider_conformance_tests!(responses::Responses);
