-- reins PostgreSQL schema, version 6: filters of the session list and the inbox's
-- deliveries pushed into the store. Sessions by the phase of their run state
-- (`phase.phase` of the JSON, '' without one), then by activity (ids in byte order): a
-- page of paused sessions is one index walk from the cursor on, however few sessions
-- are paused. Deliveries by session: the inbox reads the deliveries of a page's
-- sessions at once.
CREATE INDEX reins_sessions_by_phase
    ON reins_sessions ((COALESCE(run_state #>> '{phase,phase}', '')), updated_at DESC, id COLLATE "C");
CREATE INDEX reins_deliveries_by_session ON reins_deliveries (session_id);
