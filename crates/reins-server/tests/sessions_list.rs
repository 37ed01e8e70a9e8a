//! `GET /v1/sessions`: the sessions with their status (paused, running, idle), their
//! owner and pending tools, filtered by status, principal and tool, newest activity
//! first, paginated; bad filters are 400; roles decide what is listed. On the
//! in-memory store, SQLite and PostgreSQL (when `REINS_TEST_POSTGRES_URL` is set, as
//! `cargo xtask test` does; required under `CI`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use reins_memory::MemoryStore;
use reins_server::{AccessRole, Principal};
use serde_json::{Value, json};
use support::*;

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

fn tag() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// Each backend, fresh (PostgreSQL is shared: the tests use principals of their own).
async fn stores() -> Vec<(
    &'static str,
    Arc<dyn MemoryStore>,
    Option<tempfile::TempDir>,
)> {
    let mut out: Vec<(
        &'static str,
        Arc<dyn MemoryStore>,
        Option<tempfile::TempDir>,
    )> = vec![("memory", Arc::new(reins_memory::InMemoryStore::new()), None)];
    let (dir, sqlite) = sqlite_store().await;
    out.push(("sqlite", sqlite, Some(dir)));
    match std::env::var("REINS_TEST_POSTGRES_URL") {
        Ok(url) => out.push((
            "postgres",
            Arc::new(reins_memory::PostgresStore::connect(&url).await.unwrap()),
            None,
        )),
        Err(_) => {
            let msg = "REINS_TEST_POSTGRES_URL is not set (run `cargo xtask test`)";
            assert!(!in_ci(), "{msg}; CI requires it");
            eprintln!("\n!!! SKIPPED the PostgreSQL part of this test: {msg}\n");
        }
    }
    out
}

/// A server whose extra user `u<tag>` owns the sessions under `<tag>/`; its token is
/// `tok-<tag>`.
async fn server(
    store: Arc<dyn MemoryStore>,
    dir: Option<tempfile::TempDir>,
    t: &str,
) -> TestServer {
    let ran: Ran = Arc::default();
    let agent = agent(store, &ran);
    let user = Principal::new(format!("u{t}"), [AccessRole::User]).session_prefix(format!("{t}/"));
    let token = format!("tok-{t}");
    serve(agent, ran, dir, move |s| s.auth(auth().token(&token, user))).await
}

async fn run(s: &TestServer, token: &str, session: &str, text: &str) -> Value {
    let (st, out) = s
        .post(
            token,
            &format!("/v1/sessions/{}/runs", enc(session)),
            json!({"message": text}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    out
}

/// The ids (and statuses) of a listing.
fn ids(page: &Value) -> Vec<String> {
    page["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}:{}",
                r["id"].as_str().unwrap(),
                r["status"].as_str().unwrap()
            )
        })
        .collect()
}

async fn list(s: &TestServer, token: &str, query: &str) -> Value {
    let (st, page) = s.get(token, &format!("/v1/sessions?{query}")).await;
    assert_eq!(st, 200, "{query}: {page}");
    page
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_listed_with_their_status_filtered_and_paginated() {
    for (label, store, dir) in stores().await {
        let t = tag();
        let s = server(store, dir, &t).await;
        let me = format!("tok-{t}");
        let p = format!("principal=u{t}");
        let (del, mail, chat, slow) = (
            format!("{t}/del"),
            format!("{t}/mail"),
            format!("{t}/chat"),
            format!("{t}/slow"),
        );
        // Oldest first: del, mail, chat; each one moves later than the one before.
        assert_eq!(run(&s, &me, &del, "delete a.txt").await["status"], "paused");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            run(&s, &me, &mail, "mail bob@example.com").await["status"],
            "paused"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(run(&s, &me, &chat, "hello").await["status"], "completed");

        // Newest activity first, each with its status, owner and pending tools.
        let page = list(&s, ANA, &p).await;
        assert_eq!(
            ids(&page),
            [
                format!("{chat}:idle"),
                format!("{mail}:paused"),
                format!("{del}:paused")
            ],
            "{label}"
        );
        let row = &page["sessions"][1];
        assert_eq!(row["principal"], format!("u{t}"), "{label}");
        assert_eq!(row["pending_tools"], json!(["send_email"]), "{label}");
        assert_eq!(row["pending_count"], 1, "{label}");
        assert!(
            row["message_count"].as_u64().unwrap() >= 2,
            "{label}: {row}"
        );
        assert_eq!(page["sessions"][0]["pending_count"], 0, "{label}");
        assert!(page.get("next_cursor").is_none(), "{label}: one page");

        // Filters: status, tool, both; several statuses.
        let page = list(&s, ANA, &format!("{p}&status=paused")).await;
        assert_eq!(
            ids(&page),
            [format!("{mail}:paused"), format!("{del}:paused")],
            "{label}"
        );
        let page = list(&s, ANA, &format!("{p}&tool=delete_file")).await;
        assert_eq!(ids(&page), [format!("{del}:paused")], "{label}");
        let page = list(&s, ANA, &format!("{p}&status=idle&tool=delete_file")).await;
        assert_eq!(ids(&page), Vec::<String>::new(), "{label}");
        let page = list(&s, ANA, &format!("{p}&status=idle,running")).await;
        assert_eq!(ids(&page), [format!("{chat}:idle")], "{label}");

        // Pages of one, in the same order, each with the next page's cursor.
        let mut seen = Vec::new();
        let mut q = format!("{p}&limit=1");
        loop {
            let page = list(&s, ANA, &q).await;
            seen.extend(ids(&page));
            match page["next_cursor"].as_str() {
                Some(c) => q = format!("{p}&limit=1&cursor={c}"),
                None => break,
            }
            assert!(seen.len() <= 3, "{label}: pages never end: {seen:?}");
        }
        assert_eq!(
            seen,
            [
                format!("{chat}:idle"),
                format!("{mail}:paused"),
                format!("{del}:paused")
            ],
            "{label}"
        );

        // A decision moves the session: it is idle and newest now.
        let rid = list(&s, ANA, &format!("{p}&tool=delete_file")).await;
        assert_eq!(rid["sessions"][0]["id"], del.as_str());
        let (_, view) = s.get(ANA, &format!("/v1/sessions/{}", enc(&del))).await;
        let (st, out) = s
            .post(
                ANA,
                &format!("/v1/sessions/{}/decisions", enc(&del)),
                json!({"decisions": [{"requirement_id": view["requirements"][0]["id"], "action": "approve"}]}),
            )
            .await;
        assert_eq!(st, 200, "{out}");
        let page = list(&s, ANA, &p).await;
        assert_eq!(ids(&page)[0], format!("{del}:idle"), "{label}");

        // A run in flight is `running`, in the list as in the session view.
        let client = s.client.clone();
        let url = s.url(&format!("/v1/sessions/{}/runs", enc(&slow)));
        let me2 = me.clone();
        let running = tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(me2)
                .json(&json!({"message": "slow crabs"}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        });
        let started = Instant::now();
        loop {
            let page = list(&s, ANA, &format!("{p}&status=running")).await;
            if ids(&page) == [format!("{slow}:running")] {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{label}: the slow run never listed as running: {page}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (_, view) = s.get(ANA, &format!("/v1/sessions/{}", enc(&slow))).await;
        assert_eq!(view["status"], "running", "{label}");
        let (st, _) = s
            .post(
                ANA,
                &format!("/v1/sessions/{}/interrupt", enc(&slow)),
                json!({}),
            )
            .await;
        assert_eq!(st, 202, "{label}");
        assert_eq!(running.await.unwrap()["status"], "cancelled", "{label}");
        let page = list(&s, ANA, &format!("{p}&status=running")).await;
        assert_eq!(ids(&page), Vec::<String>::new(), "{label}");
    }
}

#[tokio::test]
async fn bad_filters_are_refused_with_400() {
    let s = start().await;
    for q in [
        "status=stopped",
        "status=paused,",
        "status=",
        "principal=nobody",
        "principal=ana",
        "principal=",
        "tool=",
        "limit=0",
        "limit=201",
        "limit=many",
        "cursor=zz",
        "cursor=7b7d",
    ] {
        let (st, err) = s.get(ANA, &format!("/v1/sessions?{q}")).await;
        assert_eq!(st, 400, "{q}: {err}");
        assert_eq!(err["error"]["code"], "bad_request", "{q}: {err}");
        assert!(!err["error"]["message"].as_str().unwrap().is_empty(), "{q}");
    }
    let (_, err) = s.get(ANA, "/v1/sessions?status=stopped").await;
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("paused, running, idle"),
        "{err}"
    );
    let (_, err) = s.get(ANA, "/v1/sessions?principal=nobody").await;
    assert!(
        err["error"]["message"].as_str().unwrap().contains("alice"),
        "{err}"
    );

    // A requirements cursor is not a sessions cursor.
    run(&s, ALICE, "alice/a", "delete a.txt").await;
    run(&s, ALICE, "alice/b", "delete b.txt").await;
    let (_, inbox) = s.get(ANA, "/v1/requirements?limit=1").await;
    let c = inbox["next_cursor"].as_str().unwrap();
    let (st, err) = s.get(ANA, &format!("/v1/sessions?cursor={c}")).await;
    assert_eq!(st, 400, "{err}");
}

#[tokio::test]
async fn the_list_follows_the_roles() {
    let s = start().await;
    run(&s, ALICE, "alice/one", "delete a.txt").await;
    run(&s, BOB, "bob/two", "hello").await;

    // No token, an unknown token: 401.
    let res = s.client.get(s.url("/v1/sessions")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 401);
    let (st, _) = s.get("nope", "/v1/sessions").await;
    assert_eq!(st, 401);

    // A user sees their own sessions only; approvers and admins see every one.
    let page = list(&s, ALICE, "").await;
    assert_eq!(ids(&page), ["alice/one:paused"]);
    let page = list(&s, ALICE, "principal=bob").await;
    assert_eq!(ids(&page), Vec::<String>::new());
    for token in [ANA, ADMIN, RITA] {
        let page = list(&s, token, "").await;
        assert_eq!(ids(&page), ["bob/two:idle", "alice/one:paused"], "{token}");
    }
    let page = list(&s, ANA, "principal=bob").await;
    assert_eq!(page["sessions"][0]["principal"], "bob");
    assert_eq!(ids(&page), ["bob/two:idle"]);
}

/// The `status=paused` and `tool=` filters (narrowed in the store by the run's phase)
/// list what the unfiltered list shows with that status or tool, and their pages with
/// a cursor neither repeat nor skip a session while a second caller pauses new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_pages_match_the_full_list_and_hold_under_inserts() {
    for (label, store, dir) in stores().await {
        let t = tag();
        let s = server(store, dir, &t).await;
        let me = format!("tok-{t}");
        let p = format!("principal=u{t}");
        for (k, text) in [
            "delete a.txt",
            "hello",
            "mail bob@example.com",
            "delete b.txt",
            "hello",
            "mail ann@example.com",
        ]
        .iter()
        .enumerate()
        {
            run(&s, &me, &format!("{t}/s{k}"), text).await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let all = ids(&list(&s, ANA, &format!("{p}&limit=200")).await);
        assert_eq!(all.len(), 6, "{label}: {all:?}");
        let paused: Vec<String> = all
            .iter()
            .filter(|r| r.ends_with(":paused"))
            .cloned()
            .collect();
        assert_eq!(paused.len(), 4, "{label}: {all:?}");
        let deletes: Vec<String> = paused
            .iter()
            .filter(|r| r.contains("/s0:") || r.contains("/s3:"))
            .cloned()
            .collect();
        // The sessions paused during the first walk wait on another tool than the
        // second walk lists.
        for (query, want, text) in [
            ("status=paused", &paused, "mail new@example.com"),
            ("tool=delete_file", &deletes, "delete c.txt"),
        ] {
            assert_eq!(
                ids(&list(&s, ANA, &format!("{p}&{query}")).await),
                *want,
                "{label}: {query}"
            );
            // Pages of one; before each next page a second caller pauses a new
            // session (newer than the cursor: it belongs before the walk's position).
            let mut seen = Vec::new();
            let mut q = format!("{p}&{query}&limit=1");
            for k in 0.. {
                let page = list(&s, ANA, &q).await;
                seen.extend(ids(&page));
                assert!(seen.len() <= want.len(), "{label}: {query}: {seen:?}");
                run(&s, &me, &format!("{t}/new-{query}-{k}"), text).await;
                match page["next_cursor"].as_str() {
                    Some(c) => q = format!("{p}&{query}&limit=1&cursor={c}"),
                    None => break,
                }
            }
            assert_eq!(seen, *want, "{label}: {query}");
        }
        let now = ids(&list(&s, ANA, &format!("{p}&status=paused&limit=200")).await);
        assert_eq!(
            now.len(),
            4 + paused.len() + deletes.len(),
            "{label}: {now:?}"
        );
    }
}
