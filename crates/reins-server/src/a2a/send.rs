//! `SendMessage`, `SendStreamingMessage` and `SubscribeToTask`: an incoming A2A
//! message read as a new task's user message or as decisions on a task ([`decide`]),
//! and its task followed to an answer — at once, once the message is stored
//! (`returnImmediately`), or as a stream of task events.
//!
//! A new task's message is stored under the client's `messageId`, so that the same
//! message sent again is recognised, as AG-UI recognises the message ids a thread
//! holds: before anything runs, the context is read for a message with that id (the
//! same text: the task it started is the answer; other text: `-32602`); two identical
//! sends at once meet at the session's lock and the store, which holds each message id
//! once per session — the one that did not run answers with its twin's task. A message
//! without `contextId` gets a context derived from its id, so that a retry finds it.
//!
//! [`decide`]: super::decide

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::response::Response;
use axum::response::sse::Event;
use reins_agent::AgentError;
use reins_message::{Msg, Role};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use super::backend::NotStarted;
use super::incoming::{Incoming, incoming};
use super::task::{TASK_MARK, TaskState, TaskView, task_json};
use super::{RpcError, decide, id_param, load_task, rpc, rpc_result, task};
use crate::auth::Principal;
use crate::error::ServerError;
use crate::extract::validate_session_id;
use crate::hub::{LocalRun, Subscription};
use crate::state::AppState;

/// How long a request waits for the twin it raced (the same message, sent at once) to
/// store the message, before it answers that the context is busy.
const TWIN_WAIT: Duration = Duration::from_secs(2);
/// How long an answer follows a task that works (a run elsewhere) at most.
const FOLLOW_LIMIT: Duration = Duration::from_secs(15 * 60);
/// How often the store is read while following a task whose run executes elsewhere.
const REREAD: Duration = Duration::from_millis(50);

/// `SendMessage` / `SendStreamingMessage`.
pub(super) async fn send_message(
    state: &AppState,
    who: &Principal,
    params: &Value,
    rpc_id: &Value,
    streaming: bool,
) -> Result<Response, RpcError> {
    let msg = incoming(params)?;
    let reply = Reply {
        rpc_id: rpc_id.clone(),
        streaming,
        return_immediately: msg.return_immediately,
    };
    match &msg.task_id {
        Some(task_id) => {
            let task = load_task(state, who, task_id).await?;
            if msg
                .context_id
                .as_ref()
                .is_some_and(|c| *c != task.context_id)
            {
                return Err(RpcError::params(
                    "`contextId` differs from the task's context",
                ));
            }
            decide::on_task(state, who, &msg, task, reply).await
        }
        None => new_task(state, who, &msg, reply).await,
    }
}

/// The context of a message sent without one: `<prefix>a2a-<digest of its id>`, the
/// same for the same message sent again.
fn derived_context(who: &Principal, message_id: &str) -> String {
    let digest = Sha256::digest(message_id.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{}a2a-{hex}", who.prefix())
}

/// The task `msg` started in `session` already, if the session holds it: the same
/// message sent again. A message of the session with that id that is not the same A2A
/// message is refused.
async fn started_before(
    state: &AppState,
    session: &str,
    msg: &Incoming,
) -> Result<Option<String>, RpcError> {
    let stored = match state.sessions.read(session, true).await {
        Ok(s) => s,
        Err(AgentError::Store(reins_memory::Error::SessionNotFound { .. })) => return Ok(None),
        Err(e) => return Err(ServerError::from(e).into()),
    };
    let mark = |m: &Msg| m.metadata.get(TASK_MARK).and_then(Value::as_str) == Some(&msg.message_id);
    let Some(m) = stored
        .messages
        .iter()
        .find(|m| m.id == msg.message_id || (m.role == Role::User && mark(m)))
    else {
        return Ok(None);
    };
    if m.role == Role::User && mark(m) && m.text() == msg.text {
        return Ok(Some(task::task_id(session, &m.id)));
    }
    Err(RpcError::params(format!(
        "`messageId` `{}` already names another message in context `{session}`: a new message needs a new `messageId` (a retry repeats the message unchanged)",
        msg.message_id
    ))
    .with("contextId", session))
}

/// A message that starts a task.
async fn new_task(
    state: &AppState,
    who: &Principal,
    msg: &Incoming,
    reply: Reply,
) -> Result<Response, RpcError> {
    if msg.decisions.is_some() {
        return Err(RpcError::params(
            "decisions go on the task that waits for them (`taskId`)",
        ));
    }
    if msg.text.trim().is_empty() {
        return Err(RpcError::params("the message has no text"));
    }
    let session = match &msg.context_id {
        Some(c) => {
            validate_session_id(c).map_err(RpcError::from)?;
            c.clone()
        }
        None => derived_context(who, &msg.message_id),
    };
    if !who.owns(&session) {
        return Err(RpcError::params(format!(
            "context `{session}` is not yours (yours start with `{}`)",
            who.prefix()
        )));
    }
    // Sent before (a retry, on this instance or another): the task it started.
    if let Some(task_id) = started_before(state, &session, msg).await? {
        return answer(state, who, &task_id, Follow::Stored, reply).await;
    }
    let user = Msg::user(msg.text.clone())
        .with_id(msg.message_id.clone())
        .with_metadata(TASK_MARK, json!(msg.message_id));
    let task_id = task::task_id(&session, &user.id);
    // The run stores the message when it begins: the first answer is built here.
    let initial = json!({
        "id": task_id,
        "contextId": session,
        "status": {"state": TaskState::Working.wire()},
        "history": [{
            "messageId": user.id, "contextId": session, "taskId": task_id,
            "role": "ROLE_USER", "parts": [{"text": msg.text}],
        }],
    });
    // The task's push configuration, stored before its run can change its state.
    if let Some(push) = &msg.push {
        super::push::save(state, who, &task_id, &session, push).await?;
    }
    let input = reins_agent::RunInput::Message(user);
    match super::backend::start(state, who, &session, input, &msg.message_id, None).await {
        Ok((run, sub)) => {
            let follow = Follow::Run { run, sub, initial };
            answer(state, who, &task_id, follow, reply).await
        }
        Err(NotStarted::Refused(e @ AgentError::SessionBusy { .. })) => {
            twin(state, who, &session, msg, e, reply).await
        }
        // Refused before anything was stored. The same message sent at once by
        // another request may have been stored in between (the store holds each
        // message id once per session): then this is a retry of it.
        Err(e) => match started_before(state, &session, msg).await? {
            Some(task_id) => answer(state, who, &task_id, Follow::Stored, reply).await,
            None => Err(e.into()),
        },
    }
}

/// `busy`: the same message sent at once by another request (a retry racing the first
/// send) may hold the session; once it has stored the message, this is a retry of it.
/// Otherwise the refusal stands.
async fn twin(
    state: &AppState,
    who: &Principal,
    session: &str,
    msg: &Incoming,
    busy: AgentError,
    reply: Reply,
) -> Result<Response, RpcError> {
    let deadline = Instant::now() + TWIN_WAIT;
    while Instant::now() < deadline {
        if let Some(task_id) = started_before(state, session, msg).await? {
            return answer(state, who, &task_id, Follow::Stored, reply).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(busy.into())
}

/// How to answer a message: its JSON-RPC id and form.
pub(super) struct Reply {
    pub(super) rpc_id: Value,
    pub(super) streaming: bool,
    pub(super) return_immediately: bool,
}

/// What an answer follows.
pub(super) enum Follow {
    /// The run this request started, executing here ([`start`](super::backend::start));
    /// `initial` is its task as it starts
    /// (`TASK_STATE_WORKING`).
    Run {
        run: Arc<LocalRun>,
        sub: Subscription,
        initial: Value,
    },
    /// A task as stored: what a message sent again started or continued.
    Stored,
}

/// Answers with task `task_id`: when it stops working (or at once with
/// `returnImmediately`), or as an SSE stream of it.
pub(super) async fn answer(
    state: &AppState,
    who: &Principal,
    task_id: &str,
    follow: Follow,
    reply: Reply,
) -> Result<Response, RpcError> {
    let Reply {
        rpc_id,
        streaming,
        return_immediately,
    } = reply;
    let (initial, run, working) = match follow {
        Follow::Run { run, sub, initial } => (initial, Some((run, sub)), true),
        Follow::Stored => {
            let task = load_task(state, who, task_id).await?;
            let working = task.state == TaskState::Working;
            (task_json(&task, None, true), None, working)
        }
    };
    if !streaming {
        // The run's input is stored (see `begin`): a `GetTask` that follows at once,
        // on any instance, finds the task.
        if return_immediately || !working {
            return Ok(rpc(&rpc_id, json!({"task": initial})));
        }
        if let Some((run, _)) = &run {
            let _ = run.wait().await;
        }
        let task = settle(state, who, task_id, || false).await?;
        return Ok(rpc(&rpc_id, json!({"task": task_json(&task, None, true)})));
    }
    let (tx, rx) = mpsc::channel(crate::sse::CLIENT_BUFFER);
    let state = state.clone();
    let who = who.clone();
    let task_id = task_id.to_owned();
    tokio::spawn(async move {
        let send = |v: Value| {
            let tx = tx.clone();
            let rpc_id = rpc_id.clone();
            async move {
                tx.send(Event::default().data(rpc_result(&rpc_id, v).to_string()))
                    .await
                    .is_ok()
            }
        };
        if !send(json!({"task": initial})).await || !working {
            return;
        }
        if let Some((run, sub)) = run {
            // The run's end (its events go to the native streams; A2A gets the outcome).
            let crate::hub::Subscription {
                mut rx, _channel, ..
            } = sub;
            loop {
                match rx.recv().await {
                    Ok(env)
                        if env.run_id.as_deref() == Some(run.run_id.as_str()) && env.terminal =>
                    {
                        break;
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => {
                        let _ = run.wait().await;
                        break;
                    }
                }
            }
        }
        let Ok(task) = settle(&state, &who, &task_id, || tx.is_closed()).await else {
            return;
        };
        if let Some(a) = task::answer_of(&task) {
            let update = json!({"artifactUpdate": {
                "taskId": task.id, "contextId": task.context_id,
                "artifact": a, "lastChunk": true,
            }});
            if !send(update).await {
                return;
            }
        }
        let _ = send(json!({"statusUpdate": {
            "taskId": task.id, "contextId": task.context_id,
            "status": task::status_of(&task),
        }}))
        .await;
    });
    Ok(crate::sse::respond(rx, state_keep_alive()))
}

/// The task once it no longer works: followed through the run executing here, or read
/// from the store while its run executes elsewhere (a message sent again to another
/// instance than the one running it). Gives up, with the task as it stands, after
/// [`FOLLOW_LIMIT`] or once `gone()` says nobody waits any more.
async fn settle(
    state: &AppState,
    who: &Principal,
    task_id: &str,
    gone: impl Fn() -> bool,
) -> Result<TaskView, RpcError> {
    let deadline = Instant::now() + FOLLOW_LIMIT;
    loop {
        let task = load_task(state, who, task_id).await?;
        if task.state != TaskState::Working || Instant::now() >= deadline || gone() {
            return Ok(task);
        }
        match state.hub.local_run(&task.context_id) {
            Some(run) => {
                let _ = run.wait().await;
            }
            None => tokio::time::sleep(REREAD).await,
        }
    }
}

fn state_keep_alive() -> Duration {
    Duration::from_secs(15)
}

/// `SubscribeToTask`: the task now, then its end if it is working here.
pub(super) async fn subscribe(
    state: &AppState,
    who: &Principal,
    params: &Value,
    rpc_id: &Value,
) -> Result<Response, RpcError> {
    let id = id_param(params)?;
    let task = load_task(state, who, &id).await?;
    if task.state.is_terminal() {
        return Err(RpcError::unsupported(format!(
            "task `{id}` has ended ({})",
            task.state.wire()
        )));
    }
    let (tx, rx) = mpsc::channel(4);
    let _ = tx
        .send(
            Event::default().data(
                rpc_result(rpc_id, json!({"task": task_json(&task, None, true)})).to_string(),
            ),
        )
        .await;
    if task.state == TaskState::Working {
        if let Some(run) = state.hub.local_run(&task.context_id) {
            let state = state.clone();
            let who = who.clone();
            let rpc_id = rpc_id.clone();
            tokio::spawn(async move {
                let _ = run.wait().await;
                if let Ok(t) = load_task(&state, &who, &id).await {
                    let v = json!({"statusUpdate": {
                        "taskId": t.id, "contextId": t.context_id, "status": task::status_of(&t),
                    }});
                    let _ = tx
                        .send(Event::default().data(rpc_result(&rpc_id, v).to_string()))
                        .await;
                }
            });
        }
    }
    Ok(crate::sse::respond(rx, state_keep_alive()))
}
