//! The hub's two maps of session channels, each kept at a constant cost per run
//! however many sessions the server has seen: the channels that are alive
//! ([`Channels`], weak, swept of dead entries only when the map has doubled since
//! the last sweep) and the channels held after their run for reconnecting clients
//! ([`Held`], oldest first, so that expiring and evicting look at the front only).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::channel::Channel;

/// The fewest entries before the first sweep of dead channels.
const SWEEP_FROM: usize = 64;

/// The live channels by session, weak: a channel lives while a run, a subscriber or
/// [`Held`] holds it.
pub(super) struct Channels {
    map: HashMap<String, Weak<Channel>>,
    /// The size at which dead entries are swept next.
    sweep_at: usize,
}

impl Channels {
    pub(super) fn new() -> Self {
        Self {
            map: HashMap::new(),
            sweep_at: SWEEP_FROM,
        }
    }

    /// The session's channel, created when it has none alive.
    pub(super) fn get_or_create(&mut self, session: &str) -> Arc<Channel> {
        if let Some(c) = self.map.get(session).and_then(Weak::upgrade) {
            return c;
        }
        if self.map.len() >= self.sweep_at {
            self.map.retain(|_, w| w.strong_count() > 0);
            self.sweep_at = (self.map.len() * 2).max(SWEEP_FROM);
        }
        let c = Arc::new(Channel::new());
        self.map.insert(session.to_owned(), Arc::downgrade(&c));
        c
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// Channels held after their last run, at most `max`, each for `hold_for`.
pub(super) struct Held {
    map: HashMap<String, (Arc<Channel>, Instant)>,
    /// When each hold began, oldest first; an entry whose session was held again
    /// since is stale (its time differs from the map's) and skipped.
    order: VecDeque<(String, Instant)>,
    hold_for: Duration,
    max: usize,
}

impl Held {
    pub(super) fn new(hold_for: Duration, max: usize) -> Self {
        Self {
            map: HashMap::new(),
            order: VecDeque::new(),
            hold_for,
            max: max.max(1),
        }
    }

    /// Holds `c` for `session` from `now`: drops the holds that expired, and the
    /// oldest while there are `max`.
    pub(super) fn hold(&mut self, session: &str, c: Arc<Channel>, now: Instant) {
        while let Some((s, t)) = self.order.front() {
            let current = self.map.get(s).is_some_and(|(_, held)| held == t);
            let expired = now.saturating_duration_since(*t) >= self.hold_for;
            if current && !expired && self.map.len() < self.max {
                break;
            }
            if current {
                self.map.remove(s);
            }
            self.order.pop_front();
        }
        self.map.insert(session.to_owned(), (c, now));
        self.order.push_back((session.to_owned(), now));
        // Sessions held again and again leave stale entries behind: drop them once
        // they outnumber the holds.
        if self.order.len() > 2 * self.map.len() + SWEEP_FROM {
            let map = &self.map;
            self.order
                .retain(|(s, t)| map.get(s).is_some_and(|(_, held)| held == t));
        }
    }

    #[cfg(test)]
    fn sessions(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.map.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_channels_are_swept_as_the_map_grows() {
        let mut channels = Channels::new();
        let alive = channels.get_or_create("kept");
        for i in 0..10_000 {
            drop(channels.get_or_create(&format!("s{i}")));
        }
        // Swept whenever the map doubled: never more than twice the live ones plus
        // the first sweep's size.
        assert!(channels.len() <= 2 * SWEEP_FROM, "{}", channels.len());
        assert!(Arc::ptr_eq(&alive, &channels.get_or_create("kept")));
        // A channel still held by someone is found, not replaced.
        let again = channels.get_or_create("s9999");
        assert!(Arc::ptr_eq(&again, &channels.get_or_create("s9999")));
    }

    #[test]
    fn holds_expire_and_the_oldest_give_way_to_new_ones() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut held = Held::new(Duration::from_secs(100), 3);
        let c = || Arc::new(Channel::new());
        held.hold("a", c(), s(0));
        held.hold("b", c(), s(1));
        held.hold("c", c(), s(2));
        // `a` held again: now the newest.
        held.hold("a", c(), s(3));
        held.hold("d", c(), s(4));
        assert_eq!(held.sessions(), ["a", "c", "d"]);
        // After 100 s, what was held at 2 and 3 expired.
        held.hold("e", c(), s(103));
        assert_eq!(held.sessions(), ["d", "e"]);
        // One session held many times keeps one hold and a bounded queue; `d` and
        // `e` expire meanwhile.
        for i in 0..1_000 {
            held.hold("f", c(), s(104 + i));
        }
        assert_eq!(held.sessions(), ["f"]);
        assert!(held.order.len() <= 2 * held.map.len() + SWEEP_FROM + 1);
    }
}
