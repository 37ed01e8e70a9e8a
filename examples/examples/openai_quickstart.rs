//! # openai_quickstart — the same agent on a real model
//!
//! Swap the offline `ScriptedModel` for a real provider: the rest of the program does
//! not change. The model is picked from the environment:
//!
//! | variable            | provider                                   | default model        |
//! |---------------------|--------------------------------------------|----------------------|
//! | `DASHSCOPE_API_KEY` | DashScope, OpenAI-compatible mode (Qwen)   | `qwen-plus`          |
//! | `OPENAI_API_KEY`    | OpenAI, or `OPENAI_BASE_URL` (Ollama, vLLM) | `gpt-4o-mini`        |
//! | `ANTHROPIC_API_KEY` | Anthropic Messages API                     | `claude-sonnet-4-5`  |
//!
//! `REINS_MODEL` overrides the model name. The agent streams its answer, pauses
//! before `delete_file` (a tool that needs confirmation, acting on nothing real),
//! and the example approves it, so you see a full pause → approve → answer cycle.
//!
//! Without any key it explains what to set and exits successfully. Run it with:
//!
//! ```text
//! DASHSCOPE_API_KEY=sk-... cargo run -p reins-examples --example openai_quickstart
//! ```

use std::io::Write;
use std::sync::Arc;

use reins::anthropic::AnthropicChat;
use reins::prelude::*;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// The file to delete.
    path: String,
}

/// The provider the environment asks for, if any.
fn model_from_env() -> Option<(String, Arc<dyn ChatModel>)> {
    let set = |var: &str| std::env::var(var).is_ok_and(|v| !v.trim().is_empty());
    let name = |default: &str| std::env::var("REINS_MODEL").unwrap_or_else(|_| default.to_owned());
    if set("DASHSCOPE_API_KEY") {
        let m = name("qwen-plus");
        Some((format!("DashScope {m}"), Arc::new(OpenAiChat::dashscope(m))))
    } else if set("OPENAI_API_KEY") {
        let m = name("gpt-4o-mini");
        Some((
            format!("OpenAI-compatible {m}"),
            Arc::new(OpenAiChat::openai(m)),
        ))
    } else if set("ANTHROPIC_API_KEY") {
        let m = name("claude-sonnet-4-5");
        Some((format!("Anthropic {m}"), Arc::new(AnthropicChat::new(m))))
    } else {
        None
    }
}

/// Streams one run's text to the terminal and returns its output.
async fn stream(mut run: RunHandle) -> Result<RunOutput, AgentError> {
    while let Some(ev) = run.next_event().await {
        match ev {
            RunEvent::TextDelta { text } => {
                print!("{text}");
                let _ = std::io::stdout().flush();
            }
            RunEvent::ToolExecutionFinished { result } => {
                println!(
                    "\n  [{} -> {}: {}]",
                    result.name,
                    result.outcome.label(),
                    result.text()
                );
            }
            _ => {}
        }
    }
    println!();
    run.wait().await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some((label, model)) = model_from_env() else {
        println!("openai_quickstart: no API key found, so there is nothing to call (SKIPPED).");
        println!("Set one of DASHSCOPE_API_KEY, OPENAI_API_KEY (optionally with OPENAI_BASE_URL,");
        println!("e.g. http://localhost:11434/v1 for Ollama) or ANTHROPIC_API_KEY, and run again.");
        println!("The other examples run offline with ScriptedModel.");
        return Ok(());
    };
    println!("using {label}");

    let mut tools = Toolkit::new();
    tools.add(
        Toolkit::function(
            "delete_file",
            "Delete a file in the user's workspace",
            |a: PathArgs, _ctx| async move {
                Ok::<_, ToolError>(format!(
                    "deleted {} (pretend: this example touches no files)",
                    a.path
                ))
            },
        )
        .policy(ToolPolicy::confirm()),
    )?;
    let agent = Agent::builder()
        .name("SafeAgent")
        .system_prompt(
            "You are a careful assistant. Use the tools you are given when asked to act.",
        )
        .model_arc(model)
        .toolkit(tools)
        .build()?;
    let session = agent.session("quickstart").await?;

    let mut out = stream(
        session
            .send(Msg::user("Please delete the file temp.txt."))
            .start()
            .await?,
    )
    .await?;
    while out.status == RunStatus::Paused {
        let mut decisions = Vec::new();
        for r in &out.requirements {
            println!(
                "  approving {} {} ({})",
                r.tool_use.name, r.tool_use.input, r.reason
            );
            decisions.push(Decision::approve(&r.id).by("quickstart"));
        }
        let next = if decisions.is_empty() {
            session.resume().start().await? // a hook stopped the run: go on
        } else {
            session.resolve(decisions).start().await?
        };
        out = stream(next).await?;
    }
    println!(
        "status: {:?}, {} model calls, {} tokens",
        out.status,
        out.iterations,
        out.usage.total_tokens()
    );
    assert!(matches!(
        out.status,
        RunStatus::Completed | RunStatus::MaxIterations
    ));
    Ok(())
}
