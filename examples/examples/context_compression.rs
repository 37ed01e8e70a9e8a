//! # context_compression — a long conversation that stays within the context window
//!
//! A support assistant answers 40 questions on one session with a budget of 2,000
//! tokens per request (`ContextPolicy::new(2_000).compress_to(1_200)`). This example
//! shows:
//!
//! - when the history grows past the budget, the oldest turns are summarized by a
//!   (here: scripted) summarizer model, and the run emits `RunEvent::ContextCompressed`
//!   with the request's size before and after;
//! - tokens are counted with the model's real tokenizer: the model is named
//!   `gpt-4o-mini`, so `tiktoken`'s `o200k_base` encoding counts them;
//! - every request stays within the budget, and carries the latest summary plus the
//!   recent turns;
//! - the store is append-only: all 80 original messages stay in the SQLite file, the
//!   summaries beside them (`session.summaries()`), each building on the one before;
//! - a new process (a second agent on the same file) goes on from the latest summary.
//!
//! Offline (scripted models). Run it with:
//!
//! ```text
//! cargo run -p reins-examples --example context_compression
//! ```

use std::sync::Arc;

use reins::agent::compression::{ContextPolicy, SUMMARY_HEADER, TiktokenCounter, TokenCounter};
use reins::prelude::*;

const BUDGET: usize = 2_000;

/// The assistant: a ~150-token answer to every question.
fn assistant() -> ScriptedModel {
    ScriptedModel::from_fn(|req| {
        let question = req.messages.last().map(Msg::text).unwrap_or_default();
        ScriptedResponse::text(format!(
            "About \"{question}\": here is what to check, step by step. First confirm the \
             account is active and the plan includes the feature; then look at the last \
             invoice for a failed payment; finally clear the browser cache and sign in \
             again. If it still fails, send me the error code shown on the page and the \
             time it happened, and I will open a ticket with the billing team for you."
        ))
    })
    .with_name("gpt-4o-mini")
}

/// The summarizer: lists the questions it read (a real model writes prose).
fn summarizer() -> ScriptedModel {
    ScriptedModel::from_fn(|req| {
        let input = req.messages.last().map(Msg::text).unwrap_or_default();
        let earlier = input
            .strip_prefix("Earlier summary:\n")
            .and_then(|rest| rest.split("\n\nConversation to summarize:").next())
            .map(|s| format!("{s} "))
            .unwrap_or_default();
        let asked: Vec<&str> = input
            .lines()
            .filter_map(|l| l.strip_prefix("[user] "))
            .collect();
        ScriptedResponse::text(format!(
            "{earlier}The user asked about {}; each time the assistant gave the same \
             checklist (account, invoice, cache) and offered a ticket.",
            asked.join(", ")
        ))
    })
    .with_name("gpt-4o-mini")
}

fn build(store: Arc<dyn MemoryStore>, model: ScriptedModel) -> Result<Agent, AgentError> {
    Agent::builder()
        .name("support")
        .system_prompt("You are a patient support assistant.")
        .model(model)
        .store_arc(store)
        .context(
            ContextPolicy::new(BUDGET)
                .compress_to(1_200)
                .summarizer(summarizer()),
        )
        .build()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("support.db");
    let model = assistant();
    let agent = build(Arc::new(SqliteStore::open(&path).await?), model.clone())?;
    let session = agent.session("customer-42").await?;

    for i in 1..=40 {
        let mut run = session
            .send(Msg::user(format!(
                "question {i}: my dashboard does not load"
            )))
            .start()
            .await?;
        while let Some(event) = run.next_event().await {
            if let RunEvent::ContextCompressed {
                summary,
                tokens_before,
                tokens_after,
            } = event
            {
                println!(
                    "turn {i:>2}: compressed {} messages: request {tokens_before} -> {tokens_after} tokens ({})",
                    summary.messages, summary.counter
                );
            }
        }
        run.wait().await?;
    }

    // Every request was within the budget (counted as the policy counts).
    let counter = TiktokenCounter::for_model("gpt-4o-mini").ok_or("no tokenizer")?;
    let largest = model
        .requests()
        .iter()
        .map(|r| {
            r.messages
                .iter()
                .map(|m| counter.count_message(m))
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0);
    assert!(largest <= BUDGET, "a request had {largest} tokens");

    // The store keeps everything; the summaries build on each other.
    let messages = session.messages().await?;
    let summaries = session.summaries().await?;
    let originals = messages.len() - summaries.len();
    assert_eq!(originals, 80);
    for pair in summaries.windows(2) {
        assert_eq!(pair[1].builds_on.as_deref(), Some(pair[0].id.as_str()));
    }
    let latest = summaries.last().ok_or("no summary")?;
    println!(
        "latest summary covers {} .. {} ({} tokens): {}",
        latest.first,
        latest.last,
        latest.summary_tokens,
        latest.text.chars().take(100).collect::<String>()
    );

    // A second process on the same file starts from the latest summary.
    drop(session);
    drop(agent);
    let model2 = assistant();
    let agent2 = build(Arc::new(SqliteStore::open(&path).await?), model2.clone())?;
    agent2
        .session("customer-42")
        .await?
        .send(Msg::user("question 41: and now?"))
        .await?;
    let request = model2.last_request().ok_or("no request")?;
    assert!(request.messages[1].text().starts_with(SUMMARY_HEADER));
    assert!(
        !request
            .messages
            .iter()
            .any(|m| m.text().starts_with("question 1:"))
    );

    println!(
        "context: 41 turns, {} summaries, largest request {largest} tokens <= {BUDGET}; the store keeps all {originals} original messages",
        summaries.len()
    );
    Ok(())
}
