-- reins SQLite schema, version 2: the decision log (the audit trail of what people
-- decided, refusals included) and interrupt requests on run locks.
CREATE TABLE reins_decisions (
    seq            INTEGER PRIMARY KEY, -- rowid: grows with every entry, never reused
    session_id     TEXT NOT NULL,
    requirement_id TEXT NOT NULL,
    at             TEXT NOT NULL,
    record         TEXT NOT NULL
);
CREATE INDEX reins_decisions_by_session ON reins_decisions (session_id, seq);

ALTER TABLE reins_session_locks ADD COLUMN interrupt_requested INTEGER NOT NULL DEFAULT 0;
