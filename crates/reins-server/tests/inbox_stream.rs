//! The inbox stream (`GET /v1/events`) over real HTTP: each `changed` event says what
//! the session holds now, typed — its version, whether it waits, its open requirements.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// The `changed` event of the inbox stream saying that `session` is at `version`
/// (a run starting or ending here names the session alone; earlier versions pass).
/// A 60 s guard turns a stream that never says it into a failure instead of a hang.
async fn change_at(inbox: &mut SseReader, session: &str, version: u64) -> Value {
    let said = async {
        loop {
            let ev = inbox.next().await.expect("the inbox stream ended");
            if ev.event == "changed"
                && ev.data["session_id"] == session
                && ev.data["version"].as_u64() == Some(version)
            {
                return ev.data;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), said)
        .await
        .unwrap_or_else(|_| panic!("no change of {session} at version {version}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_stream_says_what_changed() {
    let s = start().await;
    let res = s
        .client
        .get(s.url("/v1/events"))
        .bearer_auth(ANA)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut inbox = SseReader::new(res);
    assert_eq!(inbox.next().await.unwrap().event, "ready");

    let out = paused_run(&s, "alice/typed", "delete t.txt").await;
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let (_, view) = s.get(ALICE, "/v1/sessions/alice%2Ftyped").await;
    let paused_at = view["version"].as_u64().unwrap();

    // The paused session's change carries its version and its open requirement,
    // typed: the inbox knows a call waits, and which, without reading the session.
    let waiting = change_at(&mut inbox, "alice/typed", paused_at).await;
    assert_eq!(waiting["waiting"], true, "{waiting}");
    let open = waiting["open_requirements"].as_array().unwrap();
    assert_eq!(open.len(), 1, "{waiting}");
    assert_eq!(open[0]["requirement_id"], rid.as_str(), "{waiting}");
    assert_eq!(open[0]["tool"], "delete_file", "{waiting}");
    assert_eq!(open[0]["kind"], "confirmation", "{waiting}");
    assert!(waiting["message_count"].as_u64().unwrap() > 0, "{waiting}");

    // Once decided, the change says nothing waits any more.
    let body = json!({"view_token": view["view_token"], "decisions": [
        {"requirement_id": rid, "action": "approve"}]});
    let (st, out) = s
        .post(ANA, "/v1/sessions/alice%2Ftyped/decisions", body)
        .await;
    assert_eq!(st, 200, "{out}");
    let (_, view) = s.get(ALICE, "/v1/sessions/alice%2Ftyped").await;
    let done = change_at(&mut inbox, "alice/typed", view["version"].as_u64().unwrap()).await;
    assert_eq!(done["waiting"], false, "{done}");
    assert_eq!(done["open_requirements"], json!([]), "{done}");
}
