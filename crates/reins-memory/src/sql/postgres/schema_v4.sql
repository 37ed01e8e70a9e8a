-- reins PostgreSQL schema, version 4: the notification outbox. A notice is written with the
-- change it reports; routing makes one delivery per destination (with a copy of the
-- notice); every attempt is logged.
CREATE TABLE reins_notices (
    seq         BIGSERIAL PRIMARY KEY,
    id          TEXT NOT NULL UNIQUE,
    kind        TEXT NOT NULL,
    session_id  TEXT,
    requirement TEXT,
    created_at  TIMESTAMPTZ NOT NULL,
    routed      BOOLEAN NOT NULL DEFAULT FALSE,
    body        JSONB NOT NULL
);
CREATE INDEX reins_notices_unrouted ON reins_notices (routed, seq);
CREATE TABLE reins_deliveries (
    seq         BIGSERIAL PRIMARY KEY,
    id          TEXT NOT NULL UNIQUE,
    notice_id   TEXT NOT NULL,
    destination TEXT NOT NULL,
    session_id  TEXT,
    requirement TEXT,
    state       TEXT NOT NULL,
    attempts    BIGINT NOT NULL DEFAULT 0,
    next_at     TIMESTAMPTZ NOT NULL,
    lease_owner TEXT,
    lease_until TIMESTAMPTZ,
    last_error  TEXT,
    updated_at  TIMESTAMPTZ NOT NULL,
    body        JSONB NOT NULL
);
CREATE INDEX reins_deliveries_due ON reins_deliveries (state, next_at);
CREATE INDEX reins_deliveries_by_requirement ON reins_deliveries (requirement);
CREATE TABLE reins_delivery_attempts (
    delivery_id TEXT NOT NULL,
    attempt     BIGINT NOT NULL,
    owner       TEXT NOT NULL,
    at          TIMESTAMPTZ NOT NULL,
    outcome     TEXT NOT NULL,
    error       TEXT,
    PRIMARY KEY (delivery_id, attempt)
);
CREATE TABLE reins_subscriptions (
    id         TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    body       JSONB NOT NULL
);
