//! Standing grants, the approval policy hook and quorums (issue #24).
//!
//! Grants and quorums run on the in-memory store, SQLite and PostgreSQL (fails under
//! `CI=true` without a server, reported SKIPPED elsewhere): scope (principal, session,
//! tool, argument conditions), expiry, revocation and the audit of every use; the
//! policy hook's allow / deny / ask and its place before the grants; two approvers on
//! two agent instances sharing one store, and one rejection closing a quorum.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use reins_agent::approval::{ArgCondition, Grant, GrantEffect, GrantFilter, NewGrant};
use reins_agent::{
    Actor, Agent, AgentError, ApprovalPolicy, Decision, PolicyRequest, PolicyVerdict, Quorum,
    RunStatus,
};
use reins_message::{Msg, ToolOutcome};
use reins_model::ScriptedModel;
use reins_tool::ToolPolicy;
use serde_json::{Value, json};
use support::*;

fn sid(what: &str) -> String {
    format!("{what}-{}", reins_message::new_id())
}

/// One agent on `store` whose model sends one `tool` call with `args`, then answers.
fn agent(store: &SharedStore, counter: &Counter, tool: &str, args: Value) -> Agent {
    let id = format!("call-{}", reins_message::new_id());
    Agent::builder()
        .model(ScriptedModel::new([call(&id, tool, args), text("done")]))
        .toolkit(toolkit(counter, ToolPolicy::confirm()))
        .store_arc(store.clone())
        .build()
        .unwrap()
}

/// Sends one message acting for `principal` in `session`: the run's status.
async fn send_as(agent: &Agent, session: &str, principal: &str) -> RunStatus {
    let s = agent
        .session(session)
        .await
        .unwrap()
        .as_actor(Actor::new(principal));
    s.send(Msg::user("go")).await.unwrap().status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_match_by_scope_and_never_when_expired_or_revoked() {
    for (label, store, other, _keep) in store_pairs("grants").await {
        let mail = json!({"to": "bob@example.com", "body": "hi"});
        let session = sid("g");
        let setup = agent(&store, &Counter::default(), "send_email", mail.clone());
        let g = setup
            .create_grant(
                NewGrant {
                    principal: Some("alice".into()),
                    session: Some(session.clone()),
                    conditions: vec![ArgCondition::ends_with("/to", "@example.com")],
                    ttl: Some(Duration::from_secs(3600)),
                    note: Some("colleagues".into()),
                    ..NewGrant::tool("send_email")
                },
                Some("ana"),
            )
            .await
            .unwrap();
        assert_eq!(g.created_by.as_deref(), Some("ana"));

        // Mismatches pause: another principal, another session, other arguments,
        // another tool. Each on a session of its own (the grant names `session`).
        let cases = [
            (
                "principal",
                "bob",
                session.clone(),
                "send_email",
                mail.clone(),
            ),
            (
                "session",
                "alice",
                sid("g-other"),
                "send_email",
                mail.clone(),
            ),
            (
                "predicate",
                "alice",
                session.clone(),
                "send_email",
                json!({"to": "eve@evil.test"}),
            ),
            (
                "tool",
                "alice",
                session.clone(),
                "delete_file",
                json!({"path": "x"}),
            ),
        ];
        for (what, who, s, tool, args) in cases {
            let counter = Counter::default();
            let a = agent(&other, &counter, tool, args);
            assert_eq!(
                send_as(&a, &s, who).await,
                RunStatus::Paused,
                "{label}: a {what} mismatch must pause"
            );
            assert_eq!(counter.total(), 0, "{label}: {what}");
        }

        // A match runs without asking, and the audit trail names the grant and the
        // executed arguments' fingerprint.
        let counter = Counter::default();
        let a = agent(&other, &counter, "send_email", mail.clone());
        assert_eq!(
            send_as(&a, &session, "alice").await,
            RunStatus::Completed,
            "{label}"
        );
        assert_eq!(counter.count("send_email"), 1);
        let trail = a
            .session(&session)
            .await
            .unwrap()
            .decisions()
            .await
            .unwrap();
        let used: Vec<_> = trail.iter().filter(|r| r.via == "grant").collect();
        assert_eq!(used.len(), 1, "{label}: {trail:?}");
        assert_eq!(used[0].grant_id.as_deref(), Some(g.id.as_str()));
        assert_eq!(used[0].decision, "approve");
        assert_eq!(
            used[0].executed_fingerprint.as_deref(),
            Some(reins_memory::fingerprint(&mail).as_str())
        );
        assert_eq!(
            used[0].actor.as_ref().unwrap().principal,
            format!("grant:{}", g.id)
        );

        // Revoked: never matches again; the revocation is recorded (who, when).
        let revoked = a.revoke_grant(&g.id, Some("ops")).await.unwrap();
        assert_eq!(revoked.revoked_by.as_deref(), Some("ops"));
        let counter = Counter::default();
        let b = agent(&store, &counter, "send_email", mail.clone());
        assert_eq!(
            send_as(&b, &session, "alice").await,
            RunStatus::Paused,
            "{label}"
        );
        assert_eq!(counter.total(), 0);
        assert!(matches!(
            b.revoke_grant(&g.id, Some("ops")).await,
            Err(AgentError::Store(
                reins_memory::Error::GrantAlreadyRevoked { .. }
            ))
        ));

        // Expired: never matches.
        let expired_session = sid("g-expired");
        let past = Utc::now() - chrono::Duration::hours(2);
        store
            .create_grant(
                &Grant::new(reins_message::new_id(), "send_email", past)
                    .session(&expired_session)
                    .expires_at(past + chrono::Duration::hours(1)),
            )
            .await
            .unwrap();
        let counter = Counter::default();
        let c = agent(&other, &counter, "send_email", mail.clone());
        assert_eq!(
            send_as(&c, &expired_session, "alice").await,
            RunStatus::Paused,
            "{label}: an expired grant must not match"
        );
        assert_eq!(counter.total(), 0);

        // Every use is in the trail: a grant for any session used twice, twice.
        let any = c
            .create_grant(NewGrant::tool("delete_file"), Some("ana"))
            .await
            .unwrap();
        for _ in 0..2 {
            let counter = Counter::default();
            let d = agent(&store, &counter, "delete_file", json!({"path": "t.txt"}));
            let s = sid("g-any");
            assert_eq!(send_as(&d, &s, "carol").await, RunStatus::Completed);
            assert_eq!(counter.count("delete_file"), 1);
            let trail = d.session(&s).await.unwrap().decisions().await.unwrap();
            assert_eq!(
                trail
                    .iter()
                    .filter(|r| r.grant_id.as_deref() == Some(any.id.as_str()))
                    .count(),
                1
            );
        }
        // A bad grant is refused and nothing is stored.
        let before = store.list_grants(&GrantFilter::all()).await.unwrap().len();
        let bad = c
            .create_grant(
                NewGrant {
                    conditions: vec![ArgCondition {
                        pointer: "to".into(),
                        ..ArgCondition::one_of("/to", ["a@example.com"])
                    }],
                    ..NewGrant::tool("send_email")
                },
                Some("ana"),
            )
            .await;
        assert!(
            matches!(
                bad,
                Err(AgentError::Store(reins_memory::Error::InvalidGrant { .. }))
            ),
            "{bad:?}"
        );
        assert_eq!(
            store.list_grants(&GrantFilter::all()).await.unwrap().len(),
            before
        );
    }
}

/// A deny rule (a grant with `effect: deny`) rejects a matching call without asking,
/// before any allow grant, with its note for the model; it is audited `via: grant`
/// with its id; a session outside its scope still asks; revoked, the call asks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_rejects_without_asking_until_revoked() {
    for (label, store, _other, _keep) in store_pairs("deny").await {
        let counter = Counter::default();
        let args = json!({"path": "a.txt"});
        let session = sid("deny");
        let setup = agent(&store, &counter, "delete_file", args.clone());
        let allow = setup
            .create_grant(NewGrant::tool("delete_file"), Some("ana"))
            .await
            .unwrap();
        let deny = setup
            .create_grant(
                NewGrant {
                    effect: GrantEffect::Deny,
                    session: Some(session.clone()),
                    note: Some("not in this chat".into()),
                    ..NewGrant::tool("delete_file")
                },
                Some("ana"),
            )
            .await
            .unwrap();
        assert_eq!(deny.effect, GrantEffect::Deny);
        let stored = store.grant(&deny.id).await.unwrap().unwrap();
        assert_eq!(stored.effect, GrantEffect::Deny, "{label}");

        let a = agent(&store, &counter, "delete_file", args.clone());
        let out = a
            .session(&session)
            .await
            .unwrap()
            .send(Msg::user("go"))
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(counter.count("delete_file"), 0, "{label}");
        let s = a.session(&session).await.unwrap();
        let results: Vec<_> = s
            .messages()
            .await
            .unwrap()
            .iter()
            .flat_map(|m| m.tool_results_iter().cloned().collect::<Vec<_>>())
            .collect();
        assert!(
            matches!(&results[0].outcome, ToolOutcome::Rejected { note: Some(n) } if n.contains("not in this chat")),
            "{label}: {results:?}"
        );
        let trail = s.decisions().await.unwrap();
        let rec = trail.iter().find(|r| r.via == "grant").unwrap();
        assert_eq!(rec.decision, "reject", "{label}");
        assert_eq!(rec.grant_id.as_deref(), Some(deny.id.as_str()), "{label}");

        // Outside its scope the allow grant applies; revoked, the session's call is
        // allowed by the grant again (the deny rule no longer wins).
        let elsewhere = agent(&store, &counter, "delete_file", args.clone());
        assert_eq!(
            send_as(&elsewhere, &sid("other"), "bob").await,
            RunStatus::Completed
        );
        assert_eq!(counter.count("delete_file"), 1, "{label}");
        setup.revoke_grant(&deny.id, Some("ana")).await.unwrap();
        let again = agent(&store, &counter, "delete_file", args.clone());
        assert_eq!(send_as(&again, &session, "bob").await, RunStatus::Completed);
        assert_eq!(counter.count("delete_file"), 2, "{label}");
        setup.revoke_grant(&allow.id, Some("ana")).await.unwrap();
        let asks = agent(&store, &counter, "delete_file", args);
        assert_eq!(send_as(&asks, &session, "bob").await, RunStatus::Paused);
    }
}

/// Allows mail to @example.com, denies `.invalid` addresses, asks about the rest.
struct Office;

#[async_trait]
impl ApprovalPolicy for Office {
    async fn decide(&self, call: PolicyRequest<'_>) -> PolicyVerdict {
        let to = call.arguments["to"].as_str().unwrap_or_default();
        match call.tool {
            "send_email" if to.ends_with("@example.com") => PolicyVerdict::allow(format!(
                "internal mail for {}",
                call.principal.unwrap_or("?")
            )),
            "send_email" if to.ends_with(".invalid") => {
                PolicyVerdict::deny("that address cannot exist")
            }
            _ => PolicyVerdict::Ask,
        }
    }
}

fn with_policy(store: &SharedStore, counter: &Counter, args: Value) -> Agent {
    Agent::builder()
        .model(ScriptedModel::new([
            call("c1", "send_email", args),
            text("done"),
        ]))
        .toolkit(toolkit(counter, ToolPolicy::confirm()))
        .store_arc(store.clone())
        .approval_policy(Office)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_hook_allows_denies_or_asks_before_the_grants() {
    let store: SharedStore = std::sync::Arc::new(reins_memory::InMemoryStore::new());
    // A grant that would allow every mail: the policy is asked first.
    store
        .create_grant(&Grant::new("all-mail", "send_email", Utc::now()))
        .await
        .unwrap();

    // Allow: runs; the reason is in the audit trail.
    let counter = Counter::default();
    let a = with_policy(&store, &counter, json!({"to": "bob@example.com"}));
    let s = sid("p-allow");
    assert_eq!(send_as(&a, &s, "alice").await, RunStatus::Completed);
    assert_eq!(counter.count("send_email"), 1);
    let trail = a.session(&s).await.unwrap().decisions().await.unwrap();
    assert_eq!(trail.len(), 1);
    assert_eq!(trail[0].via, "policy");
    assert_eq!(trail[0].decision, "approve");
    assert_eq!(trail[0].note.as_deref(), Some("internal mail for alice"));
    assert_eq!(trail[0].grant_id, None);

    // Deny beats the grant: rejected as a person's rejection, the model reads the note.
    let counter = Counter::default();
    let a = with_policy(&store, &counter, json!({"to": "x@nowhere.invalid"}));
    let s = sid("p-deny");
    assert_eq!(send_as(&a, &s, "alice").await, RunStatus::Completed);
    assert_eq!(counter.total(), 0);
    let session = a.session(&s).await.unwrap();
    let result = session
        .messages()
        .await
        .unwrap()
        .iter()
        .flat_map(|m| m.tool_results_iter().cloned().collect::<Vec<_>>())
        .next()
        .unwrap();
    assert!(
        matches!(result.outcome, ToolOutcome::Rejected { .. }),
        "{result:?}"
    );
    assert!(
        result.text().contains("that address cannot exist"),
        "{result:?}"
    );
    let trail = session.decisions().await.unwrap();
    assert_eq!(trail[0].via, "policy");
    assert_eq!(trail[0].decision, "reject");
    assert_eq!(trail[0].note.as_deref(), Some("that address cannot exist"));

    // Ask: the grants come next (the grant allows it).
    let counter = Counter::default();
    let a = with_policy(&store, &counter, json!({"to": "carol@partner.org"}));
    let s = sid("p-ask");
    assert_eq!(send_as(&a, &s, "alice").await, RunStatus::Completed);
    assert_eq!(counter.count("send_email"), 1);
    let trail = a.session(&s).await.unwrap().decisions().await.unwrap();
    assert_eq!(trail[0].via, "grant");
    assert_eq!(trail[0].grant_id.as_deref(), Some("all-mail"));

    // Ask with no grant: a person decides.
    store
        .revoke_grant("all-mail", Some("ops"), Utc::now())
        .await
        .unwrap();
    let counter = Counter::default();
    let a = with_policy(&store, &counter, json!({"to": "carol@partner.org"}));
    let s = sid("p-person");
    assert_eq!(send_as(&a, &s, "alice").await, RunStatus::Paused);
    assert_eq!(counter.total(), 0);
    assert!(
        a.session(&s)
            .await
            .unwrap()
            .decisions()
            .await
            .unwrap()
            .is_empty()
    );
}

/// A worker: the first one's model asks to delete, then answers; the second one's
/// only answers (it resumes the first one's turn).
fn quorum_agent(store: &SharedStore, counter: &Counter, first: bool) -> Agent {
    let script = if first {
        vec![
            call("c1", "delete_file", json!({"path": "prod.db"})),
            text("done"),
        ]
    } else {
        vec![text("done")]
    };
    Agent::builder()
        .model(ScriptedModel::new(script))
        .toolkit(toolkit(counter, ToolPolicy::confirm()))
        .store_arc(store.clone())
        .quorum("delete_file", Quorum::of(2))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_needs_two_distinct_approvers_and_one_reject_closes_it() {
    for (label, store, other, _keep) in store_pairs("quorum").await {
        // Two agent instances on two handles of one store: two workers.
        let counter = Counter::default();
        let (a, b) = (
            quorum_agent(&store, &counter, true),
            quorum_agent(&other, &counter, false),
        );
        // Grants never stand in for a quorum.
        a.create_grant(NewGrant::tool("delete_file"), Some("ops"))
            .await
            .unwrap();
        let id = sid("q");
        let out = a
            .session(&id)
            .await
            .unwrap()
            .send(Msg::user("drop it"))
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Paused, "{label}");
        let q = out.requirements[0].quorum.clone().expect("a quorum");
        assert_eq!((q.needed, q.approvals.len()), (2, 0));

        // First approval (worker a): counted, still pending, nothing ran.
        let ana = a.session(&id).await.unwrap().as_actor(Actor::new("ana"));
        let out = ana.resolve(vec![Decision::approve("c1")]).await.unwrap();
        assert_eq!(out.status, RunStatus::Paused, "{label}");
        let q = out.requirements[0].quorum.clone().unwrap();
        assert_eq!(
            q.approvals
                .iter()
                .map(|x| x.by.as_str())
                .collect::<Vec<_>>(),
            ["ana"]
        );
        assert_eq!(counter.total(), 0);
        // Worker b reads the count from the store.
        let pending = b.session(&id).await.unwrap().requirements().await.unwrap();
        assert_eq!(pending[0].quorum.as_ref().unwrap().approvals.len(), 1);

        // The same approver again: refused, nothing changed (also through `by`).
        let version = store.session_version(&id).await.unwrap();
        let again = b
            .session(&id)
            .await
            .unwrap()
            .resolve(vec![Decision::approve("c1").by("ana")])
            .await;
        assert!(
            matches!(again, Err(AgentError::AlreadyApproved { ref by, count: 1, needed: 2, .. }) if by == "ana"),
            "{label}: {again:?}"
        );
        assert_eq!(store.session_version(&id).await.unwrap(), version);
        assert_eq!(counter.total(), 0);
        // resume() does not stand in for the approvers either.
        assert!(matches!(
            a.session(&id).await.unwrap().resume().await,
            Err(AgentError::InvalidInput(_))
        ));

        // Second approver on worker b completes it: the call runs once.
        let bob = b.session(&id).await.unwrap().as_actor(Actor::new("bob"));
        let out = bob.resolve(vec![Decision::approve("c1")]).await.unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(counter.count("delete_file"), 1);
        let trail = a.session(&id).await.unwrap().decisions().await.unwrap();
        let counts: Vec<_> = trail
            .iter()
            .filter(|r| r.verdict == reins_agent::Verdict::Applied)
            .map(|r| {
                (
                    r.actor.as_ref().unwrap().principal.clone(),
                    r.quorum.map(|q| (q.approvals, q.needed)),
                )
            })
            .collect();
        assert_eq!(
            counts,
            [
                ("ana".to_owned(), Some((1, 2))),
                ("bob".to_owned(), Some((2, 2)))
            ],
            "{label}"
        );
        assert!(trail.iter().any(|r| r.verdict != reins_agent::Verdict::Applied
            && matches!(&r.verdict, reins_agent::Verdict::Refused { reason, .. } if reason == "already_approved")));
        // A late third approver: already decided.
        let late = a
            .session(&id)
            .await
            .unwrap()
            .resolve(vec![Decision::approve("c1").by("carol")])
            .await;
        assert!(
            matches!(late, Err(AgentError::AlreadyDecided { .. })),
            "{late:?}"
        );

        // One reject closes it.
        let counter = Counter::default();
        let (a, b) = (
            quorum_agent(&store, &counter, true),
            quorum_agent(&other, &counter, false),
        );
        let id = sid("q-reject");
        a.session(&id)
            .await
            .unwrap()
            .send(Msg::user("drop it"))
            .await
            .unwrap();
        let ana = a.session(&id).await.unwrap().as_actor(Actor::new("ana"));
        ana.resolve(vec![Decision::approve("c1")]).await.unwrap();
        let bob = b.session(&id).await.unwrap().as_actor(Actor::new("bob"));
        let out = bob
            .resolve(vec![Decision::reject("c1", "not prod")])
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(counter.total(), 0);
        let late = a
            .session(&id)
            .await
            .unwrap()
            .resolve(vec![Decision::approve("c1").by("carol")])
            .await;
        assert!(
            matches!(late, Err(AgentError::AlreadyDecided { .. })),
            "{late:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_approvers_on_two_workers_lose_no_approval() {
    for (label, store, other, _keep) in store_pairs("quorum_race").await {
        for round in 0..5 {
            let counter = Counter::default();
            let (a, b) = (
                quorum_agent(&store, &counter, true),
                quorum_agent(&other, &counter, false),
            );
            let id = sid("q-race");
            a.session(&id)
                .await
                .unwrap()
                .send(Msg::user("drop it"))
                .await
                .unwrap();
            let ana = a.session(&id).await.unwrap().as_actor(Actor::new("ana"));
            let bob = b.session(&id).await.unwrap().as_actor(Actor::new("bob"));
            let decide = |s: reins_agent::Session| async move {
                // A busy session (the other approval in flight) is tried again.
                for _ in 0..200 {
                    match s.resolve(vec![Decision::approve("c1")]).await {
                        Err(AgentError::SessionBusy { .. }) => {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        other => return other,
                    }
                }
                panic!("still busy after 200 tries")
            };
            let (x, y) = tokio::join!(decide(ana), decide(bob));
            let statuses = [x.unwrap().status, y.unwrap().status];
            assert!(
                statuses.contains(&RunStatus::Paused) && statuses.contains(&RunStatus::Completed),
                "{label} round {round}: {statuses:?}"
            );
            assert_eq!(counter.count("delete_file"), 1, "{label} round {round}");
        }
    }
}

#[tokio::test]
async fn a_quorum_with_roles_counts_only_those_roles() {
    let store: SharedStore = std::sync::Arc::new(reins_memory::InMemoryStore::new());
    let counter = Counter::default();
    let agent = Agent::builder()
        .model(ScriptedModel::new([
            call("c1", "delete_file", json!({"path": "prod.db"})),
            text("done"),
        ]))
        .toolkit(toolkit(&counter, ToolPolicy::confirm()))
        .store_arc(store.clone())
        .quorum("delete_file", Quorum::of(2).roles(["dba"]))
        .build()
        .unwrap();
    let s = agent.session("roles").await.unwrap();
    s.send(Msg::user("drop")).await.unwrap();
    let intern = s.as_actor(Actor::new("ivan").with_metadata(json!({"roles": ["intern"]})));
    let err = intern
        .resolve(vec![Decision::approve("c1")])
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::NotEligible { .. }), "{err}");
    let anon = s.resolve(vec![Decision::approve("c1")]).await.unwrap_err();
    assert!(matches!(anon, AgentError::NotEligible { .. }), "{anon}");
    for who in ["dora", "dave"] {
        let dba = s.as_actor(Actor::new(who).with_metadata(json!({"roles": ["dba"]})));
        dba.resolve(vec![Decision::approve("c1")]).await.unwrap();
    }
    assert_eq!(counter.count("delete_file"), 1);
    assert!(matches!(
        Agent::builder()
            .model(ScriptedModel::new([]))
            .quorum("x", Quorum::of(1))
            .build(),
        Err(AgentError::Config(_))
    ));
}
