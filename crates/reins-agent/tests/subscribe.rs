//! Following sessions through the port (`Sessions::subscribe`): a door that holds only
//! the port hears, as typed events, each session that moved — the requirement a run
//! waits on, then the approval that cleared it with a higher version — whichever
//! process wrote it; a scoped subscription hears only its sessions; a dropped
//! subscription stops. On memory (one store: the feed names the session), SQLite (a
//! second handle on the same file: the change comes through polling, unnamed) and
//! PostgreSQL (a second pool: `LISTEN/NOTIFY`; required under `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reins_agent::port::{
    Decide, LiveEvent, Relayed, SessionChange, SessionEvent, SessionEvents, Sessions, Watch,
};
use reins_agent::{Actor, Agent, Decision, RunEvent, RunInput, RunStatus, Submission};
use reins_message::Msg;
use reins_model::ScriptedModel;
use reins_tool::ToolPolicy;
use serde_json::json;
use support::{Counter, agent, call, store_pairs, text, toolkit};

/// How long a test waits for an event before it fails (never a wait it relies on: an
/// event that comes returns at once).
const FAIL_AFTER: Duration = Duration::from_secs(30);

/// The next event of `events` that `pick` accepts, failing on a subscription that
/// ends or after [`FAIL_AFTER`].
async fn next_matching<T>(
    label: &str,
    events: &mut SessionEvents,
    mut pick: impl FnMut(&SessionEvent) -> Option<T>,
) -> T {
    let wait = async {
        loop {
            match events.next().await {
                Some(ev) => {
                    if let Some(t) = pick(&ev) {
                        return t;
                    }
                }
                None => panic!("{label}: the subscription ended"),
            }
        }
    };
    tokio::time::timeout(FAIL_AFTER, wait)
        .await
        .unwrap_or_else(|_| panic!("{label}: no such event within {FAIL_AFTER:?}"))
}

/// The change of `session` that `ok` accepts.
fn change_of(
    session: &'static str,
    ok: impl Fn(&SessionChange) -> bool,
) -> impl FnMut(&SessionEvent) -> Option<Arc<SessionChange>> {
    move |ev| match ev {
        SessionEvent::Changed(c) if c.session == session && ok(c) => Some(c.clone()),
        _ => None,
    }
}

fn message(text: &str) -> Submission {
    Submission::new(RunInput::Message(Msg::user(text)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_hears_the_waiting_requirement_then_its_approval_on_every_store() {
    for (label, a, b, _keep) in store_pairs("subscribe").await {
        // The runs execute on one handle; the door follows through another.
        let model = ScriptedModel::new([
            call("call_1", "delete_file", json!({"path": "a.txt"})),
            text("a.txt is gone."),
            text("hello u"),
        ]);
        let runner: Arc<dyn Sessions> = Arc::new(
            agent(model, toolkit(&Counter::default(), ToolPolicy::confirm()))
                .store(a)
                .build()
                .unwrap(),
        );
        let door: Arc<dyn Sessions> = Arc::new(
            Agent::builder()
                .model(ScriptedModel::new([]))
                .store(b)
                .build()
                .unwrap(),
        );
        let record_refs = Arc::strong_count(door.record());
        // A short re-check, so that the test also covers a re-check racing the feed;
        // the events do not depend on it.
        let mut one = door
            .subscribe(Watch::session("t/1").recheck(Duration::from_millis(50)))
            .await
            .unwrap();
        let mut tenant = door.subscribe(Watch::prefix("t/")).await.unwrap();
        let mut others = door.subscribe(Watch::prefix("u/")).await.unwrap();
        let mut every = door.subscribe(Watch::every()).await.unwrap();
        assert_eq!(Arc::strong_count(door.record()), record_refs + 4, "{label}");

        // A tool call that needs approval: the session waits for call_1.
        let out = runner
            .start("t/1", message("delete a.txt"))
            .await
            .unwrap()
            .wait()
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Paused, "{label}");
        let waiting = |c: &SessionChange| {
            c.open_requirements.len() == 1
                && c.open_requirements[0].id == "call_1"
                && c.open_requirements[0].tool.as_deref() == Some("delete_file")
        };
        let paused_at = door.read("t/1", false).await.unwrap().view.version;
        for events in [&mut one, &mut tenant, &mut every] {
            let c = next_matching(label, events, change_of("t/1", waiting)).await;
            assert!(c.is_waiting() && c.message_count >= 2, "{label}: {c:?}");
            assert!(c.version <= paused_at, "{label}: {c:?}");
        }

        // The approval: the session waits for nobody, at a higher version.
        let decide = Decide::new(Actor::new("ana"), vec![Decision::approve("call_1")]);
        let out = runner
            .decide("t/1", decide)
            .await
            .unwrap()
            .wait()
            .await
            .unwrap();
        assert_eq!(out.message.text(), "a.txt is gone.", "{label}");
        let final_count = door.read("t/1", false).await.unwrap().message_count as u64;
        for events in [&mut one, &mut tenant, &mut every] {
            let c = next_matching(
                label,
                events,
                change_of("t/1", |c| c.message_count == final_count),
            )
            .await;
            assert!(!c.is_waiting(), "{label}: {c:?}");
            assert!(c.version > paused_at, "{label}: {c:?}");
        }

        // Another tenant's session: only `u/` and the unscoped subscription hear it,
        // and `u/`'s first event is it (it heard nothing of t/1 before).
        runner
            .start("u/1", message("hi"))
            .await
            .unwrap()
            .wait()
            .await
            .unwrap();
        let first = next_matching(label, &mut others, |ev| Some(ev.clone())).await;
        assert_eq!(first.session(), Some("u/1"), "{label}: {first:?}");
        next_matching(label, &mut every, change_of("u/1", |_| true)).await;
        // Then a change of t/1 again: the scoped subscriptions' next events are t/1's,
        // so they never heard u/1.
        door.record()
            .delete_session("t/1")
            .await
            .expect("delete t/1");
        for events in [&mut one, &mut tenant] {
            let ev = next_matching(label, events, |ev| Some(ev.clone())).await;
            assert_eq!(
                ev,
                SessionEvent::Removed {
                    session: "t/1".to_owned()
                },
                "{label}"
            );
        }

        // Dropping the streams stops their tasks (each held the record).
        drop((one, tenant, others, every));
        let released = async {
            while Arc::strong_count(door.record()) != record_refs {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(FAIL_AFTER, released)
            .await
            .unwrap_or_else(|_| panic!("{label}: a dropped subscription still runs"));
    }
}

#[tokio::test]
async fn a_relayed_port_passes_on_the_live_events_of_the_sessions_in_scope() {
    // The port over a driver whose own processes run the sessions (here an agent on
    // the same store) and relay their live events to it.
    let store: Arc<dyn reins_memory::MemoryStore> = Arc::new(reins_memory::InMemoryStore::new());
    let build = || {
        Agent::builder()
            .model(ScriptedModel::new([]))
            .store_arc(store.clone())
            .build()
            .unwrap()
    };
    let port = Relayed::new(build(), Arc::new(build()));
    let mut tenant = port.subscribe(Watch::prefix("t/")).await.unwrap();
    let mut stored = port
        .subscribe(Watch::prefix("t/").stored_only())
        .await
        .unwrap();
    let delta = |text: &str| {
        LiveEvent::relayed(
            RunEvent::TextDelta {
                text: text.to_owned(),
            },
            Some("run_1".to_owned()),
            None,
        )
    };
    port.relay("u/1", vec![delta("not yours")]).unwrap();
    port.relay("t/1", vec![delta("hel"), delta("lo")]).unwrap();
    let mut heard = Vec::new();
    while heard.len() < 2 {
        let ev = next_matching("relayed", &mut tenant, |ev| Some(ev.clone())).await;
        match ev {
            SessionEvent::Live { session, event } => {
                assert_eq!(session, "t/1");
                assert_eq!(event.run_id.as_deref(), Some("run_1"));
                heard.push(event.event);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        heard,
        [
            RunEvent::TextDelta {
                text: "hel".to_owned()
            },
            RunEvent::TextDelta {
                text: "lo".to_owned()
            },
        ]
    );
    // What the step commits comes after; a subscription to the store alone hears only
    // that.
    let state = store.open_session("t/1").await.unwrap();
    let mut commit = reins_memory::Commit::at(state.version);
    commit.append = vec![Msg::assistant("hello")];
    store.commit("t/1", commit).await.unwrap();
    for events in [&mut tenant, &mut stored] {
        let ev = next_matching("relayed", events, |ev| Some(ev.clone())).await;
        assert!(
            matches!(&ev, SessionEvent::Changed(c) if c.session == "t/1" && c.message_count == 1),
            "{ev:?}"
        );
    }
}
