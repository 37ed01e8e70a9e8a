//! Filters pushed into the store: the session list by the phase of the run state
//! (keyset pages stable while a second caller adds sessions), and the deliveries of a
//! page's sessions in one call.

use chrono::Utc;
use reins_memory::notice::{DeliveryFilter, Notice, NoticeKind};
use reins_memory::{Commit, MemoryStore, RequirementRecord, SessionFilter, SessionHead};
use reins_message::new_id;
use serde_json::{Value, json};

/// A session under `prefix` committed with `run_state` and, when `tool` is set, an
/// open requirement of a call to it.
async fn session<S: MemoryStore>(
    s: &S,
    prefix: &str,
    n: &str,
    run_state: Option<Value>,
    tool: Option<&str>,
) -> String {
    let id = format!("{prefix}{n}");
    s.open_session(&id).await.unwrap();
    let mut c = Commit::at(0)
        .append(reins_message::Msg::user("hi"))
        .run_state(run_state);
    if let Some(t) = tool {
        let payload = json!({"id": "r1", "tool_use": {"id": "r1", "name": t, "input": {}}});
        let mut r = RequirementRecord::new("r1", "confirmation", payload);
        r.created_at = Utc::now();
        c = c.add_requirement(r);
    }
    s.commit(&id, c).await.unwrap();
    id
}

fn phase(p: &str) -> Option<Value> {
    Some(json!({"phase": {"phase": p}, "iteration": 1}))
}

/// Every page of `filter` from the start, `size` at a time, calling `between` after
/// each page.
async fn walk<S: MemoryStore, F: AsyncFnMut(usize)>(
    s: &S,
    filter: &SessionFilter,
    size: usize,
    mut between: F,
) -> Vec<SessionHead> {
    let mut out: Vec<SessionHead> = Vec::new();
    let mut f = SessionFilter {
        limit: size,
        ..filter.clone()
    };
    for k in 0.. {
        let page = s.session_heads_page(&f).await.unwrap();
        assert!(page.len() <= size);
        let Some(last) = page.last() else { break };
        f.after = Some((last.updated_at, last.id.clone()));
        out.extend(page);
        between(k).await;
    }
    out
}

fn ids(heads: &[SessionHead]) -> Vec<&str> {
    heads.iter().map(|h| h.id.as_str()).collect()
}

pub async fn session_heads_are_filtered_by_phase<S: MemoryStore>(a: &S, b: &S) {
    let prefix = format!("phase-{}/", new_id());
    let mut made = Vec::new();
    for (n, state, tool) in [
        ("a", phase("paused"), Some("send")),
        ("b", phase("idle"), None),
        ("c", phase("paused"), Some("delete")),
        ("d", None, None),
        ("e", phase("paused"), Some("send")),
        (
            "f",
            Some(json!({"phase": {"phase": "finished", "status": "completed"}})),
            None,
        ),
        ("g", phase("paused"), Some("send")),
    ] {
        made.push(session(a, &prefix, n, state, tool).await);
    }
    let mine = SessionFilter {
        session_prefix: Some(prefix.clone()),
        ..SessionFilter::first(100)
    };
    // The unfiltered list, newest activity first: what each filter must narrow.
    let all = b.session_heads_page(&mine).await.unwrap();
    assert_eq!(all.len(), 7);
    let narrowed = |keep: &dyn Fn(&SessionHead) -> bool| -> Vec<String> {
        all.iter()
            .filter(|h| keep(h))
            .map(|h| h.id.clone())
            .collect()
    };
    let paused_of = |h: &SessionHead| {
        h.run_state
            .as_ref()
            .and_then(|v| v.pointer("/phase/phase"))
            .and_then(Value::as_str)
            == Some("paused")
    };
    let with = |p: &str| SessionFilter {
        phase: Some(p.to_owned()),
        ..mine.clone()
    };
    // Pages of one, two and all: the same sessions in the same order.
    for size in [1, 2, 100] {
        let paused = walk(b, &with("paused"), size, async |_| {}).await;
        assert_eq!(ids(&paused), narrowed(&paused_of), "pages of {size}");
        assert!(paused.iter().all(|h| h.open_requirements.len() == 1));
    }
    assert_eq!(
        ids(&walk(b, &with("idle"), 1, async |_| {}).await),
        vec![made[1].as_str()]
    );
    assert_eq!(
        ids(&walk(b, &with("finished"), 1, async |_| {}).await),
        vec![made[5].as_str()]
    );
    // No run state: the empty phase.
    assert_eq!(
        ids(&walk(b, &with(""), 1, async |_| {}).await),
        vec![made[3].as_str()]
    );
    assert!(walk(b, &with("acting"), 1, async |_| {}).await.is_empty());
    // With a tool: paused on a call to it.
    let send = SessionFilter {
        open_tool: Some("send".to_owned()),
        ..with("paused")
    };
    assert_eq!(
        ids(&walk(b, &send, 1, async |_| {}).await),
        narrowed(&|h| paused_of(h) && h.open_requirements[0].payload["tool_use"]["name"] == "send")
    );
    // A session that leaves the phase leaves the filtered list.
    let v = a.session_version(&made[0]).await.unwrap().unwrap();
    a.commit(
        &made[0],
        Commit::at(v)
            .decide("r1", json!({"approve": true}))
            .run_state(phase("idle")),
    )
    .await
    .unwrap();
    let paused = walk(b, &with("paused"), 2, async |_| {}).await;
    assert_eq!(paused.len(), 3);
    assert!(!ids(&paused).contains(&made[0].as_str()));
}

pub async fn phase_pages_are_stable_while_sessions_are_added<S: MemoryStore>(a: &S, b: &S) {
    let prefix = format!("stable-{}/", new_id());
    for k in 0..12 {
        let state = phase(if k % 2 == 0 { "paused" } else { "idle" });
        session(a, &prefix, &format!("s{k:02}"), state, Some("send")).await;
    }
    let filter = SessionFilter {
        session_prefix: Some(prefix.clone()),
        phase: Some("paused".to_owned()),
        ..SessionFilter::first(2)
    };
    let before = walk(b, &filter, 100, async |_| {}).await;
    assert_eq!(before.len(), 6);
    // A second caller adds paused sessions between the pages: they are newer than
    // the cursor, so the walk neither repeats nor skips the sessions it started with.
    let walked = walk(b, &filter, 2, async |k| {
        session(
            a,
            &prefix,
            &format!("new{k}"),
            phase("paused"),
            Some("send"),
        )
        .await;
    })
    .await;
    assert_eq!(ids(&walked), ids(&before));
    // Three pages, a session added after each.
    let after = walk(b, &filter, 100, async |_| {}).await;
    assert_eq!(after.len(), 6 + 3);
}

pub async fn deliveries_are_listed_for_several_sessions<S: MemoryStore>(a: &S, b: &S) {
    let tag = new_id();
    let s = |n: &str| format!("deliv-{tag}/{n}");
    let mut notices = Vec::new();
    for (session, req) in [("x", "r1"), ("x", "r2"), ("y", "r1"), ("z", "r1")] {
        let n = Notice::new(NoticeKind::RequirementWaiting)
            .session(s(session))
            .requirement(req);
        a.append_notices(vec![n.clone()]).await.unwrap();
        a.route_notice(&n.id, &["terminal".to_owned()])
            .await
            .unwrap();
        notices.push(n);
    }
    let key = |d: &reins_memory::notice::Delivery| {
        (
            d.notice.session.clone().unwrap_or_default(),
            d.notice.requirement.clone().unwrap_or_default(),
        )
    };
    let both = b
        .deliveries(&DeliveryFilter::all().sessions([s("x"), s("y"), s("missing")]))
        .await
        .unwrap();
    let got: Vec<_> = both.iter().map(key).collect();
    // Newest first, as one session's listing is.
    assert_eq!(
        got,
        vec![
            (s("y"), "r1".to_owned()),
            (s("x"), "r2".to_owned()),
            (s("x"), "r1".to_owned()),
        ]
    );
    // The same as one call per session.
    let mut one_by_one = Vec::new();
    for x in [s("x"), s("y")] {
        one_by_one.extend(
            b.deliveries(&DeliveryFilter::all().session(x))
                .await
                .unwrap(),
        );
    }
    let mut sorted_both: Vec<_> = both.iter().map(|d| d.id.clone()).collect();
    let mut sorted_one: Vec<_> = one_by_one.iter().map(|d| d.id.clone()).collect();
    sorted_both.sort();
    sorted_one.sort();
    assert_eq!(sorted_both, sorted_one);
    // Narrowed further by requirement; an empty list admits nothing.
    let r1 = b
        .deliveries(
            &DeliveryFilter::all()
                .sessions([s("x"), s("z")])
                .requirement("r1"),
        )
        .await
        .unwrap();
    assert_eq!(
        r1.iter().map(key).collect::<Vec<_>>(),
        vec![(s("z"), "r1".to_owned()), (s("x"), "r1".to_owned())]
    );
    let none: [String; 0] = [];
    assert!(
        b.deliveries(&DeliveryFilter::all().sessions(none))
            .await
            .unwrap()
            .is_empty()
    );
}
