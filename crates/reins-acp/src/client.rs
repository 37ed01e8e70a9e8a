//! Client tools: what the editor declared it can do (`fs/read_text_file`,
//! `fs/write_text_file`, `terminal/*`), and the plan view, offered to the model as
//! tools the caller executes. Each call pauses the run with an `External`
//! requirement; the door executes it through the client and hands the result back as
//! `Decision::external_result`, so it is recorded in the ledger like any tool's.
//! Writing and running a command are asked first (allow / reject).

use std::path::Path;
use std::sync::Arc;

use reins_agent::{Decision, Requirement};
use reins_message::ToolSpec;
use serde_json::{Value, json};

use crate::permission::{self, Choice};
use crate::server::{Conn, Live};

/// Reads a text file through the editor (unsaved changes included).
pub const READ_TOOL: &str = "read_text_file";
/// Writes a text file through the editor.
pub const WRITE_TOOL: &str = "write_text_file";
/// Runs a command in the editor's terminal.
pub const RUN_TOOL: &str = "run_in_terminal";
/// Shows the model's plan in the editor.
pub const PLAN_TOOL: &str = "update_plan";

/// The most output kept from a command (bytes).
const OUTPUT_LIMIT: u64 = 64 * 1024;

/// The client tools this connection offers.
pub(crate) fn specs(conn: &Conn) -> Vec<ToolSpec> {
    let caps = conn.caps();
    let cfg = &conn.acp.inner;
    let mut out = Vec::new();
    if cfg.client_tools && caps.read {
        out.push(ToolSpec::new(
            READ_TOOL,
            "Read a text file in the person's editor (unsaved changes included).",
            json!({
                "type": "object",
                "properties": {
                    "path": { "type": "string", "description": "The file, absolute or relative to the project" },
                    "line": { "type": "integer", "minimum": 1, "description": "First line to read (1-based)" },
                    "limit": { "type": "integer", "minimum": 1, "description": "Most lines to read" }
                },
                "required": ["path"]
            }),
        ));
    }
    if cfg.client_tools && caps.write {
        out.push(ToolSpec::new(
            WRITE_TOOL,
            "Write a text file in the person's editor (created when missing). The person is asked first.",
            json!({
                "type": "object",
                "properties": {
                    "path": { "type": "string", "description": "The file, absolute or relative to the project" },
                    "content": { "type": "string", "description": "The whole new content" }
                },
                "required": ["path", "content"]
            }),
        ));
    }
    if cfg.client_tools && caps.terminal {
        out.push(ToolSpec::new(
            RUN_TOOL,
            "Run a command in the person's terminal and return its exit status and output. The person is asked first.",
            json!({
                "type": "object",
                "properties": {
                    "command": { "type": "string", "description": "The program" },
                    "args": { "type": "array", "items": { "type": "string" } },
                    "cwd": { "type": "string", "description": "Working directory (default: the project)" }
                },
                "required": ["command"]
            }),
        ));
    }
    if cfg.plans {
        out.push(ToolSpec::new(
            PLAN_TOOL,
            "Show the person your plan for this task (send the whole list each time).",
            json!({
                "type": "object",
                "properties": {
                    "entries": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "content": { "type": "string" },
                                "priority": { "type": "string", "enum": ["high", "medium", "low"] },
                                "status": { "type": "string", "enum": ["pending", "in_progress", "completed"] }
                            },
                            "required": ["content"]
                        }
                    }
                },
                "required": ["entries"]
            }),
        ));
    }
    out
}

/// Whether this connection executes `tool` (it offered it).
pub(crate) fn serves(conn: &Conn, tool: &str) -> bool {
    specs(conn).iter().any(|s| s.name == tool)
}

/// Executes a client tool's call; the decision carrying its result.
pub(crate) async fn execute(conn: &Arc<Conn>, live: &Live, r: &Requirement) -> Decision {
    let args = &r.tool_use.input;
    let result = match r.tool_use.name.as_str() {
        READ_TOOL => read(conn, live, args).await,
        WRITE_TOOL => asked(conn, live, r, write(conn, live, args)).await,
        RUN_TOOL => asked(conn, live, r, run(conn, live, &r.id, args)).await,
        PLAN_TOOL => plan(conn, live, args),
        other => Err(format!("`{other}` is not a client tool of this connection")),
    };
    match result {
        Ok(text) => Decision::external_result(&r.id, text, false),
        Err(why) => Decision::external_result(&r.id, why, true),
    }
}

/// Whether a user-input requirement's fields can be an ACP form: an object schema
/// whose properties are all strings, numbers, integers or booleans.
pub(crate) fn is_form(fields: &Value) -> bool {
    fields["type"] == "object"
        && fields["properties"].as_object().is_some_and(|props| {
            props.values().all(|p| {
                matches!(
                    p["type"].as_str(),
                    Some("string" | "number" | "integer" | "boolean")
                )
            })
        })
}

/// Asks for a user-input requirement's values with `elicitation/create` (a form tied
/// to the tool call). Accepted: the values (checked by the run against the schema);
/// declined: a rejection; cancelled or failed: `None`, nothing decided.
pub(crate) async fn elicit(
    conn: &Conn,
    live: &Live,
    r: &Requirement,
    fields: &Value,
) -> Option<Decision> {
    let params = json!({
        "sessionId": live.id,
        "toolCallId": r.id,
        "mode": "form",
        "message": format!("`{}` needs input: {}", r.tool_use.name, r.reason),
        "requestedSchema": fields,
    });
    match conn.peer.request("elicitation/create", params).await {
        Ok(answer) => match answer["action"].as_str() {
            Some("accept") => {
                let values = match &answer["content"] {
                    Value::Object(_) => answer["content"].clone(),
                    _ => json!({}),
                };
                Some(Decision::input(&r.id, values))
            }
            Some("decline") => Some(Decision::reject(
                &r.id,
                "The person declined to give this input in the editor.",
            )),
            _ => None,
        },
        Err(e) => {
            tracing::debug!(error = %e.message, "elicitation failed; nothing decided");
            None
        }
    }
}

/// Runs `work` once the person allowed it.
async fn asked(
    conn: &Arc<Conn>,
    live: &Live,
    r: &Requirement,
    work: impl Future<Output = Result<String, String>>,
) -> Result<String, String> {
    match permission::ask_with(conn, live, r, &permission::ONCE).await {
        Choice::AllowOnce | Choice::AllowAlways => work.await,
        Choice::Cancelled => Err("The person did not answer; nothing was done.".to_owned()),
        Choice::RejectOnce | Choice::RejectAlways => {
            Err("The person rejected this in the editor; nothing was done.".to_owned())
        }
    }
}

fn text<'a>(args: &'a Value, key: &str) -> Result<&'a str, String> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("`{key}` (a string) is required"))
}

fn absolute(cwd: &Path, p: &str) -> String {
    cwd.join(p).to_string_lossy().into_owned()
}

async fn read(conn: &Conn, live: &Live, args: &Value) -> Result<String, String> {
    let path = absolute(&live.cwd, text(args, "path")?);
    let mut params = json!({ "sessionId": live.id, "path": path });
    for key in ["line", "limit"] {
        if let Some(n) = args.get(key).and_then(Value::as_u64).filter(|n| *n >= 1) {
            params[key] = json!(n);
        }
    }
    let answer = conn
        .peer
        .request("fs/read_text_file", params)
        .await
        .map_err(|e| format!("the editor could not read `{path}`: {}", e.message))?;
    answer
        .get("content")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("the editor's answer for `{path}` had no `content`"))
}

async fn write(conn: &Conn, live: &Live, args: &Value) -> Result<String, String> {
    let path = absolute(&live.cwd, text(args, "path")?);
    let content = text(args, "content")?;
    conn.peer
        .request(
            "fs/write_text_file",
            json!({ "sessionId": live.id, "path": path, "content": content }),
        )
        .await
        .map_err(|e| format!("the editor could not write `{path}`: {}", e.message))?;
    Ok(format!("wrote {} bytes to {path}", content.len()))
}

async fn run(conn: &Conn, live: &Live, call: &str, args: &Value) -> Result<String, String> {
    let command = text(args, "command")?;
    let list: Vec<&str> = match args.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().ok_or("`args` must be strings"))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`args` must be an array of strings".to_owned()),
    };
    let cwd = match args.get("cwd").and_then(Value::as_str) {
        Some(c) => absolute(&live.cwd, c),
        None => live.cwd.to_string_lossy().into_owned(),
    };
    let fail = |what: &str, e: crate::rpc::RpcError| format!("{what} failed: {}", e.message);
    let created = conn
        .peer
        .request(
            "terminal/create",
            json!({ "sessionId": live.id, "command": command, "args": list, "cwd": cwd, "outputByteLimit": OUTPUT_LIMIT }),
        )
        .await
        .map_err(|e| fail("terminal/create", e))?;
    let Some(terminal) = created.get("terminalId").and_then(Value::as_str) else {
        return Err("the editor's terminal/create answer had no `terminalId`".to_owned());
    };
    conn.update(
        live,
        json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": call,
            "status": "in_progress",
            "content": [{ "type": "terminal", "terminalId": terminal }],
        }),
    );
    let ids = json!({ "sessionId": live.id, "terminalId": terminal });
    let exit = conn
        .peer
        .request("terminal/wait_for_exit", ids.clone())
        .await;
    let output = conn.peer.request("terminal/output", ids.clone()).await;
    if let Err(e) = conn.peer.request("terminal/release", ids).await {
        tracing::debug!(error = %e.message, "terminal/release failed");
    }
    let exit = exit.map_err(|e| fail("terminal/wait_for_exit", e))?;
    let output = output.map_err(|e| fail("terminal/output", e))?;
    let status = match (
        exit.get("exitCode").and_then(Value::as_i64),
        exit.get("signal").and_then(Value::as_str),
    ) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by {signal}"),
        (None, None) => "exited".to_owned(),
    };
    let text = output
        .get("output")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let truncated = if output.get("truncated").and_then(Value::as_bool) == Some(true) {
        " (output truncated to its end)"
    } else {
        ""
    };
    Ok(format!("{status}{truncated}\n{text}"))
}

fn plan(conn: &Conn, live: &Live, args: &Value) -> Result<String, String> {
    let Some(entries) = args.get("entries").and_then(Value::as_array) else {
        return Err("`entries` (an array) is required".to_owned());
    };
    let mut shown = Vec::new();
    for (i, e) in entries.iter().enumerate().take(100) {
        let content = e
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("entries[{i}].content (a string) is required"))?;
        let pick = |key: &str, allowed: &[&str], default: &str| -> Result<String, String> {
            match e.get(key).and_then(Value::as_str) {
                None => Ok(default.to_owned()),
                Some(v) if allowed.contains(&v) => Ok(v.to_owned()),
                Some(v) => Err(format!(
                    "entries[{i}].{key} must be one of {allowed:?}, got `{v}`"
                )),
            }
        };
        shown.push(json!({
            "content": content,
            "priority": pick("priority", &["high", "medium", "low"], "medium")?,
            "status": pick("status", &["pending", "in_progress", "completed"], "pending")?,
        }));
    }
    let n = shown.len();
    conn.update(live, json!({ "sessionUpdate": "plan", "entries": shown }));
    Ok(format!("The plan ({n} entries) is shown to the person."))
}
