//! The pending-requirements listing: key order, keyset pages, filters, decided and
//! cleared requirements leaving it.

use chrono::{DateTime, Duration as Span, Utc};
use reins_memory::{
    Commit, MemoryStore, PendingFilter, PendingKey, PendingRequirement, RequirementRecord,
};
use reins_message::new_id;
use serde_json::json;

fn record(id: &str, tool: Option<&str>, at: DateTime<Utc>) -> RequirementRecord {
    let payload = match tool {
        Some(t) => json!({"id": id, "tool_use": {"id": id, "name": t, "input": {}}}),
        None => json!({"fields": ["name"]}),
    };
    let mut r = RequirementRecord::new(id, "confirmation", payload);
    r.created_at = at;
    r
}

fn row(at: DateTime<Utc>, session: &str, id: &str, tool: Option<&str>) -> PendingRequirement {
    PendingRequirement {
        key: PendingKey {
            created_at: at,
            session_id: session.to_owned(),
            requirement_id: id.to_owned(),
        },
        tool: tool.map(str::to_owned),
    }
}

async fn page<S: MemoryStore>(s: &S, f: PendingFilter) -> Vec<PendingRequirement> {
    s.pending_requirements(&f).await.unwrap()
}

pub async fn pending_requirements_are_listed_newest_first_by_keyset<S: MemoryStore>(a: &S, b: &S) {
    let prefix = format!("pending-{}/", new_id());
    let (sa, sb, sc) = (
        format!("{prefix}a"),
        format!("{prefix}b"),
        format!("{prefix}c"),
    );
    // Nanoseconds matter: two requirements 1 ns apart keep their order.
    let t0 = DateTime::parse_from_rfc3339("2026-03-04T05:06:07.123456789Z")
        .unwrap()
        .with_timezone(&Utc);
    let t = |s: i64| t0 + Span::seconds(s);
    for s in [&sa, &sb, &sc] {
        a.open_session(s).await.unwrap();
    }
    a.commit(
        &sa,
        Commit::at(0)
            .add_requirement(record("r1", Some("send"), t(3)))
            .add_requirement(record("r2", Some("delete"), t(1))),
    )
    .await
    .unwrap();
    // A tie on time with `sa`'s r1; a decided one that must not be listed.
    let v = a
        .commit(
            &sb,
            Commit::at(0)
                .add_requirement(record("r1", Some("send"), t(3)))
                .add_requirement(record("r9", Some("send"), t(5))),
        )
        .await
        .unwrap();
    a.commit(&sb, Commit::at(v).decide("r9", json!({"approve": true})))
        .await
        .unwrap();
    a.commit(
        &sc,
        Commit::at(0)
            .add_requirement(record("r1", None, t(2)))
            .add_requirement(record("r0", Some("send"), t(2) + Span::nanoseconds(1))),
    )
    .await
    .unwrap();
    // Outside the prefix: never listed below.
    let other = format!("pending-{}/x", new_id());
    a.open_session(&other).await.unwrap();
    a.commit(
        &other,
        Commit::at(0).add_requirement(record("r1", Some("send"), t(4))),
    )
    .await
    .unwrap();

    let all = vec![
        row(t(3), &sa, "r1", Some("send")),
        row(t(3), &sb, "r1", Some("send")),
        row(t(2) + Span::nanoseconds(1), &sc, "r0", Some("send")),
        row(t(2), &sc, "r1", None),
        row(t(1), &sa, "r2", Some("delete")),
    ];
    let mine = |limit, after: Option<&PendingRequirement>| PendingFilter {
        session_prefix: Some(prefix.clone()),
        tools: None,
        after: after.map(|r| r.key.clone()),
        limit,
    };
    assert_eq!(page(b, mine(10, None)).await, all);
    // Pages of two, each after the last key of the one before.
    let p1 = page(b, mine(2, None)).await;
    assert_eq!(p1, all[..2]);
    let p2 = page(a, mine(2, p1.last())).await;
    assert_eq!(p2, all[2..4]);
    let p3 = page(b, mine(2, p2.last())).await;
    assert_eq!(p3, all[4..]);
    assert!(page(a, mine(2, p3.last())).await.is_empty());

    // By tool: one, several (merged in key order, cut to the limit), none.
    let tools = |t: &[&str], limit| PendingFilter {
        tools: Some(t.iter().map(|s| (*s).to_owned()).collect()),
        ..mine(limit, None)
    };
    let send: Vec<_> = all
        .iter()
        .filter(|r| r.tool.as_deref() == Some("send"))
        .cloned()
        .collect();
    assert_eq!(page(a, tools(&["send"], 10)).await, send);
    assert_eq!(
        page(a, tools(&["delete", "send"], 4)).await,
        [&send[..], &all[4..]].concat()
    );
    assert_eq!(
        page(b, tools(&["delete", "send", "send"], 2)).await,
        all[..2]
    );
    assert!(page(a, tools(&[], 10)).await.is_empty());
    let after_tie = PendingFilter {
        after: Some(all[0].key.clone()),
        ..tools(&["send"], 10)
    };
    assert_eq!(page(a, after_tie).await, send[1..]);

    // Unfiltered, the other session's requirement sorts first of these.
    let first = page(b, PendingFilter::first(100_000)).await;
    let at = |s: &str, id: &str| {
        first
            .iter()
            .position(|r| r.key.session_id == s && r.key.requirement_id == id)
    };
    assert!(at(&other, "r1").unwrap() < at(&sa, "r1").unwrap());
    assert!(at(&sb, "r9").is_none());

    // A decision and a clear take requirements out.
    let v = a.session_version(&sa).await.unwrap().unwrap();
    a.commit(&sa, Commit::at(v).decide("r1", json!({"approve": false})))
        .await
        .unwrap();
    let v = a.session_version(&sc).await.unwrap().unwrap();
    a.commit(&sc, Commit::at(v).clear_requirements())
        .await
        .unwrap();
    assert_eq!(
        page(b, mine(10, None)).await,
        vec![all[1].clone(), all[4].clone()]
    );
    a.delete_session(&sb).await.unwrap();
    assert_eq!(page(b, mine(10, None)).await, vec![all[4].clone()]);
}
