//! [`LiveRelay`]: the run events of the steps a service process executes — the model's
//! text deltas as it streams, tool calls as they start and finish — sent to the
//! reins-server instances that front the deployment, so that their listeners see them
//! live, as they see a local run's.
//!
//! Live events are best-effort, never the record: the journaled final message (and the
//! store commit after it) is the truth. They are produced only while a step's closure
//! runs, so a step that Restate replays from its journal sends nothing again; a step
//! executed again after a crash is a new model call, announced by a new
//! `reasoning_started` with a new `attempt` id, which tells a listener to drop the text
//! of the earlier attempt. Each step sends its events in order, in batches (one HTTP
//! request at a time per reins-server), and waits for them to be delivered (bounded by
//! [`LiveRelay::flush_timeout`]) before the step returns, so they reach listeners
//! before the step's commit does.

use std::time::Duration;

use reins_agent::RunEvent;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// How many events a step may have queued for its relay before newer ones are dropped
/// (a reins-server that does not keep up loses deltas, never slows the model).
const QUEUE: usize = 1024;
/// The most events sent in one request.
const BATCH: usize = 256;

/// Where a service process sends its live run events: the reins-server instances that
/// front the deployment (`POST /v1/sessions/{id}/live` on each, with a token whose
/// principal has the admin role). Without targets nothing is sent.
///
/// List every instance whose listeners should see the events (an address behind a load
/// balancer reaches one instance only).
#[derive(Clone)]
pub struct LiveRelay {
    http: reqwest::Client,
    targets: Vec<String>,
    token: Option<String>,
    flush: Duration,
}

impl std::fmt::Debug for LiveRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveRelay")
            .field("targets", &self.targets)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("flush", &self.flush)
            .finish_non_exhaustive()
    }
}

impl Default for LiveRelay {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveRelay {
    /// A relay with no targets (sends nothing until [`LiveRelay::to`]).
    pub fn new() -> Self {
        Self {
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(1))
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap_or_default(),
            targets: Vec::new(),
            token: None,
            flush: Duration::from_secs(2),
        }
    }

    /// Also sends to the reins-server at `base_url` (e.g. `http://reins-1:8000`).
    #[must_use]
    pub fn to(mut self, base_url: impl Into<String>) -> Self {
        self.targets
            .push(base_url.into().trim_end_matches('/').to_owned());
        self
    }

    /// The bearer token sent with each request (its principal needs the admin role on
    /// the reins-servers).
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// How long a step waits at its end for its events to be delivered (default 2 s);
    /// what is not delivered by then is dropped.
    #[must_use]
    pub fn flush_timeout(mut self, wait: Duration) -> Self {
        self.flush = wait;
        self
    }

    /// The reins-servers events go to.
    pub fn targets(&self) -> &[String] {
        &self.targets
    }

    /// A sender for one execution of one step of `session`'s turn `run_id` (the turn's
    /// invocation id), under a fresh attempt id.
    pub(crate) fn open(&self, session: &str, run_id: &str) -> LiveSender {
        let attempt = uuid::Uuid::new_v4().simple().to_string();
        if self.targets.is_empty() {
            return LiveSender {
                tx: None,
                task: None,
                run_id: run_id.to_owned(),
                attempt,
                flush: self.flush,
            };
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        let urls = self
            .targets
            .iter()
            .map(|t| format!("{t}/v1/sessions/{}/live", crate::client::encode(session)))
            .collect();
        let task = tokio::spawn(deliver(self.http.clone(), urls, self.token.clone(), rx));
        LiveSender {
            tx: Some(tx),
            task: Some(task),
            run_id: run_id.to_owned(),
            attempt,
            flush: self.flush,
        }
    }
}

/// Sends batches of what arrives on `rx` to every URL, one request at a time per URL,
/// until `rx` closes and is drained.
async fn deliver(
    http: reqwest::Client,
    urls: Vec<String>,
    token: Option<String>,
    mut rx: mpsc::Receiver<Value>,
) {
    while let Some(first) = rx.recv().await {
        let mut events = vec![first];
        while events.len() < BATCH {
            match rx.try_recv() {
                Ok(e) => events.push(e),
                Err(_) => break,
            }
        }
        let body = json!({ "events": events });
        let sends = urls.iter().map(|url| {
            let mut req = http.post(url).json(&body);
            if let Some(t) = &token {
                req = req.bearer_auth(t);
            }
            async move {
                match req.send().await {
                    Ok(r) if r.status().is_success() => {}
                    Ok(r) => tracing::debug!(%url, status = %r.status(), "live events refused"),
                    Err(e) => tracing::debug!(%url, error = %e, "live events not delivered"),
                }
            }
        });
        futures::future::join_all(sends).await;
    }
}

/// The live events of one execution of one step.
pub(crate) struct LiveSender {
    tx: Option<mpsc::Sender<Value>>,
    task: Option<tokio::task::JoinHandle<()>>,
    run_id: String,
    attempt: String,
    flush: Duration,
}

impl LiveSender {
    /// Queues `event` (the local driver's JSON, with `run_id` and `attempt` added);
    /// dropped when the queue is full.
    pub(crate) fn send(&self, event: &RunEvent) {
        let Some(tx) = &self.tx else { return };
        let mut data = serde_json::to_value(event).unwrap_or(Value::Null);
        if let Some(o) = data.as_object_mut() {
            o.insert("run_id".to_owned(), Value::String(self.run_id.clone()));
            o.insert("attempt".to_owned(), Value::String(self.attempt.clone()));
        }
        let _ = tx.try_send(data);
    }

    /// Waits (at most the relay's flush timeout) until everything queued is delivered.
    pub(crate) async fn close(mut self) {
        drop(self.tx.take());
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(self.flush, task).await.is_err() {
                abort.abort();
            }
        }
    }
}

impl Drop for LiveSender {
    fn drop(&mut self) {
        // Not closed (the step's future was dropped): stop sending.
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The effects (`reins_agent::effects`) report their run events to the relay: those of
/// a step in progress (reins-server takes no other kind on its live route; the rest —
/// a reconcile's verdict, a replayed result — is in the store).
impl reins_agent::effects::Witness for LiveSender {
    fn listening(&self) -> bool {
        self.tx.is_some()
    }

    fn send(&self, event: RunEvent) {
        if is_live(&event) {
            LiveSender::send(self, &event);
        }
    }
}

/// The run events a step in progress relays.
fn is_live(event: &RunEvent) -> bool {
    matches!(
        event,
        RunEvent::ReasoningStarted { .. }
            | RunEvent::TextDelta { .. }
            | RunEvent::OutputDelta { .. }
            | RunEvent::ThinkingDelta { .. }
            | RunEvent::ToolCallStarted { .. }
            | RunEvent::ToolCallReady { .. }
            | RunEvent::ToolExecutionStarted { .. }
            | RunEvent::ToolExecutionChunk { .. }
            | RunEvent::ToolExecutionFinished { .. }
    )
}
