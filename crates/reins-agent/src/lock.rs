//! The session's lock in the store: what makes a second run on a session fail with
//! `SessionBusy`, in this process and in others sharing the store.
//!
//! The lock is a lease. The runner renews it at its checkpoints (every step, every
//! streamed chunk, and on a timer while tools run) once a third of the lease has
//! passed, and releases it when the run ends — no background task per run.
//!
//! Where the store can ([`MemoryStore::commit_takes_lock`]) and this process's copy of
//! the session is current as far as it knows, the lock is taken by the run's first
//! commit ([`StoreLock::pending`]): the commit's version check tells whether another
//! worker wrote since this process last looked (a conflict: the run takes the lock the
//! usual way, reloads and starts again). Otherwise taking the lock also reads the
//! session's stored version (one store call, [`StoreLock::acquire`]). Where the store
//! can ([`MemoryStore::commit_releases_lock`]), the release rides in the run's last
//! commit, so a turn's store calls are: the user message with the lock, the reply with
//! the release. `PostCall` hooks then run after the release (another process may
//! already start the next run; this process still refuses one until the call
//! returns).
//!
//! The owner is the agent's, one per process, and the store grants the lock again to
//! the owner that holds it (that is how it is renewed): two runs of one process are
//! kept apart by the session's lock in this process
//! ([`SessionShared::try_claim`](crate::state::SessionShared::try_claim)), held from
//! before this lock is taken until after it is released.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reins_memory::{LockRequest, MemoryStore, SessionLock};

use crate::error::{AgentError, Result};

pub(crate) struct StoreLock {
    store: Arc<dyn MemoryStore>,
    session: String,
    owner: String,
    lease: Duration,
    /// When the lease is next due for renewal (a third of it after it was last taken
    /// or renewed; `None`: never, the lease being too long to say). Kept as the
    /// moment itself, so that the check at every step is one clock read and a
    /// comparison.
    due: Mutex<Option<Instant>>,
    /// The session's stored version when the lock was taken (`None`: no session, or
    /// taken by a commit).
    seen_version: Option<u64>,
    /// Set once the lock may be held: taken, or asked for by a commit whose outcome is
    /// unknown (so that it is released, which is harmless when it was not taken).
    held: AtomicBool,
    /// Set once the lock is released (by a commit carrying the release, or
    /// [`StoreLock::release`]).
    released: AtomicBool,
}

impl StoreLock {
    /// Takes the lock, reading the session's stored version with it, or fails with
    /// `SessionBusy`.
    pub(crate) async fn acquire(
        store: &Arc<dyn MemoryStore>,
        owner: &str,
        lease: Duration,
        session: &str,
    ) -> Result<Self> {
        let mut lock = Self::pending(store, owner, lease, session);
        lock.acquire_now().await?;
        Ok(lock)
    }

    /// A lock not taken yet: the run's first commit takes it
    /// ([`StoreLock::take_in_commit`]), or the run takes it itself
    /// ([`StoreLock::acquire_now`]) when it cannot fold it in.
    pub(crate) fn pending(
        store: &Arc<dyn MemoryStore>,
        owner: &str,
        lease: Duration,
        session: &str,
    ) -> Self {
        Self {
            store: store.clone(),
            session: session.to_owned(),
            owner: owner.to_owned(),
            lease,
            due: Mutex::new(Instant::now().checked_add(lease / 3)),
            seen_version: None,
            held: AtomicBool::new(false),
            released: AtomicBool::new(false),
        }
    }

    /// Takes a pending lock, reading the session's stored version with it, or fails
    /// with `SessionBusy`.
    pub(crate) async fn acquire_now(&mut self) -> Result<()> {
        let at = Instant::now();
        let taken = self
            .store
            .try_lock_session_reading_version(&self.session, &self.owner, self.lease)
            .await?;
        let SessionLock::Acquired { version } = taken else {
            return Err(AgentError::SessionBusy {
                session: self.session.clone(),
            });
        };
        self.seen_version = version;
        self.mark_held(at);
        Ok(())
    }

    /// Whether the lock is held (or may be: see [`StoreLock::taken_by_commit`]).
    pub(crate) fn is_held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    /// What a commit names to take the lock (`None` when it is held already).
    pub(crate) fn take_in_commit(&self) -> Option<LockRequest> {
        (!self.is_held()).then(|| LockRequest {
            owner: self.owner.clone(),
            lease: self.lease,
        })
    }

    /// Records that a commit took the lock at `at` (when it was sent), or may have
    /// (its outcome is unknown): either way the run releases it.
    pub(crate) fn taken_by_commit(&self, at: Instant) {
        self.mark_held(at);
    }

    fn mark_held(&self, at: Instant) {
        self.renewed_at(at);
        self.held.store(true, Ordering::Release);
    }

    /// The session's stored version when the lock was taken (`None`: no session yet, or
    /// the lock is not taken yet).
    pub(crate) fn seen_version(&self) -> Option<u64> {
        self.seen_version
    }

    /// The owner to name in a commit that releases the lock, when the store supports
    /// that ([`MemoryStore::commit_releases_lock`]).
    pub(crate) fn release_in_commit(&self) -> Option<&str> {
        self.store
            .commit_releases_lock()
            .then_some(self.owner.as_str())
    }

    /// Records that a commit released the lock.
    pub(crate) fn released_by_commit(&self) {
        self.released.store(true, Ordering::Release);
    }

    /// How often a long wait (tools running) should renew.
    pub(crate) fn renew_every(&self) -> Duration {
        self.lease / 3
    }

    /// Whether the lease is due for renewal: held, and a third of it has passed.
    pub(crate) fn is_due(&self) -> bool {
        self.is_held()
            && self
                .due
                .lock()
                .map(|due| due.is_some_and(|due| Instant::now() >= due))
                .unwrap_or(true)
    }

    /// Records that the lease was taken or renewed at `at`.
    fn renewed_at(&self, at: Instant) {
        if let Ok(mut due) = self.due.lock() {
            *due = at.checked_add(self.lease / 3);
        }
    }

    /// Renews the lease when a third of it has passed (cheap otherwise; nothing before
    /// the lock is taken).
    pub(crate) async fn renew_if_due(&self) {
        if !self.is_due() {
            return;
        }
        let at = Instant::now();
        match self
            .store
            .try_lock_session(&self.session, &self.owner, self.lease)
            .await
        {
            Ok(true) => self.renewed_at(at),
            Ok(false) => {
                tracing::warn!(session = %self.session, "the session lock was taken over while the run was alive");
            }
            Err(e) => {
                tracing::warn!(session = %self.session, error = %e, "could not renew the session lock");
            }
        }
    }

    /// Releases the lock (unless a commit already did) and waits until the store has
    /// recorded it.
    pub(crate) async fn release(self) {
        if !self.is_held() || self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Err(e) = self.store.unlock_session(&self.session, &self.owner).await {
            tracing::warn!(session = %self.session, error = %e, "could not release the session lock");
        }
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        if *self.released.get_mut() || !*self.held.get_mut() {
            return;
        }
        // The run ended without `release` (its task was aborted): release in the
        // background if a runtime is there; otherwise the lease simply expires.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (store, session, owner) = (
                self.store.clone(),
                std::mem::take(&mut self.session),
                std::mem::take(&mut self.owner),
            );
            handle.spawn(async move {
                let _ = store.unlock_session(&session, &owner).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use reins_memory::InMemoryStore;

    use super::*;

    fn lock(lease: Duration) -> StoreLock {
        let store: Arc<dyn MemoryStore> = Arc::new(InMemoryStore::new());
        StoreLock::pending(&store, "worker", lease, "s1")
    }

    #[test]
    fn a_lease_is_due_once_a_third_of_it_has_passed() {
        let zero = lock(Duration::ZERO);
        assert!(!zero.is_due(), "a lock not held is never due");
        zero.taken_by_commit(Instant::now());
        assert!(zero.is_due(), "a third of nothing has passed at once");

        let minute = lock(Duration::from_secs(60));
        minute.taken_by_commit(Instant::now());
        assert!(!minute.is_due(), "20 s have not passed");
        // Taken 25 s ago (where the clock goes back that far).
        if let Some(then) = Instant::now().checked_sub(Duration::from_secs(25)) {
            minute.taken_by_commit(then);
            assert!(minute.is_due());
        }
    }

    #[test]
    fn a_lease_too_long_to_add_to_the_clock_is_never_due() {
        let forever = lock(Duration::MAX);
        forever.taken_by_commit(Instant::now());
        assert!(!forever.is_due());
    }
}
