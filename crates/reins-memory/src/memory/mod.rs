//! [`InMemoryStore`]: sessions in process memory.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use reins_message::ToolResult;

mod ledger;
mod locks;

use ledger::{claim_in, push_decisions};
use locks::{Lock, held_by_another, release_lock, take_lock};

use crate::commit::Commit;
use crate::error::{Error, Result};
use crate::evidence::{ChainEntry, ChainHead, Link, Seal};
use crate::grant::{Grant, GrantFilter, sort_grants};
use crate::notice::{
    AttemptOutcome, Delivery, DeliveryAttempt, DeliveryFilter, Notice, Subscription,
};
use crate::pending::{PendingFilter, PendingRequirement};
use crate::run_state::RunStateData;
use crate::store::{
    ChangeFeed, Claim, DecisionEntry, LedgerEntry, LedgerState, MemoryStore, SessionHead,
    SessionLock, SessionState, SessionSummary, StoreChange,
};

/// Sessions kept in process memory: for tests and short-lived agents. Cloning gives
/// another handle to the same sessions. Appending costs the same whatever the
/// session's length; a commit that removes or replaces messages copies the session.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use reins_memory::{Commit, InMemoryStore, MemoryStore};
/// use reins_message::Msg;
///
/// let store = InMemoryStore::new();
/// let s = store.open_session("chat-1").await?;
/// let v = store.commit("chat-1", Commit::at(s.version).append(Msg::user("hi"))).await?;
/// assert_eq!(v, 1);
/// assert_eq!(store.load_session("chat-1").await?.messages.len(), 1);
/// # Ok::<(), reins_memory::Error>(()) }).unwrap();
/// ```
#[derive(Debug, Clone, Default)]
pub struct InMemoryStore {
    inner: Arc<Mutex<Inner>>,
    /// Created by the first listener: a broadcast channel allocates its whole buffer
    /// up front, which a store nobody watches should not pay for.
    changes: Arc<std::sync::OnceLock<tokio::sync::broadcast::Sender<StoreChange>>>,
    /// The interrupt requests only (what an agent's listener waits on).
    interrupts: Arc<std::sync::OnceLock<tokio::sync::broadcast::Sender<StoreChange>>>,
    /// Whether the outbox records the notices of changes.
    notices_on: Arc<std::sync::atomic::AtomicBool>,
    /// Whether decisions and ledger outcomes add to the evidence chain.
    evidence_on: Arc<std::sync::atomic::AtomicBool>,
}

/// How many changes a slow listener may fall behind before it sees `Lagged`.
const CHANGE_BUFFER: usize = 1024;

#[derive(Debug, Default)]
struct Inner {
    sessions: BTreeMap<String, Entry>,
    /// Per session, per tool use id: lookups borrow the caller's strings.
    ledger: HashMap<String, HashMap<String, LedgerEntry>>,
    locks: HashMap<String, Lock>,
    decisions: HashMap<String, Vec<DecisionEntry>>,
    grants: BTreeMap<String, Grant>,
    outbox: crate::memory_outbox::MemOutbox,
    /// Per session, its evidence chain.
    chains: HashMap<String, Vec<ChainEntry>>,
}

impl Inner {
    /// Seals `links` after `session`'s chain head (nothing is pushed: see `push_chain`).
    fn seal(&self, session: &str, links: Vec<Link>) -> Result<Vec<ChainEntry>> {
        let mut head = self
            .chains
            .get(session)
            .and_then(|c| c.last())
            .map_or_else(ChainHead::genesis, ChainEntry::head);
        let mut out = Vec::with_capacity(links.len());
        for l in links {
            let e = l.seal(session, &head)?;
            head = e.head();
            out.push(e);
        }
        Ok(out)
    }

    fn push_chain(&mut self, session: &str, entries: Vec<ChainEntry>) {
        if entries.is_empty() {
            return;
        }
        match self.chains.get_mut(session) {
            Some(c) => c.extend(entries),
            None => {
                self.chains.insert(session.to_owned(), entries);
            }
        }
    }
}

#[derive(Debug)]
struct Entry {
    /// The session, except its run state (always `None` here: see `run_state`).
    state: SessionState,
    ids: HashSet<String>,
    /// The run state as last committed, kept typed; JSON is made when it is read.
    run_state: Option<RunStateData>,
}

impl Entry {
    fn new(id: &str) -> Self {
        Self {
            state: SessionState::new(id, Utc::now()),
            ids: HashSet::new(),
            run_state: None,
        }
    }

    /// The session as a reader sees it.
    fn read(&self) -> Result<SessionState> {
        let mut state = self.state.clone();
        state.run_state = self.run_state_value()?;
        Ok(state)
    }

    /// The run state as JSON, as a reader sees it.
    fn run_state_value(&self) -> Result<Option<serde_json::Value>> {
        match &self.run_state {
            None => Ok(None),
            Some(rs) => Ok(Some(rs.to_value().map_err(|e| Error::Encode {
                what: format!("the run state of `{}`", self.state.id),
                detail: e.to_string(),
            })?)),
        }
    }
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn notify(&self, session: &str, interrupt: bool) {
        let change = || StoreChange {
            session: Some(session.to_owned()),
            maybe_interrupt: interrupt,
        };
        if let Some(tx) = self.changes.get().filter(|tx| tx.receiver_count() > 0) {
            let _ = tx.send(change());
        }
        if interrupt {
            if let Some(tx) = self.interrupts.get().filter(|tx| tx.receiver_count() > 0) {
                let _ = tx.send(change());
            }
        }
    }

    /// Wakes listeners (a dispatcher) after an outbox change that is no session's.
    fn notify_outbox(&self) {
        if let Some(tx) = self.changes.get().filter(|tx| tx.receiver_count() > 0) {
            let _ = tx.send(StoreChange {
                session: None,
                maybe_interrupt: false,
            });
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied commit (commits
        // validate before they mutate), so a poisoned lock is safe to reuse.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn apply(entry: &mut Entry, mut commit: Commit, now: DateTime<Utc>) -> Result<u64> {
    let appends_only = commit.remove.is_empty() && commit.replace.is_empty();
    if appends_only
        && commit.add_requirements.is_empty()
        && commit.decide.is_empty()
        && !commit.clear_requirements
    {
        // The common step (messages and maybe the run state): validate, then move
        // the messages in; nothing is copied.
        for (i, m) in commit.append.iter().enumerate() {
            if entry.ids.contains(&m.id) || commit.append[..i].iter().any(|o| o.id == m.id) {
                return Err(Error::DuplicateMessage {
                    session: entry.state.id.clone(),
                    id: m.id.clone(),
                });
            }
        }
        entry.ids.reserve(commit.append.len());
        for m in &commit.append {
            entry.ids.insert(m.id.clone());
        }
        entry.state.messages.append(&mut commit.append);
        if let Some(rs) = commit.run_state.take() {
            entry.run_state = rs;
        }
        entry.state.version += 1;
        entry.state.updated_at = now;
    } else if appends_only {
        // Append-only path: validate, then mutate; no copy of the transcript.
        let mut fresh = HashSet::new();
        for m in &commit.append {
            if entry.ids.contains(&m.id) || !fresh.insert(m.id.as_str()) {
                return Err(Error::DuplicateMessage {
                    session: entry.state.id.clone(),
                    id: m.id.clone(),
                });
            }
        }
        let append = std::mem::take(&mut commit.append);
        let mut light = SessionState {
            messages: Vec::new(),
            requirements: entry.state.requirements.clone(),
            run_state: None,
            ..SessionState::new(entry.state.id.clone(), now)
        };
        let run_state = commit.run_state.take();
        commit.apply_to(&mut light, now)?;
        entry.ids.extend(append.iter().map(|m| m.id.clone()));
        entry.state.messages.extend(append);
        entry.state.requirements = light.requirements;
        if let Some(rs) = run_state {
            entry.run_state = rs;
        }
        entry.state.version += 1;
        entry.state.updated_at = now;
    } else {
        let mut copy = entry.state.clone();
        let run_state = commit.run_state.take();
        commit.apply_to(&mut copy, now)?;
        entry.ids = copy.messages.iter().map(|m| m.id.clone()).collect();
        entry.state = copy;
        if let Some(rs) = run_state {
            entry.run_state = rs;
        }
    }
    Ok(entry.state.version)
}

#[async_trait]
impl MemoryStore for InMemoryStore {
    async fn open_session(&self, id: &str) -> Result<SessionState> {
        let mut inner = self.lock();
        let entry = inner
            .sessions
            .entry(id.to_owned())
            .or_insert_with(|| Entry::new(id));
        entry.read()
    }

    async fn load_session(&self, id: &str) -> Result<SessionState> {
        self.lock()
            .sessions
            .get(id)
            .ok_or_else(|| Error::SessionNotFound { id: id.to_owned() })?
            .read()
    }

    async fn commit(&self, id: &str, mut commit: Commit) -> Result<u64> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let entry = inner
            .sessions
            .get_mut(id)
            .ok_or_else(|| Error::SessionNotFound { id: id.to_owned() })?;
        if entry.state.version != commit.expected_version {
            return Err(Error::Conflict {
                session: id.to_owned(),
                expected: commit.expected_version,
                actual: entry.state.version,
            });
        }
        let release = commit.release_lock.take();
        let acquire = commit.acquire_lock.take();
        let notices = if self.records_notices() {
            std::mem::take(&mut commit.notices)
        } else {
            Vec::new()
        };
        let now = Utc::now();
        if let Some(req) = &acquire {
            if held_by_another(&inner.locks, id, &req.owner, now) {
                return Err(Error::SessionLocked {
                    session: id.to_owned(),
                });
            }
        }
        // The lock taken, then released (a commit doing both leaves it free).
        let lock_ops = |locks: &mut HashMap<String, Lock>| {
            if let Some(req) = &acquire {
                take_lock(locks, id, &req.owner, req.lease);
            }
            release_lock(locks, id, release.as_deref());
        };
        if commit.is_empty() {
            let version = entry.state.version;
            lock_ops(&mut inner.locks);
            inner.outbox.append(notices);
            return Ok(version);
        }
        let decisions = std::mem::take(&mut commit.decisions);
        // Sealed before anything changes, so that a failure leaves all as it was.
        let chain = if self.records_evidence() && !decisions.is_empty() {
            let links = decisions.iter().map(|d| Link::decision(d, now)).collect();
            inner.seal(id, links)?
        } else {
            Vec::new()
        };
        let entry = inner
            .sessions
            .get_mut(id)
            .ok_or_else(|| Error::SessionNotFound { id: id.to_owned() })?;
        let version = apply(entry, commit, now)?;
        push_decisions(&mut inner.decisions, id, decisions, now);
        inner.push_chain(id, chain);
        lock_ops(&mut inner.locks);
        inner.outbox.append(notices);
        drop(guard);
        self.notify(id, false);
        Ok(version)
    }

    async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
        Ok(self
            .lock()
            .sessions
            .values()
            .map(|e| SessionSummary {
                id: e.state.id.clone(),
                version: e.state.version,
                message_count: e.state.messages.len() as u64,
                updated_at: e.state.updated_at,
                has_open_requirements: e.state.open_requirements().next().is_some(),
            })
            .collect())
    }

    async fn pending_requirements(
        &self,
        filter: &PendingFilter,
    ) -> Result<Vec<PendingRequirement>> {
        let inner = self.lock();
        Ok(crate::pending::page_of_heads(
            inner
                .sessions
                .values()
                .map(|e| (e.state.id.as_str(), e.state.requirements.as_slice())),
            filter,
        ))
    }

    async fn list_session_heads(&self) -> Result<Vec<SessionHead>> {
        self.lock()
            .sessions
            .values()
            .map(|e| {
                Ok(SessionHead {
                    id: e.state.id.clone(),
                    version: e.state.version,
                    message_count: e.state.messages.len() as u64,
                    created_at: e.state.created_at,
                    updated_at: e.state.updated_at,
                    run_state: e.run_state_value()?,
                    open_requirements: e.state.open_requirements().cloned().collect(),
                })
            })
            .collect()
    }

    async fn delete_session(&self, id: &str) -> Result<()> {
        let mut inner = self.lock();
        inner.sessions.remove(id);
        inner.ledger.remove(id);
        inner.locks.remove(id);
        inner.decisions.remove(id);
        inner.chains.remove(id);
        Ok(())
    }

    async fn claim(
        &self,
        session: &str,
        tool_use_id: &str,
        fingerprint: &str,
        lease: Duration,
        allow_takeover: bool,
    ) -> Result<Claim> {
        let now = Utc::now();
        let mut guard = self.lock();
        let (claim, attempt) = claim_in(
            &mut guard,
            session,
            tool_use_id,
            fingerprint,
            lease,
            allow_takeover,
            now,
        )?;
        if let (Some(attempt), true) = (attempt, self.records_evidence()) {
            let link = Link::claim(tool_use_id, fingerprint, attempt);
            let chain = guard.seal(session, vec![link])?;
            guard.push_chain(session, chain);
        }
        Ok(claim)
    }

    async fn finish(&self, session: &str, tool_use_id: &str, result: &ToolResult) -> Result<()> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let entry = inner
            .ledger
            .get_mut(session)
            .and_then(|calls| calls.get_mut(tool_use_id))
            .ok_or_else(|| Error::LedgerEntryNotFound {
                session: session.to_owned(),
                tool_use_id: tool_use_id.to_owned(),
            })?;
        if entry.state == LedgerState::Running {
            // Sealed first, so that a failure leaves the call running.
            let chain = if self.records_evidence() {
                let link = Link::finish(session, tool_use_id, result)?;
                inner.seal(session, vec![link])?
            } else {
                Vec::new()
            };
            if let Some(entry) = inner
                .ledger
                .get_mut(session)
                .and_then(|calls| calls.get_mut(tool_use_id))
            {
                entry.state = LedgerState::Finished;
                entry.result = Some(result.clone());
            }
            inner.push_chain(session, chain);
        }
        Ok(())
    }

    async fn ledger_entry(&self, session: &str, tool_use_id: &str) -> Result<Option<LedgerEntry>> {
        Ok(self
            .lock()
            .ledger
            .get(session)
            .and_then(|calls| calls.get(tool_use_id))
            .cloned())
    }

    async fn try_lock_session(&self, session: &str, owner: &str, lease: Duration) -> Result<bool> {
        Ok(take_lock(&mut self.lock().locks, session, owner, lease))
    }

    async fn try_lock_session_reading_version(
        &self,
        session: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<SessionLock> {
        let mut inner = self.lock();
        if !take_lock(&mut inner.locks, session, owner, lease) {
            return Ok(SessionLock::Busy);
        }
        Ok(SessionLock::Acquired {
            version: inner.sessions.get(session).map(|e| e.state.version),
        })
    }

    fn commit_releases_lock(&self) -> bool {
        true
    }

    fn commit_takes_lock(&self) -> bool {
        true
    }

    async fn unlock_session(&self, session: &str, owner: &str) -> Result<()> {
        release_lock(&mut self.lock().locks, session, Some(owner));
        Ok(())
    }

    async fn session_version(&self, id: &str) -> Result<Option<u64>> {
        Ok(self.lock().sessions.get(id).map(|e| e.state.version))
    }

    async fn append_decisions(&self, session: &str, entries: Vec<DecisionEntry>) -> Result<()> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        if !inner.sessions.contains_key(session) {
            return Err(Error::SessionNotFound {
                id: session.to_owned(),
            });
        }
        let now = Utc::now();
        if self.records_evidence() && !entries.is_empty() {
            let links = entries.iter().map(|d| Link::decision(d, now)).collect();
            let chain = inner.seal(session, links)?;
            inner.push_chain(session, chain);
        }
        push_decisions(&mut inner.decisions, session, entries, now);
        Ok(())
    }

    async fn decisions(&self, session: &str) -> Result<Vec<DecisionEntry>> {
        Ok(self
            .lock()
            .decisions
            .get(session)
            .cloned()
            .unwrap_or_default())
    }

    async fn request_interrupt(&self, session: &str) -> Result<bool> {
        let now = Utc::now();
        let flagged = match self.lock().locks.get_mut(session) {
            Some(l) if l.until > now => {
                l.interrupt = true;
                true
            }
            _ => false,
        };
        if flagged {
            self.notify(session, true);
        }
        Ok(flagged)
    }

    async fn interrupt_requests(&self, owner: &str) -> Result<Vec<String>> {
        let mut out: Vec<String> = self
            .lock()
            .locks
            .iter()
            .filter(|(_, l)| l.owner == owner && l.interrupt)
            .map(|(s, _)| s.clone())
            .collect();
        out.sort();
        Ok(out)
    }

    async fn changes(&self) -> Result<ChangeFeed> {
        Ok(self
            .changes
            .get_or_init(|| tokio::sync::broadcast::channel(CHANGE_BUFFER).0)
            .subscribe())
    }

    async fn interrupt_notices(&self) -> Result<ChangeFeed> {
        Ok(self
            .interrupts
            .get_or_init(|| tokio::sync::broadcast::channel(64).0)
            .subscribe())
    }

    async fn create_grant(&self, grant: &Grant) -> Result<()> {
        grant
            .validate()
            .map_err(|detail| Error::InvalidGrant { detail })?;
        let mut inner = self.lock();
        if inner.grants.contains_key(&grant.id) {
            return Err(Error::DuplicateGrant {
                id: grant.id.clone(),
            });
        }
        inner.grants.insert(grant.id.clone(), grant.clone());
        if self.records_notices() {
            inner.outbox.append(vec![Notice::grant_created(grant)]);
        }
        Ok(())
    }

    async fn list_grants(&self, filter: &GrantFilter) -> Result<Vec<Grant>> {
        let mut out: Vec<Grant> = self
            .lock()
            .grants
            .values()
            .filter(|g| filter.admits(g))
            .cloned()
            .collect();
        sort_grants(&mut out);
        Ok(out)
    }

    async fn grant(&self, id: &str) -> Result<Option<Grant>> {
        Ok(self.lock().grants.get(id).cloned())
    }

    async fn revoke_grant(&self, id: &str, by: Option<&str>, at: DateTime<Utc>) -> Result<Grant> {
        let mut inner = self.lock();
        let g = inner
            .grants
            .get_mut(id)
            .ok_or_else(|| Error::GrantNotFound { id: id.to_owned() })?;
        if let Some(when) = g.revoked_at {
            return Err(Error::GrantAlreadyRevoked {
                id: id.to_owned(),
                at: when,
                by: g.revoked_by.clone(),
            });
        }
        g.revoked_at = Some(at);
        g.revoked_by = by.map(str::to_owned);
        let g = g.clone();
        if self.records_notices() {
            inner.outbox.append(vec![Notice::grant_revoked(&g)]);
        }
        Ok(g)
    }

    fn record_notices(&self, on: bool) {
        self.notices_on
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    fn records_notices(&self) -> bool {
        self.notices_on.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn record_evidence(&self, on: bool) {
        self.evidence_on
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    fn records_evidence(&self) -> bool {
        self.evidence_on.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn evidence(&self, session: &str) -> Result<Vec<ChainEntry>> {
        Ok(self.lock().chains.get(session).cloned().unwrap_or_default())
    }

    async fn append_evidence(&self, session: &str, seal: Seal) -> Result<ChainEntry> {
        let mut inner = self.lock();
        if !inner.sessions.contains_key(session) {
            return Err(Error::SessionNotFound {
                id: session.to_owned(),
            });
        }
        let head = inner
            .chains
            .get(session)
            .and_then(|c| c.last())
            .map_or_else(ChainHead::genesis, ChainEntry::head);
        let entry = Link::sealed(session, &head, seal)?;
        inner.push_chain(session, vec![entry.clone()]);
        Ok(entry)
    }

    async fn append_notices(&self, notices: Vec<Notice>) -> Result<()> {
        self.lock().outbox.append(notices);
        self.notify_outbox();
        Ok(())
    }

    async fn unrouted_notices(&self, limit: usize) -> Result<Vec<Notice>> {
        Ok(self.lock().outbox.unrouted(limit))
    }

    async fn route_notice(&self, notice: &str, destinations: &[String]) -> Result<()> {
        self.lock().outbox.route(notice, destinations)
    }

    async fn claim_deliveries(
        &self,
        owner: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<Delivery>> {
        Ok(self.lock().outbox.claim(owner, limit, lease))
    }

    async fn record_attempt(
        &self,
        delivery: &str,
        owner: &str,
        attempt: u32,
        outcome: AttemptOutcome,
    ) -> Result<bool> {
        Ok(self.lock().outbox.record(delivery, owner, attempt, outcome))
    }

    async fn deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>> {
        Ok(self.lock().outbox.list(filter))
    }

    async fn delivery_attempts(&self, delivery: &str) -> Result<Vec<DeliveryAttempt>> {
        Ok(self.lock().outbox.attempts(delivery))
    }

    async fn redeliver(&self, delivery: &str) -> Result<Delivery> {
        let d = self.lock().outbox.redeliver(delivery)?;
        self.notify_outbox();
        Ok(d)
    }

    async fn put_subscription(&self, subscription: &Subscription) -> Result<()> {
        self.lock()
            .outbox
            .subscriptions
            .insert(subscription.id.clone(), subscription.clone());
        Ok(())
    }

    async fn subscriptions(&self, kind: &str) -> Result<Vec<Subscription>> {
        let mut out: Vec<Subscription> = self
            .lock()
            .outbox
            .subscriptions
            .values()
            .filter(|s| s.kind == kind)
            .cloned()
            .collect();
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        Ok(out)
    }

    async fn delete_subscription(&self, id: &str) -> Result<bool> {
        Ok(self.lock().outbox.subscriptions.remove(id).is_some())
    }
}
