//! The change feeds of the SQL stores: local writes are announced at once, and one
//! background listener per store announces other processes' writes.

use crate::error::Result;

/// Where a store's change notices go: every notice to `all`, and those that may be
/// interrupt requests to `interrupts` too (so an agent waiting for interrupt requests
/// does not wake for every commit).
#[derive(Debug, Clone)]
pub(crate) struct Feeds {
    all: tokio::sync::broadcast::Sender<crate::store::StoreChange>,
    interrupts: tokio::sync::broadcast::Sender<crate::store::StoreChange>,
}

impl Feeds {
    pub(crate) fn new() -> Self {
        Self {
            all: tokio::sync::broadcast::channel(1024).0,
            interrupts: tokio::sync::broadcast::channel(64).0,
        }
    }

    /// Announces a change.
    pub(crate) fn send(&self, session: Option<&str>, maybe_interrupt: bool) {
        let change = || crate::store::StoreChange {
            session: session.map(str::to_owned),
            maybe_interrupt,
        };
        if self.all.receiver_count() > 0 {
            let _ = self.all.send(change());
        }
        if maybe_interrupt && self.interrupts.receiver_count() > 0 {
            let _ = self.interrupts.send(change());
        }
    }

    /// Whether anyone still listens.
    pub(crate) fn listened(&self) -> bool {
        self.all.receiver_count() + self.interrupts.receiver_count() > 0
    }
}

/// The change feeds of a SQL store: local writes are announced at once, and one
/// background listener per store (started by the first subscriber, ended when the last
/// one is gone) announces other processes' writes.
#[derive(Debug)]
pub(crate) struct ChangeHub {
    feeds: Feeds,
    listener: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl ChangeHub {
    pub(crate) fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            feeds: Feeds::new(),
            listener: tokio::sync::Mutex::new(None),
        })
    }

    /// Announces a change to `session` made through this store handle.
    pub(crate) fn notify(&self, session: Option<&str>, maybe_interrupt: bool) {
        self.feeds.send(session, maybe_interrupt);
    }

    /// Subscribes to every change (or, with `interrupts_only`, to those that may be
    /// interrupt requests), starting the background listener with `start` when none
    /// runs. `start` gets the feeds and returns the listener's task, or fails.
    pub(crate) async fn subscribe<F, Fut>(
        &self,
        interrupts_only: bool,
        start: F,
    ) -> Result<crate::store::ChangeFeed>
    where
        F: FnOnce(Feeds) -> Fut,
        Fut: std::future::Future<Output = Result<Option<tokio::task::JoinHandle<()>>>>,
    {
        let rx = if interrupts_only {
            self.feeds.interrupts.subscribe()
        } else {
            self.feeds.all.subscribe()
        };
        let mut listener = self.listener.lock().await;
        if listener
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            *listener = start(self.feeds.clone()).await?;
        }
        Ok(rx)
    }
}

impl Drop for ChangeHub {
    fn drop(&mut self) {
        if let Some(task) = self.listener.get_mut().take() {
            task.abort();
        }
    }
}
