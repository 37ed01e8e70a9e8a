//! The in-memory run locks: one owner per session at a time, for a lease, with the
//! interrupt flag a run's owner watches.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::store::lease_end;

/// A session's run lock.
#[derive(Debug)]
pub(super) struct Lock {
    pub(super) owner: String,
    pub(super) until: DateTime<Utc>,
    pub(super) interrupt: bool,
}

/// Takes or renews `session`'s run lock for `owner`; false when another owner holds a
/// live one.
pub(super) fn take_lock(
    locks: &mut HashMap<String, Lock>,
    session: &str,
    owner: &str,
    lease: Duration,
) -> bool {
    let now = Utc::now();
    match locks.get_mut(session) {
        Some(l) if l.owner != owner && l.until > now => false,
        Some(l) if l.owner == owner => {
            l.until = lease_end(now, lease);
            true
        }
        Some(l) => {
            // An expired lock of another owner: take it over in place.
            l.owner.clear();
            l.owner.push_str(owner);
            l.until = lease_end(now, lease);
            l.interrupt = false;
            true
        }
        None => {
            locks.insert(
                session.to_owned(),
                Lock {
                    owner: owner.to_owned(),
                    until: lease_end(now, lease),
                    interrupt: false,
                },
            );
            true
        }
    }
}

/// Whether another owner than `owner` holds a live run lock on `session`.
pub(super) fn held_by_another(
    locks: &HashMap<String, Lock>,
    session: &str,
    owner: &str,
    now: DateTime<Utc>,
) -> bool {
    locks
        .get(session)
        .is_some_and(|l| l.owner != owner && l.until > now)
}

/// Releases `session`'s run lock if `owner` (when given) holds it.
pub(super) fn release_lock(locks: &mut HashMap<String, Lock>, session: &str, owner: Option<&str>) {
    if let Some(owner) = owner {
        if locks.get(session).is_some_and(|l| l.owner == owner) {
            locks.remove(session);
        }
    }
}
