-- reins PostgreSQL schema, version 1.
CREATE TABLE reins_sessions (
    id            TEXT PRIMARY KEY,
    version       BIGINT NOT NULL,
    next_seq      BIGINT NOT NULL,
    message_count BIGINT NOT NULL,
    run_state     JSONB,
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL
);

-- One row per message: appending a step inserts rows, whatever the history length.
CREATE TABLE reins_messages (
    session_id TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    id         TEXT NOT NULL,
    body       JSONB NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE UNIQUE INDEX reins_messages_by_id ON reins_messages (session_id, id);

CREATE TABLE reins_requirements (
    session_id TEXT NOT NULL,
    id         TEXT NOT NULL,
    seq        BIGSERIAL NOT NULL,
    is_open    BOOLEAN NOT NULL,
    body       JSONB NOT NULL,
    PRIMARY KEY (session_id, id)
);

CREATE TABLE reins_ledger (
    session_id  TEXT NOT NULL,
    tool_use_id TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state       TEXT NOT NULL,
    lease_until TIMESTAMPTZ NOT NULL,
    result      JSONB,
    attempts    INTEGER NOT NULL,
    PRIMARY KEY (session_id, tool_use_id)
);

CREATE TABLE reins_session_locks (
    session_id  TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    lease_until TIMESTAMPTZ NOT NULL
);
