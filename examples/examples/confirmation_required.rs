//! # confirmation_required — tools that wait for a person's approval
//!
//! Agno's `requires_confirmation` flow, in reins. A tool registered with
//! `ToolPolicy::confirm()` never runs on the model's say-so: the run pauses with a
//! `Confirmation` requirement, and `session.resolve(decisions)` answers it (Agno's
//! `continue_run`). This example shows:
//!
//! - approving with **edited arguments** (`Decision::approve_with`): the tool runs with
//!   the person's arguments, the model's original `ToolUse` stays in the transcript
//!   untouched, and the result records `executed_input`;
//! - rejecting **with a note** (`Decision::reject`): the tool never runs and the model
//!   reads the note;
//! - an ungated tool in the same turn runs at once, while the gated ones wait;
//! - a wrong decision (unknown id, wrong kind) is refused with a clear error and
//!   changes nothing.
//!
//! Offline (a scripted model). Run it with:
//!
//! ```text
//! cargo run -p reins-examples --example confirmation_required
//! ```

use std::sync::{Arc, Mutex};

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
    /// The text.
    body: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SearchArgs {
    /// What to look for.
    query: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ran: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut tools = Toolkit::new();
    let log = ran.clone();
    tools.add(
        Toolkit::function("delete_file", "Delete a file", move |a: PathArgs, _ctx| {
            let log = log.clone();
            async move {
                log.lock()
                    .map_err(|_| "poisoned")?
                    .push(format!("delete_file {}", a.path));
                Ok::<_, ToolError>(format!("deleted {}", a.path))
            }
        })
        .policy(ToolPolicy::confirm()),
    )?;
    let log = ran.clone();
    tools.add(
        Toolkit::function("send_email", "Send an email", move |a: EmailArgs, _ctx| {
            let log = log.clone();
            async move {
                log.lock()
                    .map_err(|_| "poisoned")?
                    .push(format!("send_email {}", a.to));
                Ok::<_, ToolError>(format!("sent to {}: {}", a.to, a.body))
            }
        })
        .policy(ToolPolicy::confirm().reason("emails cannot be unsent")),
    )?;
    let log = ran.clone();
    tools.add(Toolkit::function(
        "search_web",
        "Search the web",
        move |a: SearchArgs, _ctx| {
            let log = log.clone();
            async move {
                log.lock()
                    .map_err(|_| "poisoned")?
                    .push(format!("search_web {}", a.query));
                Ok::<_, ToolError>(format!("3 results for `{}`", a.query))
            }
        },
    ))?;

    // The model asks for three tools at once, then answers.
    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id("c1", "search_web", json!({"query": "cleanup policy"}))
            .then_tool_call("delete_file", json!({"path": "/home/ana/report.pdf"}))
            .then_tool_call(
                "send_email",
                json!({"to": "boss@example.com", "body": "All files deleted."}),
            ),
        ScriptedResponse::text("I deleted the temp copy and did not send the email."),
    ]);
    let agent = Agent::builder()
        .name("SafeAgent")
        .model(model.clone())
        .toolkit(tools)
        .build()?;
    let session = agent.session("confirm-demo").await?;

    let out = session.send(Msg::user("clean up and tell my boss")).await?;
    println!("status: {:?}", out.status);
    for r in &out.requirements {
        println!(
            "  needs {}: {} {}  ({})",
            r.kind.label(),
            r.tool_use.name,
            r.tool_use.input,
            r.reason
        );
    }
    assert_eq!(out.status, RunStatus::Paused);
    assert_eq!(out.requirements.len(), 2);
    // The ungated search already ran; the gated calls did not.
    assert_eq!(
        *ran.lock().map_err(|_| "poisoned")?,
        ["search_web cleanup policy"]
    );
    let delete_id = out.requirements[0].id.clone();
    let email_id = out.requirements[1].id.clone();

    // A wrong decision is refused and changes nothing.
    let err = session
        .resolve(vec![Decision::input(&delete_id, json!({"x": 1}))])
        .await
        .err()
        .ok_or("a wrong decision must be refused")?;
    println!("refused: {err}");
    assert!(matches!(err, AgentError::WrongDecision { .. }));
    let err = session
        .resolve(vec![Decision::approve("no-such-call")])
        .await
        .err()
        .ok_or("an unknown id must be refused")?;
    println!("refused: {err}");
    assert!(session.is_paused().await?);

    // Approve the delete with safer arguments; reject the email with a note.
    let out = session
        .resolve(vec![
            Decision::approve_with(&delete_id, json!({"path": "/tmp/report-copy.pdf"})).by("ana"),
            Decision::reject(&email_id, "don't email my boss; I'll tell them myself").by("ana"),
        ])
        .await?;
    println!("status: {:?}\nagent: {}", out.status, out.message.text());
    assert_eq!(out.status, RunStatus::Completed);

    let ran = ran.lock().map_err(|_| "poisoned")?.clone();
    println!("\ntools that ran: {ran:?}");
    assert_eq!(
        ran,
        [
            "search_web cleanup policy",
            "delete_file /tmp/report-copy.pdf"
        ]
    );

    // The transcript tells the truth: the model's call as it made it, and what ran.
    let messages = session.messages().await?;
    let original = messages
        .iter()
        .flat_map(|m| m.tool_uses())
        .find(|u| u.id == delete_id)
        .ok_or("the model's call is kept")?;
    println!("model asked for: {}", original.input);
    assert_eq!(original.input, json!({"path": "/home/ana/report.pdf"}));
    for r in messages.iter().flat_map(|m| m.tool_results_iter()) {
        println!("  {:<12} {:<9} {}", r.name, r.outcome.label(), r.text());
        if let Some(executed) = r.metadata.get("executed_input") {
            println!("               executed with {executed}");
        }
    }
    // What the model saw on its second call: the rejection note.
    let seen = model.last_request().ok_or("the model was called")?;
    let note_seen = seen
        .messages
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .any(|r| r.text().contains("I'll tell them myself"));
    assert!(note_seen, "the model reads the rejection note");
    Ok(())
}
