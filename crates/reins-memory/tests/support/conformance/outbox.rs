//! The outbox: notices written with their commit (and only then), routing, leased
//! claims that never hand one attempt to two owners, the attempt log, redelivery.
//! One case claims (claims take every due delivery of a shared database).

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use reins_memory::{
    AttemptOutcome, Commit, Delivery, DeliveryFilter, DeliveryState, Error, Grant, MemoryStore,
    Notice, NoticeKind,
};
use reins_message::{Msg, new_id};

async fn unrouted_ids<S: MemoryStore>(s: &S) -> Vec<String> {
    s.unrouted_notices(100_000)
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.id)
        .collect()
}

pub async fn notices_ride_with_their_commit<S: MemoryStore>(a: &S, b: &S) {
    let sid = format!("outbox-{}", new_id());
    let s = a.open_session(&sid).await.unwrap();
    // Off: the notice is dropped with the commit applied.
    let off = Notice::new(NoticeKind::RunCompleted).session(&sid);
    let v = a
        .commit(
            &sid,
            Commit::at(s.version)
                .append(Msg::user("1"))
                .notify(off.clone()),
        )
        .await
        .unwrap();
    assert!(!unrouted_ids(b).await.contains(&off.id));

    a.record_notices(true);
    assert!(a.records_notices());
    let on = Notice::new(NoticeKind::RequirementWaiting)
        .session(&sid)
        .requirement("call_1")
        .tool("delete_file")
        .principal("ana")
        .payload(serde_json::json!({ "path": "/tmp/x" }));
    let v = a
        .commit(
            &sid,
            Commit::at(v).append(Msg::user("2")).notify(on.clone()),
        )
        .await
        .unwrap();
    // A stale commit writes neither its change nor its notice.
    let lost = Notice::new(NoticeKind::RunFailed).session(&sid);
    let stale = a
        .commit(
            &sid,
            Commit::at(v - 1)
                .append(Msg::user("3"))
                .notify(lost.clone()),
        )
        .await;
    assert!(matches!(stale, Err(Error::Conflict { .. })));
    // A commit with only a notice writes it and keeps the version.
    let alone = Notice::new(NoticeKind::RequirementExpired).session(&sid);
    assert_eq!(
        a.commit(&sid, Commit::at(v).notify(alone.clone()))
            .await
            .unwrap(),
        v
    );
    // Grants write their own.
    let tool = format!("outbox_tool_{}", new_id());
    let g = Grant::new(new_id(), &tool, Utc::now()).created_by("ana");
    a.create_grant(&g).await.unwrap();
    a.revoke_grant(&g.id, Some("bo"), Utc::now()).await.unwrap();

    let all = b.unrouted_notices(100_000).await.unwrap();
    let got = all.iter().find(|n| n.id == on.id).unwrap();
    assert_eq!(got.id, on.id);
    assert_eq!(got.kind, on.kind);
    assert_eq!(got.payload, on.payload);
    assert_eq!(got.principals, vec!["ana".to_owned()]);
    assert_eq!(got.requirement.as_deref(), Some("call_1"));
    let ids: Vec<&str> = all.iter().map(|n| n.id.as_str()).collect();
    assert!(!ids.contains(&lost.id.as_str()));
    assert!(ids.contains(&alone.id.as_str()));
    let grant_kinds: Vec<NoticeKind> = all
        .iter()
        .filter(|n| n.tool.as_deref() == Some(tool.as_str()))
        .map(|n| n.kind)
        .collect();
    assert_eq!(
        grant_kinds,
        vec![NoticeKind::GrantCreated, NoticeKind::GrantRevoked]
    );
    // Writing a stored id again is skipped.
    a.append_notices(vec![on.clone()]).await.unwrap();
    let n = unrouted_ids(b)
        .await
        .iter()
        .filter(|i| **i == on.id)
        .count();
    assert_eq!(n, 1);
    // Two writers of one keyed notice (two sweeps, two instances), made at different
    // moments with different details: the first is kept, once.
    let key = format!("requirement.escalated:{sid}:call_1");
    let at = Utc::now();
    let first = Notice::keyed(NoticeKind::RequirementEscalated, &key, at)
        .session(&sid)
        .principal("ana");
    let mut second = Notice::keyed(NoticeKind::RequirementEscalated, &key, at)
        .session(&sid)
        .principal("bo");
    second.created_at = at + chrono::Duration::seconds(15);
    a.append_notices(vec![first.clone()]).await.unwrap();
    b.append_notices(vec![second]).await.unwrap();
    let kept: Vec<Notice> = b
        .unrouted_notices(100_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|n| n.id == first.id)
        .collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].principals, ["ana"]);
    assert_eq!(
        uuid::Uuid::parse_str(&first.id).unwrap().get_version_num(),
        7
    );
    a.route_notice(&first.id, &[]).await.unwrap();
    a.record_notices(false);
    // Route them away, so that the claiming case does not meet them.
    for n in all {
        a.route_notice(&n.id, &[]).await.unwrap();
    }
}

pub async fn deliveries_are_leased_logged_and_redelivered<S: MemoryStore>(a: &S, b: &S) {
    let lease = Duration::from_secs(60);
    let n = Notice::new(NoticeKind::RunCompleted).session(format!("outbox-{}", new_id()));
    a.append_notices(vec![n.clone()]).await.unwrap();
    let to = vec!["terminal".to_owned(), "webhook:w1".to_owned()];
    a.route_notice(&n.id, &to).await.unwrap();
    // Routing again (a racing instance) makes nothing new.
    b.route_notice(&n.id, &to).await.unwrap();
    assert!(!unrouted_ids(a).await.contains(&n.id));
    let mine = |ds: Vec<Delivery>| -> Vec<Delivery> {
        ds.into_iter().filter(|d| d.notice.id == n.id).collect()
    };
    let first = mine(a.claim_deliveries("one", 100_000, lease).await.unwrap());
    assert_eq!(first.len(), 2);
    assert!(first.iter().all(|d| d.attempts == 1 && d.notice == n));
    // Leased: another owner gets none of them.
    assert!(mine(b.claim_deliveries("two", 100_000, lease).await.unwrap()).is_empty());
    let hook = first
        .iter()
        .find(|d| d.destination == "webhook:w1")
        .unwrap();
    let term = first.iter().find(|d| d.destination == "terminal").unwrap();
    // Only the holder of the attempt's lease records it.
    let retry = AttemptOutcome::Retry {
        next_at: Utc::now() - chrono::Duration::seconds(1),
        error: "HTTP 500".into(),
    };
    assert!(
        !b.record_attempt(&hook.id, "two", 1, retry.clone())
            .await
            .unwrap()
    );
    assert!(
        !b.record_attempt(&hook.id, "one", 2, retry.clone())
            .await
            .unwrap()
    );
    assert!(
        a.record_attempt(&hook.id, "one", 1, retry.clone())
            .await
            .unwrap()
    );
    assert!(!a.record_attempt(&hook.id, "one", 1, retry).await.unwrap());
    assert!(
        a.record_attempt(&term.id, "one", 1, AttemptOutcome::Delivered)
            .await
            .unwrap()
    );
    // Due again: the second attempt goes to whoever claims.
    let second = mine(b.claim_deliveries("two", 100_000, lease).await.unwrap());
    assert_eq!(second.len(), 1);
    assert_eq!(
        (second[0].id.as_str(), second[0].attempts),
        (hook.id.as_str(), 2)
    );
    assert_eq!(second[0].last_error.as_deref(), Some("HTTP 500"));
    let dead = AttemptOutcome::Dead {
        error: "HTTP 410".into(),
    };
    assert!(b.record_attempt(&hook.id, "two", 2, dead).await.unwrap());
    let log = a.delivery_attempts(&hook.id).await.unwrap();
    let outcomes: Vec<(u32, &str, &str)> = log
        .iter()
        .map(|x| (x.attempt, x.owner.as_str(), x.outcome.as_str()))
        .collect();
    assert_eq!(outcomes, vec![(1, "one", "retry"), (2, "two", "dead")]);
    let listed = a
        .deliveries(&DeliveryFilter::all().notice(&n.id))
        .await
        .unwrap();
    let states: HashMap<&str, DeliveryState> = listed
        .iter()
        .map(|d| (d.destination.as_str(), d.state))
        .collect();
    assert_eq!(states["terminal"], DeliveryState::Delivered);
    assert_eq!(states["webhook:w1"], DeliveryState::Dead);
    let hooks = a
        .deliveries(
            &DeliveryFilter::all()
                .notice(&n.id)
                .destination_prefix("webhook:"),
        )
        .await
        .unwrap();
    assert_eq!(hooks.len(), 1);
    // A person redelivers the dead one: due again, log kept.
    let again = b.redeliver(&hook.id).await.unwrap();
    assert_eq!(again.state, DeliveryState::Pending);
    assert!(matches!(
        b.redeliver("no-such-delivery").await,
        Err(Error::DeliveryNotFound { .. })
    ));
    let third = mine(a.claim_deliveries("one", 100_000, lease).await.unwrap());
    assert_eq!(third.len(), 1);
    assert_eq!(third[0].attempts, 3);
    assert!(
        a.record_attempt(&hook.id, "one", 3, AttemptOutcome::Delivered)
            .await
            .unwrap()
    );
    assert_eq!(a.delivery_attempts(&hook.id).await.unwrap().len(), 3);

    // Racing claimers on both handles: every delivery goes to exactly one.
    let batch: Vec<Notice> = (0..12)
        .map(|_| Notice::new(NoticeKind::RequirementDecided))
        .collect();
    a.append_notices(batch.clone()).await.unwrap();
    for n in &batch {
        a.route_notice(&n.id, &["x".to_owned()]).await.unwrap();
    }
    let ids: std::collections::HashSet<String> = batch.iter().map(|n| n.id.clone()).collect();
    let claims = (0..6).map(|i| {
        let (s, owner) = if i % 2 == 0 { (a, "even") } else { (b, "odd") };
        async move {
            s.claim_deliveries(&format!("{owner}{i}"), 3, lease)
                .await
                .unwrap()
        }
    });
    let mut seen = HashMap::new();
    for round in futures::future::join_all(claims).await {
        for d in round.into_iter().filter(|d| ids.contains(&d.notice.id)) {
            *seen.entry(d.id).or_insert(0) += 1;
        }
    }
    assert!(
        seen.values().all(|c| *c == 1),
        "a delivery was claimed twice: {seen:?}"
    );
}
