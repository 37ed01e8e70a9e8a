-- reins SQLite schema, version 6: filters of the session list and the inbox's
-- deliveries pushed into the store. Sessions by the phase of their run state
-- (`phase.phase` of the JSON, '' without one), then by activity: a page of paused
-- sessions is one index walk from the cursor on, however few sessions are paused. A
-- run state that is not JSON (a corrupt row) indexes as '' rather than failing writes.
-- Deliveries by session: the inbox reads the deliveries of a page's sessions at once.
CREATE INDEX reins_sessions_by_phase
    ON reins_sessions (COALESCE(json_extract(CASE WHEN json_valid(run_state) THEN run_state END, '$.phase.phase'), ''), updated_at DESC, id);
CREATE INDEX reins_deliveries_by_session ON reins_deliveries (session_id);
