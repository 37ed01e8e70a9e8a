//! A session's event channel: every event published for the session, fanned out to its
//! subscribers through a bounded broadcast channel, and kept in a short replay ring for
//! clients that reconnect with `Last-Event-ID`. Events travel typed ([`HubEvent`]);
//! each protocol encodes them at its edge (the native SSE streams with
//! [`Envelope::native_data`], AG-UI and A2A from the types).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use reins_agent::{RunEvent, RunOutput};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::error::ServerError;

/// How many events each session keeps for reconnecting clients.
const RING: usize = 512;
/// How many events a slow subscriber may fall behind before it is resynchronised.
const CHANNEL: usize = 256;

/// What a session's channel carries.
#[derive(Debug, Clone)]
pub(crate) enum HubEvent {
    /// A run event: of a run executing here, or relayed live by a backend's service.
    Run(RunEvent),
    /// The run ended with this output (shared with the run's final answer).
    Output(Arc<RunOutput>),
    /// The run ended with this error.
    Error(ServerError),
}

impl HubEvent {
    /// The native API's SSE event name.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Run(ev) => ev.name(),
            Self::Output(_) => "output",
            Self::Error(_) => "error",
        }
    }

    /// Whether the run failed or was refused with this event.
    pub(crate) fn is_failure(&self) -> bool {
        matches!(self, Self::Run(RunEvent::Failed { .. }) | Self::Error(_))
    }
}

/// One published event.
#[derive(Debug)]
pub(crate) struct Envelope {
    /// `<instance>-<seq>`: the SSE id.
    pub(crate) id: String,
    pub(crate) seq: u64,
    /// The event.
    pub(crate) event: HubEvent,
    /// The run it belongs to, if any (this server's id of the run it follows).
    pub(crate) run_id: Option<String>,
    /// The driver's own id of that run, for a run whose live events a driver's
    /// processes relayed (Restate: the turn's invocation id); shown as `run_id`.
    pub(crate) driver_run: Option<String>,
    /// The attempt of a backend's step it was relayed from (see reins-restate's
    /// `LiveRelay`), if any.
    pub(crate) attempt: Option<String>,
    /// The last event of its run.
    pub(crate) terminal: bool,
}

impl Envelope {
    /// The SSE event name of the native API.
    pub(crate) fn name(&self) -> &'static str {
        self.event.name()
    }

    /// The native API's JSON data: a run event's JSON (reins-agent's `RunEvent`) with
    /// `run_id` (and a relayed event's `attempt`) beside; `{run_id, output}`;
    /// `{run_id, error}`.
    pub(crate) fn native_data(&self) -> String {
        let mut data = match &self.event {
            HubEvent::Run(ev) => serde_json::to_value(ev).unwrap_or(Value::Null),
            HubEvent::Output(out) => json!({"output": &**out}),
            HubEvent::Error(e) => json!({"error": e.body().error}),
        };
        if let Some(o) = data.as_object_mut() {
            if let Some(run_id) = self.driver_run.as_ref().or(self.run_id.as_ref()) {
                o.insert("run_id".to_owned(), Value::String(run_id.clone()));
            }
            if let Some(attempt) = &self.attempt {
                o.insert("attempt".to_owned(), Value::String(attempt.clone()));
            }
        }
        data.to_string()
    }
}

/// Where a published event comes from: its run, and a relayed event's attempt.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Origin<'a> {
    pub(crate) run_id: Option<&'a str>,
    /// The driver's own id of the run, for a relayed event.
    pub(crate) driver_run: Option<&'a str>,
    pub(crate) attempt: Option<&'a str>,
    /// The last event of its run.
    pub(crate) terminal: bool,
}

struct Ring {
    next: u64,
    items: VecDeque<Arc<Envelope>>,
}

/// A session's event channel.
pub(crate) struct Channel {
    ring: Mutex<Ring>,
    tx: broadcast::Sender<Arc<Envelope>>,
}

/// What a subscriber gets: events to replay, then the live receiver. `gap`: the
/// requested position is no longer (or never was) in the ring.
pub(crate) struct Subscription {
    /// Keeps the channel alive while subscribed.
    pub(crate) _channel: Arc<Channel>,
    pub(crate) replay: Vec<Arc<Envelope>>,
    pub(crate) rx: broadcast::Receiver<Arc<Envelope>>,
    pub(crate) gap: bool,
    /// The sequence number of the last event published before subscribing.
    pub(crate) position: u64,
}

impl Channel {
    pub(super) fn new() -> Self {
        let (tx, _) = broadcast::channel(CHANNEL);
        Self {
            ring: Mutex::new(Ring {
                next: 1,
                items: VecDeque::new(),
            }),
            tx,
        }
    }

    pub(crate) fn publish(&self, instance: &str, event: HubEvent, origin: Origin<'_>) {
        let Ok(mut ring) = self.ring.lock() else {
            return;
        };
        let seq = ring.next;
        ring.next += 1;
        let env = Arc::new(Envelope {
            id: format!("{instance}-{seq}"),
            seq,
            event,
            run_id: origin.run_id.map(str::to_owned),
            driver_run: origin.driver_run.map(str::to_owned),
            attempt: origin.attempt.map(str::to_owned),
            terminal: origin.terminal,
        });
        if ring.items.len() >= RING {
            ring.items.pop_front();
        }
        ring.items.push_back(env.clone());
        // No receivers is fine.
        let _ = self.tx.send(env);
    }

    /// Subscribes; `after`: replay the events after this sequence number.
    pub(crate) fn subscribe(self: &Arc<Self>, after: Option<u64>) -> Subscription {
        let Ok(ring) = self.ring.lock() else {
            return Subscription {
                _channel: self.clone(),
                replay: Vec::new(),
                rx: self.tx.subscribe(),
                gap: true,
                position: 0,
            };
        };
        let rx = self.tx.subscribe();
        let position = ring.next - 1;
        match after {
            None => Subscription {
                _channel: self.clone(),
                replay: Vec::new(),
                rx,
                gap: false,
                position,
            },
            Some(after) => {
                let oldest = ring.items.front().map_or(ring.next, |e| e.seq);
                let gap = after + 1 < oldest || after >= ring.next;
                let replay = ring
                    .items
                    .iter()
                    .filter(|e| e.seq > after)
                    .cloned()
                    .collect();
                Subscription {
                    _channel: self.clone(),
                    replay,
                    rx,
                    gap,
                    position,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_subscriber_replays_what_it_missed_and_learns_of_gaps() {
        let c = Arc::new(Channel::new());
        for i in 0..3 {
            let ev = HubEvent::Run(RunEvent::TextDelta {
                text: i.to_string(),
            });
            c.publish("i", ev, Origin::default());
        }
        let fresh = c.subscribe(None);
        assert_eq!(
            (fresh.position, fresh.replay.len(), fresh.gap),
            (3, 0, false)
        );
        let back = c.subscribe(Some(1));
        let seqs: Vec<u64> = back.replay.iter().map(|e| e.seq).collect();
        assert_eq!((seqs, back.gap), (vec![2, 3], false));
        // A position this channel never gave out.
        assert!(c.subscribe(Some(9)).gap);
    }
}
