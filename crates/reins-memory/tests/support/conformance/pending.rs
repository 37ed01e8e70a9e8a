//! The pending-requirements listing: key order, keyset pages, filters, decided and
//! cleared requirements leaving it.

use chrono::{DateTime, Duration as Span, Utc};
use reins_memory::{
    Commit, MemoryStore, PendingFilter, PendingKey, PendingRequirement, RequirementRecord,
    SessionFilter,
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

pub async fn session_heads_are_paged_by_activity<S: MemoryStore>(a: &S, b: &S) {
    let prefix = format!("heads-{}/", new_id());
    let now = Utc::now();
    let mut ids = Vec::new();
    for (n, tool) in [
        ("a", Some("send")),
        ("b", None),
        ("c", Some("delete")),
        ("d", Some("send")),
        ("e", None),
    ] {
        let id = format!("{prefix}{n}");
        a.open_session(&id).await.unwrap();
        let mut c = Commit::at(0).append(reins_message::Msg::user("hi"));
        if let Some(t) = tool {
            c = c.add_requirement(record("r1", Some(t), now));
        }
        a.commit(&id, c).await.unwrap();
        ids.push(id);
    }
    // `d` decided: no longer has an open `send`; `b` moves last to the top.
    a.commit(
        &ids[3],
        Commit::at(1).decide("r1", json!({"approve": true})),
    )
    .await
    .unwrap();
    a.commit(
        &ids[1],
        Commit::at(1).append(reins_message::Msg::user("again")),
    )
    .await
    .unwrap();

    let mut expected: Vec<_> = b
        .list_session_heads()
        .await
        .unwrap()
        .into_iter()
        .filter(|h| h.id.starts_with(&prefix))
        .collect();
    expected.sort_by(|x, y| {
        y.updated_at
            .cmp(&x.updated_at)
            .then_with(|| x.id.cmp(&y.id))
    });
    assert_eq!(expected.len(), 5);
    assert_eq!(expected[0].id, ids[1]);
    let filter =
        |limit, after: Option<&reins_memory::SessionHead>, tool: Option<&str>| SessionFilter {
            session_prefix: Some(prefix.clone()),
            open_tool: tool.map(str::to_owned),
            after: after.map(|h| (h.updated_at, h.id.clone())),
            limit,
            phase: None,
        };
    let mut walked = Vec::new();
    let mut after = None;
    loop {
        let page = b
            .session_heads_page(&filter(2, after.as_ref(), None))
            .await
            .unwrap();
        assert!(page.len() <= 2);
        if page.is_empty() {
            break;
        }
        after = page.last().cloned();
        walked.extend(page);
    }
    assert_eq!(
        walked, expected,
        "pages of two walk the whole list in order"
    );
    let send = a
        .session_heads_page(&filter(10, None, Some("send")))
        .await
        .unwrap();
    assert_eq!(send.len(), 1);
    assert_eq!(send[0].id, ids[0]);
    assert_eq!(send[0].open_requirements.len(), 1);
    assert_eq!(send[0].message_count, 1);
    let none = a
        .session_heads_page(&filter(10, None, Some("nothing")))
        .await
        .unwrap();
    assert!(none.is_empty());

    // By id: those that exist, with their open requirements, each once.
    let names = [
        ids[2].clone(),
        format!("{prefix}missing"),
        ids[0].clone(),
        ids[2].clone(),
    ];
    let mut got = b.session_heads(&names).await.unwrap();
    got.sort_by(|x, y| x.id.cmp(&y.id));
    let mut want: Vec<_> = expected
        .iter()
        .filter(|h| h.id == ids[0] || h.id == ids[2])
        .cloned()
        .collect();
    want.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(got, want);
    assert!(b.session_heads(&[]).await.unwrap().is_empty());
}
