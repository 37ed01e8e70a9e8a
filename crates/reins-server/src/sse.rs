//! Server-Sent Event responses. Each stream is fed by a task through a small bounded
//! channel ([`respond`]): a client that stops reading holds at most that many events,
//! its subscription falls behind, and it is resynchronised from the store (a `state`
//! event) when it reads again. Memory stays bounded whatever the client does.
//!
//! The streams themselves live with their resources (the session stream in
//! `sessions`, the inbox stream in `inbox`); a run's own stream, which answers a
//! request that started a run, is here.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::Result;
use crate::hub::{Envelope, LocalRun, Subscription};

/// Events a client may be behind before its task waits for it.
pub(crate) const CLIENT_BUFFER: usize = 32;

/// A published event as it goes out: its own id, name and data.
fn event_of(env: &Envelope) -> Event {
    Event::default()
        .id(env.id.clone())
        .event(env.name())
        .data(env.native_data())
}

/// The SSE response that sends what arrives on `rx`, with a keep-alive comment when
/// idle and headers that keep proxies from buffering it.
pub(crate) fn respond(rx: mpsc::Receiver<Event>, keep_alive: std::time::Duration) -> Response {
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
    if first.as_ref().is_none_or(|e| e.event.is_failure()) {
        // Refused or failed at once: answer with the error's status.
        run.wait().await?;
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
                        let ev = match run.wait().await {
                            Ok(out) => Event::default().event("output").data(
                                json!({"run_id": run.run_id, "output": &*out}).to_string(),
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
