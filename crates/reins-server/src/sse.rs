//! The Server-Sent Event streams. Each stream is fed by a task through a small bounded
//! channel: a client that stops reading holds at most that many events, its
//! subscription falls behind, and it is resynchronised from the store (a `state`
//! event) when it reads again. Memory stays bounded whatever the client does.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::auth::Principal;
use crate::compat;
use crate::error::Result;
use crate::hub::{Envelope, LocalRun, Subscription};
use crate::state::AppState;

/// Events a client may be behind before its task waits for it.
const CLIENT_BUFFER: usize = 32;

fn event_of(env: &Envelope) -> Event {
    Event::default()
        .id(env.id.clone())
        .event(env.event.clone())
        .data(env.data.clone())
}

fn respond(rx: mpsc::Receiver<Event>, keep_alive: std::time::Duration) -> Response {
    let stream = ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    let mut res = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(keep_alive))
        .into_response();
    let h = res.headers_mut();
    h.insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-cache"),
    );
    h.insert(
        "x-accel-buffering",
        axum::http::HeaderValue::from_static("no"),
    );
    res
}

/// Where a session-stream client is: the last run event of this instance it got, how
/// many stored messages it was sent, and the last `state` it saw.
struct Cursor {
    seq: u64,
    messages: Option<usize>,
    /// The id of the last message sent, to notice a transcript that was rewritten.
    last_message: Option<String>,
    last_state: Option<(u64, bool)>,
}

/// The session's stream. Committed steps come from the store, so every instance
/// serves them whichever instance ran the step: a `message` event per stored message
/// (in order, each exactly once per stream), and a `state` event (the session view
/// without messages) on connect and whenever the stored session or its status moves.
/// The run events of runs executing on this instance (text deltas, tool progress) are
/// relayed as they happen. Every event's id names the client's position in both, so
/// that `Last-Event-ID` resumes on any instance without losing a committed step (and,
/// on the same instance, replays the run events too while they are kept).
pub(crate) fn session_stream(state: AppState, id: String, last: Option<String>) -> Response {
    let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
    let keep_alive = state.limits.keep_alive;
    tokio::spawn(async move {
        let hub = state.hub.clone();
        let chan = hub.channel(&id);
        let last = last.map(|l| hub.parse_last_id(&l)).unwrap_or_default();
        let mut notices = hub.notices();
        hub.ensure_poller(&state.agent);
        let Subscription {
            replay,
            mut rx,
            gap,
            position,
            ..
        } = chan.subscribe(last.seq);
        let mut cur = Cursor {
            seq: if gap {
                position
            } else {
                last.seq.unwrap_or(position)
            },
            messages: last.messages,
            last_message: None,
            last_state: None,
        };
        // Run events to replay (same instance, still kept), then what the store has
        // that the client lacks; a `state` unless this resumes a stream without a gap.
        for env in replay {
            cur.seq = env.seq;
            if tx.send(event_of_at(&hub, &env, &cur)).await.is_err() {
                return;
            }
        }
        let force = gap || last.seq.is_none();
        if !sync(&state, &id, &tx, &mut cur, force).await {
            return;
        }
        loop {
            tokio::select! {
                () = tx.closed() => return,
                r = rx.recv() => match r {
                    Ok(env) => {
                        cur.seq = env.seq;
                        if tx.send(event_of_at(&hub, &env, &cur)).await.is_err() {
                            return;
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        if !sync(&state, &id, &tx, &mut cur, true).await {
                            return;
                        }
                    }
                    Err(RecvError::Closed) => return,
                },
                n = notices.recv() => match n {
                    Ok(n) if n.session_id == id => {
                        if !sync(&state, &id, &tx, &mut cur, false).await {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => {
                        if !sync(&state, &id, &tx, &mut cur, false).await {
                            return;
                        }
                    }
                    Err(RecvError::Closed) => return,
                },
            }
        }
    });
    respond(rx, keep_alive)
}

/// A relayed run event with the client's position as its id.
fn event_of_at(hub: &crate::hub::Hub, env: &Envelope, cur: &Cursor) -> Event {
    Event::default()
        .id(hub.event_id(cur.seq, cur.messages.unwrap_or(0)))
        .event(env.event.clone())
        .data(env.data.clone())
}

/// Reads the stored session and sends what the client lacks: the messages after the
/// ones it has (a `reset` with the whole transcript if the stored one got shorter or
/// no longer ends where this stream left it, as when a repair dropped messages), then a `state` when the session moved (or
/// `force`). A client without a message count starts at the current transcript. False
/// when the client is gone.
async fn sync(
    state: &AppState,
    id: &str,
    tx: &mpsc::Sender<Event>,
    cur: &mut Cursor,
    force: bool,
) -> bool {
    let running = state.hub.local_run(id).is_some();
    let stored = match state.agent.store().load_session(id).await {
        Ok(s) => s,
        Err(e) => {
            let e = crate::error::ServerError::from(e);
            let ev = Event::default()
                .event("error")
                .data(json!({"error": e.body().error}).to_string());
            return tx.send(ev).await.is_ok();
        }
    };
    let total = stored.messages.len();
    match cur.messages {
        None => {
            cur.messages = Some(total);
            cur.last_message = stored.messages.last().map(|m| m.id.clone());
        }
        Some(have)
            if have > total
                || (have > 0
                    && cur.last_message.as_ref().is_some_and(|last| {
                        stored.messages.get(have - 1).map(|m| &m.id) != Some(last)
                    })) =>
        {
            cur.last_message = stored.messages.last().map(|m| m.id.clone());
            cur.messages = Some(total);
            let data = json!({"session_id": id, "messages": stored.messages});
            let ev = Event::default()
                .id(state.hub.event_id(cur.seq, total))
                .event("reset")
                .data(data.to_string());
            if tx.send(ev).await.is_err() {
                return false;
            }
        }
        Some(have) => {
            for (index, m) in stored.messages.iter().enumerate().skip(have) {
                cur.messages = Some(index + 1);
                cur.last_message = Some(m.id.clone());
                let data = json!({"session_id": id, "index": index, "message": m});
                let ev = Event::default()
                    .id(state.hub.event_id(cur.seq, index + 1))
                    .event("message")
                    .data(data.to_string());
                if tx.send(ev).await.is_err() {
                    return false;
                }
            }
        }
    }
    let (view, _) = compat::view_of(stored, running, false);
    let key = (view.version, running);
    if !force && cur.last_state == Some(key) {
        return true;
    }
    cur.last_state = Some(key);
    let data = serde_json::to_string(&view).unwrap_or_default();
    let ev = Event::default()
        .id(state.hub.event_id(cur.seq, total))
        .event("state")
        .data(data);
    tx.send(ev).await.is_ok()
}

/// The inbox stream: `changed` events for the sessions the caller may read.
pub(crate) fn inbox_stream(state: AppState, who: Arc<Principal>) -> Response {
    let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
    let keep_alive = state.limits.keep_alive;
    tokio::spawn(async move {
        let mut notices = state.hub.notices();
        state.hub.ensure_poller(&state.agent);
        if tx
            .send(Event::default().event("ready").data("{}"))
            .await
            .is_err()
        {
            return;
        }
        loop {
            tokio::select! {
                () = tx.closed() => return,
                n = notices.recv() => {
                    let data = match n {
                        Ok(n) if who.may_read(&n.session_id) => json!({"session_id": n.session_id}),
                        Ok(_) => continue,
                        // Fell behind: tell the client to reload everything.
                        Err(RecvError::Lagged(_)) => json!({"session_id": null}),
                        Err(RecvError::Closed) => return,
                    };
                    if tx.send(Event::default().event("changed").data(data.to_string())).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    respond(rx, keep_alive)
}

/// A run's own stream (`?stream=true`): its events, ending with `output` or `error`.
/// A run refused before it started answers with the HTTP error instead.
pub(crate) async fn run_stream(run: Arc<LocalRun>, sub: Subscription) -> Result<Response> {
    let Subscription {
        mut rx, _channel, ..
    } = sub;
    let run_id = run.run_id.clone();
    let mine = move |env: &Envelope| env.run_id.as_deref() == Some(run_id.as_str());
    // The first event tells whether the run started at all.
    let first = loop {
        match rx.recv().await {
            Ok(env) if mine(&env) => break Some(env),
            Ok(_) => {}
            Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => break None,
        }
    };
    if first
        .as_ref()
        .is_none_or(|e| e.event == "failed" || e.event == "error")
    {
        // Refused or failed at once: answer with the error's status.
        crate::api::wait_done(&run).await?;
    }
    let (tx, out) = mpsc::channel(CLIENT_BUFFER);
    tokio::spawn(async move {
        let _keep = _channel;
        if let Some(env) = first {
            if tx.send(event_of(&env)).await.is_err() {
                return;
            }
            if env.terminal {
                return;
            }
        }
        loop {
            tokio::select! {
                () = tx.closed() => return,
                r = rx.recv() => match r {
                    Ok(env) if mine(&env) => {
                        if tx.send(event_of(&env)).await.is_err() || env.terminal {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(n)) => {
                        // Fell behind: say so, then give the final answer.
                        let _ = tx
                            .send(Event::default().event("lagged").data(json!({"missed": n}).to_string()))
                            .await;
                        let ev = match crate::api::wait_done(&run).await {
                            Ok(out) => Event::default().event("output").data(
                                json!({"run_id": run.run_id, "output": out}).to_string(),
                            ),
                            Err(e) => Event::default().event("error").data(
                                json!({"run_id": run.run_id, "error": e.body().error}).to_string(),
                            ),
                        };
                        let _ = tx.send(ev).await;
                        return;
                    }
                    Err(RecvError::Closed) => return,
                },
            }
        }
    });
    Ok(respond(out, std::time::Duration::from_secs(15)))
}
