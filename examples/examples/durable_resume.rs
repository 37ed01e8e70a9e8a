//! # durable_resume — pause in one process, resume in another
//!
//! A paused session lives in the store, not in memory. This example pauses a run in
//! one process with a `SqliteStore` (the embedded default), lets that process end,
//! and resumes the run in a *second process*: the example starts itself again
//! (`std::env::current_exe()`) with `resume <dir>`. The second process builds the same
//! agent on the same database file, finds the pending `delete_file` call, approves
//! it, and the tool deletes a real file in a temporary sandbox — once. Back in the
//! first process the finished transcript is read from the database.
//!
//! Offline (a rule-based scripted model). Run it with:
//!
//! ```text
//! cargo run -p reins-examples --example durable_resume
//! ```

use std::path::Path;

use reins::prelude::*;
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// The file to delete, relative to the sandbox.
    path: String,
}

/// The same agent in both processes: a model, a tool acting on `sandbox`, and the
/// SQLite database in it.
async fn build_agent(sandbox: &Path) -> Result<Agent, Box<dyn std::error::Error>> {
    let dir = sandbox.to_path_buf();
    let mut tools = Toolkit::new();
    tools.add(
        Toolkit::function("delete_file", "Delete a file", move |a: PathArgs, _ctx| {
            let file = dir.join(&a.path);
            async move {
                std::fs::remove_file(&file)?;
                Ok::<_, ToolError>(format!("deleted {}", a.path))
            }
        })
        .policy(ToolPolicy::confirm()),
    )?;
    // Asks to delete temp.txt; once the tool has answered, says it is done.
    let model = ScriptedModel::from_fn(|req| {
        let answered = req.messages.last().is_some_and(Msg::has_tool_results);
        if answered {
            ScriptedResponse::text("temp.txt is deleted.")
        } else {
            ScriptedResponse::tool_call_with_id("del-1", "delete_file", json!({"path": "temp.txt"}))
        }
    });
    let store = SqliteStore::open(sandbox.join("sessions.db")).await?;
    Ok(Agent::builder()
        .name("SafeAgent")
        .model(model)
        .toolkit(tools)
        .store(store)
        .build()?)
}

/// Process 1: start the run, pause, exit.
async fn first_half(sandbox: &Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::write(sandbox.join("temp.txt"), "scratch data")?;
    let agent = build_agent(sandbox).await?;
    let out = agent
        .session("user-7/chat-1")
        .await?
        .send(Msg::user("delete temp.txt"))
        .await?;
    assert_eq!(out.status, RunStatus::Paused);
    let r = &out.requirements[0];
    println!(
        "[pid {}] paused: {} wants {} {}",
        std::process::id(),
        r.id,
        r.tool_use.name,
        r.tool_use.input
    );
    Ok(())
}

/// Process 2: load the session, show what waits, approve it.
async fn second_half(sandbox: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let agent = build_agent(sandbox).await?;
    let session = agent.session("user-7/chat-1").await?;
    let pending = session.requirements().await?;
    println!(
        "[pid {}] loaded a paused session; pending:",
        std::process::id()
    );
    for r in &pending {
        println!(
            "    {} {} {} ({})",
            r.id, r.tool_use.name, r.tool_use.input, r.reason
        );
    }
    assert!(session.is_paused().await?);
    let out = session
        .resolve(vec![Decision::approve(&pending[0].id).by("ana")])
        .await?;
    println!(
        "[pid {}] approved; agent: {}",
        std::process::id(),
        out.message.text()
    );
    assert_eq!(out.status, RunStatus::Completed);
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, cmd, dir] = args.as_slice() {
        if cmd == "resume" {
            return second_half(Path::new(dir)).await;
        }
    }

    let sandbox = tempfile::tempdir()?;
    first_half(sandbox.path()).await?;
    assert!(
        sandbox.path().join("temp.txt").exists(),
        "nothing deleted yet"
    );

    println!(
        "[pid {}] starting a second process to resume ...",
        std::process::id()
    );
    let status = std::process::Command::new(std::env::current_exe()?)
        .arg("resume")
        .arg(sandbox.path())
        .status()?;
    assert!(status.success(), "the second process failed: {status}");

    // Back here, the store holds the whole conversation.
    assert!(
        !sandbox.path().join("temp.txt").exists(),
        "the file was deleted"
    );
    let store = SqliteStore::open(sandbox.path().join("sessions.db")).await?;
    let state = store.load_session("user-7/chat-1").await?;
    println!(
        "[pid {}] the stored transcript (version {}):",
        std::process::id(),
        state.version
    );
    for m in &state.messages {
        let mut line = m.text();
        for u in m.tool_uses() {
            line.push_str(&format!("calls {} {}", u.name, u.input));
        }
        for r in m.tool_results_iter() {
            line.push_str(&format!(
                "{} -> {}: {}",
                r.name,
                r.outcome.label(),
                r.text()
            ));
        }
        println!("    {:<9} {line}", m.role.as_str());
    }
    let ledger = store
        .ledger_entry("user-7/chat-1", "del-1")
        .await?
        .ok_or("the call is in the ledger")?;
    println!(
        "    ledger: del-1 {:?}, attempts {}",
        ledger.state, ledger.attempts
    );
    assert_eq!(ledger.attempts, 1, "the tool ran once");
    assert!(
        state.open_requirements().next().is_none(),
        "nothing is pending"
    );
    Ok(())
}
