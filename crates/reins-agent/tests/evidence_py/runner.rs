//! Runs the independent evidence verifier (`verify.py`, Python, written from
//! docs/evidence.md only; its venv is installed by .ci/run) on a bundle. Shared by
//! reins-agent's and reins-restate's evidence tests (`#[path]`).

use std::path::Path;

/// Runs the verifier on `bundle` (written to `dir` as `name.jsonl`), with the keys of
/// `jwks` when given: its exit status and its line.
pub fn python_verify(dir: &Path, name: &str, bundle: &str, jwks: Option<&str>) -> (i32, String) {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reins-agent/tests/evidence_py");
    let python = here.join(".venv/bin/python");
    assert!(
        python.exists(),
        "the independent evidence verifier is not installed: run `python3 -m venv \
         crates/reins-agent/tests/evidence_py/.venv && crates/reins-agent/tests/evidence_py/.venv/bin/pip \
         install -r crates/reins-agent/tests/evidence_py/requirements.txt` (as .ci/run does)"
    );
    let path = dir.join(format!("{name}.jsonl"));
    std::fs::write(&path, bundle).unwrap();
    let mut cmd = std::process::Command::new(python);
    cmd.arg(here.join("verify.py")).arg(&path);
    if let Some(jwks) = jwks {
        let keys = dir.join(format!("{name}.jwks.json"));
        std::fs::write(&keys, jwks).unwrap();
        cmd.arg("--jwks").arg(keys);
    }
    let out = cmd.output().unwrap();
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), format!("{line}{err}"))
}
