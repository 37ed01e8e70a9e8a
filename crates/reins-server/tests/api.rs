//! The JSON API end to end over real HTTP: runs, pauses, the inbox, decisions with
//! edits and notes, view tokens, interrupts, SSE streams and the audit trail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

#[tokio::test]
async fn a_run_pauses_shows_in_the_inbox_and_an_edited_approval_runs_once() {
    let s = start().await;
    let out = paused_run(&s, "alice/chat-1", "delete a.txt").await;
    let req = &out["requirements"][0];
    assert_eq!(req["tool_use"]["name"], "delete_file");
    let rid = req["id"].as_str().unwrap().to_owned();

    // The owner reads the session: paused, with a view token.
    let (st, view) = s.get(ALICE, "/v1/sessions/alice%2Fchat-1").await;
    assert_eq!(st, 200);
    assert_eq!(view["status"], "paused");
    assert_eq!(view["requirements"][0]["id"], rid.as_str());
    let token = view["view_token"].as_str().unwrap().to_owned();
    assert!(!view["messages"].as_array().unwrap().is_empty());

    // The approver's inbox shows it, with the tool's schema.
    let (st, inbox) = s.get(ANA, "/v1/requirements?status=pending").await;
    assert_eq!(st, 200);
    let item = &inbox["items"][0];
    assert_eq!(item["session_id"], "alice/chat-1");
    assert_eq!(item["tool"], "delete_file");
    assert_eq!(item["arguments"], json!({"path": "a.txt"}));
    assert_eq!(item["tool_schema"]["type"], "object");

    // A user may not decide.
    let body = json!({"view_token": token, "decisions": [
        {"requirement_id": rid, "action": "approve", "edited_args": {"path": "b.txt"}}]});
    let (st, err) = s
        .post(ALICE, "/v1/sessions/alice%2Fchat-1/decisions", body.clone())
        .await;
    assert_eq!(st, 403, "{err}");
    assert!(s.ran().is_empty());

    // The approver approves with edited arguments: the edit runs, once.
    let (st, out) = s
        .post(ANA, "/v1/sessions/alice%2Fchat-1/decisions", body.clone())
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["status"], "completed");
    assert!(
        out["message"].to_string().contains("deleted b.txt"),
        "{out}"
    );
    assert_eq!(s.ran(), ["delete:b.txt"]);

    // Deciding again: refused, nothing runs.
    let (st, err) = s
        .post(ANA, "/v1/sessions/alice%2Fchat-1/decisions", body)
        .await;
    // A late decision: 409 already_decided, naming the one that took effect.
    assert_eq!(st, 409, "{err}");
    assert_eq!(err["error"]["code"], "already_decided", "{err}");
    assert_eq!(err["error"]["decided"]["by"], "ana", "{err}");
    assert_eq!(s.ran(), ["delete:b.txt"]);

    // The inbox is empty again.
    let (_, inbox) = s.get(ANA, "/v1/requirements").await;
    assert!(inbox["items"].as_array().unwrap().is_empty(), "{inbox}");

    // The transcript keeps the model's call and records what ran.
    let (_, view) = s.get(ALICE, "/v1/sessions/alice%2Fchat-1").await;
    assert_eq!(view["status"], "idle");
    let text = view["messages"].to_string();
    assert!(text.contains("executed_input"), "{text}");
}

#[tokio::test]
async fn rejecting_with_a_note_tells_the_model_and_runs_nothing() {
    let s = start().await;
    let out = paused_run(&s, "alice/r", "delete keep.txt").await;
    let rid = out["requirements"][0]["id"].as_str().unwrap();
    let (st, out) = s
        .post(
            ANA,
            "/v1/sessions/alice%2Fr/decisions",
            json!({"decisions": [{"requirement_id": rid, "action": "reject", "note": "keep it"}]}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert!(out["message"].to_string().contains("Rejected"), "{out}");
    assert!(s.ran().is_empty());
}

#[tokio::test]
async fn user_input_is_supplied_through_the_api() {
    let s = start().await;
    let out = paused_run(&s, "alice/b", "book table").await;
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let (_, inbox) = s.get(ANA, "/v1/requirements").await;
    assert_eq!(inbox["items"][0]["kind"], "user_input");
    assert_eq!(inbox["items"][0]["fields"]["required"][0], "date");
    // approve is the wrong kind for user input: 422, nothing changes.
    let (st, err) = s
        .post(
            ANA,
            "/v1/sessions/alice%2Fb/decisions",
            json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 422, "{err}");
    assert_eq!(err["error"]["code"], "invalid_decision");
    let (st, out) = s
        .post(ANA, "/v1/sessions/alice%2Fb/decisions", json!({"decisions": [{"requirement_id": rid, "action": "input", "values": {"date": "2026-12-01"}}]}))
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(s.ran(), ["book:table@2026-12-01"]);
}

#[tokio::test]
async fn a_stale_view_token_is_refused_and_changes_nothing() {
    let s = start().await;
    let out = paused_run(&s, "alice/s", "delete one.txt").await;
    let r1 = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let (_, v1) = s.get(ANA, "/v1/sessions/alice%2Fs").await;
    let t1 = v1["view_token"].as_str().unwrap().to_owned();
    // Someone rejects r1; a new pause r2 appears.
    let (st, _) = s
        .post(
            ANA,
            "/v1/sessions/alice%2Fs/decisions",
            json!({"decisions": [{"requirement_id": r1, "action": "reject"}]}),
        )
        .await;
    assert_eq!(st, 200);
    let out = paused_run(&s, "alice/s", "delete two.txt").await;
    let r2 = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let (_, before) = s.get(ANA, "/v1/sessions/alice%2Fs").await;
    // A decision on r2 made with the old view: 409 stale_view, nothing ran.
    let (st, err) = s
        .post(
            ANA,
            "/v1/sessions/alice%2Fs/decisions",
            json!({"view_token": t1, "decisions": [{"requirement_id": r2, "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 409, "{err}");
    assert_eq!(err["error"]["code"], "stale_view");
    assert_eq!(err["error"]["pending"][0]["id"], r2.as_str());
    assert!(s.ran().is_empty());
    let (_, after) = s.get(ANA, "/v1/sessions/alice%2Fs").await;
    assert_eq!(before["version"], after["version"]);
    // With the current token it goes through.
    let (st, _) = s
        .post(ANA, "/v1/sessions/alice%2Fs/decisions", json!({"view_token": after["view_token"], "decisions": [{"requirement_id": r2, "action": "approve"}]}))
        .await;
    assert_eq!(st, 200);
    assert_eq!(s.ran(), ["delete:two.txt"]);
}

#[tokio::test]
async fn roles_and_tokens_are_enforced() {
    let s = start().await;
    // No token, an unknown token: 401.
    let res = s
        .client
        .get(s.url("/v1/requirements"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    let (st, _) = s.get("nope", "/v1/requirements").await;
    assert_eq!(st, 401);
    // A user may not run someone else's session.
    let (st, err) = s
        .post(BOB, "/v1/sessions/alice%2Fx/runs", json!({"message": "hi"}))
        .await;
    assert_eq!(st, 403, "{err}");
    let (st, _) = s.get(BOB, "/v1/sessions/alice%2Fx").await;
    assert_eq!(st, 403);
    // An approver restricted to send_email may not decide delete_file, nor see it.
    let out = paused_run(&s, "alice/t", "delete x.txt").await;
    let rid = out["requirements"][0]["id"].as_str().unwrap();
    let (_, inbox) = s.get(RITA, "/v1/requirements").await;
    assert!(inbox["items"].as_array().unwrap().is_empty(), "{inbox}");
    let (st, err) = s
        .post(
            RITA,
            "/v1/sessions/alice%2Ft/decisions",
            json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 403, "{err}");
    // Bob's inbox does not show Alice's pause; Alice's does.
    let (_, inbox) = s.get(BOB, "/v1/requirements").await;
    assert!(inbox["items"].as_array().unwrap().is_empty());
    let (_, inbox) = s.get(ALICE, "/v1/requirements").await;
    assert_eq!(inbox["items"].as_array().unwrap().len(), 1);
    assert!(s.ran().is_empty());
    // Who am I.
    let (st, me) = s.get(RITA, "/v1/me").await;
    assert_eq!(st, 200);
    assert_eq!(me["principal"]["name"], "rita");
}

#[tokio::test]
async fn concurrent_decisions_on_one_requirement_exactly_one_wins() {
    let s = start().await;
    let out = paused_run(&s, "alice/c", "delete race.txt").await;
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let client = s.client.clone();
        let url = s.url("/v1/sessions/alice%2Fc/decisions");
        let body = json!({"decisions": [{"requirement_id": rid, "action": "approve"}]});
        tasks.push(tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(ANA)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.unwrap());
    }
    assert_eq!(codes.iter().filter(|c| **c == 200).count(), 1, "{codes:?}");
    // The others were late: always 409 (already_decided), whatever the timing.
    assert!(codes.iter().all(|c| [200, 409].contains(c)), "{codes:?}");
    assert_eq!(s.ran(), ["delete:race.txt"]);
}

#[tokio::test]
async fn a_streamed_run_sends_its_events_then_the_output() {
    let s = start().await;
    let res = s
        .client
        .post(s.url("/v1/sessions/alice%2Fst/runs?stream=true"))
        .bearer_auth(ALICE)
        .json(&json!({"message": "hello there"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(
        res.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = SseReader::new(res).until("output").await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names.first(), Some(&"run_started"), "{names:?}");
    assert!(names.contains(&"text_delta"), "{names:?}");
    assert!(names.contains(&"completed"), "{names:?}");
    let out = &events.last().unwrap().data["output"];
    assert_eq!(out["message"]["content"][0]["text"], "echo: hello there");

    // A refused streamed decision answers with the HTTP error, not a stream: the run
    // refuses a decision on a session that waits for nothing (409 `not_paused`).
    let res = s
        .client
        .post(s.url("/v1/sessions/alice%2Fst/decisions?stream=true"))
        .bearer_auth(ANA)
        .json(&json!({"decisions": [{"requirement_id": "nope", "action": "approve"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 409);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_paused", "{body}");
}

#[tokio::test]
async fn session_events_resume_after_last_event_id() {
    let s = start().await;
    let (st, _) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fev/runs",
            json!({"message": "hi"}),
        )
        .await;
    assert_eq!(st, 200);
    let open = |last: Option<String>| {
        let mut req = s
            .client
            .get(s.url("/v1/sessions/alice%2Fev/events"))
            .bearer_auth(ALICE);
        if let Some(l) = last {
            req = req.header("Last-Event-ID", l);
        }
        req.send()
    };
    let mut first = SseReader::new(open(None).await.unwrap());
    let state = first.next().await.unwrap();
    assert_eq!(state.event, "state");
    assert_eq!(state.data["status"], "idle");
    // A run while we listen.
    let (st, _) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fev/runs",
            json!({"message": "again"}),
        )
        .await;
    assert_eq!(st, 200);
    let seen: Vec<SseEvent> = first
        .until("output")
        .await
        .into_iter()
        .filter(|e| e.id.is_some())
        .collect();
    assert!(seen.len() >= 3, "{seen:?}");
    // The committed steps arrive as `message` events: the user's, then the answer.
    let indexes = |evs: &[SseEvent]| -> Vec<u64> {
        evs.iter()
            .filter(|e| e.event == "message")
            .map(|e| e.data["index"].as_u64().unwrap())
            .collect()
    };
    let run_events = |evs: &[SseEvent]| -> Vec<(String, Value)> {
        evs.iter()
            .filter(|e| !matches!(e.event.as_str(), "message" | "state" | "reset"))
            .map(|e| (e.event.clone(), e.data.clone()))
            .collect()
    };
    let mut seen = seen;
    // Read on until the stored answer has arrived too.
    while indexes(&seen).len() < 2 {
        seen.push(first.next().await.unwrap());
    }
    assert_eq!(indexes(&seen), [2, 3], "{seen:?}");
    let msgs: Vec<&SseEvent> = seen.iter().filter(|e| e.event == "message").collect();
    assert_eq!(msgs[0].data["message"]["role"], "user");
    assert_eq!(msgs[1].data["message"]["role"], "assistant");
    drop(first);
    // Reconnect after the first event: the rest is replayed (run events in order, and
    // the messages it had not had), then the current state.
    let mut again = SseReader::new(open(seen[0].id.clone()).await.unwrap());
    let replay = again.until("state").await;
    assert_eq!(run_events(&replay), run_events(&seen[1..]));
    let before: Vec<u64> = indexes(&seen[1..]);
    let mut got = indexes(&replay);
    got.retain(|i| before.contains(i));
    assert_eq!(got, before);
    assert_eq!(replay.last().unwrap().data["status"], "idle");
    // An id from another instance with a message count: the messages after it, then
    // the state (committed steps are never lost, whichever instance answers).
    let mut other = SseReader::new(open(Some("someone-else-7.3".into())).await.unwrap());
    let evs = other.until("state").await;
    assert_eq!(indexes(&evs), [3], "{evs:?}");
    // An id without a count (or unreadable): the current state first.
    let mut other = SseReader::new(open(Some("someone-else-7".into())).await.unwrap());
    assert_eq!(other.next().await.unwrap().event, "state");
}

#[tokio::test]
async fn an_interrupt_stops_a_slow_tool_and_the_outcome_is_honest() {
    let s = start().await;
    let res = s
        .client
        .post(s.url("/v1/sessions/alice%2Fslow/runs?stream=true"))
        .bearer_auth(ALICE)
        .json(&json!({"message": "slow rust"}))
        .send()
        .await
        .unwrap();
    let mut events = SseReader::new(res);
    events.until("tool_execution_started").await;
    let (_, view) = s.get(ALICE, "/v1/sessions/alice%2Fslow").await;
    assert_eq!(view["status"], "running");
    let (st, ans) = s
        .post(ALICE, "/v1/sessions/alice%2Fslow/interrupt", json!({}))
        .await;
    assert_eq!(st, 202, "{ans}");
    assert_eq!(ans["delivered"], "local");
    let rest = events.until("output").await;
    let out = &rest.last().unwrap().data["output"];
    assert_eq!(out["status"], "cancelled", "{out}");
    let (_, view) = s.get(ALICE, "/v1/sessions/alice%2Fslow").await;
    assert_eq!(view["status"], "idle");
    let text = view["messages"].to_string();
    assert!(
        text.contains("interrupted") || text.contains("cancelled"),
        "{text}"
    );
    assert!(!s.ran().iter().any(|r| r.starts_with("search-done")));
    // Nothing left to interrupt.
    let (st, _) = s
        .post(ALICE, "/v1/sessions/alice%2Fslow/interrupt", json!({}))
        .await;
    assert_eq!(st, 409);
}

#[tokio::test]
async fn the_inbox_is_newest_first_and_paginated() {
    let s = start().await;
    for i in 0..5 {
        paused_run(&s, &format!("alice/p{i}"), &format!("delete f{i}.txt")).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (_, page1) = s.get(ANA, "/v1/requirements?limit=2").await;
    let items1 = page1["items"].as_array().unwrap();
    assert_eq!(items1.len(), 2);
    assert_eq!(items1[0]["session_id"], "alice/p4");
    assert_eq!(items1[1]["session_id"], "alice/p3");
    let cursor = page1["next_cursor"].as_str().unwrap();
    let (_, page2) = s
        .get(ANA, &format!("/v1/requirements?limit=2&cursor={cursor}"))
        .await;
    assert_eq!(page2["items"][0]["session_id"], "alice/p2");
    let (_, page3) = s
        .get(
            ANA,
            &format!(
                "/v1/requirements?limit=2&cursor={}",
                page2["next_cursor"].as_str().unwrap()
            ),
        )
        .await;
    assert_eq!(page3["items"].as_array().unwrap().len(), 1);
    assert!(page3.get("next_cursor").is_none());
    let (st, _) = s.get(ANA, "/v1/requirements?cursor=zz").await;
    assert_eq!(st, 400);
    let (st, _) = s.get(ANA, "/v1/requirements?status=done").await;
    assert_eq!(st, 400);
}

#[tokio::test]
async fn health_readiness_and_openapi() {
    let s = start().await;
    let (st, h) = s.get("", "/healthz").await;
    assert_eq!((st, h["status"].as_str()), (200, Some("ok")));
    let (st, _) = s.get("", "/readyz").await;
    assert_eq!(st, 200);
    let (st, doc) = s.get("", "/v1/openapi.json").await;
    assert_eq!(st, 200);
    for p in [
        "/v1/sessions/{id}/runs",
        "/v1/sessions/{id}",
        "/v1/sessions/{id}/decisions",
        "/v1/sessions/{id}/interrupt",
        "/v1/sessions/{id}/events",
        "/v1/requirements",
    ] {
        assert!(doc["paths"].get(p).is_some(), "{p} missing");
    }
    assert!(
        doc["components"]["schemas"]
            .get("DecisionsRequest")
            .is_some()
    );
    let page = s.client.get(s.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    // No inline script may run: the page's scripts are files of its own.
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self';"), "{csp}");
    let html = page.text().await.unwrap();
    assert!(html.contains("<html"));
    let scripts: Vec<&str> = html
        .split("<script src=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap())
        .collect();
    assert_eq!(scripts.len(), 9, "{scripts:?}");
    for src in scripts {
        let res = s.client.get(s.url(src)).send().await.unwrap();
        assert_eq!(res.status(), 200, "{src}");
        assert_eq!(
            res.headers()["content-type"],
            "text/javascript; charset=utf-8",
            "{src}"
        );
        assert!(
            res.text().await.unwrap().contains("\"use strict\";"),
            "{src}"
        );
    }
    let res = s
        .client
        .get(s.url("/inbox/js/nope.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    let err: Value = res.json().await.unwrap();
    assert_eq!(err["error"]["code"], "not_found", "{err}");
    assert!(!html.contains("<script>"), "no inline script");
}

#[tokio::test]
async fn the_audit_trail_names_the_approver() {
    let s = start().await;
    let out = paused_run(&s, "alice/a", "delete x.txt").await;
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let (st, _) = s
        .post(
            ANA,
            "/v1/sessions/alice%2Fa/decisions",
            json!({"decisions": [{"requirement_id": rid, "action": "reject", "note": "no"}]}),
        )
        .await;
    assert_eq!(st, 200);
    let (st, list) = s.get(ALICE, "/v1/sessions/alice%2Fa/decisions").await;
    assert_eq!(st, 200, "{list}");
    let d = list["decisions"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{list}");
    assert_eq!(d[0]["requirement_id"], rid.as_str());
    assert_eq!(d[0]["actor"]["principal"], "ana");
    assert_eq!(d[0]["tool_name"], "delete_file");
    assert_eq!(d[0]["decision"], "reject");
}

#[tokio::test]
async fn an_approval_binds_to_the_fingerprint_of_the_run_answer() {
    let s = start().await;
    let out = paused_run(&s, "alice/fp", "delete fp.txt").await;
    let req = &out["requirements"][0];
    let (_, view) = s.get(ALICE, "/v1/sessions/alice%2Ffp").await;
    assert_eq!(view["requirements"][0]["fingerprint"], req["fingerprint"]);
    // A fingerprint of other arguments is refused; the one from the answer is taken.
    let decide = |fp: &str| json!({"decisions": [{"requirement_id": req["id"], "action": "approve", "shown_fingerprint": fp}]});
    let (st, err) = s
        .post(
            ANA,
            "/v1/sessions/alice%2Ffp/decisions",
            decide(&"0".repeat(64)),
        )
        .await;
    assert_eq!(st, 409, "{err}");
    assert_eq!(err["error"]["code"], "fingerprint_mismatch", "{err}");
    assert!(s.ran().is_empty());
    let (st, out) = s
        .post(
            ANA,
            "/v1/sessions/alice%2Ffp/decisions",
            decide(req["fingerprint"].as_str().unwrap()),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(s.ran(), ["delete:fp.txt"]);
}

#[tokio::test]
async fn a_late_second_approval_is_refused_and_listed_in_the_audit_trail() {
    let s = start().await;
    let out = paused_run(&s, "alice/late", "delete late.txt").await;
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let body = json!({"decisions": [{"requirement_id": rid, "action": "approve"}]});
    let (st, _) = s
        .post(ANA, "/v1/sessions/alice%2Flate/decisions", body.clone())
        .await;
    assert_eq!(st, 200);
    let (st, err) = s
        .post(ADMIN, "/v1/sessions/alice%2Flate/decisions", body)
        .await;
    assert_eq!(st, 409, "{err}");
    assert_eq!(err["error"]["code"], "already_decided", "{err}");
    assert_eq!(err["error"]["decided"]["by"], "ana", "{err}");
    assert_eq!(s.ran(), ["delete:late.txt"]);
    let (st, list) = s.get(ALICE, "/v1/sessions/alice%2Flate/decisions").await;
    assert_eq!(st, 200, "{list}");
    let d = list["decisions"].as_array().unwrap();
    assert_eq!(d.len(), 2, "{list}");
    assert_eq!(d[0]["verdict"], "applied", "{list}");
    assert_eq!(d[1]["verdict"], "refused", "{list}");
    assert_eq!(d[1]["reason"], "already_decided", "{list}");
    assert_eq!(d[1]["actor"]["principal"], "ops", "{list}");
}

/// An agent whose `wait X` calls `gated_search`, a tool that says when it has started
/// and then waits until released; everything else as [`respond`].
fn gated_agent(
    store: std::sync::Arc<dyn reins_memory::MemoryStore>,
    ran: &Ran,
    entered: std::sync::Arc<tokio::sync::Notify>,
    release: std::sync::Arc<tokio::sync::Notify>,
) -> reins_agent::Agent {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Query {
        /// What to search.
        query: String,
    }
    let mut tools = toolkit(ran);
    tools
        .add(reins_tool::Toolkit::function(
            "gated_search",
            "Search (waits until released)",
            move |a: Query, _ctx: reins_tool::ToolContext| {
                let (entered, release) = (entered.clone(), release.clone());
                async move {
                    entered.notify_one();
                    release.notified().await;
                    Ok::<_, reins_tool::ToolError>(format!("results for {}", a.query))
                }
            },
        ))
        .unwrap();
    let model = reins_model::ScriptedModel::from_fn(|req| {
        let last = req.messages.last();
        match last.map(reins_message::Msg::text).as_deref() {
            Some(t) if last.is_some_and(|m| m.role == reins_message::Role::User) => {
                match t.strip_prefix("wait ") {
                    Some(q) => reins_model::ScriptedResponse::tool_call_with_id(
                        "g1",
                        "gated_search",
                        json!({ "query": q }),
                    ),
                    None => respond(req),
                }
            }
            _ => respond(req),
        }
    });
    reins_agent::Agent::builder()
        .name("TestAgent")
        .model(model)
        .toolkit(tools)
        .store_arc(store)
        .build()
        .unwrap()
}

/// A new message while a tool of the session's run is at work is refused with 409
/// `busy` (the run it would start is not started, the message is not stored), and the
/// first run finishes normally; on the in-memory store and SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_while_a_tool_runs_is_409_busy_and_the_run_finishes() {
    let (dir, sqlite) = sqlite_store().await;
    let stores: [(&str, std::sync::Arc<dyn reins_memory::MemoryStore>); 2] = [
        (
            "memory",
            std::sync::Arc::new(reins_memory::InMemoryStore::new()),
        ),
        ("sqlite", sqlite),
    ];
    for (label, store) in stores {
        let (entered, release) = (
            std::sync::Arc::new(tokio::sync::Notify::new()),
            std::sync::Arc::new(tokio::sync::Notify::new()),
        );
        let ran: Ran = Default::default();
        let agent = gated_agent(store.clone(), &ran, entered.clone(), release.clone());
        let s = serve(agent, ran, None, |s| s).await;
        let path = "/v1/sessions/alice%2Fbusy/runs";
        let first = {
            let (client, url) = (s.client.clone(), s.url(path));
            tokio::spawn(async move {
                let res = client
                    .post(url)
                    .bearer_auth(ALICE)
                    .json(&json!({"message": "wait rust"}))
                    .send()
                    .await
                    .unwrap();
                (res.status().as_u16(), res.json::<Value>().await.unwrap())
            })
        };
        tokio::time::timeout(Duration::from_secs(10), entered.notified())
            .await
            .unwrap_or_else(|_| panic!("[{label}] the tool never started"));
        for _ in 0..3 {
            let (st, err) = s.post(ALICE, path, json!({"message": "hi"})).await;
            assert_eq!(st, 409, "[{label}] {err}");
            assert_eq!(err["error"]["code"], "busy", "[{label}] {err}");
        }
        release.notify_one();
        let (st, out) = first.await.unwrap();
        assert_eq!(st, 200, "[{label}] {out}");
        assert_eq!(out["status"], "completed", "[{label}] {out}");
        let stored = store.load_session("alice/busy").await.unwrap();
        assert_eq!(stored.messages.len(), 4, "[{label}] {:#?}", stored.messages);
        assert!(
            !stored.messages.iter().any(|m| m.text() == "hi"),
            "[{label}] a refused message was stored"
        );
        // Once the run has ended, the message is taken.
        let (st, out) = s.post(ALICE, path, json!({"message": "hi"})).await;
        assert_eq!(st, 200, "[{label}] {out}");
        assert!(
            out["message"].to_string().contains("echo: hi"),
            "[{label}] {out}"
        );
    }
    drop(dir);
}

/// A session whose stored run state this agent cannot read (written by another
/// program, or an incompatible version) answers `500 corrupt_session` itself, and is
/// left out of the inbox, the session list and the A2A task list: one such session
/// does not hide every other one.
#[tokio::test]
async fn a_session_with_unreadable_state_does_not_hide_the_others() {
    use reins_memory::{Commit, RequirementRecord};
    let s = start().await;
    let store = s.agent.store().clone();
    store.open_session("alice/broken").await.unwrap();
    store
        .commit(
            "alice/broken",
            Commit::at(0)
                .append(reins_message::Msg::user("delete x"))
                .add_requirement(RequirementRecord::new("r1", "confirmation", json!({})))
                .run_state(Some(json!({"not": "a run state"}))),
        )
        .await
        .unwrap();
    let out = paused_run(&s, "alice/fine", "delete a.txt").await;
    let rid = out["requirements"][0]["id"].as_str().unwrap();

    let (st, err) = s.get(ALICE, "/v1/sessions/alice%2Fbroken").await;
    assert_eq!(st, 500, "{err}");
    assert_eq!(err["error"]["code"], "corrupt_session", "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("alice/broken"),
        "{err}"
    );

    let (st, inbox) = s.get(ANA, "/v1/requirements").await;
    assert_eq!(st, 200, "{inbox}");
    let ids: Vec<&str> = inbox["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["requirement_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [rid], "{inbox}");

    let (st, list) = s.get(ADMIN, "/v1/sessions").await;
    assert_eq!(st, 200, "{list}");
    let listed: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["alice/fine"], "{list}");

    // Nothing was written to the broken session by reading around it.
    let stored = store.load_session("alice/broken").await.unwrap();
    assert_eq!(stored.version, 1);
}
