//! `reins-audit verify` (what `cargo xtask audit verify` runs): its exit status and its
//! line for a bundle that verifies, one that does not, and one checked with a JWKS.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use reins_evidence::{Bundle, ChainEntry, ChainHead, EntryKind, Keyring, Signer, claim_body};

fn run(args: &[&std::ffi::OsStr]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_reins-audit"))
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn verify_answers_with_its_exit_status_and_names_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let mut head = ChainHead::genesis();
    let mut entries = Vec::new();
    for i in 0..3 {
        let e = ChainEntry::next(
            "s",
            &head,
            EntryKind::Claim,
            "2026-01-01T00:00:00.000000Z",
            claim_body(&format!("c{i}"), "fp", 1),
        )
        .unwrap();
        head = e.head();
        entries.push(e);
    }
    let mut keys = Keyring::new();
    keys.insert_signer(&Signer::from_seed("k", [1; 32]));
    let text = Bundle::new("s", entries, keys.clone()).to_jsonl().unwrap();
    let good = dir.path().join("good.jsonl");
    std::fs::write(&good, &text).unwrap();
    let (code, line) = run(&["verify".as_ref(), good.as_os_str()]);
    assert_eq!(code, 0, "{line}");
    assert!(
        line.contains("verifies") && line.contains("3 entries"),
        "{line}"
    );

    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, text.replace("\"c1\"", "\"c9\"")).unwrap();
    let (code, line) = run(&["verify".as_ref(), bad.as_os_str()]);
    assert_eq!(code, 1, "{line}");
    assert!(
        line.contains("REFUSED") && line.contains("entry 2 "),
        "{line}"
    );

    let jwks = dir.path().join("keys.json");
    std::fs::write(&jwks, keys.jwks().to_string()).unwrap();
    let (code, line) = run(&[
        "verify".as_ref(),
        good.as_os_str(),
        "--jwks".as_ref(),
        jwks.as_os_str(),
    ]);
    assert_eq!(code, 0, "{line}");

    let (code, _) = run(&["check".as_ref()]);
    assert_eq!(code, 2);
}
