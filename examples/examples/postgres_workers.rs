//! # postgres_workers — many workers, one paused session, one tool execution
//!
//! With `PostgresStore`, any stateless worker can resume any session. Here a session
//! pauses on a `charge_card` call that needs approval; then two workers — each with
//! its own connection pool, as if on two machines — both try to resume it at the
//! same moment. The store's session lock and the tool-call ledger make the race
//! safe: one worker runs the call, the other is told the session is busy (or that
//! there is nothing left to resume), and the card is charged exactly once. Five
//! rounds, to show it is not luck.
//!
//! Needs PostgreSQL: set `REINS_TEST_POSTGRES_URL` (or `DATABASE_URL`), e.g.
//!
//! ```text
//! REINS_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!     cargo run -p reins-examples --example postgres_workers
//! ```
//!
//! Without either variable the example says it is skipped and exits successfully.
//! Tables go in the `reins_examples` schema; the sessions it makes are deleted.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use reins::memory::PostgresOptions;
use reins::prelude::*;
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ChargeArgs {
    /// Cents to charge.
    cents: u32,
}

/// One worker: its own connection pool and agent. `charges` stands in for the
/// payment provider, which every worker would call.
async fn worker(url: &str, charges: Arc<AtomicUsize>) -> Result<Agent, Box<dyn std::error::Error>> {
    let mut tools = Toolkit::new();
    tools.add(
        Toolkit::function(
            "charge_card",
            "Charge the card",
            move |a: ChargeArgs, _ctx| {
                let charges = charges.clone();
                async move {
                    charges.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    Ok::<_, ToolError>(format!("charged {} cents", a.cents))
                }
            },
        )
        .policy(ToolPolicy::confirm()),
    )?;
    let model = ScriptedModel::from_fn(|req| {
        if req.messages.last().is_some_and(Msg::has_tool_results) {
            ScriptedResponse::text("Paid.")
        } else {
            ScriptedResponse::tool_call_with_id("pay-1", "charge_card", json!({"cents": 1999}))
        }
    });
    let options = PostgresOptions::default().schema("reins_examples");
    let store = PostgresStore::connect_with(url, options).await?;
    Ok(Agent::builder()
        .model(model)
        .toolkit(tools)
        .store(store)
        .build()?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REINS_TEST_POSTGRES_URL").or_else(|_| std::env::var("DATABASE_URL"));
    let Ok(url) = url else {
        println!("postgres_workers: SKIPPED — no PostgreSQL to talk to.");
        println!("Set REINS_TEST_POSTGRES_URL (or DATABASE_URL) to run it, e.g.");
        println!("  REINS_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres \\");
        println!("      cargo run -p reins-examples --example postgres_workers");
        return Ok(());
    };

    for round in 1..=5 {
        let charges = Arc::new(AtomicUsize::new(0));
        let session_id = format!("pg-workers-{}", reins::message::new_id());

        // Somewhere, a run pauses for approval.
        let front = worker(&url, charges.clone()).await?;
        let out = front
            .session(&session_id)
            .await?
            .send(Msg::user("pay my invoice"))
            .await?;
        assert_eq!(out.status, RunStatus::Paused);

        // Two workers pick up the approval at the same time.
        let (a, b) = (
            worker(&url, charges.clone()).await?,
            worker(&url, charges.clone()).await?,
        );
        let (sa, sb) = (a.session(&session_id).await?, b.session(&session_id).await?);
        let (ra, rb) = tokio::join!(
            tokio::spawn(async move { sa.resume().await }),
            tokio::spawn(async move { sb.resume().await }),
        );
        let describe = |r: &Result<RunOutput, AgentError>| match r {
            Ok(out) => format!("{:?} ({})", out.status, out.message.text()),
            Err(e) => format!("refused: {e}"),
        };
        let (ra, rb) = (ra?, rb?);
        println!("round {round}: worker A {}", describe(&ra));
        println!("         worker B {}", describe(&rb));
        let winners = [&ra, &rb].iter().filter(|r| r.is_ok()).count();
        assert!(winners >= 1, "one worker completes the run");
        for r in [&ra, &rb] {
            if let Err(e) = r {
                assert!(
                    matches!(
                        e,
                        AgentError::SessionBusy { .. } | AgentError::NothingToResume { .. }
                    ),
                    "unexpected error: {e}"
                );
            }
        }
        let n = charges.load(Ordering::SeqCst);
        println!("         the card was charged {n} time(s)");
        assert_eq!(n, 1, "exactly one execution");
        front.store().delete_session(&session_id).await?;
    }
    Ok(())
}
