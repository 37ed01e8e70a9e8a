//! The SQL of every step in SQLite: the session, grant and outbox statements.

use super::super::flow::{self, Dialect, MultiInsert};

/// The SQL of the grant steps.
pub(super) const GRANTS: flow::GrantSql = flow::GrantSql {
    insert: "INSERT INTO reins_grants (id, tool, created_at, revoked, body) VALUES (?1, ?2, ?3, 0, ?4)",
    list: "SELECT body FROM reins_grants WHERE (?1 IS NULL OR tool = ?1) AND (?2 OR revoked = 0) \
         ORDER BY created_at, id",
    get: "SELECT body FROM reins_grants WHERE id = ?1",
    revoke: "UPDATE reins_grants SET revoked = 1, body = ?2 WHERE id = ?1 AND revoked = 0",
};

/// The SQL of the outbox steps.
pub(super) const OUTBOX: flow::OutboxSql = flow::OutboxSql {
    put_subscription: "INSERT INTO reins_subscriptions (id, kind, created_at, body) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, body = excluded.body",
    subscriptions: "SELECT id, created_at, body FROM reins_subscriptions WHERE kind = ?1 ORDER BY created_at, id",
    delete_subscription: "DELETE FROM reins_subscriptions WHERE id = ?1",
    insert_notice: "INSERT INTO reins_notices (id, kind, session_id, requirement, created_at, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO NOTHING",
    unrouted: "SELECT body FROM reins_notices WHERE routed = 0 ORDER BY seq LIMIT ?1",
    notice: "SELECT body FROM reins_notices WHERE id = ?1",
    mark_routed: "UPDATE reins_notices SET routed = 1 WHERE id = ?1",
    insert_delivery: "INSERT INTO reins_deliveries (id, notice_id, destination, session_id, requirement, state, attempts, next_at, updated_at, body) \
         VALUES (?1, ?2, ?3, ?4, ?5, 'pending', 0, ?6, ?6, ?7) ON CONFLICT (id) DO NOTHING",
    claim: "UPDATE reins_deliveries SET attempts = attempts + 1, lease_owner = ?1, lease_until = ?4, updated_at = ?3 \
         WHERE id IN (SELECT id FROM reins_deliveries WHERE state = 'pending' AND next_at <= ?3 \
         AND (lease_until IS NULL OR lease_until <= ?3) ORDER BY next_at, seq LIMIT ?2) \
         RETURNING id, destination, state, attempts, next_at, lease_owner, lease_until, last_error, updated_at, body",
    settle: "UPDATE reins_deliveries SET state = ?4, next_at = ?5, last_error = ?6, lease_owner = NULL, lease_until = NULL, updated_at = ?7 \
         WHERE id = ?1 AND lease_owner = ?2 AND attempts = ?3",
    log_attempt: "INSERT INTO reins_delivery_attempts (delivery_id, attempt, owner, at, outcome, error) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
         ON CONFLICT (delivery_id, attempt) DO NOTHING",
    list: "SELECT id, destination, state, attempts, next_at, lease_owner, lease_until, last_error, updated_at, body FROM reins_deliveries \
         WHERE (?1 IS NULL OR substr(destination, 1, length(?1)) = ?1) AND (?2 IS NULL OR session_id = ?2) \
         AND (?3 IS NULL OR requirement = ?3) AND (?4 IS NULL OR notice_id = ?4) ORDER BY seq DESC LIMIT ?5",
    list_for_sessions: "SELECT id, destination, state, attempts, next_at, lease_owner, lease_until, last_error, updated_at, body FROM reins_deliveries \
         WHERE session_id IN (SELECT value FROM json_each(?6)) \
         AND (?1 IS NULL OR substr(destination, 1, length(?1)) = ?1) AND (?2 IS NULL OR session_id = ?2) \
         AND (?3 IS NULL OR requirement = ?3) AND (?4 IS NULL OR notice_id = ?4) ORDER BY seq DESC LIMIT ?5",
    ids_as_json: true,
    attempts: "SELECT attempt, owner, at, outcome, error FROM reins_delivery_attempts WHERE delivery_id = ?1 ORDER BY attempt",
    redeliver: "UPDATE reins_deliveries SET state = 'pending', next_at = ?2, updated_at = ?2 WHERE id = ?1",
    delivery: "SELECT id, destination, state, attempts, next_at, lease_owner, lease_until, last_error, updated_at, body FROM reins_deliveries WHERE id = ?1",
};

/// The SQL of each step (see [`Dialect`] for the parameters). Timestamps are RFC 3339
/// text (fixed width, so text order is time order); leases are microseconds since the
/// epoch, computed from the caller's clock.
pub(super) const DIALECT: Dialect = Dialect {
    load_session: "SELECT version, run_state, created_at, updated_at FROM reins_sessions WHERE id = ?1",
    load_messages: "SELECT seq, id, body FROM reins_messages WHERE session_id = ?1 ORDER BY seq",
    load_requirements: "SELECT id, body FROM reins_requirements WHERE session_id = ?1 ORDER BY seq",
    create_session: "INSERT INTO reins_sessions (id, version, next_seq, message_count, run_state, created_at, updated_at) \
         VALUES (?1, 0, 0, 0, NULL, ?2, ?2) ON CONFLICT (id) DO NOTHING",
    session_version: "SELECT version FROM reins_sessions WHERE id = ?1",
    bump_session: "UPDATE reins_sessions SET version = version + 1, next_seq = next_seq + ?3, \
         message_count = message_count + ?4, updated_at = ?5, \
         run_state = CASE WHEN ?6 THEN ?7 ELSE run_state END \
         WHERE id = ?1 AND version = ?2 AND NOT (?8 AND run_state IS ?7) \
         RETURNING next_seq - ?3",
    remove_message: "DELETE FROM reins_messages WHERE session_id = ?1 AND id = ?2",
    replace_message: "UPDATE reins_messages SET body = ?3 WHERE session_id = ?1 AND id = ?2",
    append_messages: MultiInsert::Values {
        head: "INSERT INTO reins_messages (session_id, seq, id, body) VALUES ",
        row: "(?, ?, ?, ?)",
        tail: " ON CONFLICT DO NOTHING",
    },
    append_commit: None,
    message_seq: "SELECT seq FROM reins_messages WHERE session_id = ?1 AND id = ?2",
    clear_requirements: "DELETE FROM reins_requirements WHERE session_id = ?1",
    requirement: "SELECT is_open, body FROM reins_requirements WHERE session_id = ?1 AND id = ?2",
    delete_requirement: "DELETE FROM reins_requirements WHERE session_id = ?1 AND id = ?2",
    insert_requirement: "INSERT INTO reins_requirements (session_id, id, seq, is_open, body, open_order, tool) VALUES (?1, ?2, \
         (SELECT COALESCE(MAX(seq), 0) + 1 FROM reins_requirements WHERE session_id = ?1), ?3, ?4, ?5, ?6)",
    pending_requirements: "SELECT session_id, id, tool, open_order FROM reins_requirements \
         WHERE is_open = 1 AND (open_order, session_id, id) > (?1, ?2, ?3) \
         AND (?4 IS NULL OR substr(session_id, 1, length(?4)) = ?4) \
         ORDER BY open_order, session_id, id LIMIT ?5",
    pending_requirements_tool: "SELECT session_id, id, tool, open_order FROM reins_requirements \
         WHERE is_open = 1 AND tool = ?6 AND (open_order, session_id, id) > (?1, ?2, ?3) \
         AND (?4 IS NULL OR substr(session_id, 1, length(?4)) = ?4) \
         ORDER BY open_order, session_id, id LIMIT ?5",
    session_heads: "SELECT s.id, s.version, s.message_count, s.created_at, s.updated_at, s.run_state, r.id, r.body \
         FROM reins_sessions s LEFT JOIN reins_requirements r ON r.session_id = s.id AND r.is_open = 1 \
         WHERE s.id IN (SELECT value FROM json_each(?1)) ORDER BY s.id, r.seq",
    ids_as_json: true,
    session_heads_page: "SELECT p.id, p.version, p.message_count, p.created_at, p.updated_at, p.run_state, r.id, r.body \
         FROM (SELECT id, version, message_count, created_at, updated_at, run_state FROM reins_sessions s \
           WHERE s.updated_at <= ?1 AND (s.updated_at < ?1 OR s.id > ?2) \
           AND (?3 IS NULL OR substr(s.id, 1, length(?3)) = ?3) \
           AND (?4 IS NULL OR EXISTS (SELECT 1 FROM reins_requirements q \
             WHERE q.session_id = s.id AND q.is_open = 1 AND q.tool = ?4)) \
           ORDER BY s.updated_at DESC, s.id LIMIT ?5) p \
         LEFT JOIN reins_requirements r ON r.session_id = p.id AND r.is_open = 1 \
         ORDER BY p.updated_at DESC, p.id, r.seq",
    session_heads_page_phase: "SELECT p.id, p.version, p.message_count, p.created_at, p.updated_at, p.run_state, r.id, r.body \
         FROM (SELECT id, version, message_count, created_at, updated_at, run_state FROM reins_sessions s \
           WHERE COALESCE(json_extract(CASE WHEN json_valid(s.run_state) THEN s.run_state END, '$.phase.phase'), '') = ?6 AND s.updated_at <= ?1 AND (s.updated_at < ?1 OR s.id > ?2) \
           AND (?3 IS NULL OR substr(s.id, 1, length(?3)) = ?3) \
           AND (?4 IS NULL OR EXISTS (SELECT 1 FROM reins_requirements q \
             WHERE q.session_id = s.id AND q.is_open = 1 AND q.tool = ?4)) \
           ORDER BY s.updated_at DESC, s.id LIMIT ?5) p \
         LEFT JOIN reins_requirements r ON r.session_id = p.id AND r.is_open = 1 \
         ORDER BY p.updated_at DESC, p.id, r.seq",
    unindexed_requirements: "SELECT session_id, id, body FROM reins_requirements WHERE is_open = 1 AND open_order IS NULL",
    index_requirement: "UPDATE reins_requirements SET open_order = ?3, tool = ?4 WHERE session_id = ?1 AND id = ?2",
    decide_requirement: "UPDATE reins_requirements SET is_open = 0, body = ?3 WHERE session_id = ?1 AND id = ?2",
    insert_decision: "INSERT INTO reins_decisions (session_id, requirement_id, at, record) VALUES (?1, ?2, ?3, ?4)",
    decisions: "SELECT requirement_id, at, record FROM reins_decisions WHERE session_id = ?1 ORDER BY seq",
    list_sessions: "SELECT s.id, s.version, s.message_count, s.updated_at, \
         EXISTS (SELECT 1 FROM reins_requirements r WHERE r.session_id = s.id AND r.is_open = 1) \
         FROM reins_sessions s ORDER BY s.id",
    list_session_heads: "SELECT id, version, message_count, created_at, updated_at, run_state \
         FROM reins_sessions ORDER BY id",
    open_requirements: "SELECT session_id, id, body FROM reins_requirements WHERE is_open = 1 \
         ORDER BY session_id, seq",
    delete_session: &[
        "DELETE FROM reins_messages WHERE session_id = ?1",
        "DELETE FROM reins_requirements WHERE session_id = ?1",
        "DELETE FROM reins_ledger WHERE session_id = ?1",
        "DELETE FROM reins_session_locks WHERE session_id = ?1",
        "DELETE FROM reins_decisions WHERE session_id = ?1",
        "DELETE FROM reins_evidence WHERE session_id = ?1",
        "DELETE FROM reins_evidence_heads WHERE session_id = ?1",
        "DELETE FROM reins_sessions WHERE id = ?1",
    ],
    claim_insert: "INSERT INTO reins_ledger (session_id, tool_use_id, fingerprint, state, lease_until, result, attempts) \
         VALUES (?1, ?2, ?3, 'running', ?4 + ?5, NULL, 1) ON CONFLICT (session_id, tool_use_id) DO NOTHING",
    // `BEGIN IMMEDIATE` already holds the write lock: no row lock needed.
    claim_select: "SELECT fingerprint, state, lease_until, result, lease_until <= ?3 \
         FROM reins_ledger WHERE session_id = ?1 AND tool_use_id = ?2",
    claim_takeover: "UPDATE reins_ledger SET lease_until = ?3 + ?4, attempts = attempts + 1 \
         WHERE session_id = ?1 AND tool_use_id = ?2",
    finish: "UPDATE reins_ledger SET state = 'finished', result = ?3 \
         WHERE session_id = ?1 AND tool_use_id = ?2 AND state = 'running'",
    ledger_entry: "SELECT fingerprint, state, lease_until, result, attempts FROM reins_ledger \
         WHERE session_id = ?1 AND tool_use_id = ?2",
    try_lock: "INSERT INTO reins_session_locks (session_id, owner, lease_until) VALUES (?1, ?2, ?3 + ?4) \
         ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, lease_until = excluded.lease_until, \
         interrupt_requested = CASE WHEN reins_session_locks.owner = excluded.owner \
         THEN reins_session_locks.interrupt_requested ELSE 0 END \
         WHERE reins_session_locks.owner = excluded.owner OR reins_session_locks.lease_until <= ?3",
    // Two statements in one inline transaction cost SQLite next to nothing.
    try_lock_version: None,
    unlock: "DELETE FROM reins_session_locks WHERE session_id = ?1 AND owner = ?2",
    request_interrupt: "UPDATE reins_session_locks SET interrupt_requested = 1 \
         WHERE session_id = ?1 AND lease_until > ?2",
    interrupt_requests: "SELECT session_id FROM reins_session_locks \
         WHERE owner = ?1 AND interrupt_requested = 1 ORDER BY session_id",
    migration_lock: None,
    create_version_table: "CREATE TABLE IF NOT EXISTS reins_schema_version (version INTEGER NOT NULL)",
    schema_version: "SELECT MAX(version) FROM reins_schema_version",
    record_version: "INSERT INTO reins_schema_version (version) VALUES (?1)",
};

/// The SQL of the evidence chain steps.
pub(super) const EVIDENCE: flow::EvidenceSql = flow::EvidenceSql {
    head: "INSERT INTO reins_evidence_heads (session_id, seq, hash) VALUES (?1, 0, ?2) \
         ON CONFLICT (session_id) DO UPDATE SET seq = reins_evidence_heads.seq RETURNING seq, hash",
    advance: "UPDATE reins_evidence_heads SET seq = ?2, hash = ?3 WHERE session_id = ?1",
    insert: "INSERT INTO reins_evidence (session_id, seq, hash, entry) VALUES (?1, ?2, ?3, ?4)",
    chain: "SELECT entry FROM reins_evidence WHERE session_id = ?1 ORDER BY seq",
};
