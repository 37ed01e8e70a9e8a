//! `serve --acp`: the demo agent as an Agent Client Protocol agent on stdin/stdout,
//! started and driven by the real TypeScript ACP SDK client as an editor would
//! (crates/reins-acp/tests/client/demo.mjs, installed by .ci/run): an approval allowed
//! in the editor runs the tool; a question the editor cancels leaves the call waiting
//! in the inbox that runs beside it. Every agent message is schema-validated.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../reins-acp/tests/client")
}

/// Whether node and the SDK client are installed; under CI their absence fails.
fn have_node(test: &str) -> bool {
    let sdk = client_dir().join("node_modules/@agentclientprotocol/sdk");
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if node && sdk.is_dir() {
        return true;
    }
    let why = format!(
        "{test}: needs node and `npm ci --prefix {}` (node found: {node})",
        client_dir().display()
    );
    if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0") {
        panic!("{why}");
    }
    eprintln!("\n*** SKIPPED {why} ***\n");
    false
}

#[test]
fn serve_acp_asks_in_the_editor_and_leaves_the_rest_to_the_inbox() {
    if !have_node("serve_acp_asks_in_the_editor_and_leaves_the_rest_to_the_inbox") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new("node")
        .arg(client_dir().join("demo.mjs"))
        .arg(env!("CARGO_BIN_EXE_serve"))
        .args(["--acp", "--data-dir"])
        .arg(dir.path())
        // The offline model, whatever keys this shell has.
        .env_remove("DASHSCOPE_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("demo.mjs took longer than 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo.mjs failed:\n{stdout}\n{stderr}");
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("demo.mjs printed no JSON:\n{stdout}\n{stderr}"));
    let out: Value = serde_json::from_str(last).unwrap();

    assert_eq!(out["invalid"], serde_json::json!([]), "{out}");
    assert_eq!(out["init"]["agentInfo"]["name"], "SafeAgent", "{out}");
    assert!(out["session"].as_str().unwrap().starts_with("acp/local/"));
    let sandbox = dir.path().join("sandboxes/server");
    assert_eq!(out["allowed"]["stopReason"], "end_turn", "{out}");
    assert!(
        !sandbox.join("temp.txt").exists(),
        "temp.txt was not deleted"
    );
    assert_eq!(out["asked"].as_array().unwrap().len(), 2, "{out}");
    assert!(
        out["asked"][0].as_str().unwrap().contains("delete_file"),
        "{out}"
    );
    assert_eq!(out["cancelled"]["stopReason"], "end_turn", "{out}");
    assert!(sandbox.join("notes.md").exists(), "notes.md was deleted");
    assert_eq!(
        out["pendingInInbox"],
        serde_json::json!(["delete_file"]),
        "{out}"
    );
}
