//! The dispatcher: routes new notices to destinations, claims due deliveries and makes
//! their attempts, in every process that runs one (the store's leases keep them apart).

use std::sync::Arc;

use chrono::Utc;
use reins_memory::{AttemptOutcome, Delivery, MemoryStore, Notice};

use super::{Attempt, Channel, DeliveryError, NotifyOptions};

/// Where destinations other than the registered channels come from (webhook
/// subscribers, A2A push configurations): stored subscriptions, each a destination
/// named with the source's own prefix (`webhook:<id>`).
#[async_trait::async_trait]
pub trait Source: Send + Sync + 'static {
    /// The destinations of this source that want `notice`.
    ///
    /// # Errors
    /// The store's, when the subscriptions cannot be read (the notice is routed on
    /// the next round).
    async fn route(&self, notice: &Notice) -> reins_memory::Result<Vec<String>>;
    /// Delivers to `destination` if it is this source's; `None` when it is not.
    async fn deliver(
        &self,
        destination: &str,
        notice: &Notice,
        attempt: &Attempt,
    ) -> Option<Result<(), DeliveryError>>;
}

/// Routes and delivers the notices of one store; see the [crate docs](crate).
///
/// Run one in every process that should deliver ([`Dispatcher::spawn`]), or step it
/// yourself ([`Dispatcher::tick`]). Any number of processes may dispatch for one
/// store: each delivery attempt is claimed with a lease.
#[derive(Clone)]
pub struct Dispatcher {
    store: Arc<dyn MemoryStore>,
    channels: Vec<Arc<dyn Channel>>,
    sources: Vec<Arc<dyn Source>>,
    options: NotifyOptions,
    /// This process's lease owner name.
    owner: String,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field(
                "channels",
                &self.channels.iter().map(|c| c.name()).collect::<Vec<_>>(),
            )
            .field("sources", &self.sources.len())
            .field("options", &self.options)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// A running dispatcher ([`Dispatcher::spawn`]): it stops when this is dropped.
#[derive(Debug)]
pub struct Dispatching(tokio::task::JoinHandle<()>);

impl Drop for Dispatching {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Dispatcher {
    /// A dispatcher for `store`, with no channel and no source yet. The store's outbox
    /// records notices from now on (`MemoryStore::record_notices`): every agent on
    /// this store, in this process, writes them with its commits.
    pub fn new(store: Arc<dyn MemoryStore>) -> Self {
        store.record_notices(true);
        Self {
            store,
            channels: Vec::new(),
            sources: Vec::new(),
            options: NotifyOptions::default(),
            owner: format!("reins-notify/{}", uuid::Uuid::new_v4()),
        }
    }

    /// Adds a channel; one with the same [name](Channel::name) is replaced.
    #[must_use]
    pub fn channel(self, channel: impl Channel) -> Self {
        self.channel_arc(Arc::new(channel))
    }

    /// Adds a shared channel; one with the same [name](Channel::name) is replaced.
    #[must_use]
    pub fn channel_arc(mut self, channel: Arc<dyn Channel>) -> Self {
        self.channels.retain(|have| have.name() != channel.name());
        self.channels.push(channel);
        self
    }

    /// Adds a source of destinations (stored subscriptions).
    #[must_use]
    pub fn source(mut self, source: Arc<dyn Source>) -> Self {
        self.sources.push(source);
        self
    }

    /// Delivers to the store's webhook subscribers ([`Webhooks`](crate::webhook::Webhooks)
    /// over this dispatcher's store).
    #[must_use]
    pub fn webhooks(self) -> Self {
        let hooks = Arc::new(crate::webhook::Webhooks::new(self.store.clone()));
        self.source(hooks)
    }

    /// How it retries, leases and batches.
    #[must_use]
    pub fn options(mut self, options: NotifyOptions) -> Self {
        self.options = options;
        self
    }

    /// The name this process claims deliveries under (default `reins-notify/<uuid>`):
    /// unique per process.
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// The store it dispatches for.
    pub fn store(&self) -> &Arc<dyn MemoryStore> {
        &self.store
    }

    /// Runs the dispatcher on the current runtime until the returned handle is
    /// dropped: a round at once, then one on every change the store reports and every
    /// [`NotifyOptions::poll_interval`]. `None` outside a Tokio runtime.
    pub fn spawn(self) -> Option<Dispatching> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        Some(Dispatching(rt.spawn(self.run())))
    }

    async fn run(self) {
        let mut feed = self.store.changes().await.ok();
        loop {
            if let Err(e) = self.tick().await {
                tracing::warn!(error = %e, "the notification dispatcher could not read the outbox");
            }
            let sleep = tokio::time::sleep(self.options.poll_interval);
            match feed.as_mut() {
                Some(f) => {
                    tokio::select! {
                        () = sleep => {}
                        r = f.recv() => {
                            if matches!(r, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                                feed = None;
                            } else {
                                // One round for every change already signalled: a run
                                // commits several times, and each round reads the outbox.
                                while !matches!(
                                    f.try_recv(),
                                    Err(tokio::sync::broadcast::error::TryRecvError::Empty
                                        | tokio::sync::broadcast::error::TryRecvError::Closed)
                                ) {}
                            }
                        }
                    }
                }
                None => sleep.await,
            }
        }
    }

    /// One round: route what is new, then attempt what is due. How many attempts
    /// were made.
    ///
    /// # Errors
    /// The store's, when the outbox cannot be read or claimed from.
    pub async fn tick(&self) -> reins_memory::Result<usize> {
        self.route().await?;
        if self.options.batch == 0 {
            return Ok(0);
        }
        let due = self
            .store
            .claim_deliveries(&self.owner, self.options.batch, self.options.lease)
            .await?;
        let n = due.len();
        futures::future::join_all(due.into_iter().map(|d| self.attempt(d))).await;
        Ok(n)
    }

    async fn route(&self) -> reins_memory::Result<()> {
        loop {
            let notices = self.store.unrouted_notices(64).await?;
            if notices.is_empty() {
                return Ok(());
            }
            for n in &notices {
                let mut to: Vec<String> = self
                    .channels
                    .iter()
                    .filter(|c| c.wants(n))
                    .map(|c| c.name().to_owned())
                    .collect();
                for s in self.sources.iter() {
                    to.extend(s.route(n).await?);
                }
                self.store.route_notice(&n.id, &to).await?;
            }
            if notices.len() < 64 {
                return Ok(());
            }
        }
    }

    async fn attempt(&self, d: Delivery) {
        let attempt = Attempt::new(d.id.clone(), d.destination.clone(), d.attempts);
        let result = self.deliver(&d, &attempt).await;
        let outcome = match result {
            Ok(()) => AttemptOutcome::Delivered,
            Err(DeliveryError::Permanent(error)) => AttemptOutcome::Dead { error },
            Err(DeliveryError::Retryable(error)) if d.attempts >= self.options.max_attempts => {
                AttemptOutcome::Dead {
                    error: format!("{error} (gave up after {} attempts)", d.attempts),
                }
            }
            Err(DeliveryError::Retryable(error)) => {
                let wait = self.options.backoff_after(d.attempts);
                let next_at = Utc::now()
                    + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::seconds(60));
                AttemptOutcome::Retry { next_at, error }
            }
        };
        // The channel's kind (`webhook`, `a2a`, `email`, ...), not the subscriber: the
        // label's values stay bounded however many webhooks or tasks there are.
        let channel = d
            .destination
            .split(':')
            .next()
            .unwrap_or_default()
            .to_owned();
        let result = match &outcome {
            AttemptOutcome::Delivered => "delivered",
            AttemptOutcome::Retry { .. } => "retry",
            AttemptOutcome::Dead { .. } => "dead",
        };
        metrics::counter!(reins_agent::telemetry::metric::NOTICES, "channel" => channel, "result" => result)
            .increment(1);
        match self
            .store
            .record_attempt(&d.id, &self.owner, d.attempts, outcome)
            .await
        {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                delivery = %d.id,
                "a delivery's lease ended before its attempt was recorded; it will be attempted again"
            ),
            Err(e) => {
                tracing::warn!(delivery = %d.id, error = %e, "could not record a delivery attempt")
            }
        }
    }

    async fn deliver(&self, d: &Delivery, attempt: &Attempt) -> Result<(), DeliveryError> {
        if let Some(c) = self.channels.iter().find(|c| c.name() == d.destination) {
            return c.deliver(&d.notice, attempt).await;
        }
        for s in self.sources.iter() {
            if let Some(r) = s.deliver(&d.destination, &d.notice, attempt).await {
                return r;
            }
        }
        Err(DeliveryError::Permanent(format!(
            "no channel named `{}` is registered on this dispatcher",
            d.destination
        )))
    }
}
