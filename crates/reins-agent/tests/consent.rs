//! Approvals bound to what was shown (issue #24): a decision carrying the fingerprint
//! of other arguments is refused with nothing changed; an edit records a new
//! fingerprint; a decision is single-use; requirements expire after a per-tool TTL.
//! Every scenario runs on the in-memory store, SQLite and PostgreSQL (fails under
//! `CI=true` without a server, reported SKIPPED elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::time::Duration;

use reins_agent::{Agent, AgentError, Decision, RunStatus, Verdict};
use reins_message::Msg;
use reins_model::ScriptedModel;
use reins_tool::ToolPolicy;
use serde_json::json;
use support::*;

fn sid() -> String {
    format!("consent-{}", reins_message::new_id())
}

fn gated(
    store: &SharedStore,
    counter: &Counter,
    model: ScriptedModel,
) -> reins_agent::AgentBuilder {
    Agent::builder()
        .name("careful")
        .model(model)
        .toolkit(toolkit(counter, ToolPolicy::confirm()))
        .store_arc(store.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_bound_to_other_arguments_is_refused_and_changes_nothing() {
    for (label, store, _, _keep) in store_pairs("cfp").await {
        let counter = Counter::default();
        let agent = gated(
            &store,
            &counter,
            ScriptedModel::new([
                call("c1", "delete_file", json!({"path": "a.txt"})),
                text("done"),
            ]),
        )
        .build()
        .unwrap();
        let id = sid();
        let session = agent.session(&id).await.unwrap();
        let out = session.send(Msg::user("delete a.txt")).await.unwrap();
        let shown = out.requirements[0].fingerprint();
        assert_eq!(shown, reins_memory::fingerprint(&json!({"path": "a.txt"})));
        let version = store.session_version(&id).await.unwrap();

        // Approved on what another screen showed (other arguments): refused.
        let other = reins_memory::fingerprint(&json!({"path": "important.txt"}));
        let err = session
            .resolve(vec![Decision::approve("c1").shown(other.clone()).by("ana")])
            .await
            .unwrap_err();
        assert!(
            matches!(&err, AgentError::ShownArgumentsChanged { id, shown: s, current }
                if id == "c1" && *s == other && *current == shown),
            "{label}: {err}"
        );
        assert_eq!(counter.count("delete_file"), 0, "{label}");
        assert_eq!(
            store.session_version(&id).await.unwrap(),
            version,
            "{label}"
        );
        assert_eq!(session.requirements().await.unwrap().len(), 1, "{label}");
        let trail = session.decisions().await.unwrap();
        assert!(
            matches!(&trail[..], [r] if matches!(&r.verdict, Verdict::Refused { reason, .. } if reason == "fingerprint_mismatch")),
            "{label}: {trail:?}"
        );

        // Approved with an edit, bound to what was shown: runs once; the trail keeps
        // both fingerprints.
        let edited = json!({"path": "b.txt"});
        let out = session
            .resolve(vec![
                Decision::approve_with("c1", edited.clone())
                    .shown(shown.clone())
                    .by("ana"),
            ])
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(
            counter.args("delete_file"),
            std::slice::from_ref(&edited),
            "{label}"
        );
        let trail = session.decisions().await.unwrap();
        let applied = trail
            .iter()
            .find(|r| r.verdict == Verdict::Applied)
            .unwrap();
        assert_eq!(
            applied.shown_fingerprint.as_deref(),
            Some(shown.as_str()),
            "{label}"
        );
        assert_eq!(
            applied.executed_fingerprint,
            Some(reins_memory::fingerprint(&edited)),
            "{label}"
        );

        // Single use: the same decision again is refused and runs nothing.
        let version = store.session_version(&id).await.unwrap();
        let err = session
            .resolve(vec![Decision::approve("c1").shown(shown).by("ana")])
            .await
            .unwrap_err();
        assert!(
            matches!(err, AgentError::AlreadyDecided { .. }),
            "{label}: {err}"
        );
        assert_eq!(counter.count("delete_file"), 1, "{label}");
        assert_eq!(
            store.session_version(&id).await.unwrap(),
            version,
            "{label}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requirements_expire_after_their_tools_ttl() {
    for (label, store, _, _keep) in store_pairs("cttl").await {
        let counter = Counter::default();
        let agent = gated(
            &store,
            &counter,
            ScriptedModel::new([
                call("c1", "delete_file", json!({"path": "a.txt"})),
                call("c2", "send_email", json!({"to": "ops", "body": "hi"})),
                text("done"),
            ]),
        )
        .requirement_ttl(Duration::from_secs(3600))
        .approval_ttl("delete_file", Duration::from_secs(1))
        .build()
        .unwrap();
        let id = sid();
        let session = agent.session(&id).await.unwrap();
        let out = session.send(Msg::user("delete a.txt")).await.unwrap();
        let r = &out.requirements[0];
        let ttl = r.expires_at.unwrap() - r.created_at;
        assert_eq!(ttl.num_seconds(), 1, "{label}: the tool's own TTL");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let version = store.session_version(&id).await.unwrap();
        let err = session
            .resolve(vec![Decision::approve("c1").by("ana")])
            .await
            .unwrap_err();
        assert!(
            matches!(err, AgentError::RequirementExpired { .. }),
            "{label}: {err}"
        );
        assert_eq!(counter.count("delete_file"), 0, "{label}");
        assert_eq!(
            store.session_version(&id).await.unwrap(),
            version,
            "{label}"
        );
        // A new message still closes it; the next tool gets the default TTL.
        let out = session.send(Msg::user("then mail ops")).await.unwrap();
        let r = &out.requirements[0];
        assert_eq!(r.tool_use.name, "send_email", "{label}");
        assert_eq!(
            (r.expires_at.unwrap() - r.created_at).num_seconds(),
            3600,
            "{label}"
        );
    }
}
