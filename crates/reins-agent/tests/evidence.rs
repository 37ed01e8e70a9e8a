//! Evidence from real runs: an agent with a signer chains every decision and ledger
//! outcome and signs a receipt for each approval and each finished call; the exported
//! bundle verifies offline, and every kind of tampering is refused naming the entry.
//! On the in-memory store, SQLite, and PostgreSQL when `REINS_TEST_POSTGRES_URL` is set
//! (see `harness_stores`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

#[path = "evidence_py/runner.rs"]
mod runner;
use runner::python_verify;

use std::sync::Arc;

use reins_agent::{Actor, Decision, RunStatus};
use reins_evidence::{ChainEntry, EntryKind, Keyring, Signer, verify, verify_with};
use reins_memory::{InMemoryStore, MemoryStore};
use reins_message::Msg;
use reins_model::ScriptedModel;
use reins_tool::ToolPolicy;
use serde_json::{Value, json};
use support::*;

fn signer() -> Signer {
    Signer::from_seed("reins-2026-01", [3; 32])
}

/// Runs one approved call on `store` in `session` and returns the exported bundle.
async fn approved_run(store: Arc<dyn MemoryStore>, session: &str, path: &str) -> String {
    let counter = Counter::default();
    let model = ScriptedModel::new([
        call("c1", "delete_file", json!({ "path": path })),
        text("done"),
    ]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::confirm()))
        .store_arc(store)
        .evidence_signer(signer(), Keyring::new())
        .build()
        .unwrap();
    let s = agent
        .session(session)
        .await
        .unwrap()
        .as_actor(Actor::new("ana").with_metadata(json!({
            "issuer": "https://id.example",
            "subject": "u-1",
            "via": "native",
        })));
    assert_eq!(
        s.send(Msg::user("go")).await.unwrap().status,
        RunStatus::Paused
    );
    let out = s.resolve(vec![Decision::approve("c1")]).await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(counter.count("delete_file"), 1);
    agent.evidence(session).await.unwrap().to_jsonl().unwrap()
}

fn entries(bundle: &str) -> Vec<ChainEntry> {
    bundle
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "entry")
        .map(|v| serde_json::from_value(v["entry"].clone()).unwrap())
        .collect()
}

fn check_bundle(bundle: &str) {
    let report = verify(bundle).unwrap();
    let chain = entries(bundle);
    let kinds: Vec<EntryKind> = chain.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EntryKind::Decision,
            EntryKind::Receipt,
            EntryKind::Claim,
            EntryKind::Finish,
            EntryKind::Receipt,
        ],
        "{bundle}"
    );
    assert_eq!((report.entries, report.receipts), (5, 2));
    let approval = &chain[1].body["receipt"];
    assert_eq!(approval["kind"], "approval");
    assert_eq!(approval["decision"], "approve");
    assert_eq!(approval["actor"], "ana");
    assert_eq!(approval["issuer"], "https://id.example");
    assert_eq!(approval["subject"], "u-1");
    assert_eq!(approval["door"], "native");
    assert_eq!(approval["chain_head"], json!(chain[0].hash));
    let execution = &chain[4].body["receipt"];
    assert_eq!(execution["kind"], "execution");
    assert_eq!(execution["decision"], "success");
    assert_eq!(execution["args_executed"], approval["args_shown"]);
    // The key is published as a JWKS member in the bundle.
    assert!(bundle.contains(r#""kty":"OKP""#) && bundle.contains(r#""kid":"reins-2026-01""#));
}

#[tokio::test]
async fn bundles_from_every_store_verify() {
    check_bundle(&approved_run(Arc::new(InMemoryStore::new()), "ev-mem", "a.txt").await);
    let dir = tempfile::tempdir().unwrap();
    for spec in harness_stores(dir.path(), "evidence") {
        let bundle = approved_run(spec.open().await, "ev-sql", "a.txt").await;
        check_bundle(&bundle);
        eprintln!("{} bundle verifies", spec.label());
    }
}

#[tokio::test]
async fn without_a_signer_nothing_is_chained() {
    let store = Arc::new(InMemoryStore::new());
    let counter = Counter::default();
    let model = ScriptedModel::new([call("c1", "delete_file", json!({"path": "a"})), text("ok")]);
    let agent = agent(model, toolkit(&counter, ToolPolicy::confirm()))
        .store_arc(store.clone())
        .build()
        .unwrap();
    let s = agent.session("plain").await.unwrap();
    s.send(Msg::user("go")).await.unwrap();
    s.resolve(vec![Decision::approve("c1").by("ana")])
        .await
        .unwrap();
    assert!(!store.records_evidence());
    assert!(store.evidence("plain").await.unwrap().is_empty());
    assert!(agent.evidence_keys().is_empty());
}

/// The bundle with entry `seq`'s line passed through `f` (as JSON).
fn edit_entry(bundle: &str, seq: u64, f: impl FnOnce(&mut Value)) -> String {
    let mut f = Some(f);
    bundle
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["type"] == "entry" && v["entry"]["seq"] == seq {
                if let Some(f) = f.take() {
                    f(&mut v["entry"]);
                }
            }
            format!("{v}\n")
        })
        .collect()
}

/// Changes one character of the string at `pointer`.
fn flip(v: &mut Value, pointer: &str) {
    let shown = v.to_string();
    let s = v
        .pointer_mut(pointer)
        .unwrap_or_else(|| panic!("no {pointer} in {shown}"));
    let mut text = s.as_str().unwrap().to_owned();
    let last = text.pop().unwrap();
    text.push(if last == 'x' { 'y' } else { 'x' });
    *s = Value::String(text);
}

fn refused_at(bundle: &str, entry: u64) -> String {
    let err = verify(bundle).unwrap_err();
    assert_eq!(err.entry, Some(entry), "{err}");
    err.to_string()
}

#[tokio::test]
async fn every_kind_of_tampering_is_refused_naming_the_entry() {
    let store: Arc<dyn MemoryStore> = Arc::new(InMemoryStore::new());
    let bundle = approved_run(store.clone(), "ev-tamper", "a.txt").await;
    verify(&bundle).unwrap();

    // One byte of an argument the person was shown.
    refused_at(
        &edit_entry(&bundle, 1, |e| flip(e, "/body/record/shown_input/path")),
        1,
    );
    // The decision.
    refused_at(
        &edit_entry(&bundle, 1, |e| flip(e, "/body/record/decision")),
        1,
    );
    // The actor, in the receipt; with its hash recomputed the signature still fails.
    refused_at(
        &edit_entry(&bundle, 2, |e| flip(e, "/body/receipt/actor")),
        2,
    );
    let forged = edit_entry(&bundle, 2, |e| {
        flip(e, "/body/receipt/actor");
        let mut entry: ChainEntry = serde_json::from_value(e.clone()).unwrap();
        entry.hash = entry.content_hash().unwrap();
        *e = serde_json::to_value(entry).unwrap();
    });
    assert!(refused_at(&forged, 2).contains("signature"), "{forged}");
    // A time.
    refused_at(&edit_entry(&bundle, 3, |e| flip(e, "/at")), 3);

    let lines: Vec<&str> = bundle.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.contains(r#""type":"entry""#))
        .unwrap();
    // An entry deleted.
    let mut deleted = lines.clone();
    deleted.remove(first + 2);
    refused_at(&deleted.join("\n"), 3);
    // Two entries reordered.
    let mut swapped = lines.clone();
    swapped.swap(first + 2, first + 3);
    refused_at(&swapped.join("\n"), 3);
    // An entry spliced in from another session.
    let other = approved_run(store.clone(), "ev-other", "b.txt").await;
    let foreign = other
        .lines()
        .filter(|l| l.contains(r#""type":"entry""#))
        .nth(2)
        .unwrap();
    let mut spliced = lines.clone();
    spliced[first + 2] = foreign;
    assert!(refused_at(&spliced.join("\n"), 3).contains("ev-other"));

    // A revoked key, an unknown key.
    let mut revoked = Keyring::new();
    revoked.insert_signer(&signer());
    revoked.revoke("reins-2026-01");
    let err = verify_with(&bundle, &revoked).unwrap_err();
    assert_eq!(err.entry, Some(2), "{err}");
    assert!(err.reason.contains("revoked"), "{err}");
    let mut unknown = Keyring::new();
    unknown.insert_signer(&Signer::from_seed("someone-else", [9; 32]));
    let err = verify_with(&bundle, &unknown).unwrap_err();
    assert_eq!(err.entry, Some(2), "{err}");
    assert!(err.reason.contains("unknown key"), "{err}");
}

#[tokio::test]
async fn the_independent_verifier_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let mut bundles = vec![(
        "memory",
        approved_run(Arc::new(InMemoryStore::new()), "py-mem", "a.txt").await,
    )];
    for spec in harness_stores(dir.path(), "evidence_py") {
        bundles.push((
            spec.label(),
            approved_run(spec.open().await, "py-sql", "a.txt").await,
        ));
    }
    for (label, bundle) in &bundles {
        let (code, line) = python_verify(dir.path(), label, bundle, None);
        assert_eq!(code, 0, "{label}: {line}");
        let head = verify(bundle).unwrap().head.hash;
        assert!(
            line.contains("entries=5 receipts=2") && line.contains(&head),
            "{label}: {line}"
        );
    }
    let bundle = &bundles[0].1;
    let cases = [
        (
            "argument",
            edit_entry(bundle, 1, |e| flip(e, "/body/record/shown_input/path")),
            1,
        ),
        (
            "actor",
            edit_entry(bundle, 2, |e| flip(e, "/body/receipt/actor")),
            2,
        ),
        ("time", edit_entry(bundle, 3, |e| flip(e, "/at")), 3),
    ];
    for (what, tampered, entry) in cases {
        let (code, line) = python_verify(dir.path(), what, &tampered, None);
        assert_eq!(code, 1, "{what}: {line}");
        assert!(line.contains(&format!("entry {entry} ")), "{what}: {line}");
        assert_eq!(verify(&tampered).unwrap_err().entry, Some(entry));
    }
    let mut revoked = Keyring::new();
    revoked.insert_signer(&signer());
    revoked.revoke("reins-2026-01");
    let (code, line) = python_verify(
        dir.path(),
        "revoked",
        bundle,
        Some(&revoked.jwks().to_string()),
    );
    assert_eq!(code, 1, "{line}");
    assert!(
        line.contains("entry 2 ") && line.contains("revoked"),
        "{line}"
    );
}
