//! `serve --mcp http` and `serve --mcp stdio`: the demo agent as an MCP server, driven
//! by the real TypeScript MCP SDK clients (crates/reins-mcp-server/tests/client/demo.mjs,
//! installed by .ci/run): a host without elicitation (as the MCP Inspector) is told
//! where to decide a paused call, the decision made there (reins-server's API, what
//! the inbox page calls) runs the tool once, the conversation goes on over MCP; a host
//! with elicitation answers the approval in its form. Also `--help` and bad usage.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../reins-mcp-server/tests/client")
}

/// Whether node and the SDK clients are installed; under CI their absence fails.
fn have_node(test: &str) -> bool {
    let sdk = client_dir().join("node_modules/@modelcontextprotocol");
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if node && sdk.join("sdk").is_dir() && sdk.join("client").is_dir() {
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

fn serve() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_serve"));
    // The offline model, whatever keys this shell has.
    cmd.env_remove("DASHSCOPE_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY");
    cmd
}

/// Runs demo.mjs; the JSON it prints last. It has 90 s.
fn run_client(args: &[&str]) -> Value {
    let mut child = Command::new("node")
        .arg(client_dir().join("demo.mjs"))
        .args(args)
        .env_remove("DASHSCOPE_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("demo.mjs {args:?} took longer than 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo.mjs {args:?} failed:\n{stdout}\n{stderr}"
    );
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("demo.mjs printed no JSON:\n{stdout}\n{stderr}"));
    serde_json::from_str(last).unwrap()
}

fn check(out: &Value, sandbox: &Path) {
    assert_eq!(out["tools"], serde_json::json!(["SafeAgent"]), "{out}");

    // The paused call names the tool, the reason and the inbox link to decide at.
    let paused = &out["paused"];
    assert_eq!(paused["isError"], true, "{out}");
    assert_eq!(paused["structured"]["status"], "paused", "{out}");
    let session = paused["structured"]["session"].as_str().unwrap();
    assert!(session.starts_with("mcp/local/"), "{session}");
    let link = paused["structured"]["decide_at"].as_str().unwrap();
    let encoded = session.replace('/', "%2F");
    assert!(
        link.starts_with("http://127.0.0.1:") && link.ends_with(&format!("/?session={encoded}")),
        "{link}"
    );
    let text = paused["text"].as_str().unwrap();
    assert!(
        text.contains("delete_file") && text.contains(link) && text.contains(session),
        "{text}"
    );

    // Arguments the tool cannot take: an error result, nothing ran.
    assert_eq!(out["badArgs"]["isError"], true, "{out}");
    assert!(
        out["badArgs"]["text"]
            .as_str()
            .unwrap()
            .contains("invalid arguments"),
        "{out}"
    );

    // Decided at the link: the inbox lists the call, the approval runs it once.
    assert_eq!(
        out["pendingInInbox"],
        serde_json::json!(["delete_file"]),
        "{out}"
    );
    assert_eq!(out["decided"]["status"], 200, "{out}");
    assert_eq!(out["decided"]["runStatus"], "completed", "{out}");
    assert!(
        !sandbox.join("temp.txt").exists(),
        "temp.txt was not deleted"
    );

    // The conversation goes on over MCP.
    assert_eq!(out["next"]["isError"], false, "{out}");
    assert_eq!(out["next"]["session"], session, "{out}");
    let next = out["next"]["text"].as_str().unwrap();
    assert!(
        next.contains("temp.txt"),
        "the agent knows what happened: {next}"
    );

    // A host with elicitation approves in its own form.
    let elicited = &out["elicited"];
    assert_eq!(elicited["isError"], false, "{out}");
    let asked = elicited["asked"][0].as_str().unwrap();
    assert!(
        asked.contains("delete_file") && asked.contains("notes.md"),
        "{asked}"
    );
    assert!(
        !sandbox.join("notes.md").exists(),
        "notes.md was not deleted"
    );
}

/// Reads the banner of a `serve` child until `mcp:`; returns (MCP URL, token) and
/// keeps reading its stdout so it stays open.
fn banner(child: &mut Child) -> (String, String) {
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let (mut url, mut token) = (String::new(), String::new());
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(t) = line.strip_prefix("token: ") {
            token = t.trim().to_owned();
        }
        if let Some(rest) = line.strip_prefix("mcp:") {
            url = rest.split_whitespace().next().unwrap().to_owned();
            break;
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    assert!(!url.is_empty() && !token.is_empty(), "no banner");
    (url, token)
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn serve_mcp_http_beside_the_inbox() {
    if !have_node("serve_mcp_http_beside_the_inbox") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = serve()
        .args(["--mcp", "http", "--port", "0", "--data-dir"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (url, token) = banner(&mut child);
    let _server = Killed(child);
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    let out = run_client(&["http", &url, &token]);
    check(&out, &dir.path().join("sandboxes/server"));
}

#[test]
fn serve_mcp_stdio_with_the_inbox_on_a_free_port() {
    if !have_node("serve_mcp_stdio_with_the_inbox_on_a_free_port") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let out = run_client(&[
        "stdio",
        env!("CARGO_BIN_EXE_serve"),
        "--mcp",
        "stdio",
        "--data-dir",
        data,
    ]);
    check(&out, &dir.path().join("sandboxes/server"));
}

#[test]
fn serve_help_names_the_mcp_modes_and_bad_usage_is_refused() {
    let help = serve().arg("--help").output().unwrap();
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("--mcp stdio") && text.contains("--mcp http") && text.contains("--inbox-url"),
        "{text}"
    );
    // `--help` wins wherever it is, even where a value was expected.
    let help = serve().args(["--mcp", "--help"]).output().unwrap();
    assert!(help.status.success());
    for (args, says) in [
        (&["--mcp"][..], "--mcp needs `stdio`"),
        (&["--mcp", "sse"][..], "`sse` is not a transport"),
        (
            &["--mcp", "http", "--inbox-url", "ftp://x"][..],
            "http:// or https://",
        ),
    ] {
        let out = serve()
            .args(args)
            .args(["--port", "0", "--data-dir"])
            .arg(tempfile::tempdir().unwrap().path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must fail");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
