//! The live side of one server: a bounded event channel per session ([`channel`]),
//! notices of session changes (the inbox's feed, and the signal for session streams to
//! read the store), the runs executing on this instance ([`run`]) with the pump that
//! moves their events into their session's channel ([`Hub::start_run`]), and the
//! listener that notices other instances' writes. It knows nothing of HTTP: the
//! handlers and the SSE streams use it.

mod channel;
mod keep;
mod run;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use reins_agent::port::{LiveEvent, SessionChange, SessionEvent, Sessions, Watch};
use reins_agent::{RunEvent, RunHandle};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

pub(crate) use channel::{Channel, Envelope, HubEvent, Origin, Subscription};
use keep::{Channels, Held};
use run::Done;
pub(crate) use run::LocalRun;

use crate::error::ServerError;

/// How long, and for how many sessions at most, channels are kept after their last
/// run for reconnecting clients.
const HOLD_FOR: Duration = Duration::from_secs(600);
const HOLD_MAX: usize = 1024;

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

/// A session changed: as the port's subscription reports the store ([`SessionEvent`]:
/// typed, with the session's version and open requirements), or as this instance saw
/// a run of it start or end (which the store does not show).
#[derive(Debug, Clone)]
pub(crate) enum Notice {
    /// What the port's subscription to the store reported.
    Stored(SessionEvent),
    /// A run of this session started or ended on this instance.
    Here(String),
}

impl Notice {
    /// The session it is about (`None`: any session may have changed).
    pub(crate) fn session(&self) -> Option<&str> {
        match self {
            Notice::Stored(e) => e.session(),
            Notice::Here(id) => Some(id),
        }
    }

    /// Whether it may concern session `id`.
    pub(crate) fn concerns(&self, id: &str) -> bool {
        self.session().is_none_or(|s| s == id)
    }

    /// The stored change it reports, when it reports one.
    pub(crate) fn change(&self) -> Option<&SessionChange> {
        match self {
            Notice::Stored(SessionEvent::Changed(c)) => Some(c),
            _ => None,
        }
    }
}

/// How often a session is read again while waiting, besides every change notice (a
/// safety net for stores whose change feed is slow or missing).
const REREAD: Duration = Duration::from_millis(250);

/// Returns on a change notice for session `id`, or after [`REREAD`].
pub(crate) async fn wait_for_notice(notices: &mut broadcast::Receiver<Notice>, id: &str) {
    let notice = async {
        loop {
            match notices.recv().await {
                Ok(n) if n.concerns(id) => return,
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => return,
                Err(RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    };
    tokio::select! {
        () = notice => {}
        () = tokio::time::sleep(REREAD) => {}
    }
}

/// The hub of one server.
pub(crate) struct Hub {
    pub(crate) instance: String,
    channels: Mutex<Channels>,
    held: Mutex<Held>,
    notices: broadcast::Sender<Notice>,
    runs: Mutex<HashMap<String, Arc<LocalRun>>>,
    poller: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    poll_every: Duration,
}

impl Hub {
    pub(crate) fn new(poll_every: Duration) -> Self {
        let (notices, _) = broadcast::channel(1024);
        let id = uuid::Uuid::new_v4().simple().to_string();
        Self {
            instance: id.get(..8).unwrap_or(&id).to_owned(),
            channels: Mutex::new(Channels::new()),
            held: Mutex::new(Held::new(HOLD_FOR, HOLD_MAX)),
            notices,
            runs: Mutex::new(HashMap::new()),
            poller: tokio::sync::Mutex::new(None),
            poll_every,
        }
    }

    /// The channel of a session (created on demand; kept while anyone holds it, and
    /// for a while after its last event so that reconnecting clients can replay).
    pub(crate) fn channel(&self, session: &str) -> Arc<Channel> {
        match self.channels.lock() {
            Ok(mut channels) => channels.get_or_create(session),
            Err(_) => Arc::new(Channel::new()),
        }
    }

    /// Keeps a session's channel alive after a run, for replay; drops old ones.
    fn hold(&self, session: &str, c: Arc<Channel>) {
        if let Ok(mut held) = self.held.lock() {
            held.hold(session, c, std::time::Instant::now());
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

    /// Tells the waiters that a run of `session` started or ended here.
    pub(crate) fn notify(&self, session: &str) {
        let _ = self.notices.send(Notice::Here(session.to_owned()));
    }

    pub(crate) fn notices(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    pub(crate) fn local_run(&self, session: &str) -> Option<Arc<LocalRun>> {
        self.runs.lock().ok()?.get(session).cloned()
    }

    fn add_run(&self, session: &str, run: Arc<LocalRun>) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.insert(session.to_owned(), run);
        }
    }

    fn remove_run(&self, session: &str, run_id: &str) {
        if let Ok(mut runs) = self.runs.lock()
            && runs.get(session).is_some_and(|r| r.run_id == run_id)
        {
            runs.remove(session);
        }
    }

    /// Pumps a run's events into the session's channel until it ends, then publishes
    /// its output or error; the run no longer depends on the request that started
    /// it. Each event goes out typed, with the run id; the events that mark a
    /// committed step also notify, so that subscribers read the store then.
    ///
    /// `live`: for a run a driver's processes execute, the session's live channel on
    /// the port (subscribed before the run started): the handle's live events go out
    /// with the driver's run id and the step's attempt they were relayed with.
    pub(crate) fn start_run(
        self: &Arc<Self>,
        session: &str,
        mut handle: RunHandle,
        mut live: Option<broadcast::Receiver<LiveEvent>>,
    ) -> Arc<LocalRun> {
        let run_id = uuid::Uuid::new_v4().simple().to_string();
        let (run, done_tx) = LocalRun::new(run_id.clone(), handle.interrupter());
        let run = Arc::new(run);
        let hub = self.clone();
        hub.add_run(session, run.clone());
        hub.notify(session);
        let chan = hub.channel(session);
        let session = session.to_owned();
        tokio::spawn(async move {
            let origin = Origin {
                run_id: Some(&run_id),
                ..Origin::default()
            };
            // A live event of the handle, with the origin its driver relayed it with
            // (the port's live channel holds the same events in the same order).
            let origin_of = |rx: &mut broadcast::Receiver<LiveEvent>, ev: &RunEvent| loop {
                match rx.try_recv() {
                    Ok(e) if e.event == *ev => break Some(e),
                    Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                    Err(_) => break None,
                }
            };
            while let Some(ev) = handle.next_event().await {
                let relayed = match live.as_mut() {
                    Some(rx) if LiveEvent::is_live(&ev) => origin_of(rx, &ev),
                    _ => None,
                };
                let committed = ev.marks_committed_step();
                let o = match &relayed {
                    Some(e) => Origin {
                        driver_run: e.run_id.as_deref(),
                        attempt: e.attempt.as_deref(),
                        ..origin
                    },
                    None => origin,
                };
                chan.publish(&hub.instance, HubEvent::Run(ev), o);
                if committed {
                    hub.notify(&session);
                }
            }
            let result = handle.wait().await;
            hub.remove_run(&session, &run_id);
            let end = Origin {
                terminal: true,
                ..origin
            };
            let done: Done = Some(match result {
                Ok(out) => {
                    let out = Arc::new(out);
                    chan.publish(&hub.instance, HubEvent::Output(out.clone()), end);
                    Ok(out)
                }
                Err(e) => {
                    let e = ServerError::from(e);
                    chan.publish(&hub.instance, HubEvent::Error(e.clone()), end);
                    Err(e)
                }
            });
            hub.hold(&session, chan);
            hub.notify(&session);
            let _ = done_tx.send(done);
        });
        run
    }

    /// Starts the change listener (once): the port's subscription to every session
    /// ([`Sessions::subscribe`]: the store's change feed, comparing stored versions
    /// when the feed cannot name the session or falls behind, and every poll interval
    /// as a safety net), each of its typed events a [`Notice::Stored`]. When this
    /// returns, every later commit is noticed (unless the store cannot be read: then
    /// the listener keeps trying, every poll interval). It stops when nobody listens;
    /// the next subscriber starts it again.
    pub(crate) async fn ensure_poller(self: &Arc<Self>, sessions: &Arc<dyn Sessions>) {
        let mut slot = self.poller.lock().await;
        if slot.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        let hub = Arc::downgrade(self);
        let sessions = Arc::clone(sessions);
        let every = self.poll_every;
        // The live events of runs come through the runs' own channels.
        let watch = Watch::every().recheck(every).stored_only();
        let first = sessions.subscribe(watch.clone()).await;
        // Whether anyone still listens (the hub gone: nobody).
        let listened = |hub: &std::sync::Weak<Hub>| {
            hub.upgrade()
                .is_some_and(|h| h.notices.receiver_count() > 0)
        };
        *slot = Some(tokio::spawn(async move {
            let mut events = match first {
                Ok(events) => events,
                Err(mut e) => loop {
                    tracing::warn!(error = %e, "cannot follow the store's sessions; trying again");
                    tokio::time::sleep(every).await;
                    if !listened(&hub) {
                        return;
                    }
                    match sessions.subscribe(watch.clone()).await {
                        Ok(events) => break events,
                        Err(again) => e = again,
                    }
                },
            };
            loop {
                tokio::select! {
                    ev = events.next() => match (ev, hub.upgrade()) {
                        (Some(SessionEvent::Live { .. }), Some(_)) => {}
                        (Some(ev), Some(h)) => {
                            let _ = h.notices.send(Notice::Stored(ev));
                        }
                        _ => return,
                    },
                    () = tokio::time::sleep(every) => {}
                }
                if !listened(&hub) {
                    return;
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

    #[tokio::test]
    async fn notices_carry_the_stored_change_the_port_reports() {
        use reins_agent::{Agent, RunInput, Submission};
        use reins_model::{ScriptedModel, ScriptedResponse};

        let model = ScriptedModel::new([ScriptedResponse::text("hello")]);
        let sessions: Arc<dyn Sessions> = Arc::new(Agent::builder().model(model).build().unwrap());
        let hub = Arc::new(Hub::new(Duration::from_secs(60)));
        let mut notices = hub.notices();
        hub.ensure_poller(&sessions).await;
        let input = Submission::new(RunInput::Message(reins_message::Msg::user("hi")));
        sessions
            .start("s/1", input)
            .await
            .unwrap()
            .wait()
            .await
            .unwrap();
        let stored = sessions.read("s/1", false).await.unwrap();
        // The commits of the run come as typed changes, the last with the answer.
        let last = loop {
            let n = notices.recv().await.unwrap();
            assert!(n.concerns("s/1"), "{n:?}");
            if let Some(c) = n.change()
                && c.version == stored.view.version
            {
                break c.clone();
            }
        };
        assert_eq!((last.session.as_str(), last.message_count), ("s/1", 2));
        assert!(!last.is_waiting());
    }
}
