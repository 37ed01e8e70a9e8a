//! # subagents — an agent used as a tool, with its pauses bubbling up
//!
//! A `lead` agent delegates to a `research` agent registered with
//! `.subagent(research.as_tool("research", ..))`. The research agent runs in a child
//! session of its own, stored beside the lead's in one SQLite file. This example
//! shows:
//!
//! - the child's pause **is** the parent's pause: research wants to run `send_email`
//!   (under `ToolPolicy::confirm()`), and the lead's run pauses with that requirement,
//!   whose `path` (`["call_lead_1", "call_res_1"]`) and `agent` (`research`) let a UI
//!   say who wants what;
//! - a **rejection** at the parent reaches the child's model with its note; the child
//!   tries again, the parent shows the new requirement, and an **approval** at the
//!   parent runs the child's tool exactly once;
//! - both runs go on to their answers; the child's transcript and audit trail are an
//!   ordinary session, opened by its derived id (`child_session_id`);
//! - approving again does nothing: the tool ran once.
//!
//! Offline (scripted models). Run it with:
//!
//! ```text
//! cargo run -p reins-examples --example subagents
//! ```

use std::sync::{Arc, Mutex};

use reins::agent::child_session_id;
use reins::prelude::*;
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EmailArgs {
    /// Who gets the email.
    to: String,
    /// The text.
    body: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn MemoryStore> =
        Arc::new(SqliteStore::open(dir.path().join("team.db")).await?);

    // The research agent: it may send email, but only with a person's approval.
    let sent: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = sent.clone();
    let mut tools = Toolkit::new();
    tools.add(
        Toolkit::function("send_email", "Send an email", move |a: EmailArgs, _ctx| {
            let log = log.clone();
            async move {
                log.lock()
                    .map_err(|_| "poisoned")?
                    .push(format!("{}: {}", a.to, a.body));
                Ok::<_, ToolError>(format!("sent to {}", a.to))
            }
        })
        .policy(ToolPolicy::confirm().reason("emails cannot be unsent")),
    )?;
    let research_model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id(
            "call_res_1",
            "send_email",
            json!({"to": "ops@example.com", "body": "Q3 numbers: revenue up 4%"}),
        ),
        ScriptedResponse::tool_call_with_id(
            "call_res_2",
            "send_email",
            json!({"to": "ops@example.com", "body": "Q3 numbers: revenue up 4% (draft, not for sharing)"}),
        ),
        ScriptedResponse::text("Sent the Q3 summary to ops, marked as a draft."),
    ]);
    let research = Agent::builder()
        .name("research")
        .system_prompt("You research and report by email.")
        .model(research_model.clone())
        .toolkit(tools)
        .store_arc(store.clone())
        .build()?;

    // The lead agent: research is one of its tools.
    let lead = Agent::builder()
        .name("lead")
        .system_prompt("You delegate research.")
        .model(ScriptedModel::new([
            ScriptedResponse::tool_call_with_id(
                "call_lead_1",
                "research",
                json!({"task": "Mail ops a summary of the Q3 numbers."}),
            ),
            ScriptedResponse::text("Research mailed ops the Q3 summary (as a draft)."),
        ]))
        .store_arc(store)
        .subagent(research.as_tool("research", "Researches and reports by email"))
        .build()?;

    let session = lead.session("user-7/q3").await?;
    let out = session
        .send(Msg::user("Get the Q3 numbers to ops."))
        .await?;
    check(out.status == RunStatus::Paused, "the lead pauses")?;
    let r = &out.requirements[0];
    println!(
        "paused: {} wants to run {} ({}) — id {}, path {:?}",
        r.agent.as_deref().unwrap_or("lead"),
        r.tool_use.name,
        r.kind.label(),
        r.id,
        r.path
    );
    check(r.id == "call_lead_1/call_res_1", "the nested id")?;
    check(r.agent.as_deref() == Some("research"), "the child's name")?;

    // Reject at the parent: the note reaches the child's model.
    let out = session
        .resolve(vec![
            Decision::reject(&r.id, "mark it as a draft, it is not final").by("alice"),
        ])
        .await?;
    check(out.status == RunStatus::Paused, "the child asks again")?;
    let r = &out.requirements[0];
    println!(
        "rejected with a note; the child asks again: {} {}",
        r.id, r.tool_use.input
    );
    let note_seen = research_model.requests().last().is_some_and(|req| {
        req.messages
            .iter()
            .flat_map(|m| m.tool_results_iter())
            .any(|t| t.text().contains("not final"))
    });
    check(note_seen, "the child's model read the note")?;

    // Approve at the parent: the child's tool runs once, both runs finish.
    let out = session
        .resolve(vec![Decision::approve(&r.id).by("alice")])
        .await?;
    check(out.status == RunStatus::Completed, "the lead completes")?;
    println!("lead: {}", out.message.text());
    let emails = sent.lock().map_err(|_| "poisoned")?.clone();
    println!("emails sent: {emails:?}");
    check(emails.len() == 1, "one email")?;

    // The child is an ordinary session in the same store.
    let child = research
        .session(&child_session_id("user-7/q3", "call_lead_1"))
        .await?;
    println!("child session {}:", child.id());
    for m in child.messages().await? {
        println!("  {:?}: {}", m.role, one_line(&m));
    }
    for d in child.decisions().await? {
        println!(
            "  audit: {} {} on {} by {}",
            d.decision,
            d.tool_name,
            d.requirement_id,
            d.actor.map(|a| a.principal).unwrap_or_default()
        );
    }

    // Approving again finds nothing pending.
    let again = session
        .resolve(vec![Decision::approve("call_lead_1/call_res_2")])
        .await;
    check(again.is_err(), "a second approval is refused")?;
    check(
        sent.lock().map_err(|_| "poisoned")?.len() == 1,
        "still one email",
    )?;
    println!("second approval refused; still one email");
    Ok(())
}

fn one_line(m: &Msg) -> String {
    let mut parts: Vec<String> = Vec::new();
    let text = m.text();
    if !text.is_empty() {
        parts.push(text);
    }
    for u in m.tool_uses() {
        parts.push(format!("[calls {} {}]", u.name, u.input));
    }
    for r in m.tool_results_iter() {
        parts.push(format!("[{} {}: {}]", r.id, r.outcome.label(), r.text()));
    }
    parts.join(" ")
}

fn check(ok: bool, what: &str) -> Result<(), Box<dyn std::error::Error>> {
    if ok {
        Ok(())
    } else {
        Err(format!("check failed: {what}").into())
    }
}
