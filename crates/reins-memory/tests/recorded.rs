//! The conformance suite against `Recorded` over `InMemoryStore`: a store that records
//! its calls behaves as the store it wraps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use reins_memory::{InMemoryStore, Recorded};

async fn stores() -> Option<(Recorded, Recorded, ())> {
    let a = Recorded::new(InMemoryStore::new());
    Some((a.clone(), a, ()))
}

conformance_tests!(stores);

#[tokio::test]
async fn each_call_is_recorded_with_its_session_in_order() {
    use reins_memory::{Commit, MemoryStore, StoreCall};
    let store = Recorded::new(InMemoryStore::new());
    let s = store.open_session("a").await.unwrap();
    store.commit("a", Commit::at(s.version)).await.unwrap();
    store.list_sessions().await.unwrap();
    assert!(store.commit_takes_lock() == store.inner().commit_takes_lock());
    let call = |method, session: Option<&str>| StoreCall {
        method,
        session: session.map(str::to_owned),
    };
    assert_eq!(
        store.take(),
        [
            call("open_session", Some("a")),
            call("commit", Some("a")),
            call("list_sessions", None),
        ]
    );
    assert!(store.calls().is_empty());
}
