//! The dispatcher: routes new notices to destinations, claims due deliveries and makes
//! their attempts, on every instance (the store's leases keep instances apart).

use std::sync::Arc;

use chrono::Utc;
use reins_memory::{AttemptOutcome, Delivery, MemoryStore, Notice};

use super::{Attempt, Channels, DeliveryError, NotifyOptions};

/// Where destinations other than the registered channels come from (webhook
/// subscribers, A2A push configurations): they name their destinations with a prefix
/// of their own.
#[async_trait::async_trait]
pub(crate) trait Source: Send + Sync + 'static {
    /// The destinations of this source that want `notice`.
    async fn route(&self, notice: &Notice) -> reins_memory::Result<Vec<String>>;
    /// Delivers to `destination` if it is this source's; `None` when it is not.
    async fn deliver(
        &self,
        destination: &str,
        notice: &Notice,
        attempt: &Attempt,
    ) -> Option<Result<(), DeliveryError>>;
}

/// Routes and delivers notices; see the [module docs](super).
#[derive(Clone)]
pub(crate) struct Dispatcher {
    pub(crate) store: Arc<dyn MemoryStore>,
    pub(crate) channels: Channels,
    pub(crate) sources: Arc<Vec<Arc<dyn Source>>>,
    pub(crate) options: NotifyOptions,
    /// This instance's lease owner name.
    pub(crate) owner: String,
}

/// Stops the dispatcher's task when the last handle is dropped.
#[derive(Debug)]
pub(crate) struct DispatcherTask(tokio::task::JoinHandle<()>);

impl Drop for DispatcherTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Dispatcher {
    /// Runs the dispatcher on the current runtime until the returned handle is
    /// dropped; `None` outside a runtime.
    pub(crate) fn spawn(self) -> Option<DispatcherTask> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        Some(DispatcherTask(rt.spawn(self.run())))
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
    pub(crate) async fn tick(&self) -> reins_memory::Result<usize> {
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
            "no channel named `{}` is registered on this server",
            d.destination
        )))
    }
}
