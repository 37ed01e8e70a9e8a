//! The real TypeScript MCP SDK as the client of a reins agent:
//! `@modelcontextprotocol/client` 2.4.0 pinned to revision 2026-07-28 (MRTR) and
//! `@modelcontextprotocol/sdk` 1.32.2 (2025-11-25, `elicitation/create`), over
//! streamable HTTP and over stdio (the server is this test binary run again as a
//! child). Versions are pinned in tests/client/package-lock.json, installed by .ci/run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod support;

use serde_json::Value;
use support::*;

const CHILD_ENV: &str = "REINS_MCP_SERVER_STDIO_CHILD";

/// In a child process: serve the test agent over stdio until stdin closes.
#[test]
fn stdio_child() {
    let Ok(db) = std::env::var(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let store = reins_memory::SqliteStore::open(&db).await.unwrap();
        let agent = agent(std::sync::Arc::new(store), &Ran::default());
        server(agent).serve_stdio().await.unwrap();
    });
}

/// Invalid arguments are tool results with `isError` that say what to fix, and nothing
/// ran or was stored for them; an unknown tool is a JSON-RPC error (`-32602`).
fn check_invalid_arguments(out: &Value) {
    for (case, says) in [
        ("missingMessage", "message"),
        ("wrongType", "message"),
        ("foreignSession", "unknown session"),
    ] {
        let r = &out[case];
        assert_eq!(
            r["ok"], true,
            "{case} must be a result, not an error: {out}"
        );
        assert_eq!(r["isError"], true, "{case}: {out}");
        let text = r["text"].as_str().unwrap();
        assert!(
            text.contains("invalid arguments") && text.contains(says),
            "{case}: {text}"
        );
    }
    assert_eq!(out["unknownTool"]["ok"], false, "{out}");
    assert_eq!(out["unknownTool"]["code"], -32602, "{out}");
}

/// The command that starts [`stdio_child`]: libtest writes its own text on stdout
/// (`test stdio_child ... ` even precedes the first message on its line), so a filter
/// passes on only what starts at a `{`: the JSON-RPC messages.
fn stdio_command(db: &std::path::Path) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    vec![
        "stdio".into(),
        "/bin/sh".into(),
        "-c".into(),
        format!(
            "{CHILD_ENV}='{}' '{}' stdio_child --exact --nocapture --test-threads=1 | grep --line-buffered -o '{{.*'",
            db.display(),
            exe.display()
        ),
    ]
}

fn check_modern(out: &Value, ran: &[String]) {
    assert_eq!(out["era"], "2026-07-28", "{out}");
    check_invalid_arguments(out);
    let tool = &out["tools"][0];
    assert_eq!(tool["name"], "files");
    assert_eq!(tool["annotations"]["destructiveHint"], true);
    assert_eq!(tool["annotations"]["idempotentHint"], false);
    assert_eq!(out["plain"]["text"], "echo: hello there", "{out}");
    assert!(
        out["plain"]["session"]
            .as_str()
            .unwrap()
            .starts_with("mcp/")
    );
    assert!(
        out["approve"]["text"]
            .as_str()
            .unwrap()
            .contains("deleted a.txt"),
        "{out}"
    );
    let reject = out["reject"]["text"].as_str().unwrap();
    assert!(
        reject.contains("Rejected") && reject.contains("keep it"),
        "{reject}"
    );
    assert!(
        out["input"]["text"]
            .as_str()
            .unwrap()
            .contains("tagged c.txt blue"),
        "{out}"
    );
    // The questions carried tool, arguments, reason and the answer's schema.
    let asked = out["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 3, "{out}");
    let first = &asked[0];
    assert!(first["message"].as_str().unwrap().contains("delete_file"));
    assert_eq!(
        first["meta"]["dev.reins/requirement"]["arguments"]["path"],
        "a.txt"
    );
    assert_eq!(
        first["meta"]["dev.reins/requirement"]["reason"],
        "deleting needs a person's yes"
    );
    assert_eq!(
        first["schema"]["properties"]["decision"]["enum"][0],
        "approve"
    );
    assert_eq!(asked[2]["schema"]["required"][0], "tag");
    // Manual MRTR.
    assert_eq!(out["manual"]["resultType"], "input_required", "{out}");
    assert_eq!(out["manual"]["hasState"], true);
    for refused in ["tampered", "otherArgs", "replayed", "expired"] {
        assert_eq!(out[refused]["ok"], false, "{refused}: {out}");
        assert_eq!(out[refused]["code"], -32602, "{refused}: {out}");
    }
    assert!(
        out["expired"]["message"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{out}"
    );
    assert!(
        out["retried"]["text"]
            .as_str()
            .unwrap()
            .contains("deleted d.txt")
    );
    // Cancel mid-run.
    assert_eq!(out["cancel"]["ok"], false, "{out}");
    // What ran: each approved delete once; nothing for b, e, f; the slow tool stopped.
    let deletes: Vec<&String> = ran.iter().filter(|r| r.starts_with("delete:")).collect();
    assert_eq!(deletes, ["delete:a.txt", "delete:d.txt"], "{ran:?}");
    assert!(ran.contains(&"tag:c.txt=blue".to_owned()), "{ran:?}");
    assert!(ran.contains(&"slow-start:g.txt".to_owned()), "{ran:?}");
    assert!(ran.contains(&"slow-stopped:g.txt".to_owned()), "{ran:?}");
    assert!(!ran.contains(&"slow-done:g.txt".to_owned()), "{ran:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_sdk_over_http() {
    if !have_node("modern_sdk_over_http") {
        return;
    }
    let (_dir, store) = sqlite_store().await;
    let ran = Ran::default();
    let http = serve_http(server(agent(store, &ran))).await;
    let out = run_client("modern.mjs", &["http", &http.url], &[]).await;
    check_modern(&out, &ran.all());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_sdk_over_stdio() {
    if !have_node("modern_sdk_over_stdio") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ran_file = dir.path().join("ran.txt");
    let cmd = stdio_command(&dir.path().join("s.db"));
    let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = run_client(
        "modern.mjs",
        &args,
        &[("REINS_MCP_RAN_FILE", ran_file.to_str().unwrap())],
    )
    .await;
    let ran: Vec<String> = std::fs::read_to_string(&ran_file)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    check_modern(&out, &ran);
}

fn check_legacy(out: &Value, ran: &[String]) {
    assert_eq!(out["tools"][0]["name"], "files", "{out}");
    check_invalid_arguments(out);
    assert_eq!(out["plain"]["text"], "echo: hello there", "{out}");
    assert!(
        out["approve"]["text"]
            .as_str()
            .unwrap()
            .contains("deleted a.txt"),
        "{out}"
    );
    let reject = out["reject"]["text"].as_str().unwrap();
    assert!(
        reject.contains("Rejected") && reject.contains("declined"),
        "{reject}"
    );
    assert!(
        out["input"]["text"]
            .as_str()
            .unwrap()
            .contains("tagged c.txt blue"),
        "{out}"
    );
    let asked = out["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 3, "{out}");
    assert!(asked[0]["message"].as_str().unwrap().contains("a.txt"));
    assert_eq!(asked[0]["schema"]["required"][0], "decision");
    assert_eq!(out["cancel"]["ok"], false, "{out}");
    let deletes: Vec<&String> = ran.iter().filter(|r| r.starts_with("delete:")).collect();
    assert_eq!(deletes, ["delete:a.txt"], "{ran:?}");
    assert!(ran.contains(&"slow-stopped:g.txt".to_owned()), "{ran:?}");
    assert!(!ran.contains(&"slow-done:g.txt".to_owned()), "{ran:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sdk_over_http() {
    if !have_node("legacy_sdk_over_http") {
        return;
    }
    let (_dir, store) = sqlite_store().await;
    let ran = Ran::default();
    let http = serve_http(server(agent(store, &ran))).await;
    let out = run_client("legacy.mjs", &["http", &http.url], &[]).await;
    check_legacy(&out, &ran.all());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sdk_over_stdio() {
    if !have_node("legacy_sdk_over_stdio") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ran_file = dir.path().join("ran.txt");
    let cmd = stdio_command(&dir.path().join("s.db"));
    let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = run_client(
        "legacy.mjs",
        &args,
        &[("REINS_MCP_RAN_FILE", ran_file.to_str().unwrap())],
    )
    .await;
    let ran: Vec<String> = std::fs::read_to_string(&ran_file)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    check_legacy(&out, &ran);
}
