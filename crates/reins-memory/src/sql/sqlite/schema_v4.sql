-- reins SQLite schema, version 4: the notification outbox. A notice is written with the
-- change it reports; routing makes one delivery per destination (with a copy of the
-- notice); every attempt is logged.
CREATE TABLE reins_notices (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    kind        TEXT NOT NULL,
    session_id  TEXT,
    requirement TEXT,
    created_at  TEXT NOT NULL,
    routed      INTEGER NOT NULL DEFAULT 0,
    body        TEXT NOT NULL
);
CREATE INDEX reins_notices_unrouted ON reins_notices (routed, seq);
CREATE TABLE reins_deliveries (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    notice_id   TEXT NOT NULL,
    destination TEXT NOT NULL,
    session_id  TEXT,
    requirement TEXT,
    state       TEXT NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    next_at     TEXT NOT NULL,
    lease_owner TEXT,
    lease_until TEXT,
    last_error  TEXT,
    updated_at  TEXT NOT NULL,
    body        TEXT NOT NULL
);
CREATE INDEX reins_deliveries_due ON reins_deliveries (state, next_at);
CREATE INDEX reins_deliveries_by_requirement ON reins_deliveries (requirement);
CREATE TABLE reins_delivery_attempts (
    delivery_id TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    owner       TEXT NOT NULL,
    at          TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    error       TEXT,
    PRIMARY KEY (delivery_id, attempt)
);
CREATE TABLE reins_subscriptions (
    id         TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    created_at TEXT NOT NULL,
    body       TEXT NOT NULL
);
