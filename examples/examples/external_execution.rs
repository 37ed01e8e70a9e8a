//! # external_execution — tools the caller runs itself
//!
//! Agno's `external_execution` flow, in reins, two ways:
//!
//! 1. `run_shell` is registered with `ToolPolicy::external()`: reins never runs it.
//!    The run pauses with an `External` requirement; the caller executes the call
//!    wherever it must (a sandbox, another machine, a person's laptop) and hands back
//!    the output with `Decision::external_result(id, output, is_error)`.
//! 2. `lookup_invoice` runs normally but finds it cannot finish here, so it returns
//!    `ToolError::Suspend(reason)`. The run pauses with an `External` requirement
//!    carrying that reason; the caller answers with `Msg::tool_results([..])` (a
//!    `Decision::external_result` works too).
//!
//! In both cases the model sees the caller's result as the tool's result.
//!
//! Offline (a scripted model). Run it with:
//!
//! ```text
//! cargo run -p reins-examples --example external_execution
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use reins::message::ToolResult;
use reins::prelude::*;
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ShellArgs {
    /// The command line.
    command: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct InvoiceArgs {
    /// The invoice number.
    number: u32,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let shell_runs = Arc::new(AtomicUsize::new(0));
    let counter = shell_runs.clone();
    let mut tools = Toolkit::new();
    tools.add(
        Toolkit::function(
            "run_shell",
            "Run a shell command",
            move |a: ShellArgs, _ctx| {
                // Never called: the policy hands every call to the caller.
                counter.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, ToolError>(format!("ran `{}` here", a.command)) }
            },
        )
        .policy(ToolPolicy::external()),
    )?;
    tools.add(Toolkit::function(
        "lookup_invoice",
        "Find an invoice",
        |a: InvoiceArgs, _ctx| async move {
            if a.number < 1000 {
                Ok(format!("invoice {} is paid", a.number))
            } else {
                // Old invoices live in a system only the back office can reach.
                Err(ToolError::suspend(format!(
                    "invoice {} is archived; ask the back office",
                    a.number
                )))
            }
        },
    ))?;

    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id("sh1", "run_shell", json!({"command": "df -h /"})),
        ScriptedResponse::text("The disk is 41% full."),
        ScriptedResponse::tool_call_with_id("inv1", "lookup_invoice", json!({"number": 1042})),
        ScriptedResponse::text("Invoice 1042 was paid on 3 March."),
    ]);
    let agent = Agent::builder().model(model).toolkit(tools).build()?;
    let session = agent.session("ops").await?;

    println!("== 1. ToolPolicy::external ==");
    let out = session.send(Msg::user("how full is the disk?")).await?;
    let req = &out.requirements[0];
    println!("paused: {} -> {}", req.reason, req.tool_use.input);
    assert_eq!(req.kind, RequirementKind::External);
    // The caller runs the command its own way, then reports the output.
    let output = "Filesystem  Size  Used Avail Use%\n/dev/sda1   100G   41G   59G  41%";
    let out = session
        .resolve(vec![
            Decision::external_result(&req.id, output, false).by("sandbox-7"),
        ])
        .await?;
    println!("agent: {}", out.message.text());
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(
        shell_runs.load(Ordering::SeqCst),
        0,
        "reins never ran run_shell"
    );

    println!("\n== 2. a tool that suspends itself ==");
    let out = session.send(Msg::user("was invoice 1042 paid?")).await?;
    let req = out
        .requirements
        .first()
        .ok_or("the tool suspended the run")?;
    println!("paused: {}", req.reason);
    assert_eq!(out.status, RunStatus::Paused);
    assert!(req.reason.contains("back office"));
    // The back office answers; hand the result back as a tool message.
    let answer = ToolResult::answering(&req.id).success("invoice 1042: paid on 3 March");
    let out = session.send(Msg::tool_results([answer])).await?;
    println!("agent: {}", out.message.text());
    assert_eq!(out.status, RunStatus::Completed);

    println!("\n== results in the transcript ==");
    for r in session
        .messages()
        .await?
        .iter()
        .flat_map(|m| m.tool_results_iter())
    {
        let by = r
            .metadata
            .get("executed_by")
            .map(|v| format!(" (executed_by {v})"))
            .unwrap_or_default();
        println!(
            "  {:<14} {:<8} {}{by}",
            r.name,
            r.outcome.label(),
            r.text().replace('\n', " | ")
        );
    }
    Ok(())
}
