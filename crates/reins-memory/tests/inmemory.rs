//! The conformance suite against `InMemoryStore`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use reins_memory::InMemoryStore;

async fn stores() -> Option<(InMemoryStore, InMemoryStore, ())> {
    let a = InMemoryStore::new();
    Some((a.clone(), a, ()))
}

conformance_tests!(stores);
