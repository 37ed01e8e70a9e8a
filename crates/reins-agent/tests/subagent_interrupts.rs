//! Sub-agents under interrupts and races: an interrupt of the parent (in process or
//! from another) stops the running child, and two concurrent resolutions of the
//! parent run the child's tool once. Every scenario runs on the in-memory store,
//! SQLite and PostgreSQL (fails under `CI=true` without a server, reported SKIPPED
//! elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// These tests drive the run verbs of 0.1 through their deprecated wrappers.

mod support;

use std::time::Duration;

use reins_agent::{AgentError, Decision, RunStatus, child_session_id};
use reins_message::{Msg, ToolOutcome};
use reins_model::ScriptedModel;
use reins_tool::ToolPolicy;
use serde_json::json;
use support::subagents::*;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_of_the_parent_stops_the_running_child() {
    for (label, store, _, _keep) in store_pairs("sintr").await {
        let counter = Counter::default();
        let lead = team(
            &store,
            lead_script(),
            ScriptedModel::new([
                call("c1", "slow", json!({"ms": 60_000})),
                text("never reached"),
            ]),
            &counter,
            ToolPolicy::confirm(),
        );
        let id = sid();
        let session = lead.session(&id).await.unwrap();
        let handle = session
            .send(Msg::user("research slowly"))
            .start()
            .await
            .unwrap();
        // Wait until the child's tool is running (no timing assertion: just polling).
        for _ in 0..6_000 {
            if counter.count("slow") > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            counter.count("slow"),
            1,
            "{label}: the child's tool never started"
        );
        handle.interrupt();
        let out = handle.wait().await.unwrap();
        assert_eq!(out.status, RunStatus::Cancelled, "{label}");

        let parent_msgs = session.messages().await.unwrap();
        assert_valid(&parent_msgs);
        assert_eq!(
            outcomes(&parent_msgs).get("p1"),
            Some(&ToolOutcome::Interrupted),
            "{label}"
        );
        let child = lead
            .subagent("research")
            .unwrap()
            .session(&child_session_id(&id, "p1"))
            .await
            .unwrap();
        let child_msgs = child.messages().await.unwrap();
        assert_valid(&child_msgs);
        assert_eq!(
            outcomes(&child_msgs).get("c1"),
            Some(&ToolOutcome::Interrupted),
            "{label}"
        );
        assert!(!child.is_paused().await.unwrap(), "{label}");
        // The session goes on: a new message works at the parent.
        let lead2 = team(
            &store,
            ScriptedModel::new([text("ok")]),
            ScriptedModel::new(Vec::<reins_model::ScriptedResponse>::new()),
            &counter,
            ToolPolicy::confirm(),
        );
        let out = lead2
            .session(&id)
            .await
            .unwrap()
            .send(Msg::user("never mind"))
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{label}");
    }
}

/// An interrupt requested through the store by another worker (`request_interrupt`)
/// reaches the running child through the parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_interrupt_of_the_parent_stops_the_running_child() {
    for (label, sa, sb, _keep) in store_pairs("sremote").await {
        let counter = Counter::default();
        let a = team(
            &sa,
            lead_script(),
            ScriptedModel::new([call("c1", "slow", json!({"ms": 60_000})), text("never")]),
            &counter,
            ToolPolicy::confirm(),
        );
        let b = team(
            &sb,
            ScriptedModel::new(Vec::<reins_model::ScriptedResponse>::new()),
            ScriptedModel::new(Vec::<reins_model::ScriptedResponse>::new()),
            &counter,
            ToolPolicy::confirm(),
        );
        let id = sid();
        let handle = a
            .session(&id)
            .await
            .unwrap()
            .send(Msg::user("research slowly"))
            .start()
            .await
            .unwrap();
        for _ in 0..6_000 {
            if counter.count("slow") > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            counter.count("slow"),
            1,
            "{label}: the child's tool never started"
        );
        let hb = b.session(&id).await.unwrap();
        assert!(hb.request_interrupt().await.unwrap(), "{label}");
        let out = tokio::time::timeout(Duration::from_secs(30), handle.wait())
            .await
            .unwrap_or_else(|_| panic!("{label}: the run never noticed the interrupt"))
            .unwrap();
        assert_eq!(out.status, RunStatus::Cancelled, "{label}");
        let parent_msgs = hb.messages().await.unwrap();
        assert_valid(&parent_msgs);
        assert_eq!(
            outcomes(&parent_msgs).get("p1"),
            Some(&ToolOutcome::Interrupted),
            "{label}"
        );
        let child = b
            .subagent("research")
            .unwrap()
            .session(&child_session_id(&id, "p1"))
            .await
            .unwrap();
        let child_msgs = child.messages().await.unwrap();
        assert_valid(&child_msgs);
        assert_eq!(
            outcomes(&child_msgs).get("c1"),
            Some(&ToolOutcome::Interrupted),
            "{label}"
        );
    }
}

/// Two workers resolve the same paused parent at once: the child's tool runs once,
/// whoever wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_resolutions_of_the_parent_run_the_childs_tool_once() {
    for (label, sa, sb, _keep) in store_pairs("srace").await {
        for round in 0..4 {
            let counter = Counter::default();
            let a = team(
                &sa,
                lead_script(),
                research_script(),
                &counter,
                ToolPolicy::confirm(),
            );
            // B's models answer from where A's scripts would be after the pause.
            let b = team(
                &sb,
                ScriptedModel::new([text("research reports: done")]),
                ScriptedModel::new([text("the report went out")]),
                &counter,
                ToolPolicy::confirm(),
            );
            let id = sid();
            let sa_ = a.session(&id).await.unwrap();
            let out = sa_.send(Msg::user("send ops the report")).await.unwrap();
            assert_eq!(out.status, RunStatus::Paused, "{label}");
            let sb_ = b.session(&id).await.unwrap();
            assert!(sb_.is_paused().await.unwrap(), "{label}");
            let (ra, rb) = tokio::join!(sa_.resolve(vec![Decision::approve("p1/c1")]), async {
                if round % 2 == 1 {
                    sb_.resume().await
                } else {
                    sb_.resolve(vec![Decision::approve("p1/c1")]).await
                }
            });
            let completed = [&ra, &rb]
                .iter()
                .filter(|r| matches!(r, Ok(o) if o.status == RunStatus::Completed))
                .count();
            // Exactly one wins; the other always hears that it came too late.
            assert_eq!(completed, 1, "{label} round {round}: {ra:?} {rb:?}");
            assert_eq!(counter.count("send_email"), 1, "{label} round {round}");
            // A decision that lost names the one that won; a `resume()` that lost
            // (it names no requirement) is busy or stale.
            for (r, resumed) in [(&ra, false), (&rb, round % 2 == 1)] {
                if let Err(e) = r {
                    assert!(
                        matches!(e, AgentError::AlreadyDecided { .. })
                            || (resumed
                                && matches!(
                                    e,
                                    AgentError::SessionBusy { .. }
                                        | AgentError::StaleView { .. }
                                        | AgentError::NothingToResume { .. }
                                )),
                        "{label} round {round}: {e}"
                    );
                }
            }
            let msgs = sa_.messages().await.unwrap();
            assert_valid(&msgs);
        }
    }
}
