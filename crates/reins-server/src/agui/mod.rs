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
//! given to [`Server::backend`](crate::Server::backend), a Restate deployment) through
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
use reins_agent::{Actor, Decision, Requirement, RunInput, Submission, ViewToken};
use reins_message::{Msg, ToolSpec};
use serde_json::{Value, json};

use crate::auth::Principal;
use crate::error::{Result, ServerError};
use crate::extract::{ApiJson, Caller, validate_session_id};
use crate::sessions::backend::Begun;
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
        // A resume that repeats what was applied (a retry, or the slower of two
        // identical resumes) is answered with the outcome of the run it started;
        // anything else waits for no one.
        match racing(&state, &thread, resume_of(&input)).await? {
            Racing::Replay => match settled(&state, &thread).await? {
                Some(now) => read = now,
                None => return refuse(busy(&thread)),
            },
            Racing::Ended(now) => read = now,
            Racing::Busy => return refuse(busy(&thread)),
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

    let mut submission = match plan {
        Plan::Show => {
            let now = Thread {
                transcript,
                pending,
                running: false,
            };
            return Ok(fixed(&state, show(&state, &scope, &now)));
        }
        Plan::Send(msg) => Submission::new(RunInput::Message(msg)),
        Plan::Decide(decisions, view) => {
            let mut s = Submission::new(RunInput::Decisions(decisions));
            s.view = Some(view);
            s
        }
    };
    let mut actor = Actor::new(who.name.clone());
    actor.metadata = Some(json!({"via": "ag-ui", "run_id": scope.run_id}));
    submission.actor = Some(actor);
    submission.client_tools = client_tools;
    // Subscribed before the input goes in: the run's events from its first one.
    let sub = state.hub.channel(&thread).subscribe(None);
    let begun = match crate::sessions::backend::begin(&state, &who, &thread, submission).await {
        Ok(b) => b,
        // The same answer raced with this one and was applied first (or is being
        // applied by the run that took the session): a replay.
        Err(
            e @ (reins_agent::AgentError::AlreadyDecided { .. }
            | reins_agent::AgentError::SessionBusy { .. }),
        ) if !resume_of(&input).is_empty() => {
            if let Racing::Replay = racing(&state, &thread, resume_of(&input)).await? {
                return match settled(&state, &thread).await? {
                    Some(now) => Ok(fixed(&state, show(&state, &scope, &now))),
                    None => refuse(busy(&thread)),
                };
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
    match begun {
        Begun::Here(run) => {
            // A run refused once started (the same answer raced with this one and was
            // applied first) ends as a replay of the resume, as above.
            let replay = resume_of(&input).to_vec();
            Ok(stream::run_stream(state, scope, run, sub, replay))
        }
        Begun::Relayed(mark) => Ok(stream::relayed_stream(state, scope, mark, sub)),
    }
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
    let stored = match state.agent.store().load_session(thread).await {
        Ok(s) => s,
        Err(reins_memory::Error::SessionNotFound { .. }) => {
            return Ok(Thread {
                transcript: Vec::new(),
                pending: Vec::new(),
                running: false,
            });
        }
        Err(e) => return Err(e.into()),
    };
    let running_here = state.hub.local_run(thread).is_some();
    let transcript = stored.messages.clone();
    let (detail, pending) = view::of(&state.agent, stored, running_here, false).await?;
    Ok(Thread {
        transcript,
        pending,
        running: detail.status == crate::types::SessionStatus::Running,
    })
}

/// How long a replayed resume waits for the run its original started.
const REPLAY_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Waits until no run of the thread is in flight, then reads it (`None` when it still
/// runs after [`REPLAY_WAIT`]). A run here is awaited through the hub; one on another
/// instance through the store's change feed.
async fn settled(state: &AppState, thread: &str) -> Result<Option<Thread>> {
    use futures::StreamExt;
    let wait = async {
        if let Some(run) = state.hub.local_run(thread) {
            // Its outcome, or its error, is the thread's to show: read below.
            let _ = run.wait().await;
        }
        let mut watch = state.agent.session(thread).await?.watch().await?;
        loop {
            let read = read_thread(state, thread).await?;
            if !read.running {
                return Ok(read);
            }
            if watch.next().await.transpose()?.is_none() {
                return Err(ServerError::Internal(
                    "the store's change feed closed while a replayed resume waited".to_owned(),
                ));
            }
        }
    };
    match tokio::time::timeout(REPLAY_WAIT, wait).await {
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
    let now = settled(state, &scope.thread_id).await.ok()??;
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

/// How long a resume that arrives while a run is in flight waits for the audit trail
/// to show whether it repeats what that run applied (the run records its decisions
/// when it commits its first step, an instant after it started).
const APPLIED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What a resume that arrived while a run is in flight is.
enum Racing {
    /// It repeats what the running run applied: answer with that run's outcome.
    Replay,
    /// The run ended before the trail said so: judge the resume on this thread.
    Ended(Thread),
    /// Something else (or nothing to replay): refused as `busy`.
    Busy,
}

/// Tells a resume that repeats the running run's decisions — whose record may not be
/// in the audit trail yet — from one that does not (see [`Racing`]). Waits only while
/// nothing in the trail contradicts it, at most [`APPLIED_WAIT`].
async fn racing(state: &AppState, thread: &str, resume: &[wire::ResumeEntry]) -> Result<Racing> {
    if resume.is_empty() {
        return Ok(Racing::Busy);
    }
    let deadline = tokio::time::Instant::now() + APPLIED_WAIT;
    loop {
        let trail = state.agent.session(thread).await?.decisions().await?;
        let seen: Vec<Option<bool>> = resume.iter().map(|e| replays(e, &trail)).collect();
        if seen.iter().all(|s| *s == Some(true)) {
            return Ok(Racing::Replay);
        }
        if seen.contains(&Some(false)) {
            return Ok(Racing::Busy);
        }
        let read = read_thread(state, thread).await?;
        if !read.running {
            return Ok(Racing::Ended(read));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(Racing::Busy);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

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
    let trail = state.agent.session(thread).await?.decisions().await?;
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
        let session = state.agent.session(thread).await?;
        let trail = session.decisions().await?;
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
        require_decider(who, interrupts.iter().map(|r| r.tool_use.name.as_str()))?;
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
            require_decider(who, front.iter().map(|r| r.tool_use.name.as_str()))?;
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

/// Refuses (403) a caller that may not decide on calls to these tools.
fn require_decider<'a>(who: &Principal, tools: impl Iterator<Item = &'a str>) -> Result<()> {
    who.require_decider("answer interrupts")?;
    for t in tools {
        if !who.may_decide(t) {
            return Err(ServerError::Forbidden(format!(
                "`{}` may not decide on `{t}` calls",
                who.name
            )));
        }
    }
    Ok(())
}

fn list<'a>(ids: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = ids.collect();
    if v.is_empty() {
        "none".to_owned()
    } else {
        v.join(", ")
    }
}
