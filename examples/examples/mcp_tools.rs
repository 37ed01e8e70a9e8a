//! # mcp_tools — an MCP server's tools in a reins agent
//!
//! Starts the reference MCP server `@modelcontextprotocol/server-everything` over
//! stdio, adds its tools to a `Toolkit` (named `everything__<tool>`), and lets a
//! scripted model use them:
//!
//! 1. `get-sum` is annotated `readOnlyHint: true`, so it runs at once (and is
//!    idempotent: a call lost to a crash would be retried once).
//! 2. `get-env` would also run at once by its annotations, but the program overrides
//!    its policy with `ToolPolicy::confirm()` (the user's word always wins over a
//!    server's hints): the run pauses, and the person rejects it.
//! 3. `trigger-long-running-operation` reports progress; each
//!    `notifications/progress` arrives as a `ToolExecutionChunk` run event.
//!
//! Offline (a scripted model, no API key); needs Node.js and the server, which
//! `.ci/run` installs (`npm ci --prefix crates/reins-mcp/tests/servers`). Set
//! `REINS_MCP_EVERYTHING` to another `dist/index.js` to use that one. Run it with:
//!
//! ```text
//! cargo run -p reins-examples --example mcp_tools
//! ```

use std::path::PathBuf;

use reins::mcp::{McpServer, McpToolset};
use reins::prelude::*;
use serde_json::json;

fn server_script() -> Option<PathBuf> {
    let path = std::env::var_os("REINS_MCP_EVERYTHING").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
                "../crates/reins-mcp/tests/servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
            )
        },
        PathBuf::from,
    );
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    (node && path.is_file()).then_some(path)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(script) = server_script() else {
        let why = "mcp_tools needs Node.js and server-everything \
                   (npm ci --prefix crates/reins-mcp/tests/servers)";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            return Err(why.into());
        }
        println!("SKIPPED: {why}");
        return Ok(());
    };

    let everything = McpToolset::connect(
        McpServer::stdio(
            "everything",
            "node",
            [script.display().to_string(), "stdio".into()],
        )
        .tool_policy(
            "get-env",
            ToolPolicy::confirm().reason("shows the server's environment"),
        ),
    )
    .await?;
    for name in [
        "everything__get-sum",
        "everything__get-env",
        "everything__trigger-long-running-operation",
    ] {
        if let Some(t) = everything.tool(name) {
            println!("tool {:<45} policy from {:?}", t.name, t.policy_source);
        }
    }

    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id(
            "sum-1",
            "everything__get-sum",
            json!({ "a": 2, "b": 40 }),
        ),
        ScriptedResponse::tool_call_with_id("env-1", "everything__get-env", json!({})),
        ScriptedResponse::text("The sum is 42; I did not look at the environment."),
        ScriptedResponse::tool_call_with_id(
            "long-1",
            "everything__trigger-long-running-operation",
            json!({ "duration": 1, "steps": 3 }),
        ),
        ScriptedResponse::text("The long operation finished."),
    ]);
    let agent = Agent::builder()
        .name("McpAgent")
        .model(model)
        .toolkit(everything.toolkit()?)
        .build()?;
    let session = agent.session("mcp-demo").await?;

    // get-sum runs at once; get-env pauses for a person.
    let out = session
        .send(Msg::user("add 2 and 40, then show me the env"))
        .await?;
    assert_eq!(out.status, RunStatus::Paused);
    for r in &out.requirements {
        println!(
            "paused: {} wants `{}` ({})",
            r.id, r.tool_use.name, r.reason
        );
    }
    let out = session
        .resolve(vec![
            Decision::reject("env-1", "no need to see secrets").by("ana"),
        ])
        .await?;
    println!("agent: {}", out.message.text());

    // Progress notifications arrive as run events while the tool runs.
    let mut run = session
        .send(Msg::user("now run the long operation"))
        .start()
        .await?;
    let mut progress = 0;
    while let Some(event) = run.next_event().await {
        if let RunEvent::ToolExecutionChunk { id, text } = event {
            println!("progress of {id}: {text}");
            progress += 1;
        }
    }
    let out = run.wait().await?;
    println!("agent: {}", out.message.text());
    assert!(progress >= 1, "no progress events");

    for m in session.messages().await? {
        for r in m.tool_results_iter() {
            println!(
                "result {:<8} {:<12} {}",
                r.id,
                r.outcome.label(),
                r.text().replace('\n', " ")
            );
        }
    }
    everything.close().await;
    println!("mcp_tools: ok");
    Ok(())
}
