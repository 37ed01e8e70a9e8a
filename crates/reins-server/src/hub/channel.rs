//! A session's event channel: every event published for the session, fanned out to its
//! subscribers through a bounded broadcast channel, and kept in a short replay ring for
//! clients that reconnect with `Last-Event-ID`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::broadcast;

/// How many events each session keeps for reconnecting clients.
const RING: usize = 512;
/// How many events a slow subscriber may fall behind before it is resynchronised.
const CHANNEL: usize = 256;

/// One published event.
#[derive(Debug)]
pub(crate) struct Envelope {
    /// `<instance>-<seq>`: the SSE id.
    pub(crate) id: String,
    pub(crate) seq: u64,
    /// The SSE event name.
    pub(crate) event: String,
    /// The JSON data.
    pub(crate) data: String,
    /// The run it belongs to, if any.
    pub(crate) run_id: Option<String>,
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

    pub(crate) fn publish(
        &self,
        instance: &str,
        event: &str,
        data: Value,
        run_id: Option<&str>,
        terminal: bool,
    ) {
        let Ok(mut ring) = self.ring.lock() else {
            return;
        };
        let seq = ring.next;
        ring.next += 1;
        let env = Arc::new(Envelope {
            id: format!("{instance}-{seq}"),
            seq,
            event: event.to_owned(),
            data: data.to_string(),
            run_id: run_id.map(str::to_owned),
            terminal,
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
            c.publish("i", "e", Value::from(i), None, false);
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
