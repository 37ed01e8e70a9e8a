//! Notifications: the server runs a [`Dispatcher`] for its store (reins-notify's, the
//! same one any process can run) with the channels registered on it
//! ([`Server::channel`](crate::Server::channel)), the approval channels (email, Slack),
//! its webhook subscribers and its A2A push configurations; and serves the webhook API
//! (`/v1/webhooks`, `/v1/deliveries`). Everything of reins-notify is here under the same
//! names: see its documentation for channels, delivery and retries.
//!
//! ```
//! use async_trait::async_trait;
//! use reins_memory::{Notice, NoticeKind};
//! use reins_server::notify::{Attempt, Channel, DeliveryError};
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
//! ```

pub(crate) mod api;

pub use reins_notify::*;
