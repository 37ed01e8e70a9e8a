//! Notifications for reins agents, in any process: telling people and systems that
//! something happened (a requirement waiting, decided, expired or escalated; a run
//! completed or failed; a grant created or revoked), through [`Channel`]s and webhook
//! subscribers.
//!
//! Every notice is written to the store's outbox in the same transaction as the change
//! it reports (see `reins_memory::notice`), once the outbox is on. A [`Dispatcher`]
//! turns it on for its store and, in whatever process runs it — a program that runs
//! agents itself, a Restate service, reins-server (which runs one per instance) —
//! routes each new notice to the channels that [want](Channel::wants) it and to the
//! webhook subscribers whose filters match, then delivers it: each delivery is claimed
//! with a lease (two processes never make the same attempt), retried with exponential
//! backoff and jitter on a retryable error, and dead after
//! [`NotifyOptions::max_attempts`] attempts or a permanent error. Every attempt is
//! recorded in the store. Delivery is at least once; a notice keeps its [`Notice::id`]
//! on every attempt so a receiver can drop repeats.
//!
//! Webhooks ([`webhook`]) are signed in the Standard Webhooks form; subscribers are
//! stored, so every process that dispatches for the store sees the same ones.
//!
//! How long a call may wait ([`waiting`]): per tool, an escalation to the next group
//! of approvers and an expiry (rejected, or left waiting), applied by a
//! [`Sweep`](waiting::Sweep) over any session port, in any process.
//!
//! ```
//! use std::sync::Arc;
//!
//! use async_trait::async_trait;
//! use reins_memory::{InMemoryStore, MemoryStore, Notice, NoticeKind};
//! use reins_notify::{Attempt, Channel, DeliveryError, Dispatcher};
//!
//! /// Counts the requirements that start waiting.
//! struct Counter(std::sync::atomic::AtomicUsize);
//!
//! #[async_trait]
//! impl Channel for Counter {
//!     fn name(&self) -> &str {
//!         "counter"
//!     }
//!     fn wants(&self, notice: &Notice) -> bool {
//!         notice.kind == NoticeKind::RequirementWaiting
//!     }
//!     async fn deliver(&self, _notice: &Notice, _attempt: &Attempt) -> Result<(), DeliveryError> {
//!         self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let store: Arc<dyn MemoryStore> = Arc::new(InMemoryStore::new());
//! let dispatcher = Dispatcher::new(store.clone())
//!     .channel(Counter(Default::default()))
//!     .webhooks();
//! assert!(store.records_notices());
//! // Runs until the handle is dropped; agents on `store` write the notices.
//! let _running = dispatcher.spawn().expect("inside a runtime");
//! # }
//! ```

mod dispatch;
mod terminal;
pub mod waiting;
pub mod webhook;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
pub use reins_memory::{Notice, NoticeKind};

pub use dispatch::{Dispatcher, Dispatching, Source};
pub use terminal::TerminalChannel;

/// What the crate's calls refuse.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A webhook that could never be delivered to (a bad URL or secret).
    #[error("invalid webhook: {0}")]
    InvalidWebhook(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] reins_memory::Error),
    /// A session could not be read through the session port.
    #[error(transparent)]
    Session(#[from] reins_agent::AgentError),
    /// The rejection of an expired call failed ([`waiting::Sweep`]).
    #[error("the expired call `{requirement}` of session `{session}` could not be rejected: {why}")]
    Expiry {
        /// The session.
        session: String,
        /// The requirement.
        requirement: String,
        /// Why.
        why: String,
    },
}

/// Somewhere notices go: a terminal, an email relay, a chat service.
///
/// The dispatcher calls [`wants`](Channel::wants) once per notice when it routes it; a
/// notice the channel wants becomes a delivery to the destination
/// [`name`](Channel::name), and [`deliver`](Channel::deliver) is called for each attempt
/// until it answers `Ok`, a [`DeliveryError::Permanent`], or the attempts run out.
/// Deliver may be called again for a notice it already delivered (an instance died
/// before recording the success): use [`Notice::id`] to drop repeats where that matters.
#[async_trait]
pub trait Channel: Send + Sync + 'static {
    /// The destination name, unique among a dispatcher's channels (`terminal`,
    /// `email`, `slack`). Stored with each delivery: keep it stable across restarts.
    /// Names starting with `webhook:` and `a2a:` are taken (webhook subscribers, A2A
    /// push configurations).
    fn name(&self) -> &str;

    /// Whether this channel wants `notice`.
    fn wants(&self, notice: &Notice) -> bool;

    /// Delivers one attempt.
    ///
    /// # Errors
    ///
    /// [`DeliveryError::Retryable`] when a later attempt may succeed (a timeout, a 5xx,
    /// a 429), [`DeliveryError::Permanent`] when it never will (a rejected address).
    async fn deliver(&self, notice: &Notice, attempt: &Attempt) -> Result<(), DeliveryError>;
}

#[async_trait]
impl<T: Channel + ?Sized> Channel for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn wants(&self, notice: &Notice) -> bool {
        (**self).wants(notice)
    }
    async fn deliver(&self, notice: &Notice, attempt: &Attempt) -> Result<(), DeliveryError> {
        (**self).deliver(notice, attempt).await
    }
}

/// Which attempt [`Channel::deliver`] is making.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempt {
    /// The delivery's id (`<notice id>/<destination>`).
    pub delivery: String,
    /// The destination (the channel's name).
    pub destination: String,
    /// The attempt's number: 1 on the first.
    pub number: u32,
}

impl Attempt {
    /// The attempt `number` of `delivery` to `destination`.
    pub fn new(delivery: impl Into<String>, destination: impl Into<String>, number: u32) -> Self {
        Self {
            delivery: delivery.into(),
            destination: destination.into(),
            number,
        }
    }
}

/// Why an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// A later attempt may succeed: the delivery is tried again after a backoff.
    #[error("{0} (will retry)")]
    Retryable(String),
    /// No attempt will succeed: the delivery is dead at once.
    #[error("{0} (permanent)")]
    Permanent(String),
}

/// How a [`Dispatcher`] retries and leases ([`Dispatcher::options`]; reins-server's
/// `Server::notify_options`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NotifyOptions {
    /// Attempts before a delivery is dead (default 8).
    pub max_attempts: u32,
    /// The delay before the second attempt; each later one doubles it, up to
    /// `max_backoff`, with up to half of it added at random (default 1 s).
    pub base_backoff: Duration,
    /// The longest delay between attempts (default 10 min).
    pub max_backoff: Duration,
    /// How long a claimed attempt is this instance's alone (default 60 s); an attempt
    /// not recorded by then (the instance died) is claimed again.
    pub lease: Duration,
    /// How often the outbox is checked when no change wakes the dispatcher (default 1 s).
    pub poll_interval: Duration,
    /// How many deliveries one instance attempts at a time (default 16).
    pub batch: usize,
}

impl Default for NotifyOptions {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            base_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(600),
            lease: Duration::from_secs(60),
            poll_interval: Duration::from_secs(1),
            batch: 16,
        }
    }
}

impl NotifyOptions {
    /// Sets [`max_attempts`](NotifyOptions::max_attempts) (at least 1).
    #[must_use]
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// Sets [`base_backoff`](NotifyOptions::base_backoff) and
    /// [`max_backoff`](NotifyOptions::max_backoff).
    #[must_use]
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.base_backoff = base;
        self.max_backoff = max.max(base);
        self
    }

    /// Sets [`lease`](NotifyOptions::lease).
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets [`batch`](NotifyOptions::batch). With 0 this process writes and routes
    /// notices but attempts no delivery (a process that only serves requests; the
    /// others deliver).
    #[must_use]
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n;
        self
    }

    /// Sets [`poll_interval`](NotifyOptions::poll_interval).
    #[must_use]
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// The delay after failed attempt `attempt` (1-based): `base * 2^(attempt-1)`, at
    /// most `max_backoff`, plus up to half of it at random.
    pub fn backoff_after(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(30);
        let d = self
            .base_backoff
            .saturating_mul(1u32 << exp)
            .min(self.max_backoff);
        let jitter = d.mul_f64(rand_unit() / 2.0);
        d + jitter
    }
}

/// A number in [0, 1) from the standard library's randomly seeded hasher (no extra
/// dependency; jitter needs spread, not cryptographic quality).
fn rand_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_bounded_jitter() {
        let o = NotifyOptions::default().backoff(Duration::from_secs(1), Duration::from_secs(5));
        for (attempt, base) in [(1, 1), (2, 2), (3, 4), (4, 5), (20, 5)] {
            let d = o.backoff_after(attempt);
            let base = Duration::from_secs(base);
            assert!(d >= base && d <= base + base / 2, "{attempt}: {d:?}");
        }
    }
}
