//! Following sessions as the store changes ([`Sessions::subscribe`]): a stream of typed
//! [`SessionEvent`]s — a session's stored state moved (with its version, its message
//! count, when it moved and what it waits for), a session was removed, or the
//! subscription could not read the store and the subscriber should read again; and,
//! on a driver whose own processes run the sessions and relay their live events here
//! ([`super::Relayed`]), those live events as they arrive.
//!
//! The stream is the same on every driver, because it is read from the record every
//! driver writes to: the store's change feed ([`MemoryStore::changes`]) wakes it; a
//! change that names its session (in memory, PostgreSQL `LISTEN/NOTIFY`) is read at
//! once, and a change that does not (SQLite learns of other processes' writes by
//! polling), a feed that fell behind or restarted, and a re-check at an interval (the
//! safety net for a slow or missing feed) compare the stored versions of the sessions
//! in scope, so that each session that moved is reported once, with its head read in
//! one call. A subscriber that reads slowly slows the subscription down, never loses
//! a change: the changes it did not take yet are compared, not queued.
//!
//! Nothing is done for a run when nobody subscribes; a subscription stops (its task
//! ends) when its [`SessionEvents`] is dropped.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use chrono::{DateTime, Utc};
use reins_memory::{MemoryStore, RequirementRecord, SessionHead, StoreChange};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc};

use super::LiveEvent;
use crate::error::Result;

#[cfg(doc)]
use super::Sessions;

/// Which sessions a subscription follows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scope {
    /// Every session in the store.
    Every,
    /// One session.
    Session(String),
    /// The sessions whose id starts with this prefix (a tenant's, a user's).
    Prefix(String),
}

impl Scope {
    /// Whether the session `id` is in scope.
    pub fn admits(&self, id: &str) -> bool {
        match self {
            Scope::Every => true,
            Scope::Session(s) => s == id,
            Scope::Prefix(p) => id.starts_with(p.as_str()),
        }
    }
}

/// What a subscription follows ([`Sessions::subscribe`]) and how often it compares
/// the stored versions even when the change feed says nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Watch {
    /// The sessions followed.
    pub scope: Scope,
    /// How often the stored versions are compared regardless of the change feed (a
    /// safety net for a store whose feed is slow or missing).
    pub recheck: Duration,
    /// Whether the live events relayed to the port come too
    /// ([`SessionEvent::Live`]; default yes: where the driver relays them).
    pub live: bool,
}

impl Watch {
    /// The re-check interval unless told otherwise.
    pub const RECHECK: Duration = Duration::from_secs(2);

    /// Every session.
    pub fn every() -> Self {
        Self::of(Scope::Every)
    }

    /// One session.
    pub fn session(id: impl Into<String>) -> Self {
        Self::of(Scope::Session(id.into()))
    }

    /// The sessions whose id starts with `prefix`.
    pub fn prefix(prefix: impl Into<String>) -> Self {
        Self::of(Scope::Prefix(prefix.into()))
    }

    /// The sessions `scope` admits.
    pub fn of(scope: Scope) -> Self {
        Self {
            scope,
            recheck: Self::RECHECK,
            live: true,
        }
    }

    /// Only what the store shows: no [`SessionEvent::Live`] (for a listener that
    /// follows the live events of runs another way).
    #[must_use]
    pub fn stored_only(mut self) -> Self {
        self.live = false;
        self
    }

    /// Compares the stored versions every `every` besides the change feed.
    #[must_use]
    pub fn recheck(mut self, every: Duration) -> Self {
        self.recheck = every;
        self
    }
}

/// A requirement still waiting for a decision, as a [`SessionChange`] names it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OpenRequirement {
    /// The requirement id (the tool use id): what a decision names.
    pub id: String,
    /// Its kind, as stored (`confirmation`, `user_input`, …).
    pub kind: String,
    /// The tool it is about, when it is about a tool call.
    pub tool: Option<String>,
    /// When it was raised.
    pub created_at: DateTime<Utc>,
    /// When it stops accepting decisions, if ever.
    pub expires_at: Option<DateTime<Utc>>,
}

impl OpenRequirement {
    /// The open requirement a stored record is.
    pub fn of(record: &RequirementRecord) -> Self {
        Self {
            id: record.id.clone(),
            kind: record.kind.clone(),
            tool: record
                .payload
                .get("tool_use")
                .and_then(|t| t.get("name"))
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned),
            created_at: record.created_at,
            expires_at: record.expires_at,
        }
    }
}

/// A session's stored state after it changed: what a door needs to update a list or
/// an inbox without reading the session again.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SessionChange {
    /// The session id.
    pub session: String,
    /// Its stored version now.
    pub version: u64,
    /// When it was last committed to.
    pub updated_at: DateTime<Utc>,
    /// How many messages it holds.
    pub message_count: u64,
    /// The requirements waiting for a decision, oldest first (empty: it waits for
    /// nobody).
    pub open_requirements: Vec<OpenRequirement>,
}

impl SessionChange {
    /// The change a session's head shows.
    pub fn of(head: &SessionHead) -> Self {
        Self {
            session: head.id.clone(),
            version: head.version,
            updated_at: head.updated_at,
            message_count: head.message_count,
            open_requirements: head
                .open_requirements
                .iter()
                .filter(|r| r.is_open())
                .map(OpenRequirement::of)
                .collect(),
        }
    }

    /// Whether it waits for a decision.
    pub fn is_waiting(&self) -> bool {
        !self.open_requirements.is_empty()
    }
}

/// What a subscription reports ([`Sessions::subscribe`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SessionEvent {
    /// A session's stored state moved (or a session in scope appeared): here it is.
    Changed(Arc<SessionChange>),
    /// A session that was followed is no longer stored.
    Removed {
        /// Its id.
        session: String,
    },
    /// A live event of a run a driver's own processes execute, as they relayed it
    /// ([`Sessions::relay`]): only from a driver that takes relayed events
    /// ([`super::Relayed`]), in the order relayed; what the step commits follows as
    /// a [`SessionEvent::Changed`].
    Live {
        /// The session whose run sent it.
        session: String,
        /// The event, with the driver's run id and attempt.
        event: Box<LiveEvent>,
    },
    /// The subscription could not read the store (the change it heard of is unknown):
    /// read again what you show. The subscription goes on and compares the stored
    /// versions at its next re-check.
    Behind {
        /// The session concerned, when the change named it (`None`: any in scope).
        session: Option<String>,
        /// What went wrong.
        reason: String,
    },
}

impl SessionEvent {
    /// The session the event is about (`None`: any session in scope).
    pub fn session(&self) -> Option<&str> {
        match self {
            SessionEvent::Changed(c) => Some(&c.session),
            SessionEvent::Removed { session } | SessionEvent::Live { session, .. } => Some(session),
            SessionEvent::Behind { session, .. } => session.as_deref(),
        }
    }

    /// Whether the event may concern session `id`.
    pub fn concerns(&self, id: &str) -> bool {
        self.session().is_none_or(|s| s == id)
    }
}

/// How many events a subscription holds for a subscriber that has not taken them
/// yet; past that the subscription waits (and compares versions when it goes on).
const BUFFER: usize = 64;

/// A subscription ([`Sessions::subscribe`]): a [`futures::Stream`] of
/// [`SessionEvent`]s, in the order the subscription learned of them. Dropping it stops
/// the subscription.
pub struct SessionEvents {
    rx: mpsc::Receiver<SessionEvent>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for SessionEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionEvents")
            .field("buffered", &self.rx.len())
            .field("following", &!self.task.is_finished())
            .finish()
    }
}

impl SessionEvents {
    /// Follows the sessions of `store` that `watch` names (what the provided
    /// [`Sessions::subscribe`] does with the driver's record). Every change committed
    /// after this returns is reported; the stored versions are read first (an error
    /// then is this call's).
    pub async fn follow(store: Arc<dyn MemoryStore>, watch: Watch) -> Result<Self> {
        Self::follow_with(store, watch, None).await
    }

    /// [`SessionEvents::follow`], with the live events `live` carries for the sessions
    /// in scope (every session's, as a driver that takes relayed events hears them).
    pub(crate) async fn follow_with(
        store: Arc<dyn MemoryStore>,
        watch: Watch,
        live: Option<broadcast::Receiver<(String, LiveEvent)>>,
    ) -> Result<Self> {
        // The feed first, then the versions: a commit between the two is both heard
        // and compared, never lost.
        let feed = match store.changes().await {
            Ok(feed) => Some(feed),
            Err(e) => {
                tracing::warn!(error = %e, "no change feed: following sessions by re-checking");
                None
            }
        };
        let (tx, rx) = mpsc::channel(BUFFER);
        let mut follower = Follower {
            store,
            scope: watch.scope,
            seen: HashMap::new(),
            tx,
        };
        follower.seen = follower.stored_versions().await?.into_iter().collect();
        let task = tokio::spawn(follower.run(feed, live, watch.recheck));
        Ok(Self { rx, task })
    }
}

impl futures::Stream for SessionEvents {
    type Item = SessionEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for SessionEvents {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The task behind a subscription: the versions it reported last, per session.
struct Follower {
    store: Arc<dyn MemoryStore>,
    scope: Scope,
    seen: HashMap<String, u64>,
    tx: mpsc::Sender<SessionEvent>,
}

impl Follower {
    async fn run(
        mut self,
        mut feed: Option<reins_memory::ChangeFeed>,
        mut live: Option<broadcast::Receiver<(String, LiveEvent)>>,
        every: Duration,
    ) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            let change = async {
                match feed.as_mut() {
                    Some(f) => f.recv().await,
                    None => std::future::pending().await,
                }
            };
            let relayed = async {
                match live.as_mut() {
                    Some(l) => l.recv().await,
                    None => std::future::pending().await,
                }
            };
            let going = tokio::select! {
                () = self.tx.closed() => false,
                r = relayed => match r {
                    Ok((session, event)) => {
                        !self.scope.admits(&session)
                            || self.send(SessionEvent::Live { session, event: Box::new(event) }).await
                    }
                    Err(RecvError::Lagged(n)) => {
                        let reason = format!("{n} live events were missed");
                        self.send(SessionEvent::Behind { session: None, reason }).await
                    }
                    Err(RecvError::Closed) => {
                        live = None;
                        true
                    }
                },
                r = change => match r {
                    Ok(StoreChange { session: Some(id), .. }) => {
                        if self.scope.admits(&id) {
                            self.report(vec![id]).await
                        } else {
                            true
                        }
                    }
                    Ok(StoreChange { session: None, .. }) | Err(RecvError::Lagged(_)) => {
                        self.compare().await
                    }
                    Err(RecvError::Closed) => {
                        // The feed ended (its listener stopped): listen again, and
                        // compare for what was missed meanwhile.
                        feed = self.store.changes().await.ok();
                        self.compare().await
                    }
                },
                _ = tick.tick() => self.compare().await,
            };
            if !going {
                return;
            }
        }
    }

    /// The stored versions of the sessions in scope.
    async fn stored_versions(&self) -> Result<Vec<(String, u64)>> {
        Ok(match &self.scope {
            Scope::Session(id) => self
                .store
                .session_version(id)
                .await?
                .map(|v| (id.clone(), v))
                .into_iter()
                .collect(),
            scope => self
                .store
                .list_sessions()
                .await?
                .into_iter()
                .filter(|s| scope.admits(&s.id))
                .map(|s| (s.id, s.version))
                .collect(),
        })
    }

    /// Compares the stored versions with the ones reported and reports the sessions
    /// that moved, appeared or went. False when the subscriber is gone.
    async fn compare(&mut self) -> bool {
        let now = match self.stored_versions().await {
            Ok(now) => now,
            Err(e) => return self.behind(None, &e).await,
        };
        let present: HashSet<&str> = now.iter().map(|(id, _)| id.as_str()).collect();
        let gone: Vec<String> = self
            .seen
            .keys()
            .filter(|id| !present.contains(id.as_str()))
            .cloned()
            .collect();
        let moved: Vec<String> = now
            .iter()
            .filter(|(id, v)| self.seen.get(id) != Some(v))
            .map(|(id, _)| id.clone())
            .collect();
        for session in gone {
            self.seen.remove(&session);
            if !self.send(SessionEvent::Removed { session }).await {
                return false;
            }
        }
        moved.is_empty() || self.report(moved).await
    }

    /// Reads the heads of `ids` and reports each whose version is not the one reported
    /// last (and each followed session no longer stored). False when the subscriber is
    /// gone.
    async fn report(&mut self, ids: Vec<String>) -> bool {
        let heads = match self.store.session_heads(&ids).await {
            Ok(heads) => heads,
            Err(e) => {
                let one = match ids.as_slice() {
                    [id] => Some(id.clone()),
                    _ => None,
                };
                return self.behind(one, &e).await;
            }
        };
        let found: HashSet<&str> = heads.iter().map(|h| h.id.as_str()).collect();
        let gone: Vec<String> = ids
            .iter()
            .filter(|id| !found.contains(id.as_str()) && self.seen.contains_key(id.as_str()))
            .cloned()
            .collect();
        for head in &heads {
            if self.seen.get(&head.id) == Some(&head.version) {
                continue;
            }
            self.seen.insert(head.id.clone(), head.version);
            let change = SessionEvent::Changed(Arc::new(SessionChange::of(head)));
            if !self.send(change).await {
                return false;
            }
        }
        for session in gone {
            self.seen.remove(&session);
            if !self.send(SessionEvent::Removed { session }).await {
                return false;
            }
        }
        true
    }

    async fn behind(&self, session: Option<String>, e: &(dyn std::fmt::Display + Sync)) -> bool {
        let reason = e.to_string();
        tracing::warn!(error = %reason, "a session subscription could not read the store");
        self.send(SessionEvent::Behind { session, reason }).await
    }

    async fn send(&self, event: SessionEvent) -> bool {
        self.tx.send(event).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_admit_their_sessions() {
        assert!(Scope::Every.admits("any"));
        assert!(Scope::Session("a/1".into()).admits("a/1"));
        assert!(!Scope::Session("a/1".into()).admits("a/10"));
        assert!(Scope::Prefix("a/".into()).admits("a/10"));
        assert!(!Scope::Prefix("a/".into()).admits("b/1"));
    }

    #[test]
    fn an_event_without_a_session_concerns_every_session() {
        let behind = SessionEvent::Behind {
            session: None,
            reason: "x".into(),
        };
        assert!(behind.concerns("a") && behind.concerns("b"));
        let gone = SessionEvent::Removed {
            session: "a".into(),
        };
        assert!(gone.concerns("a") && !gone.concerns("b"));
    }
}
