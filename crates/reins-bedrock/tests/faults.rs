#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! reins-model's provider conformance suite on the Bedrock fixture (`support`):
//! rate limits, 5xx, resets and silence before and after output, cut-off tool
//! calls, malformed frames, empty bodies, an unreachable server — each counting the
//! requests the server got.

mod support;

reins_model::provider_conformance_tests!(support::Bedrock);
