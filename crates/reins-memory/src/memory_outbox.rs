//! The outbox of [`InMemoryStore`](crate::InMemoryStore): notices and deliveries in
//! process memory, under the store's one lock (so a commit and its notices are one
//! step).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::notice::{
    AttemptOutcome, Delivery, DeliveryAttempt, DeliveryFilter, DeliveryState, Notice, Subscription,
};
use crate::store::lease_end;

#[derive(Debug, Default)]
pub(crate) struct MemOutbox {
    /// Notices by write order, with whether they were routed.
    notices: BTreeMap<u64, (Notice, bool)>,
    by_id: HashMap<String, u64>,
    next: u64,
    /// Deliveries by id, with the order they were made in.
    deliveries: BTreeMap<String, (u64, Delivery)>,
    attempts: HashMap<String, Vec<DeliveryAttempt>>,
    pub(crate) subscriptions: BTreeMap<String, Subscription>,
}

impl MemOutbox {
    pub(crate) fn append(&mut self, notices: Vec<Notice>) {
        for n in notices {
            if self.by_id.contains_key(&n.id) {
                continue;
            }
            self.next += 1;
            self.by_id.insert(n.id.clone(), self.next);
            self.notices.insert(self.next, (n, false));
        }
    }

    pub(crate) fn unrouted(&self, limit: usize) -> Vec<Notice> {
        self.notices
            .values()
            .filter(|(_, routed)| !routed)
            .take(limit)
            .map(|(n, _)| n.clone())
            .collect()
    }

    pub(crate) fn route(&mut self, notice: &str, destinations: &[String]) -> Result<()> {
        let Some(seq) = self.by_id.get(notice).copied() else {
            return Err(Error::DeliveryNotFound {
                id: notice.to_owned(),
            });
        };
        let Some((n, routed)) = self.notices.get_mut(&seq) else {
            return Ok(());
        };
        *routed = true;
        let now = Utc::now();
        for dest in destinations {
            let id = Delivery::id_for(&n.id, dest);
            if self.deliveries.contains_key(&id) {
                continue;
            }
            self.next += 1;
            let d = Delivery {
                id: id.clone(),
                notice: n.clone(),
                destination: dest.clone(),
                state: DeliveryState::Pending,
                attempts: 0,
                next_at: now,
                lease_owner: None,
                lease_until: None,
                last_error: None,
                updated_at: now,
            };
            self.deliveries.insert(id, (self.next, d));
        }
        Ok(())
    }

    pub(crate) fn claim(&mut self, owner: &str, limit: usize, lease: Duration) -> Vec<Delivery> {
        let now = Utc::now();
        let mut due: Vec<(DateTime<Utc>, u64, String)> = self
            .deliveries
            .values()
            .filter(|(_, d)| {
                d.state == DeliveryState::Pending
                    && d.next_at <= now
                    && d.lease_until.is_none_or(|t| t <= now)
            })
            .map(|(seq, d)| (d.next_at, *seq, d.id.clone()))
            .collect();
        due.sort();
        due.truncate(limit);
        let mut out = Vec::with_capacity(due.len());
        for (_, _, id) in due {
            if let Some((_, d)) = self.deliveries.get_mut(&id) {
                d.attempts = d.attempts.saturating_add(1);
                d.lease_owner = Some(owner.to_owned());
                d.lease_until = Some(lease_end(now, lease));
                d.updated_at = now;
                out.push(d.clone());
            }
        }
        out
    }

    pub(crate) fn record(
        &mut self,
        delivery: &str,
        owner: &str,
        attempt: u32,
        outcome: AttemptOutcome,
    ) -> bool {
        let now = Utc::now();
        let Some((_, d)) = self.deliveries.get_mut(delivery) else {
            return false;
        };
        if d.lease_owner.as_deref() != Some(owner) || d.attempts != attempt {
            return false;
        }
        let (state, next_at, error, word) = settle(outcome, d.next_at);
        d.state = state;
        d.next_at = next_at;
        d.last_error = error.clone();
        d.lease_owner = None;
        d.lease_until = None;
        d.updated_at = now;
        self.attempts
            .entry(delivery.to_owned())
            .or_default()
            .push(DeliveryAttempt {
                delivery_id: delivery.to_owned(),
                attempt,
                owner: owner.to_owned(),
                at: now,
                outcome: word.to_owned(),
                error,
            });
        true
    }

    pub(crate) fn list(&self, f: &DeliveryFilter) -> Vec<Delivery> {
        let mut out: Vec<(u64, Delivery)> = self
            .deliveries
            .values()
            .filter(|(_, d)| f.admits(d))
            .map(|(s, d)| (*s, d.clone()))
            .collect();
        out.sort_by_key(|d| std::cmp::Reverse(d.0));
        if f.limit > 0 {
            out.truncate(f.limit);
        }
        out.into_iter().map(|(_, d)| d).collect()
    }

    pub(crate) fn attempts(&self, delivery: &str) -> Vec<DeliveryAttempt> {
        self.attempts.get(delivery).cloned().unwrap_or_default()
    }

    pub(crate) fn redeliver(&mut self, delivery: &str) -> Result<Delivery> {
        let now = Utc::now();
        let (_, d) = self
            .deliveries
            .get_mut(delivery)
            .ok_or_else(|| Error::DeliveryNotFound {
                id: delivery.to_owned(),
            })?;
        d.state = DeliveryState::Pending;
        d.next_at = now;
        d.updated_at = now;
        Ok(d.clone())
    }
}

/// The state, next due time, error and log word an outcome settles a delivery to.
pub(crate) fn settle(
    outcome: AttemptOutcome,
    due: DateTime<Utc>,
) -> (DeliveryState, DateTime<Utc>, Option<String>, &'static str) {
    match outcome {
        AttemptOutcome::Delivered => (DeliveryState::Delivered, due, None, "delivered"),
        AttemptOutcome::Retry { next_at, error } => {
            (DeliveryState::Pending, next_at, Some(error), "retry")
        }
        AttemptOutcome::Dead { error } => (DeliveryState::Dead, due, Some(error), "dead"),
    }
}
