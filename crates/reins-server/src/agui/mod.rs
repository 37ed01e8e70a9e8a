//! AG-UI (the Agent–User Interaction protocol, 1.0): `POST /agui` takes a
//! `RunAgentInput` and answers with the run as AG-UI events over SSE, so that an AG-UI
//! client (`@ag-ui/client`'s `HttpAgent`, CopilotKit) talks to a reins agent.
//!
//! - A thread is a reins session (`threadId` = session id, under the same ownership
//!   rules as `/v1/sessions/{id}`). The client sends the whole conversation; what is new
//!   is what the thread has not stored: a user message starts a run, a tool message
//!   answers a pending call of one of the client's tools.
//! - The run streams `RUN_STARTED`, `TEXT_MESSAGE_*`, `TOOL_CALL_START/ARGS/END`,
//!   `TOOL_CALL_RESULT`, then `MESSAGES_SNAPSHOT` (the stored transcript) and
//!   `RUN_FINISHED` with its outcome: `success`, `interrupt` (every pending requirement
//!   as an interrupt; see [`resume`] for the shapes) or `cancelled`; or `RUN_ERROR`.
//! - A resume (`resume: [{interruptId, status, payload}]`) must answer every open
//!   interrupt; it becomes reins decisions made by the caller, checked against exactly
//!   the interrupts it answers (a stale view is refused by the agent, atomically) and
//!   recorded in the audit trail with the caller as actor (`via: ag-ui`). Replaying a
//!   resume that was already applied changes nothing: the answer is the thread as it
//!   stands. Anything else that cannot apply is a `RUN_ERROR` and changes nothing.
//! - The client's `tools` run in the client: the model is offered them, and a call of
//!   one ends the run with `outcome: success` and `pendingToolCallIds`; the client's
//!   tool message with the result goes on (reins external execution).
//! - A client that aborts its request interrupts the run (as `POST
//!   /v1/sessions/{id}/interrupt` does; a run interrupted so ends with `outcome:
//!   cancelled` for whoever still listens).
//!
//! Every input goes to whatever runs the sessions (the local driver, or a backend
//! behind [`Relayed`](reins_agent::Relayed), a Restate deployment) through
//! the same door as the native API's. The stream translates the run's typed events —
//! those of a run executing here, or those the backend's processes relay — then ends
//! with the stored transcript and outcome. The client's tools go with the input
//! (`Submission::client_tools`): the driver offers them to the model and pauses on a
//! call of one.
//!
//! Refusals about the caller are HTTP errors, as on the native API: 401 (no token),
//! 403 (not the caller's thread; deciding without the approver role), 400 (a body
//! that is not a `RunAgentInput`). Everything about the thread's state is a
//! `RUN_ERROR` event (HTTP 200) with a `code`: `pending_interrupts`,
//! `incomplete_resume`, `unknown_interrupt`, `stale_resume`, `invalid_payload`,
//! `expired`, `stale_view`, `busy`, `ambiguous_input`.

mod resume;
mod stream;
mod wire;

use std::collections::{HashMap, HashSet};

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use reins_agent::port::Decide;
use reins_agent::{Decision, Requirement, RunInput, Submission, ViewToken};
use reins_message::{Msg, ToolSpec};
use serde_json::{Value, json};

use crate::auth::Principal;
use crate::error::{Result, ServerError};
use crate::extract::{ApiJson, Caller, validate_session_id};
use crate::state::AppState;
use crate::view;

use resume::{Refusal, decision_of, replays};
use stream::{RunScope, fixed};
use wire::{RunAgentInput, content_text, known_ids, messages_of, run_error};

/// The AG-UI route.
pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/agui", post(post_agui))
}

/// What a request asks for, once read against the thread.
enum Plan {
    /// A new user message.
    Send(Msg),
    /// Decisions (resume entries, client tool results), against this view.
    Decide(Vec<Decision>, ViewToken),
    /// Nothing new (a replayed resume, a reload): the thread as it stands.
    Show,
}

/// A new message of the client's conversation.
enum NewMessage {
    User {
        id: String,
        text: String,
    },
    ToolResult {
        call: String,
        output: String,
        error: bool,
    },
}

/// `POST /agui`: one AG-UI run.
async fn post_agui(
    State(state): State<AppState>,
    Caller(who): Caller,
    ApiJson(input): ApiJson<RunAgentInput>,
) -> Result<Response> {
    validate_session_id(&input.thread_id)?;
    if input.run_id.trim().is_empty() {
        return Err(ServerError::BadBody("`runId` is empty".to_owned()));
    }
    let thread = input.thread_id.clone();
    who.require_read(&thread)?;
    let scope = RunScope {
        thread_id: thread.clone(),
        run_id: input.run_id.clone(),
        client_tools: input.tools.iter().map(|t| t.name.clone()).collect(),
    };
    let refuse = |r: Refusal| Ok(fixed(&state, vec![run_error(r.code, r.message)]));

    let mut read = read_thread(&state, &thread).await?;
    if read.running {
        // A resume while a run is in flight: the run may be the one its first
        // sending started (a retry, or the slower of two identical resumes). Once the
        // thread settles, the plan below tells a replay (answered with the thread as
        // it stands) from an answer to something else; anything else waits for no one.
        if resume_of(&input).is_empty() {
            return refuse(busy(&thread));
        }
        match settled(&state, &thread, APPLIED_WAIT).await? {
            Some(now) => read = now,
            None => return refuse(busy(&thread)),
        }
    }
    let Thread {
        transcript,
        pending,
        ..
    } = read;
    let known = known_ids(&transcript);
    let news: Vec<NewMessage> = input
        .messages
        .iter()
        .filter(|m| {
            m.get("id")
                .and_then(Value::as_str)
                .is_some_and(|id| !known.contains(id))
        })
        .filter_map(new_message)
        .collect();

    let plan = match plan(&state, &who, &scope, &input, &pending, news).await? {
        Ok(p) => p,
        Err(r) => return refuse(r),
    };
    let client_tools: Vec<ToolSpec> = input
        .tools
        .iter()
        .map(|t| {
            ToolSpec::new(
                t.name.clone(),
                t.description.clone(),
                t.parameters
                    .clone()
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            )
        })
        .collect();

    let mut actor = who.actor();
    let mut meta = match actor.metadata.take() {
        Some(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    meta.insert("via".to_owned(), json!("ag-ui"));
    meta.insert("run_id".to_owned(), json!(scope.run_id));
    actor.metadata = Some(Value::Object(meta));
    let (submission, decide) = match plan {
        Plan::Show => {
            let now = Thread {
                transcript,
                pending,
                running: false,
            };
            return Ok(fixed(&state, show(&state, &scope, &now)));
        }
        Plan::Send(msg) => {
            let mut s = Submission::new(RunInput::Message(msg));
            s.actor = Some(actor);
            s.client_tools = client_tools;
            (s, None)
        }
        Plan::Decide(decisions, view) => {
            let mut d = Decide::new(actor, decisions).at(view);
            d.client_tools = client_tools;
            (Submission::new(RunInput::Resume), Some(d))
        }
    };
    // Subscribed before the input goes in: the run's events from its first one.
    let sub = state.hub.channel(&thread).subscribe(None);
    let begun = match decide {
        Some(d) => crate::sessions::backend::decide(&state, &thread, d).await,
        None => crate::sessions::backend::begin(&state, &thread, submission).await,
    };
    let run = match begun {
        Ok(run) => run,
        // The same answer raced with this one and was applied first (or is being
        // applied by the run that took the session): a replay.
        Err(
            e @ (reins_agent::AgentError::AlreadyDecided { .. }
            | reins_agent::AgentError::SessionBusy { .. }),
        ) if !resume_of(&input).is_empty() => {
            if let Some(end) = replay_end(&state, &scope, resume_of(&input)).await {
                let mut events = vec![scope.started()];
                events.extend(end);
                return Ok(fixed(&state, events));
            }
            let e = ServerError::from(e);
            return Ok(fixed(&state, vec![run_error(e.code(), e.to_string())]));
        }
        Err(e) => {
            // Refused before anything was written: say why in AG-UI's own form.
            let e = ServerError::from(e);
            return Ok(fixed(&state, vec![run_error(e.code(), e.to_string())]));
        }
    };
    // A run refused once started (the same answer raced with this one and was applied
    // first) ends as a replay of the resume, as above.
    let replay = resume_of(&input).to_vec();
    Ok(stream::run_stream(state, scope, run, sub, replay))
}

/// A thread as stored: its transcript, what it waits for, whether a run of it is in
/// flight (here or on another instance).
struct Thread {
    transcript: Vec<Msg>,
    pending: Vec<Requirement>,
    running: bool,
}

/// Reads the thread (a new thread has nothing).
async fn read_thread(state: &AppState, thread: &str) -> Result<Thread> {
    let record = match state.sessions.read(thread, true).await {
        Ok(r) => r,
        Err(reins_agent::AgentError::Store(reins_memory::Error::SessionNotFound { .. })) => {
            return Ok(Thread {
                transcript: Vec::new(),
                pending: Vec::new(),
                running: false,
            });
        }
        Err(e) => return Err(e.into()),
    };
    let running_here = state.hub.local_run(thread).is_some();
    let (detail, pending) = view::detail(record.view, &[], record.updated_at, running_here);
    Ok(Thread {
        transcript: record.messages,
        pending,
        running: detail.status == crate::types::SessionStatus::Running,
    })
}

/// How long a replayed resume waits for the run its original started.
const REPLAY_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Waits until no run of the thread is in flight, then reads it (`None` when it still
/// runs after `wait`). A run followed here is awaited through the hub; any other
/// through the store's change feed.
async fn settled(
    state: &AppState,
    thread: &str,
    wait: std::time::Duration,
) -> Result<Option<Thread>> {
    let settle = async {
        if let Some(run) = state.hub.local_run(thread) {
            // Its outcome, or its error, is the thread's to show: read below.
            let _ = run.wait().await;
        }
        let mut notices = state.hub.notices();
        state.hub.ensure_poller(&state.sessions).await;
        loop {
            let read = read_thread(state, thread).await?;
            if !read.running {
                return Ok::<_, ServerError>(read);
            }
            crate::hub::wait_for_notice(&mut notices, thread).await;
        }
    };
    match tokio::time::timeout(wait, settle).await {
        Ok(read) => read.map(Some),
        Err(_) => Ok(None),
    }
}

/// The answer to a request with nothing new: the thread as it stands.
fn show(state: &AppState, scope: &RunScope, now: &Thread) -> Vec<Value> {
    let mut events = vec![scope.started()];
    events.extend(standing(state, scope, now));
    events
}

/// The closing events of a thread as it stands: its transcript and its outcome.
fn standing(state: &AppState, scope: &RunScope, now: &Thread) -> Vec<Value> {
    vec![
        wire::event(
            "MESSAGES_SNAPSHOT",
            json!({"messages": messages_of(&now.transcript)}),
        ),
        scope.finished(scope.outcome(&now.pending, state)),
    ]
}

/// The end of a started run that was refused because what `resume` answers was
/// decided first: when every entry repeats what was applied, the thread's outcome once
/// it settles (`None`: not a replay, or the thread did not settle; the refusal stands).
pub(crate) async fn replay_end(
    state: &AppState,
    scope: &RunScope,
    resume: &[wire::ResumeEntry],
) -> Option<Vec<Value>> {
    if !replays_applied(state, &scope.thread_id, resume)
        .await
        .ok()?
    {
        return None;
    }
    let now = settled(state, &scope.thread_id, REPLAY_WAIT).await.ok()??;
    Some(standing(state, scope, &now))
}

fn resume_of(input: &RunAgentInput) -> &[wire::ResumeEntry] {
    input.resume.as_deref().unwrap_or_default()
}

fn busy(thread: &str) -> Refusal {
    Refusal::new(
        "busy",
        format!("thread `{thread}` has a run in flight; wait for it or interrupt it"),
    )
}

/// How long a resume that arrives while a run is in flight waits for the thread to
/// settle before it is refused as `busy` (the run that applies its first sending
/// stores it at once; a replay is then told by the plan).
const APPLIED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether the request is a resume whose every entry repeats what the thread's audit
/// trail says was applied (and carries nothing else new).
async fn replays_applied(
    state: &AppState,
    thread: &str,
    resume: &[wire::ResumeEntry],
) -> Result<bool> {
    if resume.is_empty() {
        return Ok(false);
    }
    let trail = state.sessions.audit(thread).await?;
    Ok(resume.iter().all(|e| replays(e, &trail) == Some(true)))
}

/// A message of the client's conversation that may be new input: a user message, or
/// a tool message (a client tool's result). Others (assistant, system, activity) are
/// the client's copy of what reins said, or not reins's to store.
fn new_message(m: &Value) -> Option<NewMessage> {
    let id = m.get("id").and_then(Value::as_str)?.to_owned();
    match m.get("role").and_then(Value::as_str)? {
        "user" => Some(NewMessage::User {
            id,
            text: content_text(m.get("content")).unwrap_or_default(),
        }),
        "tool" => Some(NewMessage::ToolResult {
            call: m.get("toolCallId").and_then(Value::as_str)?.to_owned(),
            output: content_text(m.get("content")).unwrap_or_default(),
            error: m.get("error").is_some_and(|e| !e.is_null()),
        }),
        _ => None,
    }
}

/// Reads the request against the thread: what to do, or why not (`Ok(Err(_))`, a
/// `RUN_ERROR`). Permission failures are HTTP errors (`Err(_)`).
async fn plan(
    state: &AppState,
    who: &Principal,
    scope: &RunScope,
    input: &RunAgentInput,
    pending: &[Requirement],
    news: Vec<NewMessage>,
) -> Result<std::result::Result<Plan, Refusal>> {
    let thread = &scope.thread_id;
    let (front, interrupts): (Vec<&Requirement>, Vec<&Requirement>) =
        pending.iter().partition(|r| scope.is_frontend(r, state));
    let mut users = Vec::new();
    let mut results = Vec::new();
    for n in news {
        match n {
            NewMessage::User { id, text } => users.push((id, text)),
            NewMessage::ToolResult {
                call,
                output,
                error,
            } => results.push((call, output, error)),
        }
    }
    // Tool results for calls that do not wait for one are the client's history.
    results.retain(|(call, _, _)| front.iter().any(|r| &r.id == call));

    let resume = input.resume.as_deref().unwrap_or_default();
    let open: HashMap<&str, &Requirement> =
        interrupts.iter().map(|r| (r.id.as_str(), *r)).collect();
    let answered: HashSet<&str> = resume.iter().map(|e| e.interrupt_id.as_str()).collect();
    if answered.len() != resume.len() {
        return Ok(Err(Refusal::new(
            "invalid_payload",
            "the resume answers an interrupt twice",
        )));
    }

    // A resume naming interrupts that are not open: a replay, or a stale view.
    if resume
        .iter()
        .any(|e| !open.contains_key(e.interrupt_id.as_str()))
    {
        let trail = state.sessions.audit(thread).await?;
        for e in resume {
            if open.contains_key(e.interrupt_id.as_str()) {
                continue;
            }
            match replays(e, &trail) {
                None => {
                    return Ok(Err(Refusal::new(
                        "unknown_interrupt",
                        format!(
                            "interrupt `{}` is not one of thread `{thread}`'s (open: {})",
                            e.interrupt_id,
                            list(interrupts.iter().map(|r| r.id.as_str()))
                        ),
                    )));
                }
                Some(false) => {
                    return Ok(Err(Refusal::new(
                        "stale_resume",
                        format!(
                            "interrupt `{}` was already answered differently; the thread waits for: {} (reload it)",
                            e.interrupt_id,
                            list(interrupts.iter().map(|r| r.id.as_str()))
                        ),
                    )));
                }
                Some(true) => {}
            }
        }
        if resume
            .iter()
            .all(|e| !open.contains_key(e.interrupt_id.as_str()))
        {
            // Every entry repeats what was applied: nothing to do again.
            return Ok(Ok(Plan::Show));
        }
        return Ok(Err(Refusal::new(
            "stale_resume",
            "the resume mixes answers already applied with open interrupts; reload the thread",
        )));
    }

    if !interrupts.is_empty() {
        if resume.is_empty() {
            return Ok(Err(Refusal::new(
                "pending_interrupts",
                format!(
                    "thread `{thread}` waits for interrupts {}: the next run must carry a `resume` answering them",
                    list(interrupts.iter().map(|r| r.id.as_str()))
                ),
            )));
        }
        let missing: Vec<&str> = interrupts
            .iter()
            .map(|r| r.id.as_str())
            .filter(|id| !answered.contains(id))
            .collect();
        if !missing.is_empty() {
            return Ok(Err(Refusal::new(
                "incomplete_resume",
                format!(
                    "the resume leaves interrupts {} unanswered: answer every open interrupt",
                    list(missing.into_iter())
                ),
            )));
        }
        if !users.is_empty() {
            return Ok(Err(Refusal::new(
                "ambiguous_input",
                "a run that resumes cannot also carry a new user message: send it on the next run",
            )));
        }
        // Who may decide on which tool is the run's check (the actor's scope).
        who.require_decider("answer interrupts")?;
        let now = chrono::Utc::now();
        let mut decisions = Vec::with_capacity(resume.len() + results.len());
        for e in resume {
            let Some(req) = open.get(e.interrupt_id.as_str()) else {
                continue;
            };
            if req.is_expired(now) && e.status == wire::ResumeStatus::Resolved {
                return Ok(Err(Refusal::new(
                    "expired",
                    format!(
                        "interrupt `{}` expired; it can only be cancelled now",
                        req.id
                    ),
                )));
            }
            match decision_of(e, req) {
                Ok(d) => decisions.push(d),
                Err(r) => return Ok(Err(r)),
            }
        }
        decisions.extend(results.into_iter().map(|(call, output, error)| {
            Decision::external_result(call, Value::String(output), error)
        }));
        let view = ViewToken::of(true, pending);
        return Ok(Ok(Plan::Decide(decisions, view)));
    }

    // No open interrupt.
    if !results.is_empty() {
        if !users.is_empty() {
            return Ok(Err(Refusal::new(
                "ambiguous_input",
                "a run that answers tool calls cannot also carry a new user message: send it on the next run",
            )));
        }
        if !who.owns(thread) {
            who.require_decider("answer tool calls")?;
        }
        let decisions = results
            .into_iter()
            .map(|(call, output, error)| {
                Decision::external_result(call, Value::String(output), error)
            })
            .collect();
        return Ok(Ok(Plan::Decide(decisions, ViewToken::of(true, pending))));
    }
    match users.pop() {
        Some((id, text)) => {
            who.require_owner(thread)?;
            if text.trim().is_empty() {
                return Ok(Err(Refusal::new(
                    "invalid_input",
                    "the user message is empty",
                )));
            }
            // Several new user messages at once: one turn, their texts in order.
            let text = if users.is_empty() {
                text
            } else {
                let mut all: Vec<String> = users.into_iter().map(|(_, t)| t).collect();
                all.push(text);
                all.join("\n\n")
            };
            Ok(Ok(Plan::Send(Msg::user(text).with_id(id))))
        }
        None => Ok(Ok(Plan::Show)),
    }
}

fn list<'a>(ids: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = ids.collect();
    if v.is_empty() {
        "none".to_owned()
    } else {
        v.join(", ")
    }
}
