//! Evidence from sessions driven by Restate (docs/evidence.md): the demo service, a real
//! child process whose signing key comes from its configuration (a key file), signs a
//! receipt for the approval and for the call that ran, through the same code as the
//! local driver. reins-server fronting the deployment exports the bundle
//! (`GET /v1/sessions/{id}/evidence`) and publishes the key (`/.well-known/jwks.json`);
//! the independent Python verifier (reins-agent's tests/evidence_py, installed by
//! .ci/run) accepts the bundle and refuses it tampered with, naming the entry.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

#[path = "../../reins-agent/tests/evidence_py/runner.rs"]
mod runner;
use runner::python_verify;

use std::sync::Arc;

use reins_agent::{Agent, Relayed, SessionBackend};
use reins_evidence::{ChainEntry, EntryKind, Keyring, Signer, verify, verify_with};
use reins_memory::{MemoryStore, SqliteStore};
use reins_model::{ScriptedModel, ScriptedResponse};
use reins_server::Server;
use serde_json::{Value, json};
use support::http::Http;

/// The service's key id and seed (32 bytes of 5, base64url): what its configuration
/// holds.
const KID: &str = "restate-2026-01";
const SEED: &str = "BQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQU";

fn signer() -> Signer {
    Signer::from_base64url(KID, SEED).unwrap()
}

fn entries(bundle: &str) -> Vec<ChainEntry> {
    bundle
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "entry")
        .map(|v| serde_json::from_value(v["entry"].clone()).unwrap())
        .collect()
}

/// `bundle` with entry `seq` changed by `f`.
fn edit_entry(bundle: &str, seq: u64, f: impl FnOnce(&mut Value)) -> String {
    let mut f = Some(f);
    bundle
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["type"] == "entry"
                && v["entry"]["seq"] == seq
                && let Some(f) = f.take()
            {
                f(&mut v["entry"]);
            }
            format!("{v}\n")
        })
        .collect()
}

/// `bundle` without entry `seq`.
fn without_entry(bundle: &str, seq: u64) -> String {
    bundle
        .lines()
        .filter(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            !(v["type"] == "entry" && v["entry"]["seq"] == seq)
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The store the service records in and reins-server reads: SQLite (the harness's
/// file), or a PostgreSQL schema of this test's own.
enum Store {
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres {
        url: String,
        schema: String,
    },
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restate_session_exports_signed_evidence_the_independent_verifier_accepts() {
    signed_evidence_on(Store::Sqlite).await;
}

/// The same on PostgreSQL (`REINS_TEST_POSTGRES_URL`, set by `cargo xtask test`; in CI
/// its absence fails the test).
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restate_session_on_postgres_exports_signed_evidence_the_verifier_accepts() {
    let url = std::env::var("REINS_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let Some(url) = url else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "REINS_TEST_POSTGRES_URL is not set, but CI=true: run it through `cargo xtask test`, \
             which starts a throwaway PostgreSQL"
        );
        eprintln!("SKIPPED: Restate evidence on PostgreSQL: REINS_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = format!("reins_restate_evidence_{}", uuid::Uuid::new_v4().simple());
    signed_evidence_on(Store::Postgres { url, schema }).await;
}

async fn signed_evidence_on(on: Store) {
    // The service's configuration: its signing key in a file beside the test's data,
    // and its store.
    let config = tempfile::tempdir().unwrap();
    let key_file = config.path().join("evidence.key");
    std::fs::write(&key_file, format!("{SEED}\n")).unwrap();
    let key_file = key_file.display().to_string();
    #[cfg_attr(not(feature = "postgres"), allow(unused_mut))]
    let mut extra = vec!["--evidence-key-file", &key_file, "--evidence-kid", KID];
    #[cfg(feature = "postgres")]
    if let Store::Postgres { url, schema } = &on {
        extra.extend(["--database-url", url, "--database-schema", schema]);
    }
    let Some(h) = support::Harness::start(&extra).await else {
        return;
    };

    // reins-server in front, on the store the service records in; it publishes the
    // key its configuration names (its model is never called).
    let store: Arc<dyn MemoryStore> = match &on {
        Store::Sqlite => Arc::new(
            SqliteStore::open(h.dir.path().join("reins.sqlite"))
                .await
                .unwrap(),
        ),
        #[cfg(feature = "postgres")]
        Store::Postgres { url, schema } => Arc::new(
            reins_memory::PostgresStore::connect_with(
                url,
                reins_memory::PostgresOptions::default().schema(schema),
            )
            .await
            .unwrap(),
        ),
    };
    let agent = Agent::builder()
        .model(ScriptedModel::new(Vec::<ScriptedResponse>::new()))
        .store_arc(store)
        .evidence_signer(signer(), Keyring::new())
        .build()
        .unwrap();
    let backend: Arc<dyn SessionBackend> = Arc::new(h.client.clone());
    let http = Http::start(Server::new(Relayed::new(agent, backend))).await;
    let path = "/v1/sessions/alice%2Fev";

    // A call paused for approval, approved by bob, run once.
    let (status, out) = http
        .post(
            "alice-token",
            &format!("{path}/runs"),
            json!({"message": "delete a.txt"}),
        )
        .await;
    assert_eq!(
        (status, out["status"].as_str()),
        (200, Some("paused")),
        "{out}"
    );
    let req_id = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(h.count("delete_file start"), 0);
    let (status, out) = http
        .post(
            "bob-token",
            &format!("{path}/decisions"),
            json!({"decisions": [{"requirement_id": req_id, "action": "approve"}]}),
        )
        .await;
    assert_eq!(
        (status, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );
    assert_eq!(h.count("delete_file start"), 1, "{:?}", h.outbox());

    // The bundle, over HTTP.
    let (status, body) = http.get("alice-token", &format!("{path}/evidence")).await;
    assert_eq!(status, 200, "{body}");
    let bundle = body.as_str().unwrap().to_owned();
    let (status, jwks) = http.get("alice-token", "/.well-known/jwks.json").await;
    assert_eq!(status, 200, "{jwks}");
    assert_eq!(jwks["keys"][0]["kid"], KID, "{jwks}");

    // What the chain holds: the decision and its receipt, the call's claim, its result
    // and its receipt — as the local driver writes them.
    let chain = entries(&bundle);
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
    let approval = &chain[1].body;
    assert_eq!(approval["kid"], KID);
    assert_eq!(approval["receipt"]["kind"], "approval");
    assert_eq!(approval["receipt"]["decision"], "approve");
    assert_eq!(approval["receipt"]["actor"], "bob");
    assert_eq!(approval["receipt"]["call_id"], req_id.as_str());
    assert_eq!(approval["receipt"]["chain_head"], json!(chain[0].hash));
    let execution = &chain[4].body["receipt"];
    assert_eq!(execution["kind"], "execution");
    assert_eq!(execution["decision"], "success");
    assert_eq!(execution["tool"], "delete_file");
    assert_eq!(
        execution["args_executed"],
        approval["receipt"]["args_shown"]
    );

    // Both verifiers accept it: reins's, and the independent one with the keys the
    // server publishes.
    let report = verify(&bundle).unwrap();
    assert_eq!((report.entries, report.receipts), (5, 2));
    let dir = tempfile::tempdir().unwrap();
    let (code, line) = python_verify(dir.path(), "restate", &bundle, None);
    assert_eq!(code, 0, "{line}");
    assert!(
        line.contains("entries=5 receipts=2") && line.contains(&report.head.hash),
        "{line}"
    );
    let (code, line) = python_verify(dir.path(), "published", &bundle, Some(&jwks.to_string()));
    assert_eq!(code, 0, "{line}");

    // Tampered with, refused, naming the entry: the approver, the executed arguments'
    // fingerprint, a deleted entry, and a key nobody published.
    let flip = |e: &mut Value, pointer: &str| {
        let s = e.pointer_mut(pointer).unwrap();
        let mut text = s.as_str().unwrap().to_owned();
        let last = text.pop().unwrap();
        text.push(if last == 'x' { 'y' } else { 'x' });
        *s = Value::String(text);
    };
    let cases = [
        (
            "actor",
            edit_entry(&bundle, 2, |e| flip(e, "/body/receipt/actor")),
            2,
        ),
        (
            "arguments",
            edit_entry(&bundle, 5, |e| flip(e, "/body/receipt/args_executed")),
            5,
        ),
        ("deleted", without_entry(&bundle, 3), 3),
    ];
    for (what, tampered, entry) in cases {
        let (code, line) = python_verify(dir.path(), what, &tampered, None);
        assert_eq!(code, 1, "{what}: {line}");
        assert!(line.contains(&format!("entry {entry} ")), "{what}: {line}");
        assert_eq!(verify(&tampered).unwrap_err().entry, Some(entry), "{what}");
    }
    let mut unknown = Keyring::new();
    unknown.insert_signer(&Signer::from_seed("someone-else", [9; 32]));
    let (code, line) = python_verify(
        dir.path(),
        "unknown-key",
        &bundle,
        Some(&unknown.jwks().to_string()),
    );
    assert_eq!(code, 1, "{line}");
    assert!(line.contains("entry 2 "), "{line}");
    assert_eq!(verify_with(&bundle, &unknown).unwrap_err().entry, Some(2));
}
