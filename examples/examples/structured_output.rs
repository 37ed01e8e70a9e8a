//! # structured_output — a typed final answer that survives a pause
//!
//! `Agent::builder().output::<Expense>()` makes every run end with an `Expense` (its
//! JSON Schema comes from schemars): `out.parsed::<Expense>()`. The model may call
//! tools first — here `fetch_receipt`, which needs a person's approval, so the run
//! pauses — and the schema is stored with the run, so the typed answer arrives after
//! `resolve`, even from another process.
//!
//! The scripted model first answers with a wrong type (`"amount": "twelve"`): reins
//! tells it exactly what is wrong, keeps the invalid answer in the transcript (marked
//! `reins.output: "invalid"`), and asks again — at most `max_output_retries` times.
//!
//! How the answer is asked for depends on the model (`ModelCapabilities`): a native
//! JSON Schema where the provider has one (OpenAI's `response_format`), otherwise a
//! forced `final_answer` tool (Anthropic), otherwise the same tool with an
//! instruction. This scripted model reports the tool kind.
//!
//! Offline. Run it with:
//!
//! ```text
//! cargo run -p reins-examples --example structured_output
//! ```

use reins::agent::{FINAL_ANSWER_TOOL, OUTPUT_MARK, RunEvent};
use reins::model::ModelCapabilities;
use reins::prelude::*;
use serde_json::json;

/// What the agent must return.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Expense {
    /// Who was paid.
    merchant: String,
    /// How much, in the currency below.
    amount: f64,
    /// ISO 4217 code, e.g. EUR.
    currency: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ReceiptArgs {
    /// The receipt's id.
    id: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut tools = Toolkit::new();
    tools.add(
        Toolkit::function(
            "fetch_receipt",
            "Read a receipt from the archive",
            |a: ReceiptArgs, _ctx| async move {
                Ok::<_, ToolError>(format!("receipt {}: Café Lisboa, 12.40 EUR", a.id))
            },
        )
        .policy(ToolPolicy::confirm()),
    )?;
    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id("r1", "fetch_receipt", json!({"id": "2024-117"})),
        ScriptedResponse::tool_call_with_id(
            "a1",
            FINAL_ANSWER_TOOL,
            json!({"merchant": "Café Lisboa", "amount": "twelve", "currency": "EUR"}),
        ),
        ScriptedResponse::tool_call_with_id(
            "a2",
            FINAL_ANSWER_TOOL,
            json!({"merchant": "Café Lisboa", "amount": 12.4, "currency": "EUR"}),
        ),
    ])
    .with_capabilities(ModelCapabilities::new(false, true));
    let agent = Agent::builder()
        .name("Bookkeeper")
        .model(model)
        .toolkit(tools)
        .output::<Expense>()
        .max_output_retries(2)
        .build()?;
    let session = agent.session("expenses/117").await?;

    // The model wants the receipt first: a person must approve.
    let out = session
        .send(Msg::user("file receipt 2024-117 as an expense"))
        .await?;
    assert_eq!(out.status, RunStatus::Paused);
    println!("paused: {}", out.requirements[0].reason);

    // Approve, and watch the answer stream in as it is written.
    let mut run = session
        .resolve(vec![Decision::approve("r1")])
        .start()
        .await?;
    let mut streamed = String::new();
    while let Some(ev) = run.next_event().await {
        if let RunEvent::OutputDelta { json } = ev {
            streamed.push_str(&json);
        }
    }
    let out = run.wait().await?;
    let expense: Expense = out.parsed()?;
    println!("typed answer: {expense:?}");
    assert_eq!(expense.amount, 12.4);
    println!("streamed JSON (both attempts): {streamed}");

    // The rejected answer is kept, marked, with the feedback the model got.
    for m in session.messages().await? {
        if let Some(mark) = m.metadata.get(OUTPUT_MARK) {
            let shown = match m.tool_uses().next() {
                Some(call) => format!("{} {}", call.name, call.input),
                None => m.tool_results_iter().map(|r| r.text()).collect::<String>(),
            };
            println!("[{mark}] {}", shown.lines().next().unwrap_or(""));
        }
    }
    println!(
        "expense filed: {} {} at {}",
        expense.amount, expense.currency, expense.merchant
    );
    Ok(())
}
