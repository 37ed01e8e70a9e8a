-- reins PostgreSQL schema, version 5: the pending-requirements index. Each requirement
-- row carries its sort key (`open_order`: nanoseconds since the epoch, negated, so that
-- an ascending walk is newest first) and its tool name; two partial indexes over the
-- open rows answer an inbox page, unfiltered or for one tool, with one index walk from
-- the cursor on. Ids sort in byte order (`COLLATE "C"`), as the API's cursors do. The
-- migration fills the columns of the open rows written before.
ALTER TABLE reins_requirements ADD COLUMN open_order BIGINT, ADD COLUMN tool TEXT;
CREATE INDEX reins_requirements_pending
    ON reins_requirements (open_order, session_id COLLATE "C", id COLLATE "C") INCLUDE (tool)
    WHERE is_open;
CREATE INDEX reins_requirements_pending_tool
    ON reins_requirements (tool, open_order, session_id COLLATE "C", id COLLATE "C")
    WHERE is_open;
-- Sessions by activity (most recent first, then id in byte order): a page of the
-- session list is an index walk from the cursor on.
CREATE INDEX reins_sessions_by_activity ON reins_sessions (updated_at DESC, id COLLATE "C");
