//! `reins-audit verify BUNDLE [--jwks FILE]`: checks an evidence bundle offline (every
//! hash link, every receipt signature) and names the first entry that fails. With
//! `--jwks`, receipts are checked against the keys in FILE (a JWKS you hold) instead
//! of the keys the bundle carries. Exit status 0 when it verifies, 1 when it does not,
//! 2 on a usage error. `cargo xtask audit verify BUNDLE` runs it.

use std::process::ExitCode;

use reins_evidence::{Keyring, Report, VerifyError, verify, verify_with};

const USAGE: &str = "usage: reins-audit verify BUNDLE [--jwks FILE]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (bundle, jwks) = match args.as_slice() {
        [cmd, bundle] if cmd == "verify" => (bundle, None),
        [cmd, bundle, flag, jwks] if cmd == "verify" && flag == "--jwks" => (bundle, Some(jwks)),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let read =
        |path: &str| std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"));
    let outcome = read(bundle).and_then(|text| match jwks {
        None => Ok(verify(&text)),
        Some(path) => {
            let doc: serde_json::Value = serde_json::from_str(&read(path)?)
                .map_err(|e| format!("{path} is not JSON: {e}"))?;
            let keys = Keyring::from_jwks(&doc).map_err(|e| format!("{path}: {e}"))?;
            Ok(verify_with(&text, &keys))
        }
    });
    match outcome {
        Ok(Ok(report)) => {
            say_ok(bundle, &report);
            ExitCode::SUCCESS
        }
        Ok(Err(e)) => {
            say_refused(bundle, &e);
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("reins-audit: {e}");
            ExitCode::from(2)
        }
    }
}

fn say_ok(path: &str, r: &Report) {
    println!(
        "{path}: verifies — session `{}`, {} entries ({} signed receipts), head {} at seq {}",
        r.session, r.entries, r.receipts, r.head.hash, r.head.seq
    );
}

fn say_refused(path: &str, e: &VerifyError) {
    println!("{path}: REFUSED — {e}");
}
