//! A reins run as an AG-UI event stream: its events translated as they arrive
//! ([`Translator`]), then the closing `MESSAGES_SNAPSHOT` and `RUN_FINISHED` (or
//! `RUN_ERROR`). A client that goes away (aborts its request) interrupts the run.

use std::collections::HashSet;
use std::sync::Arc;

use axum::response::Response;
use axum::response::sse::Event;
use reins_agent::{Requirement, RequirementKind, RunEvent, RunOutput, RunStatus};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use super::resume::interrupt_of;
use super::wire::{ResumeEntry, arguments_of, event, messages_of, result_text, run_error};
use crate::hub::{HubEvent, LocalRun, Subscription};
use crate::sse;
use crate::state::AppState;

/// Who the stream is for: the thread, the client's run id, and the client's own tools
/// (their calls are left to the client, not shown as interrupts).
#[derive(Debug, Clone)]
pub(crate) struct RunScope {
    pub(crate) thread_id: String,
    pub(crate) run_id: String,
    pub(crate) client_tools: HashSet<String>,
}

impl RunScope {
    /// Whether a requirement is a call of one of the client's tools (answered by a tool
    /// message, not by a resume entry).
    pub(crate) fn is_frontend(&self, r: &Requirement, state: &AppState) -> bool {
        matches!(r.kind, RequirementKind::External)
            && self.client_tools.contains(&r.tool_use.name)
            && !state.sessions.card().has_tool(&r.tool_use.name)
    }

    /// `RUN_STARTED`.
    pub(crate) fn started(&self) -> Value {
        event(
            "RUN_STARTED",
            json!({"threadId": self.thread_id, "runId": self.run_id}),
        )
    }

    /// `RUN_FINISHED` with an outcome.
    pub(crate) fn finished(&self, outcome: Value) -> Value {
        event(
            "RUN_FINISHED",
            json!({"threadId": self.thread_id, "runId": self.run_id, "outcome": outcome}),
        )
    }

    /// The outcome of a thread that waits for `pending` (or for nothing).
    pub(crate) fn outcome(&self, pending: &[Requirement], state: &AppState) -> Value {
        let (front, interrupts): (Vec<&Requirement>, Vec<&Requirement>) =
            pending.iter().partition(|r| self.is_frontend(r, state));
        if !interrupts.is_empty() {
            let list: Vec<Value> = interrupts.into_iter().map(interrupt_of).collect();
            json!({"type": "interrupt", "interrupts": list})
        } else if !front.is_empty() {
            let ids: Vec<&str> = front.iter().map(|r| r.id.as_str()).collect();
            json!({"type": "success", "pendingToolCallIds": ids})
        } else {
            json!({"type": "success"})
        }
    }
}

/// Turns run events into AG-UI events, keeping what is open.
#[derive(Debug, Default)]
pub(crate) struct Translator {
    /// The assistant text message being streamed.
    text: Option<String>,
    /// Tool calls started and not yet ended.
    calls: Vec<String>,
}

impl Translator {
    /// Closes the open text message, if any.
    fn close_text(&mut self, out: &mut Vec<Value>) {
        if let Some(id) = self.text.take() {
            out.push(event("TEXT_MESSAGE_END", json!({"messageId": id})));
        }
    }

    /// The AG-UI events of one run event.
    pub(crate) fn on(&mut self, ev: &RunEvent) -> Vec<Value> {
        let mut out = Vec::new();
        match ev {
            RunEvent::TextDelta { text } if !text.is_empty() => {
                let id = match &self.text {
                    Some(id) => id.clone(),
                    None => {
                        let id = uuid::Uuid::new_v4().to_string();
                        out.push(event(
                            "TEXT_MESSAGE_START",
                            json!({"messageId": id, "role": "assistant"}),
                        ));
                        self.text = Some(id.clone());
                        id
                    }
                };
                out.push(event(
                    "TEXT_MESSAGE_CONTENT",
                    json!({"messageId": id, "delta": text}),
                ));
            }
            RunEvent::ToolCallStarted { id, name } => {
                self.close_text(&mut out);
                if !self.calls.contains(id) {
                    self.calls.push(id.clone());
                    out.push(event(
                        "TOOL_CALL_START",
                        json!({"toolCallId": id, "toolCallName": name}),
                    ));
                }
            }
            RunEvent::ToolCallReady { tool_use } => {
                self.close_text(&mut out);
                if !self.calls.contains(&tool_use.id) {
                    out.push(event(
                        "TOOL_CALL_START",
                        json!({"toolCallId": tool_use.id, "toolCallName": tool_use.name}),
                    ));
                }
                self.calls.retain(|c| c != &tool_use.id);
                out.push(event(
                    "TOOL_CALL_ARGS",
                    json!({"toolCallId": tool_use.id, "delta": arguments_of(tool_use)}),
                ));
                out.push(event("TOOL_CALL_END", json!({"toolCallId": tool_use.id})));
            }
            RunEvent::ToolExecutionFinished { result } => {
                self.close_text(&mut out);
                out.push(event(
                    "TOOL_CALL_RESULT",
                    json!({
                        "messageId": uuid::Uuid::new_v4().to_string(),
                        "toolCallId": result.id,
                        "content": result_text(result),
                        "role": "tool",
                    }),
                ));
            }
            RunEvent::ReasoningStarted { .. }
            | RunEvent::ToolExecutionStarted { .. }
            | RunEvent::Paused { .. }
            | RunEvent::Completed { .. }
            | RunEvent::Cancelled
            | RunEvent::Failed { .. } => self.close_text(&mut out),
            _ => {}
        }
        out
    }

    /// Closes whatever is still open (a run that ended mid-stream).
    pub(crate) fn close(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        self.close_text(&mut out);
        for id in self.calls.drain(..) {
            out.push(event("TOOL_CALL_END", json!({"toolCallId": id})));
        }
        out
    }
}

/// An SSE response of ready-made events (a refusal, a replayed resume).
pub(crate) fn fixed(state: &AppState, events: Vec<Value>) -> Response {
    let (tx, rx) = mpsc::channel(events.len().max(1));
    for e in events {
        let _ = tx.try_send(sse_event(&e));
    }
    drop(tx);
    sse::respond(rx, state.limits.keep_alive)
}

fn sse_event(e: &Value) -> Event {
    Event::default().data(e.to_string())
}

/// The closing events of a run that ended with `out`: the transcript as stored, then
/// `RUN_FINISHED` with the outcome.
pub(crate) async fn closing(state: &AppState, scope: &RunScope, out: &RunOutput) -> Vec<Value> {
    let mut events = Vec::new();
    match state.sessions.read(&scope.thread_id, true).await {
        Ok(s) => events.push(event(
            "MESSAGES_SNAPSHOT",
            json!({"messages": messages_of(&s.messages)}),
        )),
        Err(e) => {
            return vec![run_error(
                "store",
                format!("the run ended but its thread could not be read: {e}"),
            )];
        }
    }
    let outcome = match out.status {
        RunStatus::Completed | RunStatus::MaxIterations => json!({"type": "success"}),
        RunStatus::Paused => scope.outcome(&out.requirements, state),
        RunStatus::Cancelled => json!({"type": "cancelled"}),
    };
    events.push(scope.finished(outcome));
    events
}

/// The stream of a run (executing here, or in a driver's processes and followed here
/// by the session port): `RUN_STARTED`, its events, the closing ones. The run is
/// interrupted when the client stops reading. A run refused as
/// `already_decided` or `busy` whose `resume` repeats what was applied ends as that
/// replay's answer ([`super::replay_end`]).
pub(crate) fn run_stream(
    state: AppState,
    scope: RunScope,
    run: Arc<LocalRun>,
    sub: Subscription,
    resume: Vec<ResumeEntry>,
) -> Response {
    let Subscription {
        mut rx, _channel, ..
    } = sub;
    let (tx, out) = mpsc::channel(sse::CLIENT_BUFFER);
    let keep_alive = state.limits.keep_alive;
    tokio::spawn(async move {
        let _keep = _channel;
        let mut t = Translator::default();
        let send_all = |events: Vec<Value>| {
            let tx = tx.clone();
            async move {
                for e in events {
                    if tx.send(sse_event(&e)).await.is_err() {
                        return false;
                    }
                }
                true
            }
        };
        if !send_all(vec![scope.started()]).await {
            run.interrupter.interrupt();
            return;
        }
        loop {
            let env = tokio::select! {
                () = tx.closed() => {
                    // The client went away (aborted): that is an interrupt.
                    run.interrupter.interrupt();
                    return;
                }
                r = rx.recv() => r,
            };
            let env = match env {
                Ok(env) if env.run_id.as_deref() == Some(run.run_id.as_str()) => env,
                Ok(_) => continue,
                Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => {
                    // Fell behind: close what is open and give the end.
                    let mut events = t.close();
                    events.extend(match run.wait().await {
                        Ok(o) => closing(&state, &scope, &o).await,
                        Err(e) => match e.code() {
                            "already_decided" | "busy" => {
                                super::replay_end(&state, &scope, &resume).await
                            }
                            _ => None,
                        }
                        .unwrap_or_else(|| vec![run_error(e.code(), e.to_string())]),
                    });
                    send_all(events).await;
                    return;
                }
            };
            match &env.event {
                HubEvent::Output(o) => {
                    let mut events = t.close();
                    events.extend(closing(&state, &scope, o).await);
                    send_all(events).await;
                    return;
                }
                HubEvent::Error(e) => {
                    let mut events = t.close();
                    let replayed = match e.code() {
                        "already_decided" | "busy" => {
                            super::replay_end(&state, &scope, &resume).await
                        }
                        _ => None,
                    };
                    match replayed {
                        Some(end) => events.extend(end),
                        None => events.push(run_error(e.code(), e.to_string())),
                    }
                    send_all(events).await;
                    return;
                }
                HubEvent::Run(ev) => {
                    if !send_all(t.on(ev)).await {
                        run.interrupter.interrupt();
                        return;
                    }
                }
            }
        }
    });
    sse::respond(out, keep_alive)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use reins_message::{ToolResult, ToolUse};

    use super::*;

    #[test]
    fn text_and_tool_calls_open_and_close_in_order() {
        let mut t = Translator::default();
        let mut types = Vec::new();
        let evs = [
            RunEvent::TextDelta { text: "hi".into() },
            RunEvent::TextDelta {
                text: String::new(),
            },
            RunEvent::ToolCallStarted {
                id: "c1".into(),
                name: "f".into(),
            },
            RunEvent::ToolCallReady {
                tool_use: ToolUse::new("c1", "f", json!({})),
            },
            RunEvent::ToolExecutionFinished {
                result: ToolResult::success("c1", "f", "ok"),
            },
            RunEvent::ToolCallStarted {
                id: "c2".into(),
                name: "g".into(),
            },
        ];
        for e in &evs {
            types.extend(
                t.on(e)
                    .into_iter()
                    .map(|v| v["type"].as_str().unwrap().to_owned()),
            );
        }
        types.extend(
            t.close()
                .into_iter()
                .map(|v| v["type"].as_str().unwrap().to_owned()),
        );
        assert_eq!(
            types,
            [
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_RESULT",
                "TOOL_CALL_START",
                "TOOL_CALL_END",
            ]
        );
    }
}
