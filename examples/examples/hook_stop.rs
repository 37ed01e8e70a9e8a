//! # hook_stop — stop after reasoning, then resume, cancel, or change your mind
//!
//! AgentScope's `HookStopAgentExample`, in reins. A `ToolConfirmationHook` watches
//! the model's answers: when it calls `delete_file` or `send_email`, the hook calls
//! `stop_agent()` in `PostReasoning`, so the run pauses *before* the tool runs and
//! the pending call becomes a `Confirmation` requirement. Then:
//!
//! 1. `session.resume()` approves the pending call (AgentScope's `agent()` with no
//!    message): the tool runs once and the model answers.
//! 2. `session.send(Msg::tool_results([ToolResult::cancelled(..)]))` cancels it: the
//!    tool never runs and the model is told so.
//! 3. `session.send(Msg::user(..))` sends new intent instead: the pending call is
//!    closed as `Rejected` (with the new message as the note) and the model goes on.
//!
//! Offline (a scripted model). Run it with:
//!
//! ```text
//! cargo run -p reins-examples --example hook_stop
//! ```

use std::sync::{Arc, Mutex};

use reins::hook::ToolConfirmationHook;
use reins::message::ToolResult;
use reins::prelude::*;
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// The file to delete.
    path: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EmailArgs {
    /// Who gets the email.
    to: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SearchArgs {
    /// What to look for.
    query: String,
}

/// Every side effect the tools had, in order.
type Effects = Arc<Mutex<Vec<String>>>;

fn toolkit(effects: &Effects) -> Result<Toolkit, Box<dyn std::error::Error>> {
    let mut tools = Toolkit::new();
    let log = effects.clone();
    tools.add(Toolkit::function(
        "delete_file",
        "Delete a file",
        move |a: PathArgs, _ctx| {
            let log = log.clone();
            async move {
                log.lock()
                    .map_err(|_| "log poisoned")?
                    .push(format!("deleted {}", a.path));
                Ok::<_, ToolError>(format!("deleted {}", a.path))
            }
        },
    ))?;
    let log = effects.clone();
    tools.add(Toolkit::function(
        "send_email",
        "Send an email",
        move |a: EmailArgs, _ctx| {
            let log = log.clone();
            async move {
                log.lock()
                    .map_err(|_| "log poisoned")?
                    .push(format!("emailed {}", a.to));
                Ok::<_, ToolError>(format!("sent to {}", a.to))
            }
        },
    ))?;
    tools.add(Toolkit::function("search_web", "Search the web", |a: SearchArgs, _ctx| async move {
        Ok::<_, ToolError>(format!("3 results for `{}`", a.query))
    }))?;
    Ok(tools)
}

fn show(label: &str, out: &RunOutput) {
    println!("[{label}] status: {:?}", out.status);
    for r in &out.requirements {
        println!(
            "  waiting: {} {} ({})",
            r.tool_use.name, r.tool_use.input, r.reason
        );
    }
    if !out.message.text().is_empty() {
        println!("  agent: {}", out.message.text());
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let effects = Effects::default();
    // The model's side of the three conversations below, in order.
    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id("c1", "delete_file", json!({"path": "temp.txt"})),
        ScriptedResponse::text("temp.txt is deleted."),
        ScriptedResponse::tool_call_with_id("c2", "send_email", json!({"to": "bo@example.com"})),
        ScriptedResponse::text("Understood, I did not send the email."),
        ScriptedResponse::tool_call_with_id("c3", "delete_file", json!({"path": "notes.txt"})),
        ScriptedResponse::tool_call_with_id("c4", "search_web", json!({"query": "rust"})),
        ScriptedResponse::text("I kept notes.txt and found 3 results about rust."),
    ]);
    let agent = Agent::builder()
        .name("SafeAgent")
        .system_prompt("You are a careful assistant.")
        .model(model)
        .toolkit(toolkit(&effects)?)
        .hook(ToolConfirmationHook::new(["delete_file", "send_email"]))
        .build()?;
    let session = agent.session("hook-stop").await?;

    println!("== 1. stop, then resume() ==");
    let out = session.send(Msg::user("delete temp.txt")).await?;
    show("call", &out);
    assert_eq!(out.status, RunStatus::Paused);
    assert_eq!(out.requirements[0].kind, RequirementKind::Confirmation);
    assert!(
        effects.lock().map_err(|_| "poisoned")?.is_empty(),
        "nothing ran yet"
    );
    let out = session.resume().await?;
    show("resume", &out);
    assert_eq!(out.status, RunStatus::Completed);

    println!("\n== 2. stop, then cancel with a tool result ==");
    let out = session.send(Msg::user("email bo")).await?;
    show("call", &out);
    let pending = &out.requirements[0];
    // The session fills in the tool's name from the pending call.
    let cancelled = ToolResult::answering(&pending.id).cancelled("cancelled by the user");
    let out = session.send(Msg::tool_results([cancelled])).await?;
    show("cancel", &out);
    assert_eq!(out.status, RunStatus::Completed);

    println!("\n== 3. stop, then a new user message ==");
    let out = session.send(Msg::user("delete notes.txt")).await?;
    show("call", &out);
    let out = session
        .send(Msg::user("no, keep it and search the web for rust instead"))
        .await?;
    show("new message", &out);
    assert_eq!(out.status, RunStatus::Completed);

    println!("\n== what the tools did ==");
    let done = effects.lock().map_err(|_| "poisoned")?.clone();
    for e in &done {
        println!("  {e}");
    }
    assert_eq!(
        done,
        ["deleted temp.txt"],
        "only the approved call ran, once"
    );

    println!("\n== how each call ended ==");
    for r in session
        .messages()
        .await?
        .iter()
        .flat_map(|m| m.tool_results_iter())
    {
        println!(
            "  {} {:<12} {:<10} {}",
            r.id,
            r.name,
            r.outcome.label(),
            r.text()
        );
    }
    Ok(())
}
