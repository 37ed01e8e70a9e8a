//! Evidence over HTTP: a decision made through the API and the call it approved are
//! chained and signed; `GET /v1/sessions/{id}/evidence` exports a bundle that verifies
//! offline with the keys `GET /.well-known/jwks.json` publishes, and an edited byte is
//! refused naming the entry.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use reins_evidence::{EntryKind, Keyring, Signer, verify, verify_with};
use serde_json::{Value, json};
use support::*;

#[tokio::test]
async fn an_approval_over_http_exports_a_bundle_that_verifies() {
    let (dir, store) = sqlite_store().await;
    let ran: Ran = Arc::default();
    let signer = Signer::from_seed("server-key-1", [11; 32]);
    let mut retired = Keyring::new();
    retired.insert_signer(&Signer::from_seed("server-key-0", [10; 32]));
    let agent = agent_with(store, &ran, |b| b.evidence_signer(signer, retired));
    let s = serve(agent, ran, Some(dir), |s| s).await;

    let (st, out) = s
        .post(
            ALICE,
            "/v1/sessions/alice%2Fev/runs",
            json!({"message": "delete a.txt"}),
        )
        .await;
    assert_eq!((st, out["status"].as_str()), (200, Some("paused")), "{out}");
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();
    let (st, out) = s
        .post(
            ANA,
            "/v1/sessions/alice%2Fev/decisions",
            json!({"decisions": [{"requirement_id": rid, "action": "approve"}]}),
        )
        .await;
    assert_eq!(
        (st, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );

    let res = s
        .client
        .get(s.url("/v1/sessions/alice%2Fev/evidence"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.headers()["content-type"].to_str().unwrap(),
        "application/x-ndjson"
    );
    let bundle = res.text().await.unwrap();
    let report = verify(&bundle).unwrap();
    assert_eq!(report.receipts, 2, "{bundle}");
    let kinds: Vec<String> = bundle
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "entry")
        .map(|v| v["entry"]["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds, ["decision", "receipt", "claim", "finish", "receipt"]);
    assert!(
        bundle.contains(r#""kid":"server-key-0""#),
        "retired keys are published too"
    );
    let approval: Value = bundle
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["entry"]["kind"] == json!(EntryKind::Receipt))
        .unwrap();
    assert_eq!(approval["entry"]["body"]["receipt"]["actor"], "ana");

    // The published keys check it; a changed byte is refused, naming the entry.
    let (st, jwks) = s.get("", "/.well-known/jwks.json").await;
    assert_eq!(st, 200, "{jwks}");
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 2);
    let keys = Keyring::from_jwks(&jwks).unwrap();
    verify_with(&bundle, &keys).unwrap();
    let tampered = bundle.replacen("\"ana\"", "\"eve\"", 1);
    assert_ne!(tampered, bundle);
    assert_eq!(verify(&tampered).unwrap_err().entry, Some(1));

    // Reading it takes the right to read the session; an unknown session is 404.
    let (st, _) = s.get(BOB, "/v1/sessions/alice%2Fev/evidence").await;
    assert_eq!(st, 403);
    let (st, _) = s.get(ALICE, "/v1/sessions/alice%2Fnone/evidence").await;
    assert_eq!(st, 404);
}
