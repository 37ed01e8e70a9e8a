//! The agents the benchmark programs run: an `add` tool, the scripted models of the
//! peer scripts (`shared/peer/agno_bench.py`), and one run on a fresh session.

use std::error::Error;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use reins::message::Role;
use reins::prelude::*;
use serde_json::json;

/// The programs' result type.
pub type Res<T> = Result<T, Box<dyn Error>>;

/// Arguments of the `add` tool.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    /// The first addend.
    a: i64,
    /// The second addend.
    b: i64,
}

/// A toolkit with one tool, `add`, which adds two integers.
pub fn add_toolkit() -> Res<Toolkit> {
    let mut tools = Toolkit::new();
    tools.add(Toolkit::function(
        "add",
        "Add two integers.",
        |args: AddArgs, _ctx| async move { Ok::<_, ToolError>((args.a + args.b).to_string()) },
    ))?;
    Ok(tools)
}

/// Calls `add` unless the last message is a tool result, then answers (as the peer's
/// scripted model does).
pub fn tool_model() -> ScriptedModel {
    ScriptedModel::from_fn(|req| {
        if req.messages.last().is_some_and(|m| m.role == Role::Tool) {
            ScriptedResponse::text("3")
        } else {
            ScriptedResponse::tool_call("add", json!({ "a": 1, "b": 2 }))
        }
    })
    .with_recording(false)
}

/// Answers every request with `reply`.
pub fn text_model(reply: String) -> ScriptedModel {
    ScriptedModel::from_fn(move |_| ScriptedResponse::text(reply.clone())).with_recording(false)
}

/// The agent of the tool-call scenario: [`tool_model`] with [`add_toolkit`], in memory.
pub fn tool_agent() -> Res<Agent> {
    Ok(Agent::builder()
        .model(tool_model())
        .toolkit(add_toolkit()?)
        .build()?)
}

/// The evidence signer of the signing scenarios (a fixed seed: what a key from the
/// configuration would be).
pub fn signer() -> reins::evidence::Signer {
    reins::evidence::Signer::from_seed("bench", [11; 32])
}

/// [`tool_agent`] on `store` (in memory when `None`), signing evidence receipts when
/// `sign` (`AgentBuilder::evidence_signer`: the store's hash chain on, a receipt per
/// decision applied and per call that ran).
pub fn tool_agent_with(store: Option<std::sync::Arc<dyn MemoryStore>>, sign: bool) -> Res<Agent> {
    let mut b = Agent::builder().model(tool_model()).toolkit(add_toolkit()?);
    if let Some(store) = store {
        b = b.store_arc(store);
    }
    if sign {
        b = b.evidence_signer(signer(), reins::evidence::Keyring::new());
    }
    Ok(b.build()?)
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A session id not used before in this process.
pub fn fresh_id() -> String {
    format!("s-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// One run on a new session (the peer passes no session id: a new session each run);
/// an error unless it completes.
pub async fn one_run(agent: &Agent, text: &str) -> Res<()> {
    let session = agent.session(&fresh_id()).await?;
    let out = session.send(Msg::user(text)).await?;
    if out.status != RunStatus::Completed {
        return Err(format!("run ended {:?}", out.status).into());
    }
    black_box(out);
    Ok(())
}

/// [`tool_agent`] whose `add` needs a person's confirmation.
pub fn confirm_agent() -> Res<Agent> {
    let mut tools = Toolkit::new();
    tools.add(
        Toolkit::function(
            "add",
            "Add two integers.",
            |args: AddArgs, _ctx| async move { Ok::<_, ToolError>((args.a + args.b).to_string()) },
        )
        .policy(ToolPolicy::confirm()),
    )?;
    Ok(Agent::builder()
        .model(tool_model())
        .toolkit(tools)
        .build()?)
}

/// [`confirm_agent`] signing evidence receipts.
pub fn signed_confirm_agent() -> Res<Agent> {
    let mut tools = Toolkit::new();
    tools.add(
        Toolkit::function(
            "add",
            "Add two integers.",
            |args: AddArgs, _ctx| async move { Ok::<_, ToolError>((args.a + args.b).to_string()) },
        )
        .policy(ToolPolicy::confirm()),
    )?;
    Ok(Agent::builder()
        .model(tool_model())
        .toolkit(tools)
        .evidence_signer(signer(), reins::evidence::Keyring::new())
        .build()?)
}

/// The human-in-the-loop cycle on a new session: the run pauses for the call, a
/// person approves it, it runs and the model answers; an error unless it completes.
pub async fn decision_run(agent: &Agent, text: &str) -> Res<()> {
    let session = agent.session(&fresh_id()).await?;
    let out = session.send(Msg::user(text)).await?;
    if out.status != RunStatus::Paused {
        return Err(format!("the run did not pause: {:?}", out.status).into());
    }
    let id = out.requirements[0].id.clone();
    let out = session.resolve(vec![Decision::approve(id)]).await?;
    if out.status != RunStatus::Completed {
        return Err(format!("the approved run ended {:?}", out.status).into());
    }
    black_box(out);
    Ok(())
}
