-- reins SQLite schema, version 7: the evidence chain (docs/evidence.md). One row per
-- entry of a session's hash chain, holding the entry's JSON as written, and each
-- session's head (its last entry), which a writer updates in the transaction of the
-- change it records. A session's chain starts at this migration: what it recorded
-- before is not in its chain.
CREATE TABLE reins_evidence (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE reins_evidence_heads (
    session_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL
);
