//! # user_input — a tool that needs values only a person can give
//!
//! Agno's `requires_user_input` flow, in reins. `book_flight` is registered with
//! `ToolPolicy::user_input(fields)`, where `fields` is a JSON Schema of what a person
//! must fill in (here: the travel date and a seat preference). When the model calls
//! it, the run pauses with a `UserInput { fields }` requirement; the program asks the
//! person, and `session.resolve(vec![Decision::input(id, values)])` merges the values
//! into the model's arguments (top-level keys replace the model's) and runs the tool.
//!
//! `resume()` cannot answer an input requirement, and values that are not a JSON
//! object are refused; both errors are shown below.
//!
//! Offline (a scripted model). Run it with:
//!
//! ```text
//! cargo run -p reins-examples --example user_input
//! ```

use std::sync::{Arc, Mutex};

use reins::prelude::*;
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct BookingArgs {
    /// Where to fly.
    destination: String,
    /// The travel date, e.g. 2025-06-01.
    date: String,
    /// `window` or `aisle`.
    seat: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let booked: Arc<Mutex<Vec<Value>>> = Arc::default();
    let log = booked.clone();
    let mut tools = Toolkit::new();
    tools.add(
        Toolkit::function(
            "book_flight",
            "Book a flight",
            move |a: BookingArgs, _ctx| {
                let log = log.clone();
                async move {
                    let booking =
                        json!({"destination": a.destination, "date": a.date, "seat": a.seat});
                    log.lock().map_err(|_| "poisoned")?.push(booking);
                    Ok::<_, ToolError>(format!(
                        "booked {} on {}, {} seat",
                        a.destination, a.date, a.seat
                    ))
                }
            },
        )
        .policy(ToolPolicy::user_input(json!({
            "type": "object",
            "properties": {
                "date": {"type": "string", "description": "travel date (YYYY-MM-DD)"},
                "seat": {"type": "string", "enum": ["window", "aisle"]}
            },
            "required": ["date", "seat"]
        }))),
    )?;

    // The model knows the destination but not the date or the seat.
    let model = ScriptedModel::new([
        ScriptedResponse::tool_call_with_id("b1", "book_flight", json!({"destination": "Lisbon"})),
        ScriptedResponse::text("Your flight to Lisbon is booked."),
    ]);
    let agent = Agent::builder().model(model).toolkit(tools).build()?;
    let session = agent.session("travel").await?;

    let out = session
        .send(Msg::user("book me a flight to Lisbon"))
        .await?;
    assert_eq!(out.status, RunStatus::Paused);
    let req = &out.requirements[0];
    let RequirementKind::UserInput { fields } = &req.kind else {
        return Err(format!("expected a user-input requirement, got {:?}", req.kind).into());
    };
    println!("paused: {} ({})", req.reason, req.tool_use.input);
    println!(
        "a person must fill in:\n{}",
        serde_json::to_string_pretty(fields)?
    );

    // These do not answer an input requirement.
    if let Err(e) = session.resume().await {
        println!("resume() refused: {e}");
    } else {
        return Err("resume() must not answer an input requirement".into());
    }
    if let Err(e) = session
        .resolve(vec![Decision::input("b1", json!("2025-06-01"))])
        .await
    {
        println!("bad values refused: {e}");
    } else {
        return Err("values that are not an object must be refused".into());
    }

    // What the person typed.
    let values = json!({"date": "2025-06-01", "seat": "window"});
    let out = session
        .resolve(vec![Decision::input("b1", values).by("ana")])
        .await?;
    println!("status: {:?}\nagent: {}", out.status, out.message.text());
    assert_eq!(out.status, RunStatus::Completed);

    let booked = booked.lock().map_err(|_| "poisoned")?.clone();
    assert_eq!(
        booked,
        [json!({"destination": "Lisbon", "date": "2025-06-01", "seat": "window"})]
    );
    let messages = session.messages().await?;
    let result = messages
        .iter()
        .flat_map(|m| m.tool_results_iter())
        .find(|r| r.id == "b1")
        .ok_or("the call has a result")?;
    println!("result: {}", result.text());
    // The model's call is kept as it was; the merged arguments are recorded.
    println!(
        "executed with: {}",
        result.metadata.get("executed_input").ok_or("recorded")?
    );
    Ok(())
}
