//! The context-compression benchmark: one session of 1,000 turns with a
//! `ContextPolicy` of 4,000 tokens (counted with `tiktoken`'s `o200k_base`, the model
//! being named `gpt-4o-mini`), against the same 1,000 turns with no policy (the whole
//! history in every request). Prints one JSON object: the median turn time over turns
//! 1-10, 491-500 and 991-1000 for both, the growth ratio (last 10 / first 10), how
//! many summaries were written, and the largest request in tokens.
//!
//! ```text
//! cargo run --release -p reins-bench --bin context_bench [-- --turns N] [-- --budget N]
//! ```
//!
//! The model and the summarizer are scripted (no latency), so only reins is timed:
//! counting, planning the cut, building the request, storing. Each reply is ~120
//! tokens; the in-memory store; a current-thread runtime. Requests are recorded by the
//! model (a copy per turn, the same cost at every turn) and counted after the run.

use std::error::Error;
use std::time::Instant;

use reins::agent::compression::{ContextPolicy, TiktokenCounter, TokenCounter};
use reins::prelude::*;

type Res<T> = Result<T, Box<dyn Error>>;

fn arg(name: &str, default: usize) -> Res<usize> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        Some(i) => Ok(args
            .get(i + 1)
            .ok_or_else(|| format!("{name} needs a value"))?
            .parse()?),
        None => Ok(default),
    }
}

fn assistant() -> ScriptedModel {
    ScriptedModel::from_fn(|_| {
        ScriptedResponse::text(
            "Here is the plan: check the account, then the last invoice, then clear the \
             cache and sign in again. If it still fails, send me the error code and the \
             time it happened, and I will open a ticket with the billing team. Meanwhile \
             the status page shows no incident in your region, so this is most likely \
             local to your account or your browser session; we will find out quickly.",
        )
    })
    .with_name("gpt-4o-mini")
}

fn summarizer() -> ScriptedModel {
    ScriptedModel::from_fn(|req| {
        let read = req.messages.last().map(|m| m.text().len()).unwrap_or(0);
        ScriptedResponse::text(format!(
            "The user keeps reporting that the dashboard does not load; the assistant gave \
             the account/invoice/cache checklist each time and offered a ticket ({read} \
             characters of conversation folded in)."
        ))
    })
    .with_name("gpt-4o-mini")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

struct Outcome {
    turn_us: Vec<f64>,
    summaries: usize,
    largest: usize,
    stored: usize,
}

async fn run(turns: usize, policy: Option<ContextPolicy>) -> Res<Outcome> {
    let model = assistant();
    let mut builder = Agent::builder()
        .system_prompt("You are a patient support assistant.")
        .model(model.clone());
    if let Some(p) = policy {
        builder = builder.context(p);
    }
    let agent = builder.build()?;
    let session = agent.session("bench").await?;
    let mut turn_us = Vec::with_capacity(turns);
    for i in 0..turns {
        let msg = Msg::user(format!("turn {i}: my dashboard still does not load"));
        let t = Instant::now();
        session.send(msg).await?;
        turn_us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let counter = TiktokenCounter::o200k();
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
    Ok(Outcome {
        turn_us,
        summaries: session.summaries().await?.len(),
        largest,
        stored: session.messages().await?.len(),
    })
}

fn window(v: &[f64], from: usize) -> f64 {
    median(v.iter().skip(from).take(10).copied().collect())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Res<()> {
    let turns = arg("--turns", 1_000)?.max(20);
    let budget = arg("--budget", 4_000)?;
    let policy = ContextPolicy::new(budget)
        .compress_to(budget * 6 / 10)
        .summarizer(summarizer());
    let with = run(turns, Some(policy)).await?;
    let baseline_turns = if std::env::args().any(|a| a == "--no-baseline") {
        20
    } else {
        turns
    };
    let without = run(baseline_turns, None).await?;
    let mid = turns / 2 - 10;
    let last = turns - 10;
    let growth = |o: &Outcome| window(&o.turn_us, o.turn_us.len() - 10) / window(&o.turn_us, 0);
    println!(
        "{}",
        serde_json::json!({
            "turns": turns,
            "budget": budget,
            "with_policy": {
                "turn_first10_us": window(&with.turn_us, 0),
                "turn_mid10_us": window(&with.turn_us, mid),
                "turn_last10_us": window(&with.turn_us, last),
                "growth": growth(&with),
                "summaries": with.summaries,
                "largest_request_tokens": with.largest,
                "within_budget": with.largest <= budget,
                "stored_messages": with.stored,
            },
            "without_policy": {
                "turn_first10_us": window(&without.turn_us, 0),
                "turn_mid10_us": window(&without.turn_us, baseline_turns / 2 - 10),
                "turn_last10_us": window(&without.turn_us, baseline_turns - 10),
                "growth": growth(&without),
                "largest_request_tokens": without.largest,
                "stored_messages": without.stored,
            },
        })
    );
    if with.largest > budget {
        return Err(format!("a request had {} tokens, over {budget}", with.largest).into());
    }
    Ok(())
}
