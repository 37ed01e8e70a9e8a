//! A session's own budget over the native API, on real HTTP on loopback: set with the
//! run that starts it, checked (422 `invalid_budget`, nothing stored; 403 above the
//! agent's default for a non-admin), stored with the session across a restart; the
//! next run pauses before its model call, a person extends it with a limit of their
//! own through the inbox's API (a bad one refused, nothing changed), and a second,
//! racing extension gets 409 `already_decided`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use support::*;

async fn server(dir: &Path, default: Option<reins_agent::budget::Budget>) -> TestServer {
    let store = reins_memory::SqliteStore::open(dir.join("s.db"))
        .await
        .unwrap();
    let ran: Ran = Arc::default();
    let agent = agent_with(Arc::new(store), &ran, |b| match default {
        Some(limit) => b.budget(limit),
        None => b,
    });
    serve(agent, ran, None, |s| s).await
}

const SESSION: &str = "alice%2Fbudget-1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_budget_set_over_http_pauses_and_a_person_extends_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), None).await;
    let runs = format!("/v1/sessions/{SESSION}/runs");

    // Budgets that cannot be accepted: 422 invalid_budget, and no session is made.
    for bad in [
        json!({"tokens": -5}),
        json!({"tokens": 1.5}),
        json!({"tokens": "many"}),
        json!({"token": 5}),
        json!({}),
        json!(7),
        // The fields in order, as an array: not a budget (the schema says object).
        json!([null, null, 1]),
        json!([5]),
        // No price for the model: a cost limit could never be counted.
        json!({"cost": 1.0}),
    ] {
        let (st, out) = s
            .post(ALICE, &runs, json!({"message": "hello", "budget": bad}))
            .await;
        assert_eq!(st, 422, "{bad}: {out}");
        assert_eq!(out["error"]["code"], "invalid_budget", "{bad}: {out}");
    }
    let (st, _) = s.get(ALICE, &format!("/v1/sessions/{SESSION}")).await;
    assert_eq!(st, 404, "a refused budget stored nothing");

    // Five tokens: the first answer (about six) is made, then the limit is reached.
    let (st, out) = s
        .post(
            ALICE,
            &runs,
            json!({"message": "hello there friend", "budget": {"tokens": 5}}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["status"], "completed", "{out}");

    // A restart: the limit was stored with the session.
    drop(s);
    let s = server(dir.path(), None).await;
    let (st, out) = s.post(ALICE, &runs, json!({"message": "again"})).await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["status"], "paused", "{out}");
    let req = &out["requirements"][0];
    assert_eq!(req["kind"], "budget", "{out}");
    assert_eq!(req["budget"]["before"], "model_call", "{out}");
    assert_eq!(req["budget"]["limit"]["tokens"], 5, "{out}");
    let (_, session) = s.get(ALICE, &format!("/v1/sessions/{SESSION}")).await;
    assert!(
        !session.to_string().contains("echo: again"),
        "the model was called over the limit: {session}"
    );

    // The inbox shows it with the spend and the limit.
    let (st, inbox) = s.get(ANA, "/v1/requirements").await;
    assert_eq!(st, 200, "{inbox}");
    let item = inbox["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["session_id"] == "alice/budget-1")
        .unwrap()
        .clone();
    assert_eq!(item["kind"], "budget", "{item}");
    assert_eq!(item["arguments"]["limit"]["tokens"], 5, "{item}");
    assert!(item["arguments"]["spent"]["tokens"].as_u64().unwrap() >= 5);
    let decide = |limit: Value| {
        json!({
            "view_token": item["view_token"],
            "decisions": [{
                "requirement_id": item["requirement_id"],
                "action": "approve",
                "edited_args": limit,
                "shown_fingerprint": item["fingerprint"],
            }]
        })
    };
    let decisions = format!("/v1/sessions/{SESSION}/decisions");

    // A limit at or below the spend is refused, and nothing changes.
    let (st, out) = s.post(ANA, &decisions, decide(json!({"tokens": 3}))).await;
    assert_eq!(st, 422, "{out}");
    assert_eq!(out["error"]["code"], "invalid_budget", "{out}");
    let (_, now) = s.get(ALICE, &format!("/v1/sessions/{SESSION}")).await;
    assert_eq!(now["status"], "paused", "{now}");
    assert_eq!(
        now["requirements"][0]["id"], item["requirement_id"],
        "{now}"
    );
    assert_eq!(
        now["requirements"][0]["budget"]["limit"]["tokens"], 5,
        "{now}"
    );

    // Two extensions at once, with limits of their own: one is applied, the other
    // gets 409 already_decided.
    let (a, b) = tokio::join!(
        s.post(ANA, &decisions, decide(json!({"tokens": 1000}))),
        s.post(CAROL, &decisions, decide(json!({"tokens": 2000}))),
    );
    let mut answers = [a, b];
    answers.sort_by_key(|(st, _)| *st);
    assert_eq!(answers[0].0, 200, "{answers:?}");
    assert_eq!(answers[1].0, 409, "{answers:?}");
    assert_eq!(
        answers[1].1["error"]["code"], "already_decided",
        "{answers:?}"
    );
    let won = &answers[0].1;
    assert_eq!(won["status"], "completed", "{won}");
    let (_, session) = s.get(ALICE, &format!("/v1/sessions/{SESSION}")).await;
    assert!(session.to_string().contains("echo: again"), "{session}");

    // The audit trail records the limit that was applied.
    let (_, trail) = s
        .get(ALICE, &format!("/v1/sessions/{SESSION}/decisions"))
        .await;
    let applied: Vec<&Value> = trail["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["requirement_id"] == item["requirement_id"] && d["verdict"] == "applied")
        .collect();
    assert_eq!(applied.len(), 1, "{trail}");
    let tokens = applied[0]["executed_input"]["tokens"].as_u64().unwrap();
    assert!(tokens == 1000 || tokens == 2000, "{trail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_sets_a_budget_above_the_agents_default() {
    let dir = tempfile::tempdir().unwrap();
    let default = reins_agent::budget::Budget::new().tokens(100).tool_calls(3);
    let s = server(dir.path(), Some(default)).await;
    let runs = format!("/v1/sessions/{SESSION}/runs");
    let (st, out) = s
        .post(
            ALICE,
            &runs,
            json!({"message": "hi", "budget": {"tokens": 500}}),
        )
        .await;
    assert_eq!(st, 403, "{out}");
    assert!(
        out["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tokens: 500 (the agent's default is 100)"),
        "{out}"
    );
    let (st, _) = s.get(ALICE, &format!("/v1/sessions/{SESSION}")).await;
    assert_eq!(st, 404, "nothing stored");
    // Lower is fine; limits left out keep the agent's default.
    let (st, out) = s
        .post(
            ALICE,
            &runs,
            json!({"message": "hi", "budget": {"tokens": 50}}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    // An admin may go above it.
    let (st, out) = s
        .post(
            ADMIN,
            "/v1/sessions/ops%2Fbig/runs",
            json!({"message": "hi", "budget": {"tokens": 100000}}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
}

/// Extending a reached budget above the agent's default needs the admin role, as
/// setting one above it does: an approver may extend up to the default (403
/// `not_eligible` above it, naming each limit, and nothing changes); an admin may extend
/// to any limit. The same check for every door: it is made where every door's input
/// goes in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_extends_a_budget_above_the_agents_default() {
    let dir = tempfile::tempdir().unwrap();
    let default = reins_agent::budget::Budget::new().tool_calls(2);
    let s = server(dir.path(), Some(default)).await;
    let session = "alice%2Fbudget-ext";
    let runs = format!("/v1/sessions/{session}/runs");
    let decisions = format!("/v1/sessions/{session}/decisions");
    let decide = |token: &'static str, decision: Value| {
        let decisions = decisions.clone();
        let s = &s;
        async move {
            s.post(token, &decisions, json!({"decisions": [decision]}))
                .await
        }
    };
    // A delete approved by ana, the call held back by the budget: its requirement.
    let held = |message: &'static str, budget: Option<Value>| {
        let runs = runs.clone();
        let s = &s;
        async move {
            let mut body = json!({"message": message});
            if let Some(b) = budget {
                body["budget"] = b;
            }
            let (st, out) = s.post(ALICE, &runs, body).await;
            assert_eq!((st, out["status"].as_str()), (200, Some("paused")), "{out}");
            let call = out["requirements"][0]["id"].as_str().unwrap().to_owned();
            let (st, out) = s
                .post(
                    ANA,
                    &format!("/v1/sessions/{session}/decisions"),
                    json!({"decisions": [{"requirement_id": call, "action": "approve"}]}),
                )
                .await;
            assert_eq!(st, 200, "{out}");
            out
        }
    };

    // Alice's own limit, one call, below the default (two): a second call is held.
    let out = held("delete a.txt", Some(json!({"tool_calls": 1}))).await;
    assert_eq!(out["status"], "completed", "{out}");
    let out = held("delete b.txt", None).await;
    assert_eq!(out["status"], "paused", "{out}");
    assert_eq!(out["requirements"][0]["kind"], "budget", "{out}");
    let budget = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let (_, before) = s.get(ADMIN, &format!("/v1/sessions/{session}")).await;

    // Ana, an approver, above the default: refused, nothing changed.
    let (st, err) = decide(
        ANA,
        json!({"requirement_id": budget, "action": "approve", "edited_args": {"tool_calls": 5}}),
    )
    .await;
    assert_eq!(st, 403, "{err}");
    assert_eq!(err["error"]["code"], "not_eligible", "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("only an admin may")
            && message.contains("tool_calls: 5 (the agent's default is 2)"),
        "{message}"
    );
    let (_, after) = s.get(ADMIN, &format!("/v1/sessions/{session}")).await;
    assert_eq!(before, after, "a refused extension changed the session");
    // Up to the default: hers to give.
    let (st, out) = decide(
        ANA,
        json!({"requirement_id": budget, "action": "approve", "edited_args": {"tool_calls": 2}}),
    )
    .await;
    assert_eq!(
        (st, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );

    // At the default now: the suggested limit (double the spend) is above it, so only
    // an admin may extend again.
    let out = held("delete c.txt", None).await;
    assert_eq!(out["requirements"][0]["kind"], "budget", "{out}");
    let budget = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let (st, err) = decide(ANA, json!({"requirement_id": budget, "action": "approve"})).await;
    assert_eq!(st, 403, "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tool_calls: 4 (the agent's default is 2)"),
        "{err}"
    );
    let (st, out) = decide(
        ADMIN,
        json!({"requirement_id": budget, "action": "approve"}),
    )
    .await;
    assert_eq!(
        (st, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );
    assert_eq!(s.ran(), ["delete:a.txt", "delete:b.txt", "delete:c.txt"]);

    // The audit trail: the applied extensions, by ana (to the default) and ops.
    let (_, trail) = s
        .get(ADMIN, &format!("/v1/sessions/{session}/decisions"))
        .await;
    let extended: Vec<(String, u64)> = trail["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"] == "budget" && d["verdict"] == "applied")
        .map(|d| {
            (
                d["actor"]["principal"].as_str().unwrap().to_owned(),
                d["executed_input"]["tool_calls"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        extended,
        [("ana".to_owned(), 2), ("ops".to_owned(), 4)],
        "{trail}"
    );
}
