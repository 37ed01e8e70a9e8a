//! A reins-mcp client for the official MCP conformance suite's client scenarios
//! (`@modelcontextprotocol/conformance client --command ...`).
//!
//! The suite starts a test server for a scenario, then runs this program with the
//! server's URL as its last argument, the scenario's name in
//! `MCP_CONFORMANCE_SCENARIO`, the revision to speak in
//! `MCP_CONFORMANCE_PROTOCOL_VERSION` (2025-11-25 when unset, as suite releases before
//! 0.2 leave it) and, for some scenarios, the calls to make in
//! `MCP_CONFORMANCE_CONTEXT`. The program connects the way any reins program does
//! (`McpToolset::connect`: `server/discover` for 2026-07-28, falling back to
//! `initialize` for older servers; for a revision before 2026-07-28 the suite's test
//! servers expect `initialize` right away, so that revision is pinned with
//! `McpServer::protocol_version`), makes the calls the scenario asks for through a
//! `Toolkit`, and prints `conformance_client: done` when every step went through; the
//! suite judges what it saw on the wire.
//!
//! Questions (`elicitation/create`, or `input_required` on 2026-07-28) are answered
//! by a callback standing in for a person who accepts the form as shown: every
//! field's `default` pre-filled, required fields without one filled with a value of
//! their type.
//!
//! Run by `cargo xtask conformance` (see docs/mcp.md); by hand:
//!
//! ```text
//! cargo build -p reins-mcp --example conformance_client
//! MCP_CONFORMANCE_SCENARIO=initialize target/debug/examples/conformance_client http://localhost:3000/mcp
//! ```

use std::process::ExitCode;
use std::time::Duration;

use reins_mcp::{Elicitation, ElicitationAnswer, McpServer, McpToolset};
use reins_message::{ToolOutcome, ToolUse};
use reins_tool::{ExecOptions, ToolContext, Toolkit};
use serde_json::{Map, Value, json};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!("usage: conformance_client URL (the scenario in MCP_CONFORMANCE_SCENARIO)");
        return ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    match run(&scenario, &url).await {
        Ok(()) => {
            // xtask's conformance runner counts a scenario whose client did not end
            // with this line as failed.
            println!("conformance_client: done");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("conformance_client ({scenario}): {e}");
            ExitCode::FAILURE
        }
    }
}

/// A person who accepts every form as shown (defaults pre-filled).
async fn accept_as_shown(q: Elicitation) -> ElicitationAnswer {
    let mut values = Map::new();
    let schema = &q.requested_schema;
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(props) = schema["properties"].as_object() {
        for (name, field) in props {
            if let Some(default) = field.get("default") {
                values.insert(name.clone(), default.clone());
            } else if required.contains(&name.as_str()) {
                values.insert(name.clone(), typed_value(field));
            }
        }
    }
    ElicitationAnswer::Accept(Value::Object(values))
}

/// Arguments for a tool: each required property with a value of its type.
fn arguments_for(schema: &Value) -> Value {
    let mut args = Map::new();
    for name in schema["required"].as_array().into_iter().flatten() {
        if let Some(name) = name.as_str() {
            args.insert(name.to_owned(), typed_value(&schema["properties"][name]));
        }
    }
    Value::Object(args)
}

fn typed_value(field: &Value) -> Value {
    if let Some(first) = field["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    if let Some(first) = field["oneOf"]
        .as_array()
        .and_then(|e| e.first())
        .and_then(|o| o.get("const"))
    {
        return first.clone();
    }
    match field["type"].as_str() {
        Some("boolean") => json!(true),
        Some("integer") => json!(1),
        Some("number") => json!(1.5),
        Some("array") => json!([]),
        _ => json!("yes"),
    }
}

async fn run(scenario: &str, url: &str) -> Result<(), String> {
    let mut server = McpServer::http("conformance", url)
        .prefix("")
        .trusted(true)
        .connect_timeout(Duration::from_secs(20))
        .call_timeout(Duration::from_secs(20))
        .on_elicitation(accept_as_shown);
    // Suite releases before 0.2 name no revision: they test 2025-11-25 clients.
    let version = std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION")
        .unwrap_or_else(|_| "2025-11-25".to_owned());
    if version.as_str() < "2026-07-28" {
        server = server.protocol_version(version);
    }
    let set = McpToolset::connect(server)
        .await
        .map_err(|e| e.to_string())?;
    let toolkit = set.toolkit().map_err(|e| e.to_string())?;
    let listed: Vec<String> = set.tools().into_iter().map(|t| t.name).collect();
    eprintln!("tools: {}", listed.join(", "));

    // Calls the scenario names in its context come first.
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    if let Some(calls) = context["toolCalls"].as_array() {
        for c in calls {
            let name = c["name"].as_str().unwrap_or_default();
            call(&toolkit, name, c["arguments"].clone()).await?;
        }
        set.close().await;
        return Ok(());
    }

    match scenario {
        // Connecting (and listing) is the whole scenario.
        "initialize" | "request-metadata" | "json-schema-ref-no-deref" => {}
        "tools_call" | "tools-call" => {
            let first = listed.first().ok_or("the server lists no tool")?;
            call(&toolkit, first, json!({ "a": 2, "b": 3 })).await?;
        }
        "elicitation-sep1034-client-defaults" | "elicitation-defaults" => {
            call(&toolkit, "test_client_elicitation_defaults", json!({})).await?;
        }
        "sse-retry" => call(&toolkit, "test_reconnection", json!({})).await?,
        "sep-2322-client-request-state" => {
            for tool in [
                "test_mrtr_echo_state",
                "test_mrtr_unrelated",
                "test_mrtr_no_state",
                "test_mrtr_no_result_type",
            ] {
                call(&toolkit, tool, json!({})).await?;
            }
        }
        "json-schema-2020-12-preservation" => {
            let focal = set
                .tool("json_schema_2020_12_tool")
                .ok_or("the server does not list `json_schema_2020_12_tool`")?;
            call(
                &toolkit,
                "json_schema_echo",
                json!({ "schema": focal.input_schema }),
            )
            .await?;
        }
        // Every other scenario: call each listed tool, required arguments filled in.
        _ => {
            for t in set.tools() {
                call(&toolkit, &t.name, arguments_for(&t.input_schema)).await?;
            }
        }
    }
    set.close().await;
    Ok(())
}

/// One call through the toolkit, as an agent's run would make it.
async fn call(toolkit: &Toolkit, name: &str, args: Value) -> Result<(), String> {
    let use_ = ToolUse::new(format!("call_{name}"), name, args);
    let ctx = ToolContext::new("conformance", &use_.id);
    let result = toolkit
        .execute(&use_, ctx, &ExecOptions::default())
        .await
        .into_result()
        .ok_or_else(|| format!("`{name}` gave no result"))?;
    eprintln!("{name}: {:?} {}", result.outcome, result.text());
    match &result.outcome {
        ToolOutcome::Success | ToolOutcome::Error => Ok(()),
        other => Err(format!("`{name}` ended {other:?}: {}", result.text())),
    }
}
