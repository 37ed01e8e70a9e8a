//! Shared helpers: where the npm-installed servers are, and the in-process fault server.

#![allow(dead_code)]

pub mod fault_server;
pub mod modern_server;

use std::path::PathBuf;

use reins_mcp::McpServer;

/// `crates/reins-mcp/tests/servers/node_modules`, where `.ci/run` installs
/// `@modelcontextprotocol/server-everything` and `server-filesystem`.
pub fn node_modules() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/node_modules")
}

/// Whether Node.js and the npm servers are installed. Under `CI=true` their absence
/// fails the test; elsewhere the test is reported as skipped, loudly.
pub fn servers_available(test: &str) -> bool {
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let installed = node_modules()
        .join("@modelcontextprotocol/server-everything/dist/index.js")
        .exists()
        && node_modules()
            .join("@modelcontextprotocol/server-filesystem/dist/index.js")
            .exists();
    if node && installed {
        return true;
    }
    let why = if node {
        "the npm MCP servers are not installed (run: npm ci --prefix crates/reins-mcp/tests/servers)"
    } else {
        "Node.js is not installed (`node` is not on PATH)"
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {why}; CI must run this test");
    }
    eprintln!("\n*** SKIPPED {test}: {why} ***\n");
    false
}

fn script(package: &str) -> String {
    node_modules()
        .join("@modelcontextprotocol")
        .join(package)
        .join("dist/index.js")
        .display()
        .to_string()
}

/// server-everything over stdio.
pub fn everything() -> McpServer {
    McpServer::stdio(
        "everything",
        "node",
        [script("server-everything"), "stdio".into()],
    )
}

/// server-everything over stdio, with everything the client writes copied to `log`.
pub fn everything_logged(log: &std::path::Path) -> McpServer {
    McpServer::stdio(
        "everything",
        "sh",
        [
            "-c".to_owned(),
            format!(
                "tee \"$REINS_MCP_WIRE_LOG\" | exec node '{}' stdio",
                script("server-everything")
            ),
        ],
    )
    .env("REINS_MCP_WIRE_LOG", log.display().to_string())
}

/// server-filesystem over stdio, allowed to touch `dir` only.
pub fn filesystem(dir: &std::path::Path) -> McpServer {
    McpServer::stdio(
        "fs",
        "node",
        [script("server-filesystem"), dir.display().to_string()],
    )
}
