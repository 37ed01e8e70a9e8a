//! Forks and replays over HTTP: `POST /fork` makes a session that serves the calls its
//! source already made (no second email, no second approval), `GET /turns` lists the
//! fork points, `POST /replay` streams a replay that runs nothing; bad input is
//! refused with the right status and nothing stored.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use serde_json::json;
use support::*;

/// `alice/s1` asked to mail bob, and ana approved it: one email sent.
async fn mailed(s: &TestServer) {
    let (status, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fs1/runs",
            json!({"message": "mail bob"}),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["status"], "paused");
    let id = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let (status, out) = s
        .post(
            ANA,
            "/v1/sessions/alice%2Fs1/decisions",
            json!({"decisions": [{"requirement_id": id, "action": "approve"}]}),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["status"], "completed");
    assert_eq!(s.ran(), ["mail:bob"]);
}

#[tokio::test]
async fn a_fork_over_http_serves_the_approved_email_without_asking_again() {
    let s = start().await;
    mailed(&s).await;
    let (status, turns) = s.get(ALICE, "/v1/sessions/alice%2Fs1/turns").await;
    assert_eq!(status, 200, "{turns}");
    assert_eq!(turns["turns"].as_array().unwrap().len(), 1);
    assert_eq!(turns["turns"][0]["text"], "mail bob");
    assert_eq!(turns["turns"][0]["tool_calls"], json!(["send_email"]));
    assert_eq!(turns["forked_from"], json!(null));

    let (status, fork) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fs1/fork",
            json!({"new_session_id": "alice/f1", "before_turn": 0}),
        )
        .await;
    assert_eq!(status, 201, "{fork}");
    assert_eq!(
        fork,
        json!({"session_id": "alice/f1", "source": "alice/s1", "at": 0, "recorded_calls": 1})
    );
    let (_, turns) = s.get(ALICE, "/v1/sessions/alice%2Ff1/turns").await;
    assert_eq!(turns["turns"], json!([]));
    assert_eq!(turns["forked_from"]["source"], "alice/s1");

    let (status, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Ff1/runs",
            json!({"message": "mail bob"}),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        out["status"], "completed",
        "no approval is asked again: {out}"
    );
    assert_eq!(s.ran(), ["mail:bob"], "one email in the outbox");
    let (_, audit) = s.get(ALICE, "/v1/sessions/alice%2Ff1/decisions").await;
    let audit = audit["decisions"].as_array().unwrap();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["decision"], "replayed");

    // Another recipient in a second fork: a new approval, a second, different email.
    let (status, _) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fs1/fork",
            json!({"new_session_id": "alice/f2", "messages": 0}),
        )
        .await;
    assert_eq!(status, 201);
    let (_, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Ff2/runs",
            json!({"message": "mail carol"}),
        )
        .await;
    assert_eq!(out["status"], "paused", "{out}");
    let id = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let (status, _) = s
        .post(
            ANA,
            "/v1/sessions/alice%2Ff2/decisions",
            json!({"decisions": [{"requirement_id": id, "action": "approve"}]}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(s.ran(), ["mail:bob", "mail:carol"]);
}

#[tokio::test]
async fn bad_forks_are_refused_with_the_right_status_and_nothing_stored() {
    let s = start().await;
    mailed(&s).await;
    let fork = |token: &'static str, path: &'static str, body: serde_json::Value| {
        let s = &s;
        async move { s.post(token, path, body).await }
    };
    let cases = [
        (
            ALICE,
            "/v1/sessions/alice%2Fs1/fork",
            json!({"new_session_id": "alice/s1", "before_turn": 0}),
            409,
            "session_exists",
        ),
        (
            ALICE,
            "/v1/sessions/alice%2Fs1/fork",
            json!({"new_session_id": "alice/x", "before_turn": 5}),
            422,
            "invalid_input",
        ),
        (
            ALICE,
            "/v1/sessions/alice%2Fs1/fork",
            json!({"new_session_id": "alice/x", "messages": 2}),
            422,
            "invalid_input",
        ),
        (
            ALICE,
            "/v1/sessions/alice%2Fs1/fork",
            json!({"new_session_id": "alice/x", "messages": 1, "before_turn": 0}),
            400,
            "bad_body",
        ),
        (
            ALICE,
            "/v1/sessions/alice%2Fs1/fork",
            json!({"new_session_id": "alice/x"}),
            400,
            "bad_body",
        ),
        (
            ALICE,
            "/v1/sessions/alice%2Fs1/fork",
            json!({"new_session_id": "alice/x", "before_turn": -1}),
            400,
            "bad_body",
        ),
        (
            ALICE,
            "/v1/sessions/alice%2Fs1/fork",
            json!({"new_session_id": "bob/x", "before_turn": 0}),
            403,
            "forbidden",
        ),
        (
            BOB,
            "/v1/sessions/alice%2Fs1/fork",
            json!({"new_session_id": "bob/x", "before_turn": 0}),
            403,
            "forbidden",
        ),
        (
            ALICE,
            "/v1/sessions/alice%2Fnope/fork",
            json!({"new_session_id": "alice/x", "before_turn": 0}),
            404,
            "not_found",
        ),
    ];
    for (token, path, body, want, code) in cases {
        let (status, out) = fork(token, path, body.clone()).await;
        assert_eq!(status, want, "{body}: {out}");
        assert_eq!(out["error"]["code"], code, "{body}: {out}");
    }
    // Nothing was made, and the source is as it was.
    for id in ["alice%2Fx", "bob%2Fx", "alice%2Fnope"] {
        let (status, _) = s.get(ADMIN, &format!("/v1/sessions/{id}")).await;
        assert_eq!(status, 404, "{id}");
    }
    let (_, src) = s.get(ALICE, "/v1/sessions/alice%2Fs1").await;
    assert_eq!(src["messages"].as_array().unwrap().len(), 4);
    assert_eq!(s.ran(), ["mail:bob"]);
}

#[tokio::test]
async fn a_replay_streams_each_turn_and_runs_nothing() {
    let s = start().await;
    mailed(&s).await;
    let (status, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fs1/runs",
            json!({"message": "hello there"}),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    let res = s
        .client
        .post(s.url("/v1/sessions/alice%2Fs1/replay"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut sse = SseReader::new(res);
    let events = sse.until("report").await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names, ["turn", "turn", "report"]);
    assert_eq!(events[0].data["served"], json!(["send_email"]));
    assert_eq!(events[0].data["divergences"], json!([]));
    let report = &events[2].data;
    assert_eq!(report["source"], "alice/s1");
    assert_eq!(report["first_divergence"], json!(null), "{report}");
    assert_eq!(s.ran(), ["mail:bob"], "a replay runs nothing");
    // Nothing of the replay is left in the server's store.
    let ids: Vec<String> = s
        .agent
        .store()
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(ids, ["alice/s1"]);
    // Another user may not replay alice's session; an unknown session is 404.
    let (status, _) = s
        .post(BOB, "/v1/sessions/alice%2Fs1/replay", json!({}))
        .await;
    assert_eq!(status, 403);
    let (status, _) = s
        .post(ALICE, "/v1/sessions/alice%2Fnone/replay", json!({}))
        .await;
    assert_eq!(status, 404);
}
