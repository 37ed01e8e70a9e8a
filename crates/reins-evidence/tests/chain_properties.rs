//! Properties of the chain and the verifier: any history verifies untouched, and any
//! single change to it is refused, naming the entry where it was made.

#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use reins_evidence::{
    Bundle, ChainEntry, ChainHead, EntryKind, Keyring, Receipt, ReceiptKind, Signer, claim_body,
    decision_body, digest, finish_body, verify, verify_with,
};
use serde_json::{Value, json};

/// One step of a random history.
#[derive(Debug, Clone)]
enum Step {
    Decision {
        call: u8,
        decision: String,
        actor: String,
    },
    Claim {
        call: u8,
        args: String,
    },
    Finish {
        call: u8,
        ok: bool,
        output: String,
    },
    Receipt {
        call: u8,
        key: u8,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (any::<u8>(), "approve|reject|edit", "[a-z]{1,8}").prop_map(|(call, decision, actor)| {
            Step::Decision {
                call,
                decision,
                actor,
            }
        }),
        (any::<u8>(), "\\PC{0,12}").prop_map(|(call, args)| Step::Claim { call, args }),
        (any::<u8>(), any::<bool>(), "\\PC{0,12}").prop_map(|(call, ok, output)| Step::Finish {
            call,
            ok,
            output
        }),
        (any::<u8>(), 0u8..2).prop_map(|(call, key)| Step::Receipt { call, key }),
    ]
}

fn signers() -> [Signer; 2] {
    [
        Signer::from_seed("k-old", [1; 32]),
        Signer::from_seed("k-new", [2; 32]),
    ]
}

fn history(session: &str, steps: &[Step]) -> Vec<ChainEntry> {
    let signers = signers();
    let mut head = ChainHead::genesis();
    let mut out = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let at = format!("2026-01-01T00:00:{:02}.{:06}Z", i % 60, i);
        let (kind, body) = match s {
            Step::Decision {
                call,
                decision,
                actor,
            } => (
                EntryKind::Decision,
                decision_body(
                    &format!("call_{call}"),
                    &json!({ "decision": decision, "actor": actor, "door": "native" }),
                ),
            ),
            Step::Claim { call, args } => (
                EntryKind::Claim,
                claim_body(&format!("call_{call}"), &digest(args, "args").unwrap(), 1),
            ),
            Step::Finish { call, ok, output } => (
                EntryKind::Finish,
                finish_body(
                    &format!("call_{call}"),
                    if *ok { "success" } else { "error" },
                    &digest(output, "result").unwrap(),
                ),
            ),
            Step::Receipt { call, key } => {
                let receipt = Receipt {
                    kind: ReceiptKind::Approval,
                    session: session.to_owned(),
                    call_id: format!("call_{call}"),
                    tool: "send_email".into(),
                    args_shown: Some("fp".into()),
                    args_executed: None,
                    decision: Some("approve".into()),
                    actor: Some("alice".into()),
                    issuer: Some("https://id.example".into()),
                    subject: Some("alice@example".into()),
                    door: Some("native".into()),
                    policy_hash: None,
                    at: at.clone(),
                    chain_head: head.hash.clone(),
                };
                let signed = signers[usize::from(*key)].sign(receipt).unwrap();
                (EntryKind::Receipt, serde_json::to_value(signed).unwrap())
            }
        };
        let e = ChainEntry::next(session, &head, kind, at, body).unwrap();
        head = e.head();
        out.push(e);
    }
    out
}

fn keyring() -> Keyring {
    let mut k = Keyring::new();
    for s in signers() {
        k.insert_signer(&s);
    }
    k
}

fn bundle(session: &str, entries: Vec<ChainEntry>) -> String {
    Bundle::new(session, entries, keyring()).to_jsonl().unwrap()
}

/// Changes one character of the `leaf`-th string (mod their count) of `v`.
fn mutate_leaf(v: &mut Value, leaf: usize) -> bool {
    fn leaves<'a>(v: &'a mut Value, out: &mut Vec<&'a mut String>) {
        match v {
            Value::String(s) => out.push(s),
            Value::Array(a) => a.iter_mut().for_each(|x| leaves(x, out)),
            Value::Object(o) => o.iter_mut().for_each(|(_, x)| leaves(x, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    leaves(v, &mut all);
    let n = all.len();
    if n == 0 {
        return false;
    }
    let s = &mut all[leaf % n];
    let flipped = match s.pop() {
        Some('a') => 'b',
        Some(_) | None => 'a',
    };
    s.push(flipped);
    true
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_history_verifies(steps in proptest::collection::vec(step(), 0..24)) {
        let entries = history("s", &steps);
        let text = bundle("s", entries.clone());
        let report = verify(&text).unwrap();
        prop_assert_eq!(report.entries, entries.len() as u64);
        prop_assert_eq!(verify_with(&text, &keyring()).unwrap(), report);
    }

    #[test]
    fn changing_any_member_is_caught_at_that_entry(
        steps in proptest::collection::vec(step(), 1..16),
        at in any::<prop::sample::Index>(),
        leaf in any::<usize>(),
    ) {
        let entries = history("s", &steps);
        let k = at.index(entries.len());
        // Change the exported text, as someone with the file would.
        let text = bundle("s", entries);
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let line = 3 + k; // after the header and the two key lines
        let mut v: Value = serde_json::from_str(&lines[line]).unwrap();
        let hash = v["entry"].as_object_mut().unwrap().remove("hash").unwrap();
        prop_assume!(mutate_leaf(&mut v["entry"], leaf));
        v["entry"]["hash"] = hash;
        lines[line] = v.to_string();
        let err = verify(&lines.join("\n")).unwrap_err();
        prop_assert_eq!(err.entry, Some(k as u64 + 1), "{}", err);
    }

    #[test]
    fn a_change_with_its_hash_recomputed_is_caught_at_the_next_link(
        steps in proptest::collection::vec(step(), 2..16),
        at in any::<prop::sample::Index>(),
        leaf in any::<usize>(),
    ) {
        let mut entries = history("s", &steps);
        let k = at.index(entries.len() - 1);
        prop_assume!(mutate_leaf(&mut entries[k].body, leaf));
        entries[k].hash = entries[k].content_hash().unwrap();
        let err = verify(&bundle("s", entries)).unwrap_err();
        // A receipt's signature fails at its own entry; otherwise the next link breaks.
        prop_assert!(err.entry == Some(k as u64 + 1) || err.entry == Some(k as u64 + 2), "{}", err);
    }

    #[test]
    fn removing_moving_or_splicing_an_entry_is_caught_there(
        steps in proptest::collection::vec(step(), 2..16),
        other in proptest::collection::vec(step(), 2..16),
        at in any::<prop::sample::Index>(),
        how in 0u8..3,
    ) {
        let mut entries = history("s", &steps);
        let k = at.index(entries.len() - 1);
        match how {
            0 => { entries.remove(k); }
            1 => entries.swap(k, k + 1),
            _ => {
                let foreign = history("t", &other);
                entries[k] = foreign[k.min(foreign.len() - 1)].clone();
            }
        }
        let err = verify(&bundle("s", entries)).unwrap_err();
        prop_assert_eq!(err.entry, Some(k as u64 + 1), "{}", err);
    }
}

#[test]
fn a_receipt_by_a_revoked_or_unknown_key_is_refused_naming_it() {
    let steps = [
        Step::Claim {
            call: 1,
            args: "x".into(),
        },
        Step::Receipt { call: 1, key: 0 },
        Step::Receipt { call: 1, key: 1 },
    ];
    let text = bundle("s", history("s", &steps));
    let mut revoked = keyring();
    revoked.revoke("k-old");
    let err = verify_with(&text, &revoked).unwrap_err();
    assert_eq!(err.entry, Some(2));
    assert!(err.reason.contains("revoked"), "{err}");

    let mut only_new = Keyring::new();
    only_new.insert_signer(&signers()[1]);
    let err = verify_with(&text, &only_new).unwrap_err();
    assert_eq!(err.entry, Some(2));
    assert!(err.reason.contains("unknown key"), "{err}");

    // A key line dropped from the bundle: the same refusal with the bundle's own keys.
    let without_old: String = text
        .lines()
        .filter(|l| !l.contains("\"k-old\""))
        .map(|l| format!("{l}\n"))
        .collect();
    let err = verify(&without_old).unwrap_err();
    assert_eq!(err.entry, Some(2), "{err}");
}

#[test]
fn a_line_that_is_not_json_names_the_entry_it_would_be() {
    let text = bundle(
        "s",
        history(
            "s",
            &vec![
                Step::Claim {
                    call: 1,
                    args: "x".into()
                };
                3
            ],
        ),
    );
    let broken: Vec<&str> = text.lines().collect();
    let mut lines = broken.clone();
    let bad = lines[4].replacen('{', "", 1);
    lines[4] = &bad;
    let err = verify(&lines.join("\n")).unwrap_err();
    assert_eq!(err.entry, Some(2), "{err}");
    assert_eq!(err.line, 5);
}
