//! Slack buttons: the message reins posts parses with slack_sdk's block models;
//! presses signed by slack_sdk's SignatureVerifier decide (audited `via: slack`) and
//! update the message; a bad signature, an old timestamp and an unmapped user are
//! refused and decide nothing; Slack and the inbox racing on one call make one winner,
//! and the loser is told who decided.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_buttons_signed_by_the_sdk_decide_through_the_consent_checks() {
    let Some(python) = python_or_skip("slack_buttons_signed_by_the_sdk") else {
        return;
    };
    let stub = SlackStub::start().await;
    let s = approvals_server(None, Some(&stub.base), |store, ran| {
        super::agent_with_ttl(store, ran, None)
    })
    .await;

    // A waiting call is posted, with the bot token, and parses with the SDK's models.
    pause(&s, "alice/slack-1", "delete x.txt").await;
    let posted = stub.wait_for("chat.postMessage", 1).await.remove(0);
    assert_eq!(posted["auth"], "Bearer xoxb-test-token");
    assert_eq!(posted["body"]["channel"], "C0APPROVALS");
    let parsed = slack_check(&python, &["blocks"], json!([posted]).to_string().as_bytes());
    assert_eq!(
        parsed[0]["types"],
        json!(["header", "section", "section", "actions"]),
        "{parsed}"
    );
    let buttons = &parsed[0]["buttons"];
    assert_eq!(buttons[0]["action_id"], "approve");
    assert_eq!(buttons[0]["style"], "primary");
    assert_eq!(buttons[1]["action_id"], "reject");
    assert_eq!(buttons[1]["style"], "danger");
    assert_eq!(buttons[2]["action_id"], "edit");
    assert_eq!(
        buttons[2]["url"],
        format!("{}/?session=alice%2Fslack-1", s.base)
    );
    let approve = press("U_ANA", "approve", &posted);

    // Refused before anything is decided: another secret, an old timestamp (signed
    // well; the SDK itself would refuse it too), an unmapped user, a mapped user who
    // may not decide.
    let (st, err) = send(&s, &python, "not the signing secret", now(), &approve).await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (401, Some("invalid_signature"))
    );
    let old = now() - 6 * 60;
    let (sig, sdk_accepts) = sdk_sign(&python, SIGNING_SECRET, old, &approve);
    assert!(!sdk_accepts);
    let res = s
        .client
        .post(s.url("/v1/slack/interactions"))
        .header("x-slack-request-timestamp", old.to_string())
        .header("x-slack-signature", sig)
        .body(approve.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let unsigned = s
        .client
        .post(s.url("/v1/slack/interactions"))
        .body(approve.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
    let (st, err) = send(
        &s,
        &python,
        SIGNING_SECRET,
        now(),
        &press("U_NOBODY", "approve", &posted),
    )
    .await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (403, Some("unknown_user")),
        "{err}"
    );
    let (st, err) = send(
        &s,
        &python,
        SIGNING_SECRET,
        now(),
        &press("U_BOB", "approve", &posted),
    )
    .await;
    assert_eq!(st, 403, "bob is a user, not an approver: {err}");
    assert!(s.ran().is_empty());
    assert_eq!(super::status_of(&s, "alice/slack-1").await, "paused");
    assert!(stub.calls("chat.update").is_empty());
    let (_, trail) = s.get(ADMIN, "/v1/sessions/alice%2Fslack-1/decisions").await;
    assert_eq!(trail["decisions"], json!([]), "nothing decided");

    // Ana approves in Slack: the call runs once; the message shows who.
    let (st, _) = send(&s, &python, SIGNING_SECRET, now(), &approve).await;
    assert_eq!(st, 200);
    eventually("the tool ran", || s.ran() == ["delete:x.txt"]).await;
    let update = stub.wait_for("chat.update", 1).await.remove(0);
    assert_eq!(update["body"]["channel"], "C0APPROVALS");
    assert_eq!(update["body"]["ts"], "1700000000.000100");
    let text = update["body"]["text"].as_str().unwrap();
    assert!(text.contains("Approved by *ana*"), "{text}");
    let parsed = slack_check(&python, &["blocks"], json!([update]).to_string().as_bytes());
    assert_eq!(
        parsed[0]["types"],
        json!(["header", "section", "section", "context"]),
        "the buttons are gone: {parsed}"
    );
    let (_, trail) = s.get(ADMIN, "/v1/sessions/alice%2Fslack-1/decisions").await;
    let rec = &trail["decisions"][0];
    assert_eq!(rec["actor"]["principal"], "ana", "{trail}");
    assert_eq!(rec["actor"]["metadata"]["via"], "slack");
    assert_eq!(rec["actor"]["metadata"]["slack_user"], "U_ANA");
    // Pressed again: told it was decided; nothing runs again.
    let (st, _) = send(&s, &python, SIGNING_SECRET, now(), &approve).await;
    assert_eq!(st, 200);
    let updates = stub.wait_for("chat.update", 2).await;
    let text = updates[1]["body"]["text"].as_str().unwrap();
    assert!(
        text.contains("Already decided") && text.contains("by *ana*"),
        "{text}"
    );
    assert_eq!(s.ran(), ["delete:x.txt"]);

    // Slack and the inbox race on one call: one winner; the other is told who.
    pause(&s, "alice/slack-2", "delete y.txt").await;
    let posted = stub.wait_for("chat.postMessage", 2).await.remove(1);
    let body = press("U_OPS", "approve", &posted);
    let ts = now();
    let (sig, _) = sdk_sign(&python, SIGNING_SECRET, ts, &body);
    let (_, pending) = s.get(ANA, "/v1/sessions/alice%2Fslack-2").await;
    let rid = pending["requirements"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let slack_press = s
        .client
        .post(s.url("/v1/slack/interactions"))
        .header("x-slack-request-timestamp", ts.to_string())
        .header("x-slack-signature", sig)
        .body(body)
        .send();
    let inbox = s.post(
        ANA,
        "/v1/sessions/alice%2Fslack-2/decisions",
        json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}),
    );
    let (slack_res, (inbox_status, inbox_body)) = tokio::join!(slack_press, inbox);
    assert_eq!(slack_res.unwrap().status(), 200);
    eventually("the raced call ran", || s.ran().len() == 2).await;
    let update = stub.wait_for("chat.update", 3).await.remove(2);
    let text = update["body"]["text"].as_str().unwrap().to_owned();
    if inbox_status == 200 {
        // The inbox won: Slack's message says so, naming ana.
        assert!(
            text.contains("Already decided") && text.contains("by *ana*"),
            "{text}"
        );
    } else {
        // Slack won: the inbox got 409 naming ops.
        assert_eq!(inbox_status, 409, "{inbox_body}");
        assert_eq!(
            inbox_body["error"]["code"], "already_decided",
            "{inbox_body}"
        );
        assert_eq!(inbox_body["error"]["decided"]["by"], "ops", "{inbox_body}");
        assert!(text.contains("Approved by *ops*"), "{text}");
    }
    assert_eq!(s.ran(), ["delete:x.txt", "delete:y.txt"], "one winner");

    // A call a new message closed: no one decided on it; the message says nothing
    // waits for it any more.
    pause(&s, "alice/slack-3", "delete z.txt").await;
    let posted = stub.wait_for("chat.postMessage", 3).await.remove(2);
    let (st, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fslack-3/runs",
            json!({"message": "never mind"}),
        )
        .await;
    assert_eq!(
        (st, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );
    let (st, _) = send(
        &s,
        &python,
        SIGNING_SECRET,
        now(),
        &press("U_ANA", "approve", &posted),
    )
    .await;
    assert_eq!(st, 200);
    let update = stub.wait_for("chat.update", 4).await.remove(3);
    let text = update["body"]["text"].as_str().unwrap();
    assert!(
        text.contains("Nothing waits for this any more")
            && text.contains("closed by a new message in the session"),
        "{text}"
    );
    assert_eq!(s.ran(), ["delete:x.txt", "delete:y.txt"]);
}

/// The walk of one Slack approval, held to its store traffic: between the press and
/// the commit that applies it, the session is loaded at most once (the run's own
/// load); besides it only version checks (that the session is stored, and the lock
/// taken with its version). The door and the decision path read nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_press_reads_the_session_at_most_once_before_its_commit() {
    let Some(python) = python_or_skip("a_slack_press_reads_the_session_at_most_once") else {
        return;
    };
    let stub = SlackStub::start().await;
    let recorded = std::sync::Arc::new(std::sync::OnceLock::new());
    let keep = std::sync::Arc::clone(&recorded);
    let s = approvals_server(None, Some(&stub.base), move |store, ran| {
        let store = reins_memory::Recorded::wrap(store);
        let _ = keep.set(store.clone());
        super::agent_with_ttl(std::sync::Arc::new(store), ran, None)
    })
    .await;
    let store = recorded.get().unwrap();
    pause(&s, "alice/walk-1", "delete w.txt").await;
    let posted = stub.wait_for("chat.postMessage", 1).await.remove(0);
    let approve = press("U_ANA", "approve", &posted);
    store.take();
    let (st, _) = send(&s, &python, SIGNING_SECRET, now(), &approve).await;
    assert_eq!(st, 200);
    eventually("the tool ran", || s.ran() == ["delete:w.txt"]).await;
    let calls = store.take();
    let about: Vec<&str> = calls
        .iter()
        .filter(|c| c.session.as_deref() == Some("alice/walk-1"))
        .map(|c| c.method)
        .collect();
    let first_commit = about
        .iter()
        .position(|m| *m == "commit")
        .unwrap_or_else(|| panic!("no commit after the press: {about:?}"));
    let reads = about[..first_commit]
        .iter()
        .filter(|m| {
            matches!(
                **m,
                "load_session" | "open_session" | "decisions" | "ledger_entry" | "evidence"
            )
        })
        .count();
    assert!(
        reads <= 1,
        "the session loaded {reads} times before the commit: {about:?}"
    );
    assert_eq!(s.ran(), ["delete:w.txt"], "ran once");
}

/// The Slack channel without a server: a program runs its agent, its own dispatcher
/// with the `slack` channel, and its own axum app with the interactivity routes mounted
/// beside a route of its own. A waiting call is posted; a press signed by slack_sdk
/// decides through the one decision path (audited `via: slack`), the tool runs once,
/// the message is updated; an unsigned press decides nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_buttons_decide_in_a_program_without_a_server() {
    use futures::StreamExt;
    use reins_agent::port::Sessions;

    let Some(python) = python_or_skip("slack_buttons_decide_in_a_program_without_a_server") else {
        return;
    };
    let stub = SlackStub::start().await;
    let store: std::sync::Arc<dyn reins_memory::MemoryStore> =
        std::sync::Arc::new(reins_memory::InMemoryStore::new());
    let ran: Ran = std::sync::Arc::default();
    let agent = super::agent_with_ttl(store.clone(), &ran, None);
    let sessions: std::sync::Arc<dyn Sessions> = std::sync::Arc::new(agent.clone());
    let slack = reins_server::SlackApprovals::builder()
        .bot_token("xoxb-test-token")
        .signing_secret(SIGNING_SECRET)
        .channel("C0APPROVALS")
        .api_base(&stub.base)
        .user("U_ANA", "ana")
        .build()
        .unwrap();
    let _dispatching = reins_server::notify::Dispatcher::new(store)
        .channel(slack.notify_channel(sessions.clone(), auth()))
        .options(
            reins_server::notify::NotifyOptions::default()
                .poll_interval(Duration::from_millis(100)),
        )
        .spawn()
        .unwrap();
    let app = axum::Router::new()
        .route(
            "/mine",
            axum::routing::get(|| async { "the program's own route" }),
        )
        .merge(slack.router(sessions.clone(), auth()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let served = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();

    let session = agent.session("alice/own-1").await.unwrap();
    let out = session
        .send(reins_message::Msg::user("delete x.txt"))
        .await
        .unwrap();
    assert_eq!(out.status, reins_agent::RunStatus::Paused);
    let posted = stub.wait_for("chat.postMessage", 1).await.remove(0);
    assert_eq!(posted["body"]["channel"], "C0APPROVALS");
    assert_eq!(
        client
            .get(format!("{base}/mine"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    let approve = press("U_ANA", "approve", &posted);
    let unsigned = client
        .post(format!("{base}/v1/slack/interactions"))
        .body(approve.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
    assert!(ran.lock().unwrap().is_empty());

    let mut watch = session.watch().await.unwrap();
    let ts = now();
    let (sig, sdk_accepts) = sdk_sign(&python, SIGNING_SECRET, ts, &approve);
    assert!(sdk_accepts);
    let res = client
        .post(format!("{base}/v1/slack/interactions"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-slack-request-timestamp", ts.to_string())
        .header("x-slack-signature", sig)
        .body(approve)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    loop {
        let view = watch
            .next()
            .await
            .expect("the store's feed closed")
            .unwrap();
        if view.outcome() == Some(reins_agent::RunStatus::Completed) {
            break;
        }
    }
    assert_eq!(*ran.lock().unwrap(), ["delete:x.txt"]);
    let update = stub.wait_for("chat.update", 1).await.remove(0);
    let text = update["body"]["text"].as_str().unwrap();
    assert!(text.contains("Approved by *ana*"), "{text}");
    let trail = sessions.audit("alice/own-1").await.unwrap();
    let actor = trail[0].actor.as_ref().unwrap();
    assert_eq!(actor.principal, "ana");
    assert_eq!(actor.metadata.as_ref().unwrap()["via"], "slack");
    served.abort();
}
