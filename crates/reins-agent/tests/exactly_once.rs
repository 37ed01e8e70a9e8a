//! Exactly once, seen from outside: every execution carries a stable idempotency key
//! that reaches the far end (a loopback mail API that dedupes by it), and a call whose
//! process died mid-call is reconciled — the tool looks its key up — instead of being
//! guessed `Unknown`. On memory and SQLite; the real-process version is the SIGKILL
//! harness in `crash.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use reins_hook::{Control, Hook, HookContext, HookError, HookEvent, HookEventKind};

use reins_agent::{Agent, Decision, DecisionRecord, RunEvent, RunOutput, RunStatus};
use reins_memory::{Claim, InMemoryStore, MemoryStore, SqliteStore};
use reins_message::{Msg, ToolOutcome};
use reins_model::ScriptedModel;
use reins_tool::{ToolContext, ToolPolicy, Toolkit, idempotency_key};
use serde_json::{Value, json};
use support::mail_api::{MailApi, MailClient};
use support::*;

const SID: &str = "mail-session";

/// `send_email` through the mail API: the call's key as `Idempotency-Key`, its
/// reconcile a lookup by key. `runs` counts how often the tool's body started.
fn mail_tools(client: MailClient, runs: &Counter, policy: ToolPolicy) -> Toolkit {
    let mut t = Toolkit::new();
    let (c, send) = (runs.clone(), client.clone());
    t.add(
        Toolkit::function(
            "send_email",
            "Send an email",
            move |a: EmailArgs, ctx: ToolContext| {
                let (c, send) = (c.clone(), send.clone());
                async move {
                    c.record("send_email", json!({ "key": ctx.idempotency_key() }));
                    send.send(&ctx, &a.to).await
                }
            },
        )
        .policy(policy)
        .reconcile(move |ctx: ToolContext| {
            let client = client.clone();
            async move { client.lookup(&ctx).await }
        }),
    )
    .unwrap();
    t
}

fn script() -> ScriptedModel {
    ScriptedModel::from_fn(|req| {
        if req.messages.iter().any(|m| m.has_tool_results()) {
            text("Done.")
        } else {
            call("c1", "send_email", json!({"to": "a@example.com"}))
        }
    })
}

/// Records the `Reconciled` hook events it sees: (tool use id, verdict, key).
#[derive(Default, Clone)]
struct SeenVerdicts(Arc<Mutex<Vec<(String, String, String)>>>);

#[async_trait]
impl Hook for SeenVerdicts {
    fn name(&self) -> &str {
        "seen_verdicts"
    }
    fn interested(&self, kind: HookEventKind) -> bool {
        kind == HookEventKind::Reconciled
    }
    async fn on_event(
        &self,
        event: &mut HookEvent,
        _ctx: &HookContext,
        _control: &mut Control,
    ) -> Result<(), HookError> {
        if let HookEvent::Reconciled {
            tool_use,
            verdict,
            idempotency_key,
        } = event
        {
            self.0.lock().unwrap().push((
                tool_use.id.clone(),
                verdict.clone(),
                idempotency_key.clone(),
            ));
        }
        Ok(())
    }
}

fn key_of(session: &str, args: &Value) -> String {
    idempotency_key(session, "c1", &reins_memory::fingerprint(args))
}

async fn stores(dir: &std::path::Path) -> Vec<(&'static str, Arc<dyn MemoryStore>)> {
    vec![
        (
            "memory",
            Arc::new(InMemoryStore::new()) as Arc<dyn MemoryStore>,
        ),
        (
            "sqlite",
            Arc::new(SqliteStore::open(dir.join("once.db")).await.unwrap()),
        ),
    ]
}

#[tokio::test]
async fn the_key_reaches_the_api_as_a_header_survives_a_reopen_and_follows_edits() {
    let api = MailApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keys.db");
    let runs = Counter::default();
    let tools = || mail_tools(MailClient::new(&api.url), &runs, ToolPolicy::confirm());
    for sid in ["as-shown", "edited"] {
        let a = agent(script(), tools())
            .store(SqliteStore::open(&db).await.unwrap())
            .build()
            .unwrap();
        let out = a
            .session(sid)
            .await
            .unwrap()
            .send(Msg::user("mail a"))
            .await
            .unwrap();
        assert_eq!(out.status, RunStatus::Paused);
    }
    // Another agent on a fresh connection to the file (a restarted process) approves.
    let b = agent(script(), tools())
        .store(SqliteStore::open(&db).await.unwrap())
        .build()
        .unwrap();
    let s = b.session("as-shown").await.unwrap();
    s.resolve(vec![Decision::approve("c1")]).await.unwrap();
    let edited = json!({"to": "b@example.com"});
    let s = b.session("edited").await.unwrap();
    s.resolve(vec![Decision::approve_with("c1", edited.clone())])
        .await
        .unwrap();

    let shown = json!({"to": "a@example.com"});
    assert_eq!(
        api.posts(),
        [
            Some(key_of("as-shown", &shown)),
            Some(key_of("edited", &edited))
        ],
        "each call's key reached the API as its Idempotency-Key header"
    );
    assert_ne!(key_of("edited", &edited), key_of("edited", &shown));
    let seen: Vec<Value> = runs
        .args("send_email")
        .into_iter()
        .map(|v| v["key"].clone())
        .collect();
    assert_eq!(
        seen,
        [
            json!(key_of("as-shown", &shown)),
            json!(key_of("edited", &edited))
        ]
    );
    let d = api.deliveries();
    assert_eq!(d.len(), 2);
    assert_eq!(
        (d[1].to.as_str(), d[1].tool_use_id.as_str()),
        ("b@example.com", "c1")
    );
}

/// What a process that died mid-call leaves behind: the ledger claim (its lease runs
/// out at once), and — when it got that far — the message the API delivered.
async fn die_mid_call(store: &Arc<dyn MemoryStore>, client: &MailClient, sent: bool) -> String {
    let args = json!({"to": "a@example.com"});
    let fp = reins_memory::fingerprint(&args);
    let claim = store
        .claim(SID, "c1", &fp, Duration::from_millis(1), false)
        .await
        .unwrap();
    assert_eq!(claim, Claim::Granted);
    let key = key_of(SID, &args);
    if sent {
        let ctx = ToolContext::new(SID, "c1").with_idempotency_key(key.clone());
        client.send(&ctx, "a@example.com").await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    key
}

async fn paused_session(agent: &Agent) {
    let out = agent
        .session(SID)
        .await
        .unwrap()
        .send(Msg::user("mail a"))
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Paused);
}

/// Approves `c1` with a started run; returns its output and events.
async fn approve_watching(agent: &Agent) -> (RunOutput, Vec<RunEvent>) {
    let s = agent.session(SID).await.unwrap();
    let mut h = s
        .resolve(vec![Decision::approve("c1")])
        .start()
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(e) = h.next_event().await {
        events.push(e);
    }
    (h.wait().await.unwrap(), events)
}

fn reconciled(events: &[RunEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            RunEvent::Reconciled {
                id,
                verdict,
                idempotency_key,
                ..
            } => {
                assert_eq!(id, "c1");
                Some((verdict.clone(), idempotency_key.clone()))
            }
            _ => None,
        })
        .collect()
}

fn reconcile_entries(log: &[DecisionRecord]) -> Vec<&DecisionRecord> {
    log.iter().filter(|r| r.kind == "reconcile").collect()
}

#[tokio::test]
async fn a_call_whose_effect_happened_is_found_by_its_key_and_not_run_again() {
    let dir = tempfile::tempdir().unwrap();
    for (label, store) in stores(dir.path()).await {
        let api = MailApi::start().await;
        let client = MailClient::new(&api.url);
        let runs = Counter::default();
        let agent = agent(
            script(),
            mail_tools(client.clone(), &runs, ToolPolicy::confirm()),
        )
        .store_arc(store.clone())
        .build()
        .unwrap();
        paused_session(&agent).await;
        // The approval ran the call in a process that died after the API delivered.
        let key = die_mid_call(&store, &client, true).await;

        let (out, events) = approve_watching(&agent).await;
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(runs.count("send_email"), 0, "{label}: not run again");
        assert_eq!(api.deliveries().len(), 1, "{label}");
        assert_eq!(
            reconciled(&events),
            [("happened".to_owned(), key.clone())],
            "{label}"
        );
        let msgs = agent.session(SID).await.unwrap().messages().await.unwrap();
        assert_eq!(outcomes(&msgs)["c1"], ToolOutcome::Success, "{label}");
        assert!(
            result_text(&msgs, "c1").contains("sent as msg-1 (found by its idempotency key)"),
            "{label}: {}",
            result_text(&msgs, "c1")
        );
        let entry = store.ledger_entry(SID, "c1").await.unwrap().unwrap();
        assert_eq!(entry.result.unwrap().metadata["reconciled"], "happened");

        let log = agent.session(SID).await.unwrap().decisions().await.unwrap();
        let rec = reconcile_entries(&log);
        assert_eq!(rec.len(), 1, "{label}: {log:?}");
        assert_eq!(
            (
                rec[0].decision.as_str(),
                rec[0].via.as_str(),
                rec[0].tool_name.as_str()
            ),
            ("happened", "recovery", "send_email")
        );
        assert!(rec[0].note.as_deref().unwrap().contains(&key), "{label}");

        // The entry travels with a snapshot (JSON and back) into another store.
        let snap = agent.session(SID).await.unwrap().snapshot().await.unwrap();
        let snap = serde_json::from_str(&serde_json::to_string(&snap).unwrap()).unwrap();
        let elsewhere = support::agent(
            script(),
            mail_tools(client.clone(), &runs, ToolPolicy::confirm()),
        )
        .build()
        .unwrap();
        let restored = elsewhere.restore(snap).await.unwrap();
        let log2 = restored.decisions().await.unwrap();
        assert_eq!(reconcile_entries(&log2).len(), 1, "{label}");
        assert_eq!(reconcile_entries(&log2)[0].decision, "happened", "{label}");
    }
}

#[tokio::test]
async fn a_call_that_never_reached_the_api_runs_again_once() {
    let dir = tempfile::tempdir().unwrap();
    for (label, store) in stores(dir.path()).await {
        let api = MailApi::start().await;
        let client = MailClient::new(&api.url);
        let runs = Counter::default();
        let seen = SeenVerdicts::default();
        let agent = agent(
            script(),
            mail_tools(client.clone(), &runs, ToolPolicy::confirm()),
        )
        .hook(seen.clone())
        .store_arc(store.clone())
        .build()
        .unwrap();
        paused_session(&agent).await;
        // The process died after the claim, before its request left.
        let key = die_mid_call(&store, &client, false).await;

        let (out, events) = approve_watching(&agent).await;
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(
            reconciled(&events),
            [("not_run".to_owned(), key.clone())],
            "{label}"
        );
        assert_eq!(
            *seen.0.lock().unwrap(),
            [("c1".to_owned(), "not_run".to_owned(), key.clone())],
            "{label}: the hook saw the verdict"
        );
        assert_eq!(runs.count("send_email"), 1, "{label}: run again, once");
        assert_eq!(
            api.posts(),
            [Some(key.clone())],
            "{label}: with the same key"
        );
        assert_eq!(api.deliveries().len(), 1, "{label}");
        let msgs = agent.session(SID).await.unwrap().messages().await.unwrap();
        assert_eq!(outcomes(&msgs)["c1"], ToolOutcome::Success, "{label}");
        assert!(result_text(&msgs, "c1").starts_with("sent to a@example.com as msg-1"));
        // The verdict is recorded before the retry runs.
        let started = events
            .iter()
            .position(|e| matches!(e, RunEvent::ToolExecutionStarted { .. }))
            .unwrap();
        let verdict = events
            .iter()
            .position(|e| matches!(e, RunEvent::Reconciled { .. }))
            .unwrap();
        assert!(verdict < started, "{label}");
        let log = agent.session(SID).await.unwrap().decisions().await.unwrap();
        assert_eq!(reconcile_entries(&log)[0].decision, "not_run", "{label}");
    }
}

#[tokio::test]
async fn when_the_tool_cannot_tell_the_call_stays_unknown_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    // An address nothing listens on: the lookup fails.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    for (label, store) in stores(dir.path()).await {
        let api = MailApi::start().await;
        let runs = Counter::default();
        let agent = agent(
            script(),
            mail_tools(MailClient::new(&dead), &runs, ToolPolicy::confirm()),
        )
        .store_arc(store.clone())
        .build()
        .unwrap();
        paused_session(&agent).await;
        let key = die_mid_call(&store, &MailClient::new(&api.url), true).await;

        let (out, events) = approve_watching(&agent).await;
        assert_eq!(out.status, RunStatus::Completed, "{label}");
        assert_eq!(
            reconciled(&events),
            [("cannot_tell".to_owned(), key)],
            "{label}"
        );
        assert_eq!(
            runs.count("send_email"),
            0,
            "{label}: never guessed into a retry"
        );
        let msgs = agent.session(SID).await.unwrap().messages().await.unwrap();
        assert_eq!(outcomes(&msgs)["c1"], ToolOutcome::Unknown, "{label}");
        let text = result_text(&msgs, "c1");
        assert!(text.contains("outcome unknown"), "{label}: {text}");
        assert!(
            text.contains("the mail API is unreachable"),
            "{label}: {text}"
        );
        let log = agent.session(SID).await.unwrap().decisions().await.unwrap();
        assert_eq!(
            reconcile_entries(&log)[0].decision,
            "cannot_tell",
            "{label}"
        );
    }
}

#[tokio::test]
async fn a_tool_that_does_not_reconcile_keeps_the_old_answer_unknown() {
    let counter = Counter::default();
    let agent = agent(script(), toolkit(&counter, ToolPolicy::confirm()))
        .build()
        .unwrap();
    paused_session(&agent).await;
    let store = agent.store().clone();
    die_mid_call(&store, &MailClient::new("http://127.0.0.1:9"), false).await;
    let (out, events) = approve_watching(&agent).await;
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("send_email"), 0);
    assert_eq!(reconciled(&events)[0].0, "cannot_tell");
    let msgs = agent.session(SID).await.unwrap().messages().await.unwrap();
    assert_eq!(outcomes(&msgs)["c1"], ToolOutcome::Unknown);
    assert_eq!(result_text(&msgs, "c1"), reins_agent::UNKNOWN_OUTCOME);
}

/// A new message closes a turn whose call died mid-run: the call is reconciled, not
/// run (the turn is over either way).
#[tokio::test]
async fn a_new_message_after_a_crash_keeps_what_the_tool_found() {
    let dir = tempfile::tempdir().unwrap();
    for (label, store) in stores(dir.path()).await {
        for sent in [true, false] {
            let sid_store = store.clone();
            let api = MailApi::start().await;
            let client = MailClient::new(&api.url);
            let runs = Counter::default();
            let agent = agent(
                script(),
                mail_tools(client.clone(), &runs, ToolPolicy::auto()),
            )
            .store_arc(sid_store.clone())
            .build()
            .unwrap();
            // The call was claimed by a process that died (before or after the send),
            // leaving the run in the acting phase.
            let session = agent.session(SID).await.unwrap();
            let fp = reins_memory::fingerprint(&json!({"to": "a@example.com"}));
            // Hold the call's lease while the first turn runs, so that it cannot run it.
            store
                .claim(SID, "c1", &fp, Duration::from_millis(300), false)
                .await
                .unwrap();
            let first = session.send(Msg::user("mail a")).await;
            assert!(
                matches!(first, Err(reins_agent::AgentError::ToolInFlight { .. })),
                "{label}: {first:?}"
            );
            if sent {
                let ctx = ToolContext::new(SID, "c1")
                    .with_idempotency_key(key_of(SID, &json!({"to": "a@example.com"})));
                client.send(&ctx, "a@example.com").await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(350)).await;
            let out = session.send(Msg::user("what happened?")).await.unwrap();
            assert_eq!(out.status, RunStatus::Completed, "{label}");
            assert_eq!(runs.count("send_email"), 0, "{label}");
            let msgs = session.messages().await.unwrap();
            let (outcome, text) = (outcomes(&msgs)["c1"].clone(), result_text(&msgs, "c1"));
            if sent {
                assert_eq!(outcome, ToolOutcome::Success, "{label}: {text}");
                assert!(text.contains("found by its idempotency key"), "{label}");
            } else {
                assert_eq!(outcome, ToolOutcome::Cancelled, "{label}: {text}");
                assert!(text.starts_with("not run"), "{label}: {text}");
            }
            assert_eq!(api.deliveries().len(), usize::from(sent), "{label}");
            store.delete_session(SID).await.unwrap();
        }
    }
}
