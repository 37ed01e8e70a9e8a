//! # budget — a spending limit that asks a person instead of failing
//!
//! An agent whose sessions may spend 1,000 model tokens and start 2 tool calls. The
//! model answers with three searches at once: two start, the third is held back and the
//! run pauses with a `budget` requirement showing what was spent. This example shows:
//!
//! - the pause before anything over the limit starts (the third search does not run);
//! - a bad extension (a limit not above the spend) refused with a typed error, nothing
//!   changed;
//! - the extension (`Decision::approve_with` a new limit): the held search runs and the
//!   run goes on;
//! - the next time the limit is reached, ending the run (`Decision::reject`): it
//!   completes with a final message saying the budget ended it.
//!
//! Offline (a scripted model). Run it with:
//!
//! ```text
//! cargo run -p reins-examples --example budget
//! ```

use std::sync::{Arc, Mutex};

use reins::agent::budget::Budget;
use reins::message::Usage;
use reins::prelude::*;
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SearchArgs {
    /// What to look for.
    query: String,
}

fn used(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ran: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut tools = Toolkit::new();
    let log = ran.clone();
    tools.add(Toolkit::function(
        "search_web",
        "Search the web",
        move |a: SearchArgs, _ctx| {
            let log = log.clone();
            async move {
                log.lock().map_err(|_| "poisoned")?.push(a.query.clone());
                Ok::<_, ToolError>(format!("3 results for `{}`", a.query))
            }
        },
    ))?;
    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id("c1", "search_web", json!({"query": "rust"}))
            .then_tool_call("search_web", json!({"query": "tokio"}))
            .then_tool_call("search_web", json!({"query": "serde"}))
            .with_usage(used(400, 100)),
        ScriptedResponse::text("Here is what I found on all three.").with_usage(used(700, 200)),
        ScriptedResponse::text("never sent: the run ends at its budget"),
    ]);
    let agent = Agent::builder()
        .name("Researcher")
        .model(model.clone())
        .toolkit(tools)
        .budget(Budget::new().tokens(1_000).tool_calls(2))
        .build()?;
    let session = agent.session("budget-demo").await?;

    let out = session
        .send(Msg::user("look up rust, tokio and serde"))
        .await?;
    println!(
        "status: {:?}; searches run: {:?}",
        out.status,
        ran.lock().map_err(|_| "poisoned")?
    );
    let r = out
        .requirements
        .first()
        .ok_or("the run should wait for its budget")?;
    println!("  needs {}: {}", r.kind.label(), r.reason);

    // A limit that is not above what was spent is refused; nothing changes.
    let low = Decision::approve_with(&r.id, json!({"tool_calls": 2}));
    match session.resolve(vec![low]).await {
        Err(e) => println!("  refused: {e}"),
        Ok(_) => return Err("a limit not above the spend must be refused".into()),
    }

    // Extend: one more tool call and more tokens.
    let more = Decision::approve_with(&r.id, json!({"tool_calls": 3})).by("ana@example.com");
    let out = session.resolve(vec![more]).await?;
    println!(
        "status: {:?}; searches run: {:?}",
        out.status,
        ran.lock().map_err(|_| "poisoned")?
    );
    println!("  the model said: {}", out.message.text());

    // 1,400 tokens spent of 1,000: the next message waits before the model is called.
    let out = session.send(Msg::user("and clap?")).await?;
    let r = out
        .requirements
        .first()
        .ok_or("the run should wait for its budget")?;
    println!(
        "status: {:?}; model calls so far: {}",
        out.status,
        model.calls()
    );
    println!("  needs {}: {}", r.kind.label(), r.reason);
    let out = session
        .resolve(vec![
            Decision::reject(&r.id, "that is enough for today").by("ana@example.com"),
        ])
        .await?;
    println!("status: {:?}; model calls: {}", out.status, model.calls());
    println!("  final message: {}", out.message.text());
    for d in session.decisions().await? {
        println!(
            "  audit: {} {} by {:?}",
            d.requirement_id,
            d.decision,
            d.actor.map(|a| a.principal)
        );
    }
    Ok(())
}
