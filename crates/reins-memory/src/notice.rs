//! The outbox: [`Notice`]s written with the change they report, and their
//! [`Delivery`]s to each destination.
//!
//! A notice is what happened (a requirement waiting or decided, a run that ended, a
//! grant created or revoked). It is written in the **same transaction** as the change
//! it reports — it travels in the [`Commit`](crate::Commit) ([`Commit::notify`](crate::Commit::notify)),
//! or a store writes it itself with a grant — so a crash never loses one and never
//! reports a change that did not happen. Stores record the notices that travel with
//! changes once [`MemoryStore::record_notices`](crate::MemoryStore::record_notices)
//! turned the outbox on (a server with notification channels does); a store nobody
//! delivers from keeps none.
//!
//! Delivering is a dispatcher's job (reins-server's `notify` module), in three steps
//! on the store, each safe with many instances sharing it:
//!
//! 1. **route**: [`unrouted_notices`](crate::MemoryStore::unrouted_notices), then
//!    [`route_notice`](crate::MemoryStore::route_notice) with the destinations that want
//!    it: one [`Delivery`] per destination (idempotent: racing routers make one each);
//! 2. **claim**: [`claim_deliveries`](crate::MemoryStore::claim_deliveries) leases due
//!    deliveries to one owner and counts the attempt; a claimed delivery is never handed
//!    to a second owner before its lease ends (PostgreSQL: `FOR UPDATE SKIP LOCKED`);
//! 3. **record**: [`record_attempt`](crate::MemoryStore::record_attempt) logs the
//!    attempt's outcome ([`AttemptOutcome`]) and settles the delivery (delivered,
//!    due again later, or dead), only while the caller still holds the lease.
//!
//! A delivery that is never recorded (the instance died) is claimed again once its
//! lease ends: delivery is at least once, and every attempt carries the notice's
//! stable [`Notice::id`] for de-duplication.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a [`Notice`] reports. Written as `requirement.waiting`, `run.completed`, ...
/// (the event type webhook subscribers filter on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub enum NoticeKind {
    /// A requirement is waiting for a person.
    #[serde(rename = "requirement.waiting")]
    RequirementWaiting,
    /// A requirement was decided.
    #[serde(rename = "requirement.decided")]
    RequirementDecided,
    /// A requirement's time to live passed.
    #[serde(rename = "requirement.expired")]
    RequirementExpired,
    /// A requirement waited too long and was escalated to the next group.
    #[serde(rename = "requirement.escalated")]
    RequirementEscalated,
    /// A run completed.
    #[serde(rename = "run.completed")]
    RunCompleted,
    /// A run failed.
    #[serde(rename = "run.failed")]
    RunFailed,
    /// A standing grant was created.
    #[serde(rename = "grant.created")]
    GrantCreated,
    /// A standing grant was revoked.
    #[serde(rename = "grant.revoked")]
    GrantRevoked,
}

impl NoticeKind {
    /// Every kind, in a stable order.
    pub const ALL: [NoticeKind; 8] = [
        Self::RequirementWaiting,
        Self::RequirementDecided,
        Self::RequirementExpired,
        Self::RequirementEscalated,
        Self::RunCompleted,
        Self::RunFailed,
        Self::GrantCreated,
        Self::GrantRevoked,
    ];

    /// The wire name: `requirement.waiting`, `run.failed`, `grant.created`, ...
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::RequirementWaiting => "requirement.waiting",
            Self::RequirementDecided => "requirement.decided",
            Self::RequirementExpired => "requirement.expired",
            Self::RequirementEscalated => "requirement.escalated",
            Self::RunCompleted => "run.completed",
            Self::RunFailed => "run.failed",
            Self::GrantCreated => "grant.created",
            Self::GrantRevoked => "grant.revoked",
        }
    }

    /// Parses the wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for NoticeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing that happened, as the outbox keeps it: who should hear of it is decided
/// when it is routed (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notice {
    /// A stable, unique id, in the UUIDv7 layout: the same on every attempt and every
    /// destination, for de-duplication (a webhook's `webhook-id`). A fresh UUIDv7 for
    /// a notice that rides with its change; [`Notice::keyed`] for one that several
    /// writers may make (the outbox keeps the first, by id).
    pub id: String,
    /// What happened.
    pub kind: NoticeKind,
    /// The session it concerns, if any (grants may have none).
    pub session: Option<String>,
    /// The requirement it concerns, if any.
    pub requirement: Option<String>,
    /// The tool it concerns, if any.
    pub tool: Option<String>,
    /// The principals it concerns: who may decide a waiting requirement, who decided,
    /// who created or revoked a grant.
    pub principals: Vec<String>,
    /// The details, as JSON (the requirement's call and arguments, the decision, the
    /// run's output or error, the grant).
    pub payload: Value,
    /// When it was written.
    pub created_at: DateTime<Utc>,
}

impl Notice {
    /// A notice of `kind` made now, with a fresh id and an empty (`null`) payload.
    pub fn new(kind: NoticeKind) -> Self {
        Self {
            id: uuid::Uuid::now_v7().to_string(),
            kind,
            session: None,
            requirement: None,
            tool: None,
            principals: Vec::new(),
            payload: Value::Null,
            created_at: Utc::now(),
        }
    }

    /// A notice of `kind` whose id is the same whoever makes it, however often:
    /// [`Notice::stable_id`] of `key` and `at`. For notices written outside the commit
    /// of the change they report, by writers that may repeat themselves (the escalation
    /// sweep on every instance, a driver repeating a step after a crash): the outbox
    /// keeps the first one written with an id and skips the others, in every store.
    pub fn keyed(kind: NoticeKind, key: &str, at: DateTime<Utc>) -> Self {
        let mut n = Self::new(kind);
        n.id = Self::stable_id(key, at);
        n
    }

    /// The id of the notice that `key` names (say `requirement.escalated`, the session
    /// and the requirement), in the UUIDv7 layout (RFC 9562): its 48-bit time is `at`
    /// in Unix milliseconds, its version 7 and its variant bits as RFC 9562 sets them,
    /// and its 74 other bits the first bits of the SHA-256 of `key`.
    ///
    /// Why not a separate de-duplication key: every store already writes a notice once
    /// by its id (the outbox's primary key, `ON CONFLICT (id) DO NOTHING`; the
    /// in-memory store by id), and a receiver de-duplicates by the id it gets (a
    /// webhook's `webhook-id`). An id derived from the key keeps both with no new column
    /// and no migration, and the id every writer computes is the one delivered. The
    /// bits RFC 9562 leaves to randomness are a hash here, so such an id must be made
    /// from a key that is unique by itself; `at` should be a time every writer agrees
    /// on (the requirement's creation, say), not the writer's clock.
    ///
    /// ```
    /// use chrono::{TimeZone, Utc};
    /// use reins_memory::Notice;
    ///
    /// let at = Utc.timestamp_millis_opt(1_764_000_000_000).unwrap();
    /// let id = Notice::stable_id("requirement.escalated:alice/chat-1:call_1", at);
    /// assert_eq!(id, Notice::stable_id("requirement.escalated:alice/chat-1:call_1", at));
    /// let uuid = uuid::Uuid::parse_str(&id).unwrap();
    /// assert_eq!(uuid.get_version_num(), 7);
    /// ```
    pub fn stable_id(key: &str, at: DateTime<Utc>) -> String {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(key.as_bytes());
        let mut bits = [0u8; 10];
        bits.copy_from_slice(&digest[..10]);
        // 48 bits of milliseconds: from 1970 to the year 10889.
        let ms = u64::try_from(at.timestamp_millis()).unwrap_or(0) & 0xFFFF_FFFF_FFFF;
        uuid::Builder::from_unix_timestamp_millis(ms, &bits)
            .into_uuid()
            .to_string()
    }

    /// Sets the session.
    #[must_use]
    pub fn session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// Sets the requirement.
    #[must_use]
    pub fn requirement(mut self, id: impl Into<String>) -> Self {
        self.requirement = Some(id.into());
        self
    }

    /// Sets the tool.
    #[must_use]
    pub fn tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// Adds a principal.
    #[must_use]
    pub fn principal(mut self, name: impl Into<String>) -> Self {
        self.principals.push(name.into());
        self
    }

    /// Sets the payload.
    #[must_use]
    pub fn payload(mut self, payload: Value) -> Self {
        self.payload = payload;
        self
    }

    /// The notice a store writes with a new grant.
    pub fn grant_created(grant: &crate::Grant) -> Self {
        let mut n = Self::new(NoticeKind::GrantCreated).tool(&grant.tool);
        n.session = grant.session.clone();
        n.principals.extend(grant.created_by.clone());
        n.payload = serde_json::to_value(grant).unwrap_or(Value::Null);
        n
    }

    /// The notice a store writes with a revocation.
    pub fn grant_revoked(grant: &crate::Grant) -> Self {
        let mut n = Self::grant_created(grant);
        n.kind = NoticeKind::GrantRevoked;
        n.principals = grant.revoked_by.clone().into_iter().collect();
        n
    }
}

/// Where a [`Delivery`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Waiting for its next attempt (or being attempted under a lease).
    Pending,
    /// Delivered.
    Delivered,
    /// Given up on: a permanent error, or too many attempts. A person may
    /// [redeliver](crate::MemoryStore::redeliver) it.
    Dead,
}

impl DeliveryState {
    /// `pending`, `delivered` or `dead`, as stored.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Dead => "dead",
        }
    }

    /// Parses the stored form.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(Self::Pending),
            "delivered" => Some(Self::Delivered),
            "dead" => Some(Self::Dead),
            _ => None,
        }
    }
}

/// One notice on its way to one destination (a channel's name, such as `terminal`,
/// or a webhook subscriber `webhook:<id>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// `<notice id>/<destination>`: unique.
    pub id: String,
    /// The notice.
    pub notice: Notice,
    /// Where it goes.
    pub destination: String,
    /// Where it stands.
    pub state: DeliveryState,
    /// How many attempts were claimed so far (a claimed delivery's count includes the
    /// attempt being made: 1 on the first).
    pub attempts: u32,
    /// When it is due (pending deliveries).
    pub next_at: DateTime<Utc>,
    /// Who holds the lease of the attempt in flight, if any.
    pub lease_owner: Option<String>,
    /// When that lease ends.
    pub lease_until: Option<DateTime<Utc>>,
    /// The last attempt's error, if it failed.
    pub last_error: Option<String>,
    /// When it was last updated.
    pub updated_at: DateTime<Utc>,
}

impl Delivery {
    /// The id of a notice's delivery to a destination.
    pub fn id_for(notice: &str, destination: &str) -> String {
        format!("{notice}/{destination}")
    }
}

/// How an attempt ended, as [`MemoryStore::record_attempt`](crate::MemoryStore::record_attempt)
/// records it.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptOutcome {
    /// Delivered.
    Delivered,
    /// Failed; try again at `next_at`.
    Retry {
        /// When the delivery is due again.
        next_at: DateTime<Utc>,
        /// What went wrong.
        error: String,
    },
    /// Failed for good (a permanent error, or the last allowed attempt).
    Dead {
        /// What went wrong.
        error: String,
    },
}

/// One line of a delivery's attempt log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryAttempt {
    /// The delivery.
    pub delivery_id: String,
    /// The attempt's number (1, 2, ...).
    pub attempt: u32,
    /// Who made it.
    pub owner: String,
    /// When it ended.
    pub at: DateTime<Utc>,
    /// `delivered`, `retry` or `dead`.
    pub outcome: String,
    /// The error, when it failed.
    pub error: Option<String>,
}

/// Which deliveries [`MemoryStore::deliveries`](crate::MemoryStore::deliveries) lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeliveryFilter {
    /// Destinations starting with this (`webhook:` for every webhook subscriber).
    pub destination_prefix: Option<String>,
    /// Deliveries of notices about this session.
    pub session: Option<String>,
    /// Deliveries of notices about one of these sessions (one store call for the
    /// deliveries of a page of sessions; an empty list admits nothing).
    pub sessions: Option<Vec<String>>,
    /// Deliveries of notices about this requirement.
    pub requirement: Option<String>,
    /// Deliveries of this notice.
    pub notice: Option<String>,
    /// At most this many, newest first (0: no limit).
    pub limit: usize,
}

impl DeliveryFilter {
    /// Every delivery.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only destinations starting with `prefix`.
    #[must_use]
    pub fn destination_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.destination_prefix = Some(prefix.into());
        self
    }

    /// Only notices about `session`.
    #[must_use]
    pub fn session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// Only notices about one of `sessions`.
    #[must_use]
    pub fn sessions(mut self, sessions: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.sessions = Some(sessions.into_iter().map(Into::into).collect());
        self
    }

    /// Only notices about `requirement`.
    #[must_use]
    pub fn requirement(mut self, requirement: impl Into<String>) -> Self {
        self.requirement = Some(requirement.into());
        self
    }

    /// Only deliveries of `notice`.
    #[must_use]
    pub fn notice(mut self, notice: impl Into<String>) -> Self {
        self.notice = Some(notice.into());
        self
    }

    /// At most `n`, newest first.
    #[must_use]
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = n;
        self
    }

    /// Whether `d` passes the filter (the limit aside).
    pub fn admits(&self, d: &Delivery) -> bool {
        self.destination_prefix
            .as_deref()
            .is_none_or(|p| d.destination.starts_with(p))
            && self
                .session
                .as_deref()
                .is_none_or(|s| d.notice.session.as_deref() == Some(s))
            && self.sessions.as_ref().is_none_or(|list| {
                d.notice
                    .session
                    .as_deref()
                    .is_some_and(|s| list.iter().any(|x| x == s))
            })
            && self
                .requirement
                .as_deref()
                .is_none_or(|r| d.notice.requirement.as_deref() == Some(r))
            && self.notice.as_deref().is_none_or(|n| d.notice.id == n)
    }
}

/// A standing subscription to notices, kept by the store for a server: a webhook
/// subscriber, an A2A push notification configuration. `body` is the server's (the
/// store does not read it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subscription {
    /// A unique id.
    pub id: String,
    /// What kind it is (`webhook`, `a2a`), for listing.
    pub kind: String,
    /// The server's record.
    pub body: Value,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn a_keyed_id_is_a_uuid_v7_the_same_for_every_writer() {
        let at = Utc.timestamp_millis_opt(1_764_000_000_123).unwrap();
        let key = "requirement.expired:alice/chat-1:call_1";
        // Two writers, at different moments: one id.
        let a = Notice::keyed(NoticeKind::RequirementExpired, key, at);
        let b = Notice::keyed(NoticeKind::RequirementExpired, key, at);
        assert_eq!(a.id, b.id);
        let id = uuid::Uuid::parse_str(&a.id).unwrap();
        assert_eq!(id.get_version(), Some(uuid::Version::SortRand));
        assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
        let (secs, nanos) = id.get_timestamp().unwrap().to_unix();
        assert_eq!((secs, nanos / 1_000_000), (1_764_000_000, 123));
        // Another key, another id; another time, another id.
        assert_ne!(
            a.id,
            Notice::stable_id("requirement.expired:alice/chat-1:call_2", at)
        );
        assert_ne!(
            a.id,
            Notice::stable_id(key, at + chrono::Duration::milliseconds(1))
        );
        // Fresh ids are UUIDv7 too.
        let fresh = uuid::Uuid::parse_str(&Notice::new(NoticeKind::RunCompleted).id).unwrap();
        assert_eq!(fresh.get_version(), Some(uuid::Version::SortRand));
    }
}
