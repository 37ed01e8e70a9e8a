//! # approval_views — two workers, one paused session, and consent that never widens
//!
//! Two agents share one SQLite file, as two service instances would. Worker A runs a
//! session until it pauses; worker B holds a handle on the same session the whole
//! time. Every read on B checks the stored version first, so B sees A's pause. When
//! A resolves it and the model asks for something new, B's old view is stale:
//! `resume()` on B is refused with `StaleView` and runs nothing, until B reads again
//! and so is shown what it approves. A web page that keeps the view between requests
//! passes a `ViewToken` (`session.resume().at(&token)` / `.resolve(..).at(&token)`).
//!
//! Every decision — who made it, what arguments were shown, what ran, and the refusals
//! — is in the session's append-only audit trail (`session.decisions()`).
//!
//! Offline (scripted models, a temporary SQLite file). Run it with:
//!
//! ```text
//! cargo run -p reins-examples --example approval_views
//! ```

use std::sync::Arc;

use reins::agent::{Actor, Verdict};
use reins::prelude::*;
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// The path.
    path: String,
}

fn tools() -> Result<Toolkit, Box<dyn std::error::Error>> {
    let mut t = Toolkit::new();
    t.add(
        Toolkit::function(
            "delete_file",
            "Delete a file",
            |a: PathArgs, _ctx| async move { Ok::<_, ToolError>(format!("deleted {}", a.path)) },
        )
        .policy(ToolPolicy::confirm()),
    )?;
    Ok(t)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("sessions.db");
    let store_a: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(&db).await?);
    let store_b: Arc<dyn MemoryStore> = Arc::new(SqliteStore::open(&db).await?);
    let a = Agent::builder()
        .model(ScriptedModel::new([
            ScriptedResponse::tool_call_with_id("c1", "delete_file", json!({"path": "a.log"})),
            ScriptedResponse::tool_call_with_id("c2", "delete_file", json!({"path": "b.log"})),
        ]))
        .toolkit(tools()?)
        .store_arc(store_a)
        .build()?;
    let b = Agent::builder()
        .model(ScriptedModel::new([ScriptedResponse::text(
            "Both logs are gone.",
        )]))
        .toolkit(tools()?)
        .store_arc(store_b)
        .build()?;

    // B opens the session before anything happened.
    let on_b = b.session("ops/cleanup").await?.as_actor(Actor::new("bob"));
    // A runs it until it pauses on c1.
    let on_a = a
        .session("ops/cleanup")
        .await?
        .as_actor(Actor::new("alice"));
    on_a.send(Msg::user("delete a.log and b.log")).await?;

    // B reads the store, not a cache.
    let shown = on_b.requirements().await?;
    println!(
        "B sees: {} waiting on {}",
        shown[0].tool_use.name, shown[0].tool_use.input
    );

    // A approves c1; the model asks for c2, which B has not seen.
    on_a.resolve(vec![Decision::approve("c1")]).await?;
    match on_b.resume().await {
        Err(AgentError::StaleView { seen, pending }) => {
            println!(
                "B's resume refused: it saw {seen:?}, the session now waits for {}",
                pending[0].id
            );
        }
        other => return Err(format!("expected StaleView, got {other:?}").into()),
    }

    // B reads again, is shown c2, and approves exactly that (with a pinned token, as a
    // web page would send it back).
    let view = on_b.view().await?;
    println!(
        "B now sees {:?}; token {}",
        view.token.requirement_ids(),
        view.token
    );
    let out = on_b.resume().at(&view.token).await?;
    assert_eq!(out.status, RunStatus::Completed);
    println!("agent: {}", out.message.text());

    println!("audit trail:");
    for d in on_a.decisions().await? {
        let who = d.actor.as_ref().map_or("-", |a| a.principal.as_str());
        let verdict = match &d.verdict {
            Verdict::Applied => "applied".to_owned(),
            Verdict::Refused { reason, .. } => format!("refused ({reason})"),
        };
        println!(
            "  #{} {} {} {} by {who}: {verdict}",
            d.seq, d.requirement_id, d.tool_name, d.decision
        );
    }
    Ok(())
}
