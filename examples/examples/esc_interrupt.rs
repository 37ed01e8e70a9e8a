//! # esc_interrupt — stop a run mid-flight (the CLI's ESC key) and keep the facts
//!
//! `session.send(msg).start()` returns a `RunHandle`: read its `RunEvent`s as they happen
//! and call `interrupt()` (or hand an `Interrupter` to the task that watches the ESC
//! key). The run stops at its next checkpoint and the turn is sanitized:
//!
//! 1. **During a slow tool**: the finished `search_web` call and its result are kept;
//!    the running `download` sees its cancellation token, stops, and its partial
//!    output is kept as an `Interrupted` result; `delete_file`, which never started,
//!    gets an honest `Cancelled` result ("not run: interrupted").
//! 2. **During streaming**: the partially streamed answer is dropped (never stored);
//!    the user's message stays.
//!
//! Either way the session is ready for the next message at once, with a transcript
//! every provider accepts, and earlier turns are untouched.
//!
//! Offline (a scripted model, slowed down so there is something to interrupt). Run:
//!
//! ```text
//! cargo run -p reins-examples --example esc_interrupt
//! ```

use std::io::Write;
use std::time::Duration;

use futures::StreamExt;
use reins::message::{Role, ToolOutcome};
use reins::model::{ChatRequest, ChatStream};
use reins::prelude::*;
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SearchArgs {
    /// What to look for.
    query: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct DownloadArgs {
    /// How many parts to fetch.
    parts: u32,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// The file to delete.
    path: String,
}

/// Wraps any model and waits `every` before each chunk, like a slow network.
struct Throttled<M> {
    inner: M,
    every: Duration,
}

#[async_trait::async_trait]
impl<M: ChatModel> ChatModel for Throttled<M> {
    fn model_name(&self) -> &str {
        self.inner.model_name()
    }
    async fn stream(&self, request: ChatRequest) -> reins::model::Result<ChatStream> {
        let every = self.every;
        let chunks = self.inner.stream(request).await?;
        Ok(Box::pin(chunks.then(move |c| async move {
            tokio::time::sleep(every).await;
            c
        })))
    }
}

fn toolkit() -> Result<Toolkit, Box<dyn std::error::Error>> {
    let mut tools = Toolkit::new();
    tools.add(Toolkit::function("search_web", "Search the web", |a: SearchArgs, _ctx| async move {
        Ok::<_, ToolError>(format!("3 results for `{}`", a.query))
    }))?;
    // A slow tool that reports progress and stops when the run is interrupted.
    tools.add(Toolkit::function("download", "Download a file", |a: DownloadArgs, ctx: ToolContext| async move {
        for part in 1..=a.parts {
            tokio::select! {
                () = ctx.cancelled() => return Ok(format!("got {} of {} parts before the stop", part - 1, a.parts)),
                () = tokio::time::sleep(Duration::from_millis(100)) => ctx.emit(format!("part {part}/{}", a.parts)),
            }
        }
        Ok::<_, ToolError>(format!("downloaded {} parts", a.parts))
    }))?;
    tools.add(Toolkit::function(
        "delete_file",
        "Delete a file",
        |a: PathArgs, _ctx| async move { Ok::<_, ToolError>(format!("deleted {}", a.path)) },
    ))?;
    Ok(tools)
}

/// Prints one event as it happens.
fn print_event(ev: &RunEvent) {
    match ev {
        RunEvent::TextDelta { text } => {
            print!("{text}");
            let _ = std::io::stdout().flush();
        }
        RunEvent::ReasoningStarted { iteration } => println!("  [model call #{iteration}]"),
        RunEvent::ToolExecutionStarted { name, .. } => println!("  [running {name}]"),
        RunEvent::ToolExecutionChunk { text, .. } => println!("  [progress: {text}]"),
        RunEvent::ToolExecutionFinished { result } => {
            println!("  [{} -> {}]", result.name, result.outcome.label());
        }
        RunEvent::Repaired { report } => println!("\n  [transcript repaired: {report:?}]"),
        RunEvent::Cancelled => println!("\n  [run cancelled]"),
        _ => {}
    }
}

fn print_transcript(messages: &[Msg]) {
    for m in messages {
        let uses: Vec<_> = m.tool_uses().map(|u| u.name.as_str()).collect();
        let text = m.text();
        print!(
            "  {:<9} {}",
            m.role.as_str(),
            if text.is_empty() { "" } else { text.as_str() }
        );
        if !uses.is_empty() {
            print!("calls {uses:?}");
        }
        for r in m.tool_results_iter() {
            print!(
                "\n            {:<12} {:<11} {}",
                r.name,
                r.outcome.label(),
                r.text().replace('\n', " | ")
            );
        }
        println!();
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let script = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id("t1", "search_web", json!({"query": "rust 2024"}))
            .then_tool_call("download", json!({"parts": 50}))
            .then_tool_call("delete_file", json!({"path": "old.zip"})),
        ScriptedResponse::text(
            "Once upon a time, a crab named Ferris set out to rewrite every program in the \
             world. The journey was long, the borrow checker was strict, and the compile \
             times were legendary...",
        ),
        ScriptedResponse::text("Short version: Ferris rewrote everything, and it was safe."),
    ])
    .with_chunk_size(6);
    let agent = Agent::builder()
        .name("SafeAgent")
        .model(Throttled {
            inner: script,
            every: Duration::from_millis(20),
        })
        .toolkit(toolkit()?)
        .tool_concurrency(reins::agent::Concurrency::Sequential)
        .interrupt_grace(Duration::from_millis(500))
        .build()?;
    let session = agent.session("esc").await?;

    println!("== 1. ESC during a slow tool ==");
    let mut run = session
        .send(Msg::user(
            "search, download the archive, then delete old.zip",
        ))
        .start()
        .await?;
    while let Some(ev) = run.next_event().await {
        print_event(&ev);
        // Press ESC once the download has made some progress.
        if matches!(&ev, RunEvent::ToolExecutionChunk { text, .. } if text.starts_with("part 3/")) {
            println!("  >>> ESC");
            run.interrupt();
        }
    }
    let out = run.wait().await?;
    assert_eq!(out.status, RunStatus::Cancelled);
    let kept = session.messages().await?;
    println!("kept:");
    print_transcript(&kept);
    let outcomes: Vec<_> = kept
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .map(|r| r.outcome.clone())
        .collect();
    assert_eq!(
        outcomes,
        [
            ToolOutcome::Success,
            ToolOutcome::Interrupted,
            ToolOutcome::Cancelled
        ]
    );

    println!("\n== 2. ESC while the answer streams ==");
    let mut run = session
        .send(Msg::user("tell me a long story"))
        .start()
        .await?;
    let mut deltas = 0;
    while let Some(ev) = run.next_event().await {
        print_event(&ev);
        // Press ESC after five pieces of the answer.
        if matches!(ev, RunEvent::TextDelta { .. }) {
            deltas += 1;
            if deltas == 5 {
                println!("\n  >>> ESC");
                run.interrupt();
            }
        }
    }
    let out = run.wait().await?;
    assert_eq!(out.status, RunStatus::Cancelled);
    let after = session.messages().await?;
    println!("kept (the partial answer is gone, the question stays):");
    print_transcript(&after[kept.len()..]);
    assert_eq!(
        &after[..kept.len()],
        &kept[..],
        "earlier turns are untouched"
    );
    assert_eq!(after.len(), kept.len() + 1);
    assert_eq!(after[kept.len()].role, Role::User);

    println!("\n== 3. the session goes on ==");
    let out = session.send(Msg::user("ok, the short version")).await?;
    println!("agent: {}", out.message.text());
    assert_eq!(out.status, RunStatus::Completed);
    Ok(())
}
