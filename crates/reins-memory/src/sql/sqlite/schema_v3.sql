-- reins SQLite schema, version 3: standing grants (a grant is never deleted; a revoked
-- one keeps who revoked it and when in its body).
CREATE TABLE reins_grants (
    id         TEXT PRIMARY KEY,
    tool       TEXT NOT NULL,
    created_at TEXT NOT NULL,
    revoked    INTEGER NOT NULL DEFAULT 0,
    body       TEXT NOT NULL
);
CREATE INDEX reins_grants_by_tool ON reins_grants (tool, created_at);
