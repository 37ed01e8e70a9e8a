//! [`Relayed`]: the port over a driver whose own processes run the sessions (a Restate
//! deployment behind reins-restate's `RestateClient`), beside the agent's
//! configuration and the store the driver writes.
//!
//! Inputs go to the driver ([`SessionBackend::submit`]); the run an input starts is
//! followed here, for every door the same way: the live events the driver's processes
//! relay for the steps in progress ([`Sessions::relay`]: text deltas, tool calls
//! starting and finishing) go out as they arrive, and the store — the record the
//! driver commits each step to — says when the session has moved past the input and
//! no longer runs (paused or ended). The run's [`RunOutput`] is then read back from
//! the store (the last call's usage, iterations and structured answer are stored with
//! its run state), and its end announced as a local run's is (`paused`, `completed`,
//! `cancelled`). Dropping the handle, or interrupting it, interrupts the run in the
//! driver.
//!
//! Live events precede the commit that ends their step (the driver delivers them
//! first): when the store shows the run settled, every live event of its steps is
//! already here, and those not yet passed on go out before the end. When none arrive
//! (a driver that relays nowhere, or to another process), the handle's events are
//! made from the messages the run stores, step by step: an assistant message's text
//! as one `text_delta` and its tool calls as `tool_call_ready`, a tool result as
//! `tool_execution_finished` — published on the session's live channel like relayed
//! ones ([`LiveEvent::from_store`]), so that every listener of the session hears them.
//! Relay is best-effort (a driver waits a bounded time for its events to be
//! delivered): once a run's events were made from the store, relayed events that
//! arrive late are dropped for the rest of that run, so that no step is told twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use reins_memory::MemoryStore;
use tokio::sync::broadcast;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::{AgentCard, ForkRequest, Interrupted, Sessions};
use crate::agent::Agent;
use crate::approval::{Grant, NewGrant};
use crate::backend::{SessionBackend, Submission};
use crate::error::{AgentError, Result};
use crate::fork::{ForkOrigin, ReplayReport, ReplayTurn};
use crate::handle::RunHandle;
use crate::output::{RunEvent, RunOutput, RunStatus};
use crate::view::Actor;

/// How many live events of one session wait for a slow listener before the oldest
/// are dropped (it is told how many it missed).
const LIVE_BUFFER: usize = 1024;

/// How often a followed run's session is read again besides every change notice of
/// the store (a safety net for stores whose change feed is slow or missing).
const REREAD: Duration = Duration::from_millis(250);

/// A live run event a driver's process relayed, with the driver's run id and the
/// attempt of the step that sent it (a step executed again after a crash sends its
/// events again under a new attempt).
#[derive(Debug, Clone, PartialEq)]
pub struct LiveEvent {
    /// The event (one of a step in progress: `reasoning_started`, `text_delta`, …).
    pub event: RunEvent,
    /// The driver's id of the run (Restate: the turn's invocation id).
    pub run_id: Option<String>,
    /// The step's attempt.
    pub attempt: Option<String>,
    /// Made by the port from a message the run stored, not relayed by the driver (no
    /// live event told of that step; see the [module docs](self)).
    pub from_store: bool,
}

impl LiveEvent {
    /// An event a driver relayed.
    pub fn relayed(event: RunEvent, run_id: Option<String>, attempt: Option<String>) -> Self {
        Self {
            event,
            run_id,
            attempt,
            from_store: false,
        }
    }
}

impl LiveEvent {
    /// Whether a driver may relay `event`: one of a step in progress, never one that
    /// says what the store holds (the store says that).
    pub fn is_live(event: &RunEvent) -> bool {
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
}

/// The live events of the sessions followed here, one channel per session, kept while
/// anyone listens; and every session's, for subscriptions ([`Sessions::subscribe`]).
struct LiveHub {
    channels: Mutex<HashMap<String, broadcast::Sender<LiveEvent>>>,
    every: broadcast::Sender<(String, LiveEvent)>,
}

impl Default for LiveHub {
    fn default() -> Self {
        Self {
            channels: Mutex::default(),
            every: broadcast::channel(LIVE_BUFFER).0,
        }
    }
}

impl LiveHub {
    fn subscribe(&self, session: &str) -> broadcast::Receiver<LiveEvent> {
        let mut map = match self.channels.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        map.retain(|_, tx| tx.receiver_count() > 0);
        map.entry(session.to_owned())
            .or_insert_with(|| broadcast::channel(LIVE_BUFFER).0)
            .subscribe()
    }

    fn publish(&self, session: &str, events: Vec<LiveEvent>) -> usize {
        let map = match self.channels.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let n = events.len();
        // Subscriptions first (a copy only while someone subscribes).
        if self.every.receiver_count() > 0 {
            for e in &events {
                let _ = self.every.send((session.to_owned(), e.clone()));
            }
        }
        if let Some(tx) = map.get(session) {
            for e in events {
                // No listener: nothing to pass it to.
                let _ = tx.send(e);
            }
        }
        n
    }
}

/// The port over a driver that runs the sessions in its own processes (see the
/// [module docs](self)). `agent` is configuration only — its name and tools for the
/// card, its eligibility policy for grants, its store: the one the driver commits to —
/// and never runs a session.
#[derive(Clone)]
pub struct Relayed {
    agent: Agent,
    backend: Arc<dyn SessionBackend>,
    live: Arc<LiveHub>,
    reread: Duration,
}

impl std::fmt::Debug for Relayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relayed")
            .field("agent", &self.agent.name())
            .field("reread", &self.reread)
            .finish_non_exhaustive()
    }
}

impl Relayed {
    /// The port over `backend`, with `agent`'s configuration and store (the store the
    /// backend's processes commit to).
    pub fn new(agent: Agent, backend: Arc<dyn SessionBackend>) -> Self {
        Self {
            agent,
            backend,
            live: Arc::default(),
            reread: REREAD,
        }
    }

    /// How often a followed run's session is read again besides the store's change
    /// notices (default 250 ms).
    #[must_use]
    pub fn reread(mut self, every: Duration) -> Self {
        self.reread = every;
        self
    }
}

#[async_trait]
impl Sessions for Relayed {
    fn card(&self) -> &AgentCard {
        self.agent.card()
    }

    fn record(&self) -> &Arc<dyn MemoryStore> {
        self.agent.store()
    }

    /// The front's agent's verifying keys: the backend's processes sign the receipts,
    /// with a key from their configuration; the front publishes the public keys it was
    /// given ([`AgentBuilder::evidence_signer`](crate::AgentBuilder::evidence_signer)
    /// with the same configuration).
    fn evidence_keys(&self) -> reins_evidence::Keyring {
        self.agent.evidence_keys()
    }

    async fn start(&self, session: &str, submission: Submission) -> Result<RunHandle> {
        // Where the store stood before the input went in: the run is over once the
        // session has moved past it and no longer runs.
        let (after, stored) = match self.agent.store().load_session(session).await {
            Ok(s) => (s.version, s.messages.len()),
            Err(reins_memory::Error::SessionNotFound { .. }) => (0, 0),
            Err(e) => return Err(e.into()),
        };
        // Subscribed before the input goes in: the run's events from its first one.
        let live = self.live.subscribe(session);
        let changes = self.agent.store().changes().await.ok();
        // A retried request the backend answers with the first answer: the run to
        // follow is the one the first input started.
        let after = match self.backend.submit_validated(session, submission).await? {
            Some(validated) => validated.min(after),
            None => after,
        };
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let follow = Follow {
            hub: self.live.clone(),
            store: self.agent.store().clone(),
            backend: self.backend.clone(),
            session: session.to_owned(),
            after,
            stored,
            live_seen: false,
            told_from_store: false,
            live,
            live_open: true,
            changes,
            reread: self.reread,
            cancel: cancel.clone(),
            events: tx,
        };
        let task = tokio::spawn(follow.run());
        Ok(RunHandle::new(session.to_owned(), cancel, rx, task))
    }

    async fn interrupt(&self, session: &str) -> Result<Interrupted> {
        super::stored(self.agent.store().as_ref(), session).await?;
        Ok(if self.backend.interrupt(session).await? {
            Interrupted::Delivered
        } else {
            Interrupted::Idle
        })
    }

    async fn replay(
        &self,
        session: &str,
        turns: Option<UnboundedSender<ReplayTurn>>,
    ) -> Result<ReplayReport> {
        super::stored(self.agent.store().as_ref(), session).await?;
        self.backend.replay(session, turns).await
    }

    async fn fork(&self, session: &str, request: ForkRequest) -> Result<ForkOrigin> {
        // A fork is written to the store the driver shares; its runs go to the driver.
        Sessions::fork(&self.agent, session, request).await
    }

    async fn create_grant(&self, grant: NewGrant, actor: &Actor) -> Result<Grant> {
        self.agent.create_grant_as(grant, actor).await
    }

    async fn revoke_grant(&self, id: &str, by: &Actor) -> Result<Grant> {
        self.agent.revoke_grant(id, Some(&by.principal)).await
    }

    fn runs_here(&self) -> bool {
        false
    }

    fn relay(&self, session: &str, events: Vec<LiveEvent>) -> Result<usize> {
        if let Some((i, e)) = events
            .iter()
            .enumerate()
            .find(|(_, e)| !LiveEvent::is_live(&e.event))
        {
            return Err(AgentError::InvalidInput(format!(
                "event {i} (`{}`) is not a live event: the store says what was committed",
                e.event.name()
            )));
        }
        Ok(self.live.publish(session, events))
    }

    fn live(&self, session: &str) -> Option<broadcast::Receiver<LiveEvent>> {
        Some(self.live.subscribe(session))
    }

    /// The provided subscription to the store, with the live events relayed here for
    /// the sessions in scope ([`SessionEvent::Live`](super::SessionEvent::Live)).
    async fn subscribe(&self, watch: super::Watch) -> Result<super::SessionEvents> {
        let live = watch.live.then(|| self.live.every.subscribe());
        super::SessionEvents::follow_with(Arc::clone(self.record()), watch, live).await
    }
}

/// Follows one run of a relayed driver to its end (see the [module docs](self)).
struct Follow {
    hub: Arc<LiveHub>,
    store: Arc<dyn MemoryStore>,
    backend: Arc<dyn SessionBackend>,
    session: String,
    after: u64,
    /// How many of the session's messages were stored before the input (or made
    /// into events since).
    stored: usize,
    /// Whether any live event arrived for this run (then the stored messages are not
    /// made into events).
    live_seen: bool,
    /// Events of this run were made from the store: relayed ones are dropped from
    /// then on (late ones would tell those steps again).
    told_from_store: bool,
    live: broadcast::Receiver<LiveEvent>,
    /// The live channel has not closed.
    live_open: bool,
    changes: Option<reins_memory::ChangeFeed>,
    reread: Duration,
    cancel: CancellationToken,
    events: UnboundedSender<RunEvent>,
}

impl Follow {
    async fn run(mut self) -> Result<RunOutput> {
        let mut interrupted = false;
        let mut started = false;
        loop {
            let state = match self.store.load_session(&self.session).await {
                Ok(s) => Some(s),
                // Not stored yet (the driver creates it as it takes the input).
                Err(reins_memory::Error::SessionNotFound { .. }) => None,
                Err(e) => return Err(e.into()),
            };
            if let Some(state) = state {
                if let Some(out) = self.read(state, &mut started).await? {
                    return Ok(out);
                }
            }
            self.wait(&mut interrupted).await;
        }
    }

    /// One read of the stored session: the events it tells of, and the output once
    /// the run is over.
    async fn read(
        &mut self,
        state: reins_memory::SessionState,
        started: &mut bool,
    ) -> Result<Option<RunOutput>> {
        {
            if !*started && state.version > self.after {
                // The input is stored: the run began (as a local run says it, once
                // its first commit is stored).
                *started = true;
                let _ = self.events.send(RunEvent::RunStarted {
                    session_id: self.session.clone(),
                });
            }
            // Every live event of the steps this read's commits ended is here: those
            // not passed on yet go first.
            self.drain();
            self.tell_stored(&state.messages);
            let out = settled(&self.store, state, self.after).await?;
            if let Some(out) = &out {
                self.announce_end(out);
            }
            Ok(out)
        }
    }

    /// Passes on live events as they come, until the store may have moved; interrupts
    /// the run in the driver when the caller asked.
    async fn wait(&mut self, interrupted: &mut bool) {
        {
            // Live events as they come, until the store may have moved.
            let until_change = async {
                match self.changes.as_mut() {
                    Some(feed) => loop {
                        match feed.recv().await {
                            Ok(c) if c.session.as_deref().is_none_or(|s| s == self.session) => {
                                return;
                            }
                            Ok(_) => {}
                            Err(broadcast::error::RecvError::Lagged(_)) => return,
                            Err(broadcast::error::RecvError::Closed) => {
                                std::future::pending::<()>().await;
                            }
                        }
                    },
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(until_change);
            let reread = tokio::time::sleep(self.reread);
            tokio::pin!(reread);
            loop {
                tokio::select! {
                    biased;
                    () = self.cancel.cancelled(), if !*interrupted => {
                        // The caller interrupted (or dropped) the run: the driver stops
                        // it; the end is read from the store as for any run.
                        *interrupted = true;
                        if let Err(e) = self.backend.interrupt(&self.session).await {
                            tracing::warn!(session = %self.session, error = %e, "could not interrupt a relayed run");
                        }
                    }
                    r = self.live.recv(), if self.live_open => match r {
                        Ok(e) => pass_on(&mut self.live_seen, self.told_from_store, &self.events, e),
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            tracing::debug!(session = %self.session, missed = n, "a followed run fell behind its live events");
                        }
                        Err(broadcast::error::RecvError::Closed) => self.live_open = false,
                    },
                    () = &mut until_change => return,
                    () = &mut reread => return,
                }
            }
        }
    }

    /// Passes on the live events already here, without waiting for more.
    fn drain(&mut self) {
        use broadcast::error::TryRecvError;
        loop {
            match self.live.try_recv() {
                Ok(e) => pass_on(&mut self.live_seen, self.told_from_store, &self.events, e),
                Err(TryRecvError::Lagged(_)) => {}
                Err(TryRecvError::Empty | TryRecvError::Closed) => return,
            }
        }
    }

    /// The events of the messages stored since the last read, when no live event
    /// told of them (see the [module docs](self)).
    fn tell_stored(&mut self, messages: &[reins_message::Msg]) {
        // A transcript that got shorter (a repair dropped a partial turn): start over
        // from where it stands.
        let from = self.stored.min(messages.len());
        self.stored = messages.len();
        if self.live_seen {
            return;
        }
        let mut made = Vec::new();
        for m in &messages[from..] {
            match m.role {
                reins_message::Role::Assistant => {
                    let text = m.text();
                    if !text.is_empty() {
                        made.push(RunEvent::TextDelta { text });
                    }
                    for tool_use in m.tool_uses() {
                        made.push(RunEvent::ToolCallReady {
                            tool_use: tool_use.clone(),
                        });
                    }
                }
                reins_message::Role::Tool => {
                    for result in m.tool_results_iter() {
                        made.push(RunEvent::ToolExecutionFinished {
                            result: result.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
        if made.is_empty() {
            return;
        }
        self.told_from_store = true;
        let made = made
            .into_iter()
            .map(|event| LiveEvent {
                event,
                run_id: None,
                attempt: None,
                from_store: true,
            })
            .collect();
        // Published for every listener of the session; this run's own receiver gets
        // them back, in order, and passes them on.
        self.hub.publish(&self.session, made);
        self.drain();
    }

    /// The events a local run ends with.
    fn announce_end(&self, out: &RunOutput) {
        let ev = match out.status {
            RunStatus::Paused => RunEvent::Paused {
                requirements: out.requirements.clone(),
            },
            RunStatus::Cancelled => RunEvent::Cancelled,
            status => RunEvent::Completed {
                message: out.message.clone(),
                status,
            },
        };
        let _ = self.events.send(ev);
    }
}

/// Passes one event of a followed session's live channel on to the run's handle
/// (`Follow`'s fields, apart: the loop that calls it holds others).
fn pass_on(
    live_seen: &mut bool,
    told_from_store: bool,
    events: &UnboundedSender<RunEvent>,
    e: LiveEvent,
) {
    if !e.from_store {
        if told_from_store {
            tracing::debug!(
                event = e.event.name(),
                "a relayed event came after the store told its step: dropped"
            );
            return;
        }
        *live_seen = true;
    }
    let _ = events.send(e.event);
}

/// The output of the run recorded in `state`, when the session has moved past version
/// `after` and its run no longer runs (paused or ended).
async fn settled(
    store: &Arc<dyn MemoryStore>,
    state: reins_memory::SessionState,
    after: u64,
) -> Result<Option<RunOutput>> {
    if state.version <= after {
        return Ok(None);
    }
    crate::follow::stored_output(store, state).await
}
