//! The agent's hooks at each point of a run, written once. Each function shows the
//! hooks what the run is about to do or did, and returns what they made of it — the
//! edited request, message, call or result, and their [`Verdict`] — as plain data, so
//! that a driver that journals its steps journals what the hooks decided and a retried
//! step never asks them again.

use reins_hook::{Control, HookContext, HookEvent, HookEventKind, SummaryReason};
use reins_message::{Msg, ToolResult, ToolUse};
use reins_model::ChatRequest;
use serde::{Deserialize, Serialize};

use crate::agent::Agent;
use crate::error::{AgentError, Result};

/// What the hooks of one event decided (the serializable part of a [`Control`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// A hook asked the run to stop.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop: bool,
    /// Messages a hook asked the model to read next (`goto_reasoning`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub goto: Vec<Msg>,
    /// A hook rejected the call, with this note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejection: Option<String>,
}

impl From<Control> for Verdict {
    fn from(c: Control) -> Self {
        Self {
            stop: c.is_stopped(),
            goto: c.goto().map(<[Msg]>::to_vec).unwrap_or_default(),
            rejection: c.rejection().map(str::to_owned),
        }
    }
}

/// Whether any of the agent's hooks listens for `kind`.
pub fn wants(agent: &Agent, kind: HookEventKind) -> bool {
    let hooks = &agent.runtime.hooks;
    !hooks.is_empty() && hooks.wants(kind)
}

/// Runs the agent's hooks of `event` (which they may edit) in `session` at
/// `iteration`; a `Control` with nothing set when none listens.
///
/// # Errors
/// A hook's error.
pub async fn run(
    agent: &Agent,
    session: &str,
    iteration: u32,
    event: &mut HookEvent,
) -> Result<Control> {
    if !wants(agent, event.kind()) {
        return Ok(Control::default());
    }
    let ctx = HookContext {
        agent_name: agent.config.name.clone(),
        session_id: session.to_owned(),
        iteration,
    };
    Ok(agent.runtime.hooks.run(event, &ctx).await?)
}

/// Runs the hooks of an event the run only reports (`ToolReplayed`, `Reconciled`,
/// `PostCall`, `Error`): what they decide changes nothing.
///
/// # Errors
/// A hook's error.
pub async fn notify(
    agent: &Agent,
    session: &str,
    iteration: u32,
    mut event: HookEvent,
) -> Result<()> {
    run(agent, session, iteration, &mut event).await.map(|_| ())
}

fn replaced(what: &str) -> AgentError {
    AgentError::Internal(format!("a hook replaced the {what} event"))
}

/// The `PreActing` hooks on a call about to run: the call they leave (its id and name
/// stay the model's: a hook may change the arguments only) and their verdict (a
/// rejection means the call does not run).
///
/// # Errors
/// A hook's error.
pub async fn pre_acting(
    agent: &Agent,
    session: &str,
    iteration: u32,
    tool_use: &ToolUse,
) -> Result<(ToolUse, Verdict)> {
    let mut ev = HookEvent::PreActing {
        tool_use: tool_use.clone(),
    };
    let control = run(agent, session, iteration, &mut ev).await?;
    let HookEvent::PreActing { tool_use: mut out } = ev else {
        return Err(replaced("PreActing"));
    };
    out.id.clone_from(&tool_use.id);
    out.name.clone_from(&tool_use.name);
    Ok((out, control.into()))
}

/// The result a call gets when a `PreActing` hook rejects it.
pub fn rejected_by_hook(tool_use: &ToolUse, note: &str) -> ToolResult {
    ToolResult::rejected(&tool_use.id, &tool_use.name, Some(note.to_owned()))
        .with_metadata("rejected_by", serde_json::Value::String("hook".to_owned()))
}

/// The `PostActing` hooks on a finished call: the result they leave and their verdict
/// (`stop`).
///
/// # Errors
/// A hook's error.
pub async fn post_acting(
    agent: &Agent,
    session: &str,
    iteration: u32,
    tool_use: ToolUse,
    result: ToolResult,
) -> Result<(ToolResult, Verdict)> {
    let mut ev = HookEvent::PostActing { tool_use, result };
    let control = run(agent, session, iteration, &mut ev).await?;
    let HookEvent::PostActing { result, .. } = ev else {
        return Err(replaced("PostActing"));
    };
    Ok((result, control.into()))
}

/// The `PreReasoning` hooks (`PreSummary` for the summary at the iteration limit) on a
/// model request: the request they leave.
///
/// # Errors
/// A hook's error.
pub async fn pre_reasoning(
    agent: &Agent,
    session: &str,
    iteration: u32,
    request: ChatRequest,
    summary: bool,
) -> Result<ChatRequest> {
    let mut ev = if summary {
        HookEvent::PreSummary {
            request,
            reason: SummaryReason::IterationLimit,
        }
    } else {
        HookEvent::PreReasoning { request }
    };
    run(agent, session, iteration, &mut ev).await?;
    match ev {
        HookEvent::PreSummary { request, .. } | HookEvent::PreReasoning { request } => Ok(request),
        _ => Err(replaced("request")),
    }
}

/// The `PostReasoning` hooks (`PostSummary` for the summary at the iteration limit) on
/// the model's message: the message they leave and their verdict (`stop`, `goto`).
///
/// # Errors
/// A hook's error.
pub async fn post_reasoning(
    agent: &Agent,
    session: &str,
    iteration: u32,
    message: Msg,
    summary: bool,
) -> Result<(Msg, Verdict)> {
    let mut ev = if summary {
        HookEvent::PostSummary {
            message,
            reason: SummaryReason::IterationLimit,
        }
    } else {
        HookEvent::PostReasoning { message }
    };
    let control = run(agent, session, iteration, &mut ev).await?;
    match ev {
        HookEvent::PostSummary { message, .. } | HookEvent::PostReasoning { message } => {
            Ok((message, control.into()))
        }
        _ => Err(replaced("message")),
    }
}

/// A tool's partial output: announced to the listeners (`ToolExecutionChunk`, for
/// text) and shown to the `ActingChunk` hooks (read-only). A hook's error is logged:
/// it never fails the call.
pub async fn acting_chunk(
    agent: &Agent,
    session: &str,
    iteration: u32,
    chunk: reins_tool::ToolChunk,
    witness: &dyn super::Witness,
) {
    let reins_tool::ToolChunk { tool_use_id, block } = chunk;
    if let Some(text) = block.as_text() {
        witness.emit(|| crate::RunEvent::ToolExecutionChunk {
            id: tool_use_id.clone(),
            text: text.to_owned(),
        });
    }
    if wants(agent, HookEventKind::ActingChunk) {
        let ev = HookEvent::ActingChunk {
            tool_use_id,
            chunk: block,
        };
        if let Err(e) = notify(agent, session, iteration, ev).await {
            tracing::warn!(error = %e, "an ActingChunk hook failed");
        }
    }
}

/// A call that failed (`error`): shown to the `Error` hooks. A hook's error is logged:
/// the call's own error is what the caller gets.
pub async fn failed(agent: &Agent, session: &str, iteration: u32, error: &str) {
    let ev = HookEvent::Error {
        message: error.to_owned(),
    };
    if let Err(e) = notify(agent, session, iteration, ev).await {
        tracing::warn!(error = %e, "an Error hook failed");
    }
}
