//! Standing grants: create, list, look up, revoke, with the same answers on every
//! backend. Each case uses tool names of its own (grants are not per session).

use chrono::{Duration as Span, Utc};
use reins_memory::{ArgCondition, Error, Grant, GrantFilter, MemoryStore};
use reins_message::new_id;
use serde_json::json;

pub async fn grants_lifecycle<S: MemoryStore>(a: &S, b: &S) {
    let tool = format!("send_email_{}", new_id());
    let now = Utc::now();
    let g1 = Grant::new(new_id(), &tool, now)
        .principal("alice")
        .condition(ArgCondition::ends_with("/to", "@example.com"))
        .expires_at(now + Span::hours(1))
        .note("mail to colleagues")
        .created_by("ana");
    let g2 = Grant::new(new_id(), &tool, now + Span::milliseconds(1)).session("s/1");
    a.create_grant(&g1).await.unwrap();
    a.create_grant(&g2).await.unwrap();

    // Read back through the other handle, oldest first, exactly as stored.
    let all = b
        .list_grants(&GrantFilter::all().tool(&tool))
        .await
        .unwrap();
    assert_eq!(all, vec![g1.clone(), g2.clone()]);
    assert_eq!(b.grant(&g1.id).await.unwrap(), Some(g1.clone()));
    assert_eq!(b.grant("no-such-grant").await.unwrap(), None);
    let by_principal = GrantFilter {
        principal: Some("alice".into()),
        ..GrantFilter::all().tool(&tool)
    };
    assert_eq!(
        b.list_grants(&by_principal).await.unwrap(),
        vec![g1.clone()]
    );
    let by_session = GrantFilter {
        session: Some("s/1".into()),
        ..GrantFilter::all().tool(&tool)
    };
    assert_eq!(b.list_grants(&by_session).await.unwrap(), vec![g2.clone()]);

    // A duplicate id and a malformed grant are refused and change nothing.
    let dup = Grant::new(g1.id.clone(), &tool, now);
    assert!(
        matches!(a.create_grant(&dup).await, Err(Error::DuplicateGrant { ref id }) if *id == g1.id)
    );
    let mut bad = Grant::new(new_id(), &tool, now);
    bad.conditions.push(ArgCondition {
        pointer: "to".into(),
        op: reins_memory::ArgOp::Equals,
        value: json!(1),
    });
    assert!(matches!(
        a.create_grant(&bad).await,
        Err(Error::InvalidGrant { .. })
    ));
    assert_eq!(
        b.list_grants(&GrantFilter::all().tool(&tool))
            .await
            .unwrap()
            .len(),
        2
    );

    // Revoking records who and when; a second revocation is refused naming the first.
    let at = Utc::now();
    let revoked = a.revoke_grant(&g1.id, Some("ops"), at).await.unwrap();
    assert_eq!(revoked.revoked_by.as_deref(), Some("ops"));
    assert!(revoked.is_revoked());
    assert!(!revoked.matches(
        &tool,
        Some("alice"),
        "s/9",
        &json!({"to": "x@example.com"}),
        at
    ));
    match b.revoke_grant(&g1.id, Some("eve"), Utc::now()).await {
        Err(Error::GrantAlreadyRevoked { id, by, .. }) => {
            assert_eq!(id, g1.id);
            assert_eq!(by.as_deref(), Some("ops"));
        }
        other => panic!("expected GrantAlreadyRevoked, got {other:?}"),
    }
    assert!(matches!(
        b.revoke_grant("no-such-grant", None, Utc::now()).await,
        Err(Error::GrantNotFound { .. })
    ));
    // Revoked grants leave the default listing and stay in the full one.
    assert_eq!(
        b.list_grants(&GrantFilter::all().tool(&tool))
            .await
            .unwrap(),
        vec![g2.clone()]
    );
    let with_revoked = GrantFilter {
        include_revoked: true,
        ..GrantFilter::all().tool(&tool)
    };
    let listed = b.list_grants(&with_revoked).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].revoked_by.as_deref(), Some("ops"));
}

pub async fn concurrent_revokes_have_one_winner<S: MemoryStore>(a: &S, b: &S) {
    let tool = format!("search_web_{}", new_id());
    let g = Grant::new(new_id(), &tool, Utc::now());
    a.create_grant(&g).await.unwrap();
    let (x, y) = tokio::join!(
        a.revoke_grant(&g.id, Some("one"), Utc::now()),
        b.revoke_grant(&g.id, Some("two"), Utc::now())
    );
    let wins = [x.is_ok(), y.is_ok()].iter().filter(|w| **w).count();
    assert_eq!(wins, 1, "{x:?} / {y:?}");
    let winner = x.as_ref().or(y.as_ref()).unwrap().revoked_by.clone();
    let loser = x.err().or(y.err()).unwrap();
    assert!(
        matches!(loser, Error::GrantAlreadyRevoked { ref by, .. } if *by == winner),
        "{loser}"
    );
    let stored = a.grant(&g.id).await.unwrap().unwrap();
    assert_eq!(stored.revoked_by, winner);
}
