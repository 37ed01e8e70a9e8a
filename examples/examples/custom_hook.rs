//! # custom_hook — write your own Hook
//!
//! A `Hook` sees every lifecycle point of a run (`PreCall`, `PreReasoning`,
//! `PostReasoning`, `PreActing`, `PostActing`, `PostCall`, ...) and can change the
//! run. This one, `SandboxHook`, does three things:
//!
//! 1. counts every event it sees, by kind;
//! 2. in `PreActing`, edits the tool use: every `write_file` path is forced under
//!    `sandbox/` (the model's original call stays in the transcript; what actually
//!    ran is recorded in the result as `executed_input`);
//! 3. in `PostActing`, calls `stop_agent()` after a file was written, so a person can
//!    look at it. The run pauses with *no* requirements (the tool already ran and its
//!    result is stored); `session.resume()` goes on to the next reasoning step.
//!
//! Hooks run in `priority()` order (lower first). Register a shared one with
//! `Arc<YourHook>` to read its state afterwards.
//!
//! Offline (a scripted model). Run it with:
//!
//! ```text
//! cargo run -p reins-examples --example custom_hook
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use reins::hook::HookEventKind;
use reins::hook::{Control, Hook, HookContext, HookError, HookEvent};
use reins::prelude::*;
use serde_json::{Value, json};

#[derive(Default)]
struct SandboxHook {
    seen: Mutex<BTreeMap<&'static str, usize>>,
}

#[async_trait::async_trait]
impl Hook for SandboxHook {
    fn name(&self) -> &str {
        "SandboxHook"
    }

    async fn on_event(
        &self,
        event: &mut HookEvent,
        ctx: &HookContext,
        control: &mut Control,
    ) -> Result<(), HookError> {
        let kind = event.kind();
        *self
            .seen
            .lock()
            .map_err(|_| "poisoned")?
            .entry(kind.as_str())
            .or_default() += 1;
        if kind != HookEventKind::ReasoningChunk {
            println!("  hook: {kind} (iteration {})", ctx.iteration);
        }
        match event {
            HookEvent::PreActing { tool_use } if tool_use.name == "write_file" => {
                let path = tool_use.input["path"].as_str().unwrap_or_default();
                if !path.starts_with("sandbox/") {
                    let confined = format!("sandbox/{}", path.trim_start_matches('/'));
                    println!("  hook: rewriting path {path} -> {confined}");
                    tool_use.input["path"] = Value::String(confined);
                }
            }
            HookEvent::PostActing { tool_use, .. } if tool_use.name == "write_file" => {
                println!("  hook: a file was written; stopping for review");
                control.stop_agent();
            }
            _ => {}
        }
        Ok(())
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WriteArgs {
    /// Where to write.
    path: String,
    /// What to write.
    text: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let written: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = written.clone();
    let mut tools = Toolkit::new();
    tools.add(Toolkit::function(
        "write_file",
        "Write a file",
        move |a: WriteArgs, _ctx| {
            let log = log.clone();
            async move {
                log.lock().map_err(|_| "poisoned")?.push(a.path.clone());
                Ok::<_, ToolError>(format!("wrote {} bytes to {}", a.text.len(), a.path))
            }
        },
    ))?;
    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id(
            "w1",
            "write_file",
            json!({"path": "/etc/motd", "text": "hello"}),
        ),
        ScriptedResponse::text("Saved your note."),
    ]);
    let hook = Arc::new(SandboxHook::default());
    let agent = Agent::builder()
        .model(model)
        .toolkit(tools)
        .hook(hook.clone())
        .build()?;
    let session = agent.session("hooks").await?;

    println!("call:");
    let out = session.send(Msg::user("write hello to /etc/motd")).await?;
    println!(
        "status: {:?}, requirements: {}",
        out.status,
        out.requirements.len()
    );
    assert_eq!(out.status, RunStatus::Paused);
    assert!(
        out.requirements.is_empty(),
        "a PostActing stop leaves nothing to decide"
    );
    assert_eq!(
        *written.lock().map_err(|_| "poisoned")?,
        ["sandbox/etc/motd"]
    );

    println!("\nresume:");
    let out = session.resume().await?;
    println!("status: {:?}, agent: {}", out.status, out.message.text());
    assert_eq!(out.status, RunStatus::Completed);

    let messages = session.messages().await?;
    let call = messages
        .iter()
        .flat_map(|m| m.tool_uses())
        .next()
        .ok_or("a call")?;
    let result = messages
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .next()
        .ok_or("a result")?;
    println!("\nthe model asked for: {}", call.input);
    println!(
        "what ran:            {}",
        result.metadata.get("executed_input").ok_or("recorded")?
    );
    assert_eq!(
        call.input["path"], "/etc/motd",
        "the model's call is kept as it was"
    );

    println!("\nevents seen:");
    let seen = hook.seen.lock().map_err(|_| "poisoned")?.clone();
    for (kind, n) in &seen {
        println!("  {kind:<16} {n}");
    }
    assert_eq!(seen.get("pre_acting"), Some(&1));
    assert_eq!(seen.get("post_reasoning"), Some(&2));
    assert_eq!(
        seen.get("pre_call"),
        Some(&2),
        "one per call: call() and resume()"
    );
    Ok(())
}
