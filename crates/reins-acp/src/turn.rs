//! A prompt turn: the user's message starts a run whose events stream as
//! `session/update`s; each pause is settled with the editor (permissions asked, client
//! tools executed) and the run goes on, until it completes, is cancelled, or waits on
//! something only the inbox can answer.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use reins_agent::approval::{GrantEffect, NewGrant};
use reins_agent::port::{Decide, SessionRecord};
use reins_agent::{AgentError, Decision, Requirement, RequirementKind, RunEvent, RunHandle};
use reins_agent::{RunInput, RunOutput, RunStatus, Submission};
use reins_message::{ContentBlock, Msg, ToolOutcome, ToolResult, ToolSpec};
use serde_json::{Value, json};

use crate::client;
use crate::permission::{self, Choice};
use crate::rpc::{RpcError, code};
use crate::server::{Conn, Live, agent_error, refusal};
use crate::update;

/// What the model is told when the person rejects a call in the editor.
pub(crate) const REJECTED: &str = "The person rejected this call in the editor.";

/// The `_meta` key of the message that says an answer was not applied: the refusal
/// as data (`code`, `message`; for `already_decided` also `requirement` and `decided`).
pub const REFUSED_META: &str = "dev.reins/refused";

/// `session/prompt`.
pub(crate) async fn prompt(
    conn: &Arc<Conn>,
    live: &Arc<Live>,
    params: &Value,
) -> Result<Value, RpcError> {
    let text = prompt_text(params)?;
    let Some(_busy) = live.begin() else {
        return Err(busy(live));
    };
    let tools = client::specs(conn);
    let mut submission = Submission::new(RunInput::Message(Msg::user(text)));
    submission.actor = Some(conn.actor());
    submission.client_tools = tools.clone();
    let handle = conn
        .port()
        .start(&live.id, submission)
        .await
        .map_err(agent_error)?;
    let stop = drive(conn, live, handle, &tools).await?;
    Ok(json!({ "stopReason": stop }))
}

/// `session/load` after the session was opened: replays the conversation as `stored`
/// holds it, then asks again what the session waits for (and runs on, streaming, when
/// answered).
pub(crate) async fn load(
    conn: &Arc<Conn>,
    live: &Arc<Live>,
    stored: SessionRecord,
) -> Result<(), RpcError> {
    let Some(_busy) = live.begin() else {
        return Err(busy(live));
    };
    let view = stored.view;
    let hidden = [client::PLAN_TOOL];
    for u in update::replay(
        &stored.messages,
        &view.requirements,
        &conn.acp.inner.describe,
        &live.cwd,
        &hidden,
    ) {
        conn.update(live, u);
    }
    if view.requirements.is_empty() {
        return Ok(());
    }
    let tools = client::specs(conn);
    let mut skip = HashSet::new();
    if let Settled::Go(handle) = settle(conn, live, &tools, &mut skip).await? {
        drive(conn, live, handle, &tools).await?;
    }
    Ok(())
}

fn busy(live: &Live) -> RpcError {
    RpcError::new(
        code::INVALID_REQUEST,
        format!(
            "session `{}` has a turn in progress; wait for its stop reason (or send session/cancel) and try again",
            live.id
        ),
    )
}

/// The prompt's content as the user message's text: text blocks, resource links
/// (`[name](uri)`) and embedded text resources.
fn prompt_text(params: &Value) -> Result<String, RpcError> {
    let Some(blocks) = params.get("prompt").and_then(Value::as_array) else {
        return Err(RpcError::invalid_params(
            "`prompt` (an array of content blocks) is required",
        ));
    };
    let mut parts = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => match b.get("text").and_then(Value::as_str) {
                Some(t) => parts.push(t.to_owned()),
                None => {
                    return Err(RpcError::invalid_params(format!(
                        "prompt[{i}]: a text block needs `text`"
                    )));
                }
            },
            Some("resource_link") => {
                let uri = b.get("uri").and_then(Value::as_str).unwrap_or_default();
                let name = b.get("name").and_then(Value::as_str).unwrap_or(uri);
                parts.push(format!("[{name}]({uri})"));
            }
            Some("resource") => {
                let r = &b["resource"];
                let uri = r.get("uri").and_then(Value::as_str).unwrap_or_default();
                match r.get("text").and_then(Value::as_str) {
                    Some(t) => parts.push(format!("{uri}:\n```\n{t}\n```")),
                    None => parts.push(format!("[binary resource]({uri})")),
                }
            }
            Some(other) => {
                return Err(RpcError::invalid_params(format!(
                    "prompt[{i}]: `{}` content is not accepted (promptCapabilities: text, resource links and embedded text)",
                    crate::server::clip(other)
                )));
            }
            None => {
                return Err(RpcError::invalid_params(format!(
                    "prompt[{i}]: a content block needs a `type`"
                )));
            }
        }
    }
    if parts.iter().all(|p| p.trim().is_empty()) {
        return Err(RpcError::invalid_params("the prompt is empty"));
    }
    Ok(parts.join("\n\n"))
}

/// Streams runs and settles their pauses until the turn's stop reason.
async fn drive(
    conn: &Arc<Conn>,
    live: &Arc<Live>,
    mut handle: RunHandle,
    tools: &[ToolSpec],
) -> Result<&'static str, RpcError> {
    // Requirements left pending in this turn (a cancelled question) are not asked again
    // in it.
    let mut skip = HashSet::new();
    loop {
        let out = stream(conn, live, handle).await.map_err(agent_error)?;
        match out.status {
            RunStatus::Completed => {
                // A run ended at its budget ends with the run's own message, which no
                // model streamed: the editor is told here.
                if out
                    .message
                    .metadata
                    .contains_key(reins_agent::run::BUDGET_ENDED_MARK)
                {
                    conn.update(
                        live,
                        update::chunk("agent_message_chunk", &out.message.text()),
                    );
                } else if out.empty_answer {
                    conn.update(live, update::chunk("agent_message_chunk", "(no answer)"));
                }
                return Ok("end_turn");
            }
            RunStatus::Cancelled => return Ok("cancelled"),
            RunStatus::MaxIterations => return Ok("max_turn_requests"),
            RunStatus::Paused if live.is_cancelled() => return Ok("cancelled"),
            RunStatus::Paused => match settle(conn, live, tools, &mut skip).await? {
                Settled::Go(h) => handle = h,
                Settled::Stop => {
                    return Ok(if live.is_cancelled() {
                        "cancelled"
                    } else {
                        "end_turn"
                    });
                }
            },
        }
    }
}

/// What one run has shown the editor so far.
#[derive(Default)]
struct Shown {
    /// Each running call's output so far.
    outputs: HashMap<String, String>,
    /// Calls not shown as tool calls (the plan).
    hidden: HashSet<String>,
    /// Calls shown and not yet given a final status, in the order they were shown.
    open: Vec<String>,
    /// Calls announced with a `tool_call` (a run followed through the store announces a
    /// call only when it is complete: its `tool_call` is sent then).
    announced: HashSet<String>,
}

impl Shown {
    fn opened(&mut self, id: &str) {
        if !self.open.iter().any(|o| o == id) {
            self.open.push(id.to_owned());
        }
    }

    fn closed(&mut self, id: &str) {
        self.open.retain(|o| o != id);
    }
}

/// Streams one run's events as updates; returns its output.
async fn stream(conn: &Conn, live: &Live, mut handle: RunHandle) -> reins_agent::Result<RunOutput> {
    *live.running() = Some(handle.interrupter());
    if live.is_cancelled() {
        handle.interrupt();
    }
    let mut shown = Shown::default();
    while let Some(ev) = handle.next_event().await {
        publish(conn, live, ev, &mut shown);
    }
    let out = handle.wait().await;
    *live.running() = None;
    if let Ok(out) = &out {
        close_unexecuted(conn, live, out, &shown.open).await;
    }
    out
}

/// Gives a final status to the calls the run answered without executing them: the
/// run publishes no execution for a call a standing deny rule or the approval policy
/// rejected, nor for one an interrupt cut off before it started, so without this the
/// editor would show them `pending` for good. Calls the run waits on stay `pending`:
/// the permission request or the inbox settles them.
async fn close_unexecuted(conn: &Conn, live: &Live, out: &RunOutput, open: &[String]) {
    let open: Vec<&str> = open
        .iter()
        .filter(|id| !out.requirements.iter().any(|r| &r.id == *id))
        .map(String::as_str)
        .collect();
    // The run has ended: a call that is in no stored message was cut off mid-stream
    // (its message dropped by the turn's sanitizing), and failed.
    close_from_transcript(conn, live, &open, true).await;
}

/// Sends the final state of calls `ids` as the stored transcript has it (their
/// results, read once the run that answered them has ended). A call with no stored
/// result ends `failed` when `missing_failed`, and is left as it is otherwise.
async fn close_from_transcript(conn: &Conn, live: &Live, ids: &[&str], missing_failed: bool) {
    if ids.is_empty() {
        return;
    }
    let messages = match conn.port().read(&live.id, true).await {
        Ok(r) => r.messages,
        Err(e) => {
            tracing::warn!(session = %live.id, error = %e, "could not read the transcript to close the calls that did not run here");
            return;
        }
    };
    let results: HashMap<&str, &ToolResult> = messages
        .iter()
        .flat_map(Msg::tool_results_iter)
        .map(|r| (r.id.as_str(), r))
        .collect();
    for id in ids {
        let mut u = match results.get(id) {
            Some(r) => update::finished(r),
            None if missing_failed => json!({ "toolCallId": id, "status": "failed" }),
            None => continue,
        };
        u["sessionUpdate"] = json!("tool_call_update");
        conn.update(live, u);
    }
}

fn publish(conn: &Conn, live: &Live, ev: RunEvent, shown: &mut Shown) {
    let describe = &conn.acp.inner.describe;
    match ev {
        RunEvent::TextDelta { text } => {
            conn.update(live, update::chunk("agent_message_chunk", &text))
        }
        RunEvent::ThinkingDelta { text } => {
            conn.update(live, update::chunk("agent_thought_chunk", &text));
        }
        RunEvent::ToolCallStarted { id, name } => {
            if name == client::PLAN_TOOL {
                shown.hidden.insert(id);
                return;
            }
            shown.opened(&id);
            shown.announced.insert(id.clone());
            conn.update(
                live,
                json!({
                    "sessionUpdate": "tool_call",
                    "toolCallId": id,
                    "title": name,
                    "kind": describe.kind(&name).as_str(),
                    "status": "pending",
                }),
            );
        }
        RunEvent::ToolCallReady { tool_use } => {
            if tool_use.name == client::PLAN_TOOL {
                shown.hidden.insert(tool_use.id);
                return;
            }
            shown.opened(&tool_use.id);
            let mut u = describe.call(&tool_use, &live.cwd, "pending");
            // A call no `tool_call` announced yet (its run is followed through the
            // store, where it appears complete) is announced whole.
            u["sessionUpdate"] = if shown.announced.insert(tool_use.id.clone()) {
                json!("tool_call")
            } else {
                json!("tool_call_update")
            };
            conn.update(live, u);
        }
        RunEvent::ToolExecutionStarted { id, .. } if !shown.hidden.contains(&id) => {
            conn.update(
                live,
                json!({ "sessionUpdate": "tool_call_update", "toolCallId": id, "status": "in_progress" }),
            );
        }
        RunEvent::ToolExecutionChunk { id, text } if !shown.hidden.contains(&id) => {
            let so_far = shown.outputs.entry(id.clone()).or_default();
            so_far.push_str(&text);
            conn.update(
                live,
                json!({
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": id,
                    "content": update::text_content(so_far),
                }),
            );
        }
        RunEvent::ToolExecutionFinished { result } | RunEvent::ToolReplayed { result }
            if !shown.hidden.contains(&result.id) && result.name != client::PLAN_TOOL =>
        {
            shown.closed(&result.id);
            let mut u = update::finished(&result);
            u["sessionUpdate"] = json!("tool_call_update");
            conn.update(live, u);
        }
        _ => {}
    }
}

/// How a pause was settled.
enum Settled {
    /// Decisions were accepted: the run goes on.
    Go(RunHandle),
    /// Nothing (more) to decide here: what waits stays pending.
    Stop,
}

/// Answers what the session waits for: asks the editor for each confirmation,
/// executes client tools through the client, and resolves the answers together on
/// the view they were made on.
async fn settle(
    conn: &Arc<Conn>,
    live: &Arc<Live>,
    tools: &[ToolSpec],
    skip: &mut HashSet<String>,
) -> Result<Settled, RpcError> {
    let view = conn.port().view(&live.id).await.map_err(agent_error)?;
    let by = conn.acp.inner.principal.clone();
    let mut decisions = Vec::new();
    // "Always" answers: standing grants and deny rules, stored once the answer is
    // accepted (a refused answer leaves nothing behind).
    let mut always = Vec::new();
    let mut left: Vec<&Requirement> = Vec::new();
    for r in &view.requirements {
        if skip.contains(&r.id) || live.is_cancelled() {
            left.push(r);
            continue;
        }
        let tool = &r.tool_use.name;
        match &r.kind {
            RequirementKind::Confirmation => match permission::ask(conn, live, r).await {
                Choice::AllowOnce => decisions.push(approve(r, &by)),
                Choice::AllowAlways => {
                    decisions.push(approve(r, &by));
                    always.push((tool.clone(), GrantEffect::Allow));
                }
                Choice::RejectOnce => decisions.push(Decision::reject(&r.id, REJECTED).by(&by)),
                Choice::RejectAlways => {
                    decisions.push(Decision::reject(&r.id, REJECTED).by(&by));
                    always.push((tool.clone(), GrantEffect::Deny));
                }
                Choice::Cancelled => left.push(r),
            },
            // A reached budget as a permission: allowing extends it to the suggested
            // limit (shown in the request), rejecting ends the run. Only "once" options
            // are offered.
            RequirementKind::Budget { .. } => {
                match permission::ask_with(conn, live, r, &permission::BUDGET).await {
                    Choice::AllowOnce | Choice::AllowAlways => decisions.push(approve(r, &by)),
                    Choice::RejectOnce | Choice::RejectAlways => {
                        decisions.push(Decision::reject(&r.id, "ended in the editor").by(&by));
                    }
                    Choice::Cancelled => left.push(r),
                }
            }
            RequirementKind::UserInput { fields }
                if conn.caps().forms && client::is_form(fields) =>
            {
                match client::elicit(conn, live, r, fields).await {
                    Some(d) => decisions.push(d.by(&by)),
                    None => left.push(r),
                }
            }
            RequirementKind::External if client::serves(conn, tool) => {
                decisions.push(client::execute(conn, live, r).await.by(&by));
            }
            _ => left.push(r),
        }
    }
    for r in &left {
        skip.insert(r.id.clone());
    }
    if !left.is_empty() && !live.is_cancelled() {
        let names: Vec<String> = left
            .iter()
            .map(|r| format!("`{}` ({})", r.tool_use.name, r.kind.label()))
            .collect();
        conn.update(
            live,
            update::chunk(
                "agent_message_chunk",
                &format!(
                    "\n\nWaiting for a decision on {} in session `{}`: answer it in the inbox, or load the session again to be asked here.",
                    names.join(", "),
                    live.id
                ),
            ),
        );
    }
    if decisions.is_empty() {
        return Ok(Settled::Stop);
    }
    // The calls these decisions settle without running them here: a rejection, and
    // a client tool the door executed. The run reports no execution for them, so the
    // editor is shown their results once the decisions are accepted.
    let settled_here: Vec<ToolResult> = decisions
        .iter()
        .filter_map(|d| {
            let name = |id: &str| {
                view.requirements
                    .iter()
                    .find(|r| r.id == id)
                    .map(|r| r.tool_use.name.clone())
                    .unwrap_or_default()
            };
            let (id, outcome, content) = match d {
                Decision::Reject { id, note, .. } => {
                    let note = note.clone().unwrap_or_else(|| REJECTED.to_owned());
                    (id, ToolOutcome::Rejected { note: Some(note) }, Vec::new())
                }
                Decision::ExternalResult {
                    id,
                    output,
                    is_error,
                    ..
                } => {
                    let text = match output {
                        Value::String(t) => t.clone(),
                        other => other.to_string(),
                    };
                    let outcome = if *is_error {
                        ToolOutcome::Error
                    } else {
                        ToolOutcome::Success
                    };
                    (id, outcome, vec![ContentBlock::text(text)])
                }
                _ => return None,
            };
            let name = name(id);
            // The plan is shown as a plan, not as a tool call.
            (name != client::PLAN_TOOL).then(|| ToolResult::new(id.clone(), name, outcome, content))
        })
        .collect();
    let answered: Vec<String> = decisions.iter().map(|d| d.id().to_owned()).collect();
    let mut decide = Decide::new(conn.actor(), decisions).at(view.token.clone());
    decide.client_tools = tools.to_vec();
    let handle = match accepted(conn, live, decide).await {
        Ok(h) => h,
        Err(refused) => {
            // The consent checks refused the answer (decided elsewhere meanwhile,
            // expired, ...): nothing changed; say so, show the calls that were
            // settled elsewhere as they ended there, and end the turn.
            let settled: Vec<&str> = match conn.port().view(&live.id).await {
                Ok(now) => answered
                    .iter()
                    .filter(|id| !now.requirements.iter().any(|r| &r.id == *id))
                    .map(String::as_str)
                    .collect(),
                Err(_) => Vec::new(),
            };
            close_from_transcript(conn, live, &settled, false).await;
            // The refusal in words, and as data (`_meta`): its code, and for a late
            // answer the decision that took effect.
            let mut said = update::chunk(
                "agent_message_chunk",
                &format!("\n\nYour answer was not applied: {refused}. Nothing changed."),
            );
            said["_meta"] = json!({ REFUSED_META: refusal(&refused) });
            conn.update(live, said);
            return Ok(Settled::Stop);
        }
    };
    for (tool, effect) in always {
        let (what, note) = match effect {
            GrantEffect::Deny => (
                "reject",
                "the person chose \"reject always\" for this tool in this session, in the editor (via acp)",
            ),
            GrantEffect::Allow => ("allow", "\"allow always\" in the editor (via acp)"),
        };
        let new = NewGrant {
            effect,
            session: Some(live.id.clone()),
            note: Some(note.to_owned()),
            ..NewGrant::tool(tool.clone())
        };
        if let Err(e) = conn.port().create_grant(new, &conn.actor()).await {
            tracing::warn!(tool = %tool, error = %e, "could not store the standing rule for an \"always\" answer");
            conn.update(
                live,
                update::chunk(
                    "agent_message_chunk",
                    &format!("\n\nThis answer was applied, but \"{what} always\" could not be stored: {e}"),
                ),
            );
        }
    }
    for r in &settled_here {
        let mut u = update::finished(r);
        u["sessionUpdate"] = json!("tool_call_update");
        conn.update(live, u);
    }
    Ok(Settled::Go(handle))
}

fn approve(r: &Requirement, by: &str) -> Decision {
    Decision::approve(&r.id).by(by).shown(r.fingerprint())
}

/// Hands the decisions to the one decision path; the run's handle once they are
/// accepted, or the refusal (nothing changed).
async fn accepted(conn: &Conn, live: &Live, decide: Decide) -> Result<RunHandle, AgentError> {
    let mut handle = conn.port().decide(&live.id, decide).await?;
    // Decisions are checked and stored before the run announces its start; a refused
    // one ends the run before that, with the refusal as its error.
    match handle.next_event().await {
        Some(RunEvent::RunStarted { .. }) => Ok(handle),
        _ => match handle.wait().await {
            Err(e) => Err(e),
            Ok(out) => Err(AgentError::InvalidInput(format!(
                "the run ended ({:?}) before it started",
                out.status
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn prompt_blocks_become_one_message_and_bad_ones_are_refused() {
        let p = json!({"prompt": [
            {"type": "text", "text": "look at"},
            {"type": "resource_link", "uri": "file:///p/a.rs", "name": "a.rs"},
            {"type": "resource", "resource": {"uri": "file:///p/b.rs", "text": "fn b() {}"}}
        ]});
        let t = prompt_text(&p).unwrap();
        assert!(t.starts_with("look at\n\n[a.rs](file:///p/a.rs)"), "{t}");
        assert!(t.contains("```\nfn b() {}\n```"), "{t}");
        for bad in [
            json!({}),
            json!({"prompt": []}),
            json!({"prompt": [{"type": "image", "data": "", "mimeType": "image/png"}]}),
            json!({"prompt": [{"text": "no type"}]}),
            json!({"prompt": [{"type": "text"}]}),
        ] {
            assert_eq!(
                prompt_text(&bad).unwrap_err().code,
                code::INVALID_PARAMS,
                "{bad}"
            );
        }
    }
}
