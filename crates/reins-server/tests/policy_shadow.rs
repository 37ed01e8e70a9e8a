//! `GET /v1/policy/shadow` over real HTTP on loopback: runs asked by an active Cedar set
//! with a shadow set beside it; the differences are listed for admins (newest first,
//! paginated, filtered), refused to others and for a bad query, acted on by nobody, and
//! still listed by a new server on the same shadow log file (a restart).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;
use std::sync::Arc;

use reins_policy::{CedarPolicy, PolicySet, ShadowLog};
use serde_json::{Value, json};
use support::*;

/// Deletes under /tmp run; anything else asks.
const ACTIVE: &str = r#"@id("tmp-deletes")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "/tmp/*" };
"#;

/// The next set: every delete runs, except in /etc.
const SHADOW: &str = r#"@id("all-deletes")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file");

@id("etc-deletes")
@reason("system files are not deleted by agents")
forbid (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "/etc/*" };
"#;

fn policy(log: &Path) -> CedarPolicy {
    let p = CedarPolicy::with_log(
        PolicySet::from_source("active.cedar", ACTIVE).unwrap(),
        ShadowLog::open(log).unwrap(),
    );
    p.set_shadow(Some(PolicySet::from_source("next.cedar", SHADOW).unwrap()));
    p
}

async fn server(dir: &Path, p: &CedarPolicy) -> TestServer {
    let store = reins_memory::SqliteStore::open(dir.join("s.db"))
        .await
        .unwrap();
    let ran: Ran = Arc::default();
    let agent = agent_with(Arc::new(store), &ran, |b| b.approval_policy(p.clone()));
    let p = p.clone();
    serve(agent, ran, None, move |s| s.policy(p)).await
}

async fn run(s: &TestServer, session: &str, text: &str) -> Value {
    let (st, out) = s
        .post(
            ALICE,
            &format!("/v1/sessions/{}/runs", session.replace('/', "%2F")),
            json!({"message": text}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_differences_are_listed_for_admins_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("shadow.jsonl");
    let p = policy(&log);
    let s = server(dir.path(), &p).await;

    // Active allows (tmp-deletes), shadow allows by another policy: a difference.
    let out = run(&s, "alice/shadow-1", "delete /tmp/a.txt").await;
    assert_eq!(out["status"], "completed", "{out}");
    // Active asks, shadow would allow: the run pauses all the same.
    let out = run(&s, "alice/shadow-2", "delete report.txt").await;
    assert_eq!(out["status"], "paused", "{out}");
    // Active asks, shadow would deny: nothing acted on it either.
    let out = run(&s, "alice/shadow-3", "delete /etc/passwd").await;
    assert_eq!(out["status"], "paused", "{out}");
    assert_eq!(s.ran(), ["delete:/tmp/a.txt"]);

    let (st, page) = s.get(ADMIN, "/v1/policy/shadow").await;
    assert_eq!(st, 200, "{page}");
    assert_eq!(page["configured"], true);
    assert_eq!(page["active_policies"], json!(["tmp-deletes"]));
    assert_eq!(
        page["shadow_policies"],
        json!(["all-deletes", "etc-deletes"])
    );
    let full = page["differences"].clone();
    let diffs = full.as_array().unwrap();
    assert_eq!(diffs.len(), 3, "{page}");
    // Newest first.
    let sessions: Vec<&str> = diffs
        .iter()
        .map(|d| d["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        sessions,
        ["alice/shadow-3", "alice/shadow-2", "alice/shadow-1"]
    );
    let etc = &diffs[0];
    assert_eq!(etc["question"], "call");
    assert_eq!(etc["tool"], "delete_file");
    assert_eq!(etc["principal"], "alice");
    assert_eq!(etc["arguments"], r#"{"path":"/etc/passwd"}"#);
    assert_eq!(etc["active"], json!({"verdict": "ask", "policies": []}));
    assert_eq!(
        etc["shadow"],
        json!({"verdict": "deny", "policies": ["etc-deletes"], "note": "system files are not deleted by agents"})
    );
    assert_eq!(
        diffs[2]["active"],
        json!({"verdict": "allow", "policies": ["tmp-deletes"]})
    );
    assert_eq!(
        diffs[2]["shadow"],
        json!({"verdict": "allow", "policies": ["all-deletes"]})
    );
    assert!(diffs[0]["call"].as_str().unwrap().starts_with("call_"));
    assert!(diffs[0]["at"].as_str().is_some());

    // Pages of one: the same three, in order, then no cursor.
    let mut seen = Vec::new();
    let mut path = "/v1/policy/shadow?limit=1".to_owned();
    loop {
        let (st, page) = s.get(ADMIN, &path).await;
        assert_eq!(st, 200, "{page}");
        let items = page["differences"].as_array().unwrap();
        assert!(items.len() <= 1);
        seen.extend(items.iter().map(|d| d["session_id"].clone()));
        match page["next_cursor"].as_str() {
            Some(c) => path = format!("/v1/policy/shadow?limit=1&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen, sessions);

    // Filters.
    let (_, page) = s
        .get(ADMIN, "/v1/policy/shadow?session=alice%2Fshadow-2")
        .await;
    assert_eq!(page["differences"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(
        page["differences"][0]["arguments"],
        r#"{"path":"report.txt"}"#
    );
    let (_, page) = s.get(ADMIN, "/v1/policy/shadow?tool=send_email").await;
    assert_eq!(page["differences"], json!([]));

    // Not an admin: 403. No token: 401. A bad query: 400 with a typed code.
    let (st, out) = s.get(ANA, "/v1/policy/shadow").await;
    assert_eq!(st, 403, "{out}");
    assert_eq!(out["error"]["code"], "forbidden");
    let (st, _) = s.get("nobody", "/v1/policy/shadow").await;
    assert_eq!(st, 401);
    for bad in [
        "limit=0",
        "limit=201",
        "limit=many",
        "cursor=zz",
        "cursor=7b7d",
        "sesion=typo",
    ] {
        let (st, out) = s.get(ADMIN, &format!("/v1/policy/shadow?{bad}")).await;
        assert_eq!(st, 400, "{bad}: {out}");
        assert_eq!(out["error"]["code"], "bad_request", "{bad}: {out}");
    }

    // A restart: a new process opens the same log file and lists the same differences.
    drop(s);
    let again = policy(&log);
    let s2 = server(dir.path(), &again).await;
    let (st, page2) = s2.get(ADMIN, "/v1/policy/shadow").await;
    assert_eq!(st, 200);
    assert_eq!(page2["differences"], full);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_policies_the_list_is_empty_and_says_so() {
    let s = start().await;
    let (st, page) = s.get(ADMIN, "/v1/policy/shadow").await;
    assert_eq!(st, 200, "{page}");
    assert_eq!(page["configured"], false);
    assert_eq!(page["differences"], json!([]));
}
