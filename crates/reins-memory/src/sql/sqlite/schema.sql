-- reins SQLite schema, version 1.
CREATE TABLE reins_sessions (
    id            TEXT PRIMARY KEY NOT NULL,
    version       INTEGER NOT NULL,
    next_seq      INTEGER NOT NULL,
    message_count INTEGER NOT NULL,
    run_state     TEXT,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL
);

-- One row per message: appending a step inserts rows, whatever the history length.
CREATE TABLE reins_messages (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    id         TEXT NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX reins_messages_by_id ON reins_messages (session_id, id);

CREATE TABLE reins_requirements (
    session_id TEXT NOT NULL,
    id         TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    is_open    INTEGER NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (session_id, id)
);

CREATE TABLE reins_ledger (
    session_id  TEXT NOT NULL,
    tool_use_id TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state       TEXT NOT NULL,
    lease_until INTEGER NOT NULL, -- microseconds since the Unix epoch
    result      TEXT,
    attempts    INTEGER NOT NULL,
    PRIMARY KEY (session_id, tool_use_id)
);

CREATE TABLE reins_session_locks (
    session_id  TEXT PRIMARY KEY NOT NULL,
    owner       TEXT NOT NULL,
    lease_until INTEGER NOT NULL -- microseconds since the Unix epoch
);
