//! The session's live stream (`GET /v1/sessions/{id}/events`): the committed steps
//! read from the store, so that every instance serves them, and the run events of the
//! runs executing on this instance, with ids that let `Last-Event-ID` resume anywhere.

use axum::response::Response;
use axum::response::sse::Event;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use crate::error::ServerError;
use crate::hub::{Envelope, Hub, Subscription};
use crate::sse::{CLIENT_BUFFER, respond};
use crate::state::AppState;
use crate::view;

/// Where a session-stream client is: the last run event of this instance it got, how
/// many stored messages it was sent, and the last `state` it saw.
struct Position {
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
        hub.ensure_poller(&state.sessions).await;
        let Subscription {
            replay,
            mut rx,
            gap,
            position,
            ..
        } = chan.subscribe(last.seq);
        let mut cur = Position {
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
            // Run events first: a step's live events were published before the commit
            // a notice announces, and go out before what the commit stored.
            tokio::select! {
                biased;
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
                    Ok(n) if n.concerns(&id) => {
                        // A stored change at the version (and run state) this stream
                        // showed last has nothing new to read.
                        let shown = n.change().is_some_and(|c| {
                            cur.last_state == Some((c.version, hub.local_run(&id).is_some()))
                        });
                        if !shown && !sync(&state, &id, &tx, &mut cur, false).await {
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
fn event_of_at(hub: &Hub, env: &Envelope, cur: &Position) -> Event {
    Event::default()
        .id(hub.event_id(cur.seq, cur.messages.unwrap_or(0)))
        .event(env.name())
        .data(env.native_data())
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
    cur: &mut Position,
    force: bool,
) -> bool {
    let running = state.hub.local_run(id).is_some();
    let stored = match state.sessions.read(id, true).await {
        Ok(s) => s,
        Err(e) => {
            let e = ServerError::from(e);
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
    let (detail, _) = view::detail(stored.view, &[], stored.updated_at, running);
    let key = (detail.version, running);
    if !force && cur.last_state == Some(key) {
        return true;
    }
    cur.last_state = Some(key);
    let data = serde_json::to_string(&detail).unwrap_or_default();
    let ev = Event::default()
        .id(state.hub.event_id(cur.seq, total))
        .event("state")
        .data(data);
    tx.send(ev).await.is_ok()
}
