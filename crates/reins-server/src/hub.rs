//! Live events: one bounded channel per session (with a short replay ring for
//! `Last-Event-ID`), one for inbox changes, the runs executing on this instance, and
//! the listener that notices other instances' writes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use reins_agent::{Agent, Interrupter, RunOutput};
use reins_memory::StoreChange;
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};

/// How many events each session keeps for reconnecting clients.
const RING: usize = 512;
/// How many events a slow subscriber may fall behind before it is resynchronised.
const CHANNEL: usize = 256;
/// How long, and for how many sessions at most, channels are kept after their last
/// run for reconnecting clients.
const HOLD_FOR: Duration = Duration::from_secs(600);
const HOLD_MAX: usize = 1024;

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

/// A `Last-Event-ID` of the session stream, parsed: `<instance>-<seq>.<messages>`,
/// where `seq` is the last run event of that instance the client saw and `messages`
/// how many stored messages it was sent (the older `<instance>-<seq>` of run streams
/// has no message count).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LastId {
    /// The run-event position, when the id comes from this instance.
    pub(crate) seq: Option<u64>,
    /// How many stored messages the client has.
    pub(crate) messages: Option<usize>,
}

impl Channel {
    fn new() -> Self {
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

/// A session changed (seen on this instance, or by polling the store).
#[derive(Debug, Clone)]
pub(crate) struct Notice {
    pub(crate) session_id: String,
}

/// The final answer of a run executing here.
pub(crate) type Done = Option<Result<RunOutput, crate::error::ServerError>>;

/// A run executing on this instance.
pub(crate) struct LocalRun {
    pub(crate) run_id: String,
    pub(crate) interrupter: Interrupter,
    pub(crate) done: watch::Receiver<Done>,
}

/// The hub of one server.
pub(crate) struct Hub {
    pub(crate) instance: String,
    channels: Mutex<HashMap<String, Weak<Channel>>>,
    held: Mutex<HashMap<String, (Arc<Channel>, std::time::Instant)>>,
    notices: broadcast::Sender<Notice>,
    runs: Mutex<HashMap<String, Arc<LocalRun>>>,
    poller: Mutex<Option<tokio::task::JoinHandle<()>>>,
    poll_every: Duration,
}

impl Hub {
    pub(crate) fn new(poll_every: Duration) -> Self {
        let (notices, _) = broadcast::channel(1024);
        let id = uuid::Uuid::new_v4().simple().to_string();
        Self {
            instance: id.get(..8).unwrap_or(&id).to_owned(),
            channels: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
            notices,
            runs: Mutex::new(HashMap::new()),
            poller: Mutex::new(None),
            poll_every,
        }
    }

    /// The channel of a session (created on demand; kept while anyone holds it, and
    /// for a while after its last event so that reconnecting clients can replay).
    pub(crate) fn channel(&self, session: &str) -> Arc<Channel> {
        let Ok(mut map) = self.channels.lock() else {
            return Arc::new(Channel::new());
        };
        if let Some(c) = map.get(session).and_then(Weak::upgrade) {
            return c;
        }
        map.retain(|_, w| w.strong_count() > 0);
        let c = Arc::new(Channel::new());
        map.insert(session.to_owned(), Arc::downgrade(&c));
        c
    }

    /// Keeps a session's channel alive after a run, for replay; drops old ones.
    pub(crate) fn hold(&self, session: &str, c: Arc<Channel>) {
        if let Ok(mut held) = self.held.lock() {
            let now = std::time::Instant::now();
            held.retain(|_, (_, t)| now.duration_since(*t) < HOLD_FOR);
            while held.len() >= HOLD_MAX {
                let Some(oldest) = held
                    .iter()
                    .min_by_key(|(_, (_, t))| *t)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                held.remove(&oldest);
            }
            held.insert(session.to_owned(), (c, now));
        }
    }

    /// Parses a `Last-Event-ID` (see [`LastId`]); ids of other instances give only
    /// their message count, malformed ones nothing.
    pub(crate) fn parse_last_id(&self, id: &str) -> LastId {
        let (run_part, messages) = match id.split_once('.') {
            Some((r, n)) => (r, n.parse().ok()),
            None => (id, None),
        };
        let seq = run_part
            .rsplit_once('-')
            .filter(|(inst, _)| *inst == self.instance)
            .and_then(|(_, seq)| seq.parse().ok());
        LastId { seq, messages }
    }

    /// The SSE id of a session-stream event (see [`LastId`]).
    pub(crate) fn event_id(&self, seq: u64, messages: usize) -> String {
        format!("{}-{seq}.{messages}", self.instance)
    }

    pub(crate) fn notify(&self, session: &str) {
        let _ = self.notices.send(Notice {
            session_id: session.to_owned(),
        });
    }

    pub(crate) fn notices(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    pub(crate) fn local_run(&self, session: &str) -> Option<Arc<LocalRun>> {
        self.runs.lock().ok()?.get(session).cloned()
    }

    pub(crate) fn add_run(&self, session: &str, run: Arc<LocalRun>) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.insert(session.to_owned(), run);
        }
    }

    pub(crate) fn remove_run(&self, session: &str, run_id: &str) {
        if let Ok(mut runs) = self.runs.lock()
            && runs.get(session).is_some_and(|r| r.run_id == run_id)
        {
            runs.remove(session);
        }
    }

    /// Starts the change listener (once): it follows the store's change feed
    /// (PostgreSQL LISTEN/NOTIFY, SQLite `data_version` polling, in memory directly)
    /// and, when the feed cannot name the session or falls behind, and every poll
    /// interval as a safety net, compares the stored versions of all sessions. It stops
    /// when nobody listens; the next subscriber starts it again.
    pub(crate) fn ensure_poller(self: &Arc<Self>, agent: &Agent) {
        let Ok(mut slot) = self.poller.lock() else {
            return;
        };
        if slot.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        let hub = Arc::downgrade(self);
        let store = agent.store().clone();
        let every = self.poll_every;
        *slot = Some(tokio::spawn(async move {
            let mut feed = store.changes().await.ok();
            let mut seen: HashMap<String, u64> = HashMap::new();
            let mut first = true;
            let mut compare = true;
            loop {
                if compare {
                    let Some(h) = hub.upgrade() else { return };
                    if let Ok(list) = store.list_sessions().await {
                        let mut now = HashMap::with_capacity(list.len());
                        for s in list {
                            if !first && seen.get(&s.id) != Some(&s.version) {
                                h.notify(&s.id);
                            }
                            now.insert(s.id, s.version);
                        }
                        seen = now;
                        first = false;
                    }
                }
                {
                    let Some(h) = hub.upgrade() else { return };
                    if h.notices.receiver_count() == 0 {
                        return;
                    }
                }
                compare = false;
                let change = async {
                    match feed.as_mut() {
                        Some(f) => Some(f.recv().await),
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    r = change => match r {
                        Some(Ok(StoreChange { session: Some(id), .. })) => {
                            if let Some(h) = hub.upgrade() {
                                h.notify(&id);
                            }
                        }
                        Some(Err(RecvError::Closed)) => feed = None,
                        _ => compare = true,
                    },
                    () = tokio::time::sleep(every) => compare = true,
                }
            }
        }));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn last_event_ids_name_a_run_position_here_and_a_message_count_anywhere() {
        let hub = Hub::new(Duration::from_secs(1));
        let id = hub.event_id(7, 12);
        let here = hub.parse_last_id(&id);
        assert_eq!((here.seq, here.messages), (Some(7), Some(12)));
        // Another instance's id: only the message count means something here.
        let other = hub.parse_last_id("0123abcd-7.12");
        assert_eq!((other.seq, other.messages), (None, Some(12)));
        // A run stream's id (no count), and garbage.
        let run = hub.parse_last_id(&format!("{}-3", hub.instance));
        assert_eq!((run.seq, run.messages), (Some(3), None));
        for bad in ["", "x", "-.", "a-b.c", "..", "\u{0}"] {
            let p = hub.parse_last_id(bad);
            assert_eq!((p.seq, p.messages), (None, None), "{bad:?}");
        }
    }

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
