#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! Provider faults against a local server on 127.0.0.1: rate limits with and without
//! `Retry-After`, 5xx, connection resets, streams cut in the middle of a tool call,
//! streams that go silent, malformed SSE, invalid JSON in tool arguments and empty
//! responses. Each test counts the requests the server received: errors before the
//! first chunk are retried per the `RetryPolicy`, errors after it never are, and
//! each failure is a typed `ModelError`.
//!
//! The cases are reins-model's provider conformance suite
//! (`reins_model::testing::conformance`), run on the Messages API fixture in
//! `support`.

mod support;

reins_model::provider_conformance_tests!(support::Anthropic);
