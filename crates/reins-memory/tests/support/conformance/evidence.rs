//! The evidence chain: written with the change it records, readable by every handle,
//! exported bundles verify.

use reins_evidence::{Bundle, EntryKind, Keyring, Receipt, ReceiptKind, Signer, verify};
use reins_memory::{Claim, Commit, DecisionEntry, Error, MemoryStore, evidence::Seal};
use reins_message::{Msg, ToolResult};
use serde_json::json;

use super::{MIN, sid};

fn signer() -> Signer {
    Signer::from_seed("test-1", [5; 32])
}

/// A seal that signs an execution receipt for `call` at the chain head it is given.
fn receipt_seal(session: &str, call: &str) -> Seal {
    let (session, call) = (session.to_owned(), call.to_owned());
    Box::new(move |head, at| {
        let receipt = Receipt {
            kind: ReceiptKind::Execution,
            session,
            call_id: call,
            tool: "delete_file".into(),
            args_shown: None,
            args_executed: Some("fp".into()),
            decision: Some("success".into()),
            actor: None,
            issuer: None,
            subject: None,
            door: None,
            policy_hash: None,
            at: at.to_owned(),
            chain_head: head.hash.clone(),
        };
        let body = serde_json::to_value(signer().sign(receipt)?).map_err(|source| {
            reins_evidence::Error::Encode {
                what: "a receipt",
                source,
            }
        })?;
        Ok((EntryKind::Receipt, body))
    })
}

async fn bundle<S: MemoryStore>(store: &S, session: &str) -> String {
    let mut keys = Keyring::new();
    keys.insert_signer(&signer());
    let chain = store.evidence(session).await.unwrap();
    Bundle::new(session, chain, keys).to_jsonl().unwrap()
}

fn kinds(chain: &[reins_evidence::ChainEntry]) -> Vec<EntryKind> {
    chain.iter().map(|e| e.kind).collect()
}

pub async fn evidence_chain_rides_with_decisions_and_ledger_outcomes<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("evidence");
    let s = a.open_session(&id).await.unwrap();
    // Off (the default): nothing is chained.
    assert!(!a.records_evidence());
    let v = a
        .commit(
            &id,
            Commit::at(s.version)
                .append(Msg::user("hi"))
                .log_decision(DecisionEntry::new("r0", json!({"decision": "approve"}))),
        )
        .await
        .unwrap();
    assert!(a.evidence(&id).await.unwrap().is_empty());

    a.record_evidence(true);
    b.record_evidence(true);
    assert!(a.records_evidence());
    let v = a
        .commit(
            &id,
            Commit::at(v)
                .append(Msg::user("again"))
                .log_decision(DecisionEntry::new(
                    "call_1",
                    json!({"decision": "approve", "actor": "alice", "door": "native"}),
                )),
        )
        .await
        .unwrap();
    b.append_decisions(
        &id,
        vec![DecisionEntry::new("call_2", json!({"verdict": "refused"}))],
    )
    .await
    .unwrap();
    // A stale commit writes nothing, its chain entry neither.
    let stale = a
        .commit(
            &id,
            Commit::at(v - 1)
                .append(Msg::user("late"))
                .log_decision(DecisionEntry::new("call_9", json!({"decision": "approve"}))),
        )
        .await
        .unwrap_err();
    assert!(matches!(stale, Error::Conflict { .. }), "{stale}");

    assert_eq!(
        a.claim(&id, "call_1", "fp", MIN, false).await.unwrap(),
        Claim::Granted
    );
    // Answers that grant nothing add nothing.
    assert!(matches!(
        b.claim(&id, "call_1", "fp", MIN, false).await.unwrap(),
        Claim::InFlight { .. }
    ));
    let result = ToolResult::success("call_1", "delete_file", "deleted");
    a.finish(&id, "call_1", &result).await.unwrap();
    b.finish(
        &id,
        "call_1",
        &ToolResult::error("call_1", "delete_file", "late"),
    )
    .await
    .unwrap();
    assert!(matches!(
        b.claim(&id, "call_1", "fp", MIN, false).await.unwrap(),
        Claim::Finished(_)
    ));
    // A takeover of an expired lease is a claim of its own, with its attempt number.
    assert_eq!(
        a.claim(&id, "call_3", "fp3", std::time::Duration::ZERO, false)
            .await
            .unwrap(),
        Claim::Granted
    );
    assert_eq!(
        a.claim(&id, "call_3", "fp3", MIN, true).await.unwrap(),
        Claim::Granted
    );

    let receipt = b
        .append_evidence(&id, receipt_seal(&id, "call_1"))
        .await
        .unwrap();
    let chain = b.evidence(&id).await.unwrap();
    assert_eq!(
        kinds(&chain),
        [
            EntryKind::Decision,
            EntryKind::Decision,
            EntryKind::Claim,
            EntryKind::Finish,
            EntryKind::Claim,
            EntryKind::Claim,
            EntryKind::Receipt,
        ]
    );
    assert_eq!(chain.last(), Some(&receipt));
    assert_eq!(chain[0].body["record"]["actor"], "alice");
    assert_eq!(chain[3].body["outcome"], "success");
    assert_eq!(
        chain[3].body["result_digest"],
        reins_evidence::digest(&result, "result").unwrap()
    );
    assert_eq!(
        (
            chain[4].body["attempt"].clone(),
            chain[5].body["attempt"].clone()
        ),
        (json!(1), json!(2))
    );
    assert_eq!(receipt.body["receipt"]["chain_head"], json!(chain[5].hash));
    assert_eq!(a.evidence(&id).await.unwrap(), chain);

    let report = verify(&bundle(a, &id).await).unwrap();
    assert_eq!((report.entries, report.receipts), (7, 1));

    // A receipt for a session that does not exist is refused; deleting a session
    // deletes its chain.
    let missing = a
        .append_evidence("no-such-session", receipt_seal("no-such-session", "c"))
        .await
        .unwrap_err();
    assert!(
        matches!(missing, Error::SessionNotFound { .. }),
        "{missing}"
    );
    a.delete_session(&id).await.unwrap();
    assert!(b.evidence(&id).await.unwrap().is_empty());
}

pub async fn concurrent_writers_keep_one_chain<S: MemoryStore>(a: &S, b: &S) {
    let id = sid("evidence-race");
    a.open_session(&id).await.unwrap();
    a.record_evidence(true);
    b.record_evidence(true);
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = if i % 2 == 0 { a } else { b };
        let call = format!("call_{i}");
        let id = id.clone();
        tasks.push(async move {
            assert_eq!(
                store.claim(&id, &call, "fp", MIN, false).await.unwrap(),
                Claim::Granted
            );
            store
                .finish(&id, &call, &ToolResult::success(&call, "t", "ok"))
                .await
                .unwrap();
            store
                .append_decisions(&id, vec![DecisionEntry::new(&call, json!({"n": i}))])
                .await
                .unwrap();
        });
    }
    futures::future::join_all(tasks).await;
    let report = verify(&bundle(a, &id).await).unwrap();
    assert_eq!(report.entries, 24);
}
