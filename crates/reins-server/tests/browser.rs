//! The approval inbox in a real headless Chromium (Debian's `chromium` and
//! `chromium-driver`, driven over WebDriver with fantoccini): a pause made through the
//! API appears; arguments are edited (the diff shows) and approved, and the result
//! streams into the session view; a call is rejected with a note; a slow run is
//! stopped with the Stop button. `browser/sign_in.rs` signs in (the form, links with
//! good and bad tokens); `browser/input_form.rs` answers a typed user-input form and
//! shows reasons with code spans. Screenshots of the key screens are taken on every
//! run; they replace the ones in `docs/screenshots/` only when
//! `REINS_WRITE_SCREENSHOTS=1` asks (otherwise they go to a temporary directory, so
//! a test run leaves the checkout as it found it).
//!
//! Without Chromium the test fails under `CI=true` and reports itself SKIPPED
//! elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use support::*;

#[path = "browser/harness.rs"]
mod harness;
use harness::*;

#[path = "browser/budget.rs"]
mod budget;
#[path = "browser/input_form.rs"]
mod input_form;
#[path = "browser/policy_shadow.rs"]
mod policy_shadow;
#[path = "browser/sending.rs"]
mod sending;
#[path = "browser/sign_in.rs"]
mod sign_in;
#[path = "browser/webhooks.rs"]
mod webhooks;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_in_a_real_browser() {
    let Some((chromium, chromedriver)) = chromium_or_skip("the_inbox_in_a_real_browser") else {
        return;
    };
    let shots = Shots::new();
    let s = start().await;
    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;

    // A pause made through the API appears in the inbox.
    let r1 = pause(&s, "alice/web-1", "delete report.txt").await;
    c.goto(&format!("{}/#token={ANA}", s.base)).await.unwrap();
    c.wait()
        .for_element(Locator::Css(&card(&r1)))
        .await
        .unwrap();
    wait_text(&c, &format!("{} .tool", card(&r1)), |t| t == "delete_file").await;
    wait_text(&c, "#who", |t| t.contains("ana")).await;
    shots.take(&c, "inbox.png").await;

    // Invalid JSON is refused in the page; a valid edit shows its diff.
    let args = c
        .find(Locator::Css(&format!("{} textarea.args", card(&r1))))
        .await
        .unwrap();
    args.clear().await.unwrap();
    args.send_keys("{\"path\": ").await.unwrap();
    wait_text(&c, &format!("{} .problem", card(&r1)), |t| {
        t.contains("not valid JSON")
    })
    .await;
    args.clear().await.unwrap();
    args.send_keys("{\"path\": 7}").await.unwrap();
    wait_text(&c, &format!("{} .problem", card(&r1)), |t| {
        t.contains("expected string")
    })
    .await;
    args.clear().await.unwrap();
    args.send_keys("{\"path\": \"report-old.txt\"}")
        .await
        .unwrap();
    wait_text(&c, &format!("{} .diff", card(&r1)), |t| {
        t.contains("+ ") && t.contains("report-old.txt") && t.contains("- ")
    })
    .await;
    shots.take(&c, "edit-diff.png").await;

    // Approve: the edited call runs once and the result streams into the session view.
    c.find(Locator::Css(&format!("{} .approve", card(&r1))))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, &format!("{} .status", card(&r1)), |t| {
        t.contains("Approved by ana")
    })
    .await;
    wait_text(&c, "#transcript", |t| t.contains("deleted report-old.txt")).await;
    wait_text(&c, "#transcript", |t| t.contains("Outcome")).await;
    assert_eq!(s.ran(), ["delete:report-old.txt"]);
    shots.take(&c, "approved.png").await;

    // Reject with a note: nothing runs; the model is told.
    let r2 = pause(&s, "alice/web-2", "delete notes.md").await;
    c.wait()
        .for_element(Locator::Css(&card(&r2)))
        .await
        .unwrap();
    c.find(Locator::Css(&format!("{} .note", card(&r2))))
        .await
        .unwrap()
        .send_keys("keep my notes")
        .await
        .unwrap();
    c.find(Locator::Css(&format!("{} .reject", card(&r2))))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, &format!("{} .status", card(&r2)), |t| {
        t.contains("Rejected by ana")
    })
    .await;
    wait_text(&c, "#transcript", |t| t.contains("keep my notes")).await;
    assert_eq!(s.ran(), ["delete:report-old.txt"]);

    // A decision refused by the server shows why: the requirement was decided
    // elsewhere while the card was open.
    let r3 = pause(&s, "alice/web-3", "delete old.log").await;
    c.wait()
        .for_element(Locator::Css(&card(&r3)))
        .await
        .unwrap();
    // Stop live refreshes from removing the card, then decide behind its back.
    c.execute(
        "state.inboxAbort && state.inboxAbort.abort(); clearTimeout(inboxTimer); \
         window.loadInbox = () => {}; window.refreshInboxSoon = () => {};",
        vec![],
    )
    .await
    .unwrap();
    c.wait()
        .for_element(Locator::Css(&format!("{} .approve", card(&r3))))
        .await
        .unwrap();
    let (st, _) = s
        .post(
            ADMIN,
            "/v1/sessions/alice%2Fweb-3/decisions",
            json!({"decisions": [{"requirement_id": r3, "action": "reject", "note": "handled by ops"}]}),
        )
        .await;
    assert_eq!(st, 200);
    c.find(Locator::Css(&format!("{} .approve", card(&r3))))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, &format!("{} .status", card(&r3)), |t| {
        t.contains("already decided") || t.contains("changed since you opened it")
    })
    .await;
    shots.take(&c, "refused.png").await;
    assert_eq!(s.ran(), ["delete:report-old.txt"]);

    // Stop a slow run from the session view.
    let client = s.client.clone();
    let url = s.url("/v1/sessions/alice%2Fslow/runs");
    let run = tokio::spawn(async move {
        client
            .post(url)
            .bearer_auth(ALICE)
            .json(&json!({"message": "slow crabs"}))
            .send()
            .await
            .unwrap()
            .json::<serde_json::Value>()
            .await
            .unwrap()
    });
    c.goto(&format!("{}/?session=alice%2Fslow", s.base))
        .await
        .unwrap();
    wait_enabled(&c, "#stop").await;
    wait_text(&c, "#sv-status", |t| t == "running").await;
    shots.take(&c, "running.png").await;
    c.find(Locator::Css("#stop"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let out = run.await.unwrap();
    assert_eq!(out["status"], "cancelled", "{out}");
    wait_text(&c, "#sv-status", |t| t == "idle").await;
    wait_text(&c, "#transcript", |t| {
        t.contains("interrupted") || t.contains("cancelled")
    })
    .await;
    wait_text(&c, "#sv-msg", |t| t.contains("Stop requested")).await;
    shots.take(&c, "stopped.png").await;
    assert!(!s.ran().iter().any(|r| r.starts_with("search-done")));

    // A phone-sized viewport: one column, still usable.
    let r4 = pause(&s, "alice/web-4", "mail bob@example.com").await;
    c.set_window_size(390, 844).await.unwrap();
    c.goto(&format!("{}/", s.base)).await.unwrap();
    c.wait()
        .for_element(Locator::Css(&card(&r4)))
        .await
        .unwrap();
    let width: f64 = c
        .execute("return document.documentElement.scrollWidth", vec![])
        .await
        .unwrap()
        .as_f64()
        .unwrap();
    let inner: f64 = c
        .execute("return window.innerWidth", vec![])
        .await
        .unwrap()
        .as_f64()
        .unwrap();
    assert!(
        width <= inner + 1.0,
        "horizontal scrolling on a phone: {width} > {inner}"
    );
    shots.take(&c, "phone.png").await;

    c.close().await.unwrap();
}

/// The session view's timeline: a "Fork here" before each turn makes a fork and opens
/// it; asking the same thing there serves the recorded result (marked "replayed"),
/// and nothing runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_from_the_timeline_in_a_real_browser() {
    let Some((chromium, chromedriver)) =
        chromium_or_skip("fork_from_the_timeline_in_a_real_browser")
    else {
        return;
    };
    let shots = Shots::new();
    let s = start().await;
    let r = pause(&s, "alice/trip", "mail bob@example.com").await;
    let (st, _) = s
        .post(
            ANA,
            "/v1/sessions/alice%2Ftrip/decisions",
            json!({"decisions": [{"requirement_id": r, "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 200);
    let (st, _) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Ftrip/runs",
            json!({"message": "thanks"}),
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(s.ran(), ["mail:bob@example.com"]);

    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;
    c.goto(&format!("{}/?session=alice%2Ftrip#token={ALICE}", s.base))
        .await
        .unwrap();
    wait_text(&c, "#transcript", |t| t.contains("echo: thanks")).await;
    let bars = c.find_all(Locator::Css("#transcript .turn")).await.unwrap();
    assert_eq!(bars.len(), 2, "one fork point per turn");
    shots.take(&c, "timeline.png").await;

    // Fork before the first turn: the fork opens, and says where it came from.
    c.find(Locator::Css(
        "#transcript .turn[data-turn=\"0\"] .fork-here",
    ))
    .await
    .unwrap()
    .click()
    .await
    .unwrap();
    let id = wait_text(&c, "#sv-id", |t| t.starts_with("alice/trip-fork1-")).await;
    wait_text(&c, "#sv-origin", |t| t.contains("Forked from alice/trip")).await;
    // One call: said in the singular.
    wait_text(&c, "#sv-msg", |t| {
        t.contains(": 1 call it made from there on is served from its record")
    })
    .await;

    // Ask the same thing in the fork: served from the record, not sent again.
    c.find(Locator::Css("#say"))
        .await
        .unwrap()
        .send_keys("mail bob@example.com")
        .await
        .unwrap();
    c.find(Locator::Css("#send"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "#transcript", |t| t.contains("replayed")).await;
    wait_text(&c, "#sv-origin", |t| {
        t.contains("after 0 messages · 1 of 1 recorded call replayed")
    })
    .await;
    assert_eq!(s.ran(), ["mail:bob@example.com"], "nothing ran twice");
    let (_, fork) = s.get(ALICE, &format!("/v1/sessions/{}", enc(&id))).await;
    assert_eq!(fork["status"], "idle", "{fork}");
    // The audit note's `code` span shows as code.
    wait_text(&c, "#audit .note-text code", |t| t == "alice/trip").await;
    shots.take(&c, "fork.png").await;
    let err: serde_json::Value = c
        .execute("return window.__err || null", vec![])
        .await
        .unwrap();
    assert_eq!(err, serde_json::Value::Null, "no script errors");
    c.close().await.unwrap();
}

fn row(id: &str) -> String {
    format!("#sessions .srow[data-id=\"{id}\"]")
}

/// The sessions list and a session's audit trail: paused sessions are listed with
/// what they wait on; the status and tool filters narrow the list and live in the URL
/// (a shared link shows the same list); a row opens the session, whose audit trail
/// says who decided what, with the edited arguments beside those shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_and_their_audit_trail_in_a_real_browser() {
    let Some((chromium, chromedriver)) =
        chromium_or_skip("sessions_and_their_audit_trail_in_a_real_browser")
    else {
        return;
    };
    let shots = Shots::new();
    let s = start().await;
    // An audited session: an approval with edited arguments by ana, a rejection by ops.
    let r = pause(&s, "alice/audited", "delete draft.txt").await;
    let (st, out) = s
        .post(
            ANA,
            "/v1/sessions/alice%2Faudited/decisions",
            json!({"decisions": [{"requirement_id": r, "action": "approve", "edited_args": {"path": "draft-old.txt"}}]}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    let r = pause(&s, "alice/audited", "delete notes.md").await;
    let (st, out) = s
        .post(
            ADMIN,
            "/v1/sessions/alice%2Faudited/decisions",
            json!({"decisions": [{"requirement_id": r, "action": "reject", "note": "keep the notes"}]}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    let (st, _) = s
        .post(
            BOB,
            "/v1/sessions/bob%2Fchat/runs",
            json!({"message": "hello"}),
        )
        .await;
    assert_eq!(st, 200);
    pause(&s, "alice/cleanup", "delete tmp.log").await;
    pause(&s, "alice/mail", "mail bob@example.com").await;

    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;
    c.goto(&format!("{}/?view=sessions#token={ANA}", s.base))
        .await
        .unwrap();
    wait_text(&c, &format!("{} .pill", row("alice/cleanup")), |t| {
        t == "paused"
    })
    .await;
    wait_text(&c, &row("alice/mail"), |t| {
        t.contains("waits on 1 call: send_email")
    })
    .await;
    let list = wait_text(&c, "#sessions", |t| t.contains("2 messages")).await;
    assert!(
        !list.contains("(s)"),
        "counts agree with their nouns: {list}"
    );
    wait_text(&c, &format!("{} .pill", row("bob/chat")), |t| t == "idle").await;
    wait_text(&c, &format!("{} .pill", row("alice/audited")), |t| {
        t == "idle"
    })
    .await;
    shots.take(&c, "sessions.png").await;

    // Filter by status: the idle ones leave; the filter is in the URL.
    c.find(Locator::Css("#f-status"))
        .await
        .unwrap()
        .select_by_value("paused")
        .await
        .unwrap();
    wait_text(&c, "#sessions", |t| {
        t.contains("alice/cleanup") && t.contains("alice/mail") && !t.contains("bob/chat")
    })
    .await;
    assert!(
        c.current_url()
            .await
            .unwrap()
            .as_str()
            .contains("status=paused")
    );

    // And by tool.
    c.find(Locator::Css("#f-tool"))
        .await
        .unwrap()
        .send_keys("send_email")
        .await
        .unwrap();
    c.find(Locator::Css("#f-apply"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "#sessions", |t| {
        t.contains("alice/mail") && !t.contains("alice/cleanup")
    })
    .await;
    let url = c.current_url().await.unwrap();
    assert!(url.as_str().contains("tool=send_email"), "{url}");

    // A shared link shows the same list, its filters filled in.
    c.goto(&format!(
        "{}/?view=sessions&status=paused&tool=delete_file",
        s.base
    ))
    .await
    .unwrap();
    wait_text(&c, "#sessions", |t| {
        t.contains("alice/cleanup") && !t.contains("alice/mail") && !t.contains("audited")
    })
    .await;
    let tool: serde_json::Value = c
        .execute("return document.querySelector('#f-tool').value", vec![])
        .await
        .unwrap();
    assert_eq!(tool, "delete_file");

    // A principal that owns no sessions: the page says why, from the server's 400.
    c.find(Locator::Css("#f-principal"))
        .await
        .unwrap()
        .send_keys("nobody")
        .await
        .unwrap();
    c.find(Locator::Css("#f-apply"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "#sessions-msg", |t| {
        t.contains("`nobody` owns no sessions")
    })
    .await;

    // Clear the filters, then open a session from its row: its timeline and audit.
    c.find(Locator::Css("#f-clear"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .for_element(Locator::Css(&row("alice/audited")))
        .await
        .unwrap();
    c.find(Locator::Css(&row("alice/audited")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "#sv-id", |t| t == "alice/audited").await;
    wait_text(&c, "#transcript", |t| t.contains("deleted draft-old.txt")).await;
    let first = wait_text(&c, "#audit .audit-entry[data-seq=\"1\"]", |t| {
        t.contains("ana")
    })
    .await;
    assert!(
        first.contains("approve") && first.contains("delete_file"),
        "{first}"
    );
    wait_text(&c, "#audit .audit-entry[data-seq=\"1\"] .diff", |t| {
        t.contains("- ")
            && t.contains("draft.txt")
            && t.contains("+ ")
            && t.contains("draft-old.txt")
    })
    .await;
    wait_text(&c, "#audit .audit-entry[data-seq=\"1\"] .fp", |t| {
        t.contains("shown") && t.contains("executed")
    })
    .await;
    let second = wait_text(&c, "#audit .audit-entry[data-seq=\"2\"]", |t| {
        t.contains("ops")
    })
    .await;
    assert!(
        second.contains("reject") && second.contains("keep the notes"),
        "{second}"
    );
    let url = c.current_url().await.unwrap();
    assert!(url.as_str().contains("session=alice%2Faudited"), "{url}");
    c.execute(
        "document.querySelector('#audit-view').scrollIntoView({block: 'end'})",
        vec![],
    )
    .await
    .unwrap();
    shots.take(&c, "audit.png").await;

    // Back to the pending cards, with the session still open beside them.
    c.find(Locator::Css("#nav a[data-view=\"pending\"]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .for_element(Locator::Css(".req-card[data-session=\"alice/cleanup\"]"))
        .await
        .unwrap();
    assert!(
        !c.find(Locator::Css("#pane-sessions"))
            .await
            .unwrap()
            .is_displayed()
            .await
            .unwrap()
    );
    wait_text(&c, "#sv-id", |t| t == "alice/audited").await;
    let err: serde_json::Value = c
        .execute("return window.__err || null", vec![])
        .await
        .unwrap();
    assert_eq!(err, serde_json::Value::Null, "no script errors");
    c.close().await.unwrap();
}

/// Standing grants in the inbox: "Approve & allow for 1 h" on a card approves the call
/// and makes a grant, under which the next call runs without asking (and the audit
/// trail says which grant allowed it); the Grants page lists grants and revokes one,
/// after which calls ask again. A tool that needs two approvals shows the count on its
/// card, and one approval leaves it pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_and_quorum_in_a_real_browser() {
    let Some((chromium, chromedriver)) = chromium_or_skip("grants_and_quorum_in_a_real_browser")
    else {
        return;
    };
    let shots = Shots::new();
    let s = start().await;
    let r = pause(&s, "alice/chores", "delete a.txt").await;
    // Another grant, made over the API: mail to example.com anywhere, for a day.
    let (st, mail_grant) = s
        .post(
            ADMIN,
            "/v1/grants",
            json!({"tool": "send_email", "conditions": [{"pointer": "/to", "op": "ends_with", "value": "@example.com"}],
                   "ttl_seconds": 86400, "note": "colleagues"}),
        )
        .await;
    assert_eq!(st, 201, "{mail_grant}");

    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;
    c.goto(&format!("{}/#token={ANA}", s.base)).await.unwrap();
    c.wait()
        .for_element(Locator::Css(&format!("{} .grant-1h", card(&r))))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, &format!("{} .status", card(&r)), |t| {
        t.contains("Approved by ana")
    })
    .await;
    let note = wait_text(&c, &format!("{} .granted", card(&r)), |t| {
        t.contains("without asking")
    })
    .await;
    assert!(note.contains("alice/chores"), "{note}");
    assert_eq!(s.ran(), ["delete:a.txt"]);

    // Under the grant, the next delete in that session runs without asking.
    let (st, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fchores/runs",
            json!({"message": "delete b.txt"}),
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(out["status"], "completed", "{out}");
    assert_eq!(s.ran(), ["delete:a.txt", "delete:b.txt"]);

    // The Grants page lists both, newest first.
    c.find(Locator::Css("#nav a[data-view=\"grants\"]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let del = ".grant[data-tool=\"delete_file\"]";
    wait_text(&c, &format!("{del} .pill"), |t| t == "live").await;
    let text = wait_text(&c, del, |t| t.contains("session alice/chores")).await;
    assert!(text.contains("made by ana"), "{text}");
    wait_text(&c, ".grant[data-tool=\"send_email\"]", |t| {
        t.contains("/to ends_with \"@example.com\"") && t.contains("any session")
    })
    .await;
    shots.take(&c, "grants.png").await;

    // The tool filter is in the URL.
    c.find(Locator::Css("#g-tool"))
        .await
        .unwrap()
        .send_keys("send_email")
        .await
        .unwrap();
    c.find(Locator::Css("#g-apply"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "#grants", |t| {
        t.contains("send_email") && !t.contains("delete_file")
    })
    .await;
    assert!(
        c.current_url()
            .await
            .unwrap()
            .as_str()
            .contains("gtool=send_email")
    );
    c.find(Locator::Css("#g-clear"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();

    // Revoke the delete grant: calls ask again.
    c.wait()
        .for_element(Locator::Css(&format!("{del} .revoke")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, &format!("{del} .status"), |t| {
        t.contains("Revoked by ana")
    })
    .await;
    let (_, list) = s
        .get(ANA, "/v1/grants?include_revoked=true&tool=delete_file")
        .await;
    assert_eq!(list["grants"][0]["state"], "revoked", "{list}");
    assert_eq!(list["grants"][0]["revoked_by"], "ana", "{list}");
    let (st, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fchores/runs",
            json!({"message": "delete c.txt"}),
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(out["status"], "paused", "{out}");
    assert_eq!(s.ran(), ["delete:a.txt", "delete:b.txt"]);
    // Revoked grants show when asked for.
    c.find(Locator::Css("#g-revoked"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, &format!("{del} .pill"), |t| t == "revoked").await;

    // The session's audit trail names the grant that let b.txt go.
    c.goto(&format!("{}/?view=sessions&session=alice%2Fchores", s.base))
        .await
        .unwrap();
    let gid = list["grants"][0]["id"].as_str().unwrap().to_owned();
    wait_text(&c, "#audit", |t| t.contains(&format!("grant {gid}"))).await;

    // A quorum: the card shows the count; one approval leaves it pending.
    let ran: Ran = Default::default();
    let (dir, store) = sqlite_store().await;
    let agent = reins_agent::Agent::builder()
        .model(reins_model::ScriptedModel::from_fn(respond))
        .toolkit(toolkit(&ran))
        .store_arc(store)
        .quorum("send_email", reins_agent::Quorum::of(2))
        .build()
        .unwrap();
    let q = serve(agent, ran, Some(dir), |s| s).await;
    let r = pause(&q, "alice/payout", "mail cfo@corp.test").await;
    // Another origin: the token goes in again.
    c.goto(&format!("{}/#token={ANA}", q.base)).await.unwrap();
    wait_text(&c, &format!("{} .quorum", card(&r)), |t| {
        t == "0 of 2 approvals"
    })
    .await;
    let grant_buttons = c
        .find_all(Locator::Css(&format!("{} .grant-1h", card(&r))))
        .await
        .unwrap();
    assert!(grant_buttons.is_empty(), "no grant shortcut under a quorum");
    c.find(Locator::Css(&format!("{} .approve", card(&r))))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, &format!("{} .status", card(&r)), |t| {
        t.contains("1 of 2 approvals")
    })
    .await;
    wait_text(&c, &format!("{} .quorum", card(&r)), |t| {
        t == "1 of 2 approvals (ana)"
    })
    .await;
    assert!(q.ran().is_empty(), "one approval of two runs nothing");
    shots.take(&c, "quorum.png").await;
    let (st, out) = q
        .post(
            ADMIN,
            "/v1/sessions/alice%2Fpayout/decisions",
            json!({"decisions": [{"requirement_id": r, "action": "approve"}]}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(q.ran(), ["mail:cfo@corp.test"]);
    let err: serde_json::Value = c
        .execute("return window.__err || null", vec![])
        .await
        .unwrap();
    assert_eq!(err, serde_json::Value::Null, "no script errors");
    c.close().await.unwrap();
}
