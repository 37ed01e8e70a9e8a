//! The SQL of every step in PostgreSQL: the session, grant and outbox statements.

use super::flow::{self, Dialect, MultiInsert};

/// The SQL of the grant steps.
pub(super) const GRANTS: flow::GrantSql = flow::GrantSql {
    insert: "INSERT INTO reins_grants (id, tool, created_at, revoked, body) VALUES ($1, $2, $3, FALSE, $4::jsonb)",
    list: "SELECT body::text FROM reins_grants WHERE ($1::text IS NULL OR tool = $1) AND ($2 OR NOT revoked) \
         ORDER BY created_at, id",
    get: "SELECT body::text FROM reins_grants WHERE id = $1",
    revoke: "UPDATE reins_grants SET revoked = TRUE, body = $2::jsonb WHERE id = $1 AND NOT revoked",
};

/// The SQL of the outbox steps.
pub(super) const OUTBOX: flow::OutboxSql = flow::OutboxSql {
    put_subscription: "INSERT INTO reins_subscriptions (id, kind, created_at, body) VALUES ($1, $2, $3, $4::jsonb) \
         ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, body = excluded.body",
    subscriptions: "SELECT id, created_at, body::text FROM reins_subscriptions WHERE kind = $1 ORDER BY created_at, id",
    delete_subscription: "DELETE FROM reins_subscriptions WHERE id = $1",
    insert_notice: "INSERT INTO reins_notices (id, kind, session_id, requirement, created_at, body) VALUES ($1, $2, $3, $4, $5, $6::jsonb) ON CONFLICT (id) DO NOTHING",
    unrouted: "SELECT body::text FROM reins_notices WHERE NOT routed ORDER BY seq LIMIT $1",
    notice: "SELECT body::text FROM reins_notices WHERE id = $1",
    mark_routed: "UPDATE reins_notices SET routed = TRUE WHERE id = $1",
    insert_delivery: "INSERT INTO reins_deliveries (id, notice_id, destination, session_id, requirement, state, attempts, next_at, updated_at, body) \
         VALUES ($1, $2, $3, $4, $5, 'pending', 0, $6, $6, $7::jsonb) ON CONFLICT (id) DO NOTHING",
    claim: "UPDATE reins_deliveries SET attempts = attempts + 1, lease_owner = $1, lease_until = $4, updated_at = $3 \
         WHERE id IN (SELECT id FROM reins_deliveries WHERE state = 'pending' AND next_at <= $3 \
         AND (lease_until IS NULL OR lease_until <= $3) ORDER BY next_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED) \
         RETURNING id, destination, state, attempts, next_at, lease_owner, lease_until, last_error, updated_at, body::text",
    settle: "UPDATE reins_deliveries SET state = $4, next_at = $5, last_error = $6::text, lease_owner = NULL, lease_until = NULL, updated_at = $7 \
         WHERE id = $1 AND lease_owner = $2 AND attempts = $3",
    log_attempt: "INSERT INTO reins_delivery_attempts (delivery_id, attempt, owner, at, outcome, error) VALUES ($1, $2, $3, $4, $5, $6::text) \
         ON CONFLICT (delivery_id, attempt) DO NOTHING",
    list: "SELECT id, destination, state, attempts, next_at, lease_owner, lease_until, last_error, updated_at, body::text FROM reins_deliveries \
         WHERE ($1::text IS NULL OR left(destination, length($1)) = $1) AND ($2::text IS NULL OR session_id = $2) \
         AND ($3::text IS NULL OR requirement = $3) AND ($4::text IS NULL OR notice_id = $4) ORDER BY seq DESC LIMIT $5",
    list_for_sessions: "SELECT id, destination, state, attempts, next_at, lease_owner, lease_until, last_error, updated_at, body::text FROM reins_deliveries \
         WHERE session_id = ANY($6) \
         AND ($1::text IS NULL OR left(destination, length($1)) = $1) AND ($2::text IS NULL OR session_id = $2) \
         AND ($3::text IS NULL OR requirement = $3) AND ($4::text IS NULL OR notice_id = $4) ORDER BY seq DESC LIMIT $5",
    ids_as_json: false,
    attempts: "SELECT attempt, owner, at, outcome, error FROM reins_delivery_attempts WHERE delivery_id = $1 ORDER BY attempt",
    redeliver: "UPDATE reins_deliveries SET state = 'pending', next_at = $2, updated_at = $2 WHERE id = $1",
    delivery: "SELECT id, destination, state, attempts, next_at, lease_owner, lease_until, last_error, updated_at, body::text FROM reins_deliveries WHERE id = $1",
};

/// The SQL of each step (see [`Dialect`] for the parameters). Leases and `updated_at`
/// use the database's clock (`now()`), so workers' clocks need not agree; the
/// caller's `Instant`/`Stamp` parameters are then unused (sqlx declares every
/// parameter's type, which PostgreSQL accepts unreferenced). JSON columns are `JSONB`,
/// read back as text.
pub(super) const DIALECT: Dialect = Dialect {
    load_session: "SELECT version, run_state::text, created_at, updated_at FROM reins_sessions WHERE id = $1",
    load_messages: "SELECT seq, id, body::text FROM reins_messages WHERE session_id = $1 ORDER BY seq",
    load_requirements: "SELECT id, body::text FROM reins_requirements WHERE session_id = $1 ORDER BY seq",
    create_session: "INSERT INTO reins_sessions (id, version, next_seq, message_count, run_state, created_at, updated_at) \
         VALUES ($1, 0, 0, 0, NULL, now(), now()) ON CONFLICT (id) DO NOTHING",
    session_version: "SELECT version FROM reins_sessions WHERE id = $1",
    bump_session: "UPDATE reins_sessions SET version = version + 1, next_seq = next_seq + $3, \
         message_count = message_count + $4, updated_at = now(), \
         run_state = CASE WHEN $6 THEN $7::jsonb ELSE run_state END \
         WHERE id = $1 AND version = $2 AND NOT ($8 AND run_state IS NOT DISTINCT FROM $7::jsonb) \
         RETURNING next_seq - $3, pg_notify($9, $10)::text",
    remove_message: "DELETE FROM reins_messages WHERE session_id = $1 AND id = $2",
    replace_message: "UPDATE reins_messages SET body = $3::jsonb WHERE session_id = $1 AND id = $2",
    append_messages: MultiInsert::Arrays(
        "INSERT INTO reins_messages (session_id, seq, id, body) \
         SELECT $1, t.s, t.i, t.b::jsonb FROM UNNEST($2::bigint[], $3::text[], $4::text[]) AS t(s, i, b) \
         ON CONFLICT DO NOTHING",
    ),
    append_commit: Some(
        "WITH s AS (UPDATE reins_sessions SET version = version + 1, next_seq = next_seq + $3, \
         message_count = message_count + $4, updated_at = now(), \
         run_state = CASE WHEN $6 THEN $7::jsonb ELSE run_state END \
         WHERE id = $1 AND version = $2 AND NOT ($8 AND run_state IS NOT DISTINCT FROM $7::jsonb) \
         RETURNING next_seq - $3 AS first), \
         m AS (INSERT INTO reins_messages (session_id, seq, id, body) \
         SELECT $1, s.first + t.o - 1, t.i, t.b::jsonb \
         FROM s, UNNEST($11::text[], $12::text[]) WITH ORDINALITY AS t(i, b, o)), \
         u AS (DELETE FROM reins_session_locks WHERE session_id = $1 AND owner = $13 \
         AND EXISTS (SELECT 1 FROM s)), \
         l AS (INSERT INTO reins_session_locks (session_id, owner, lease_until) \
         SELECT $1, $14, now() + make_interval(secs => $15) FROM s WHERE $14::text IS NOT NULL \
         ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until, \
         interrupt_requested = reins_session_locks.interrupt_requested AND reins_session_locks.owner = EXCLUDED.owner \
         WHERE reins_session_locks.owner = EXCLUDED.owner OR reins_session_locks.lease_until <= now() \
         RETURNING 1) \
         SELECT s.first, pg_notify($9, $10)::text, \
         (CASE WHEN $14::text IS NULL OR EXISTS (SELECT 1 FROM l) THEN '0' \
         ELSE 'reins: the session run lock is held by another owner' END)::int FROM s",
    ),
    message_seq: "SELECT seq FROM reins_messages WHERE session_id = $1 AND id = $2",
    clear_requirements: "DELETE FROM reins_requirements WHERE session_id = $1",
    requirement: "SELECT is_open, body::text FROM reins_requirements WHERE session_id = $1 AND id = $2",
    delete_requirement: "DELETE FROM reins_requirements WHERE session_id = $1 AND id = $2",
    insert_requirement: "INSERT INTO reins_requirements (session_id, id, is_open, body, open_order, tool) \
         VALUES ($1, $2, $3, $4::jsonb, $5, $6)",
    pending_requirements: "SELECT session_id, id, tool, open_order FROM reins_requirements \
         WHERE is_open AND (open_order, session_id COLLATE \"C\", id COLLATE \"C\") > ($1, $2, $3) \
         AND ($4::text IS NULL OR starts_with(session_id, $4)) \
         ORDER BY open_order, session_id COLLATE \"C\", id COLLATE \"C\" LIMIT $5",
    pending_requirements_tool: "SELECT session_id, id, tool, open_order FROM reins_requirements \
         WHERE is_open AND tool = $6 AND (open_order, session_id COLLATE \"C\", id COLLATE \"C\") > ($1, $2, $3) \
         AND ($4::text IS NULL OR starts_with(session_id, $4)) \
         ORDER BY open_order, session_id COLLATE \"C\", id COLLATE \"C\" LIMIT $5",
    session_heads: "SELECT s.id, s.version, s.message_count, s.created_at, s.updated_at, s.run_state::text, r.id, r.body::text \
         FROM reins_sessions s LEFT JOIN reins_requirements r ON r.session_id = s.id AND r.is_open \
         WHERE s.id = ANY($1) ORDER BY s.id, r.seq",
    ids_as_json: false,
    session_heads_page: "SELECT p.id, p.version, p.message_count, p.created_at, p.updated_at, p.run_state::text, r.id, r.body::text \
         FROM (SELECT id, version, message_count, created_at, updated_at, run_state FROM reins_sessions s \
           WHERE s.updated_at <= $1 AND (s.updated_at < $1 OR s.id COLLATE \"C\" > $2) \
           AND ($3::text IS NULL OR starts_with(s.id, $3)) \
           AND ($4::text IS NULL OR EXISTS (SELECT 1 FROM reins_requirements q \
             WHERE q.session_id = s.id AND q.is_open AND q.tool = $4)) \
           ORDER BY s.updated_at DESC, s.id COLLATE \"C\" LIMIT $5) p \
         LEFT JOIN reins_requirements r ON r.session_id = p.id AND r.is_open \
         ORDER BY p.updated_at DESC, p.id COLLATE \"C\", r.seq",
    session_heads_page_phase: "SELECT p.id, p.version, p.message_count, p.created_at, p.updated_at, p.run_state::text, r.id, r.body::text \
         FROM (SELECT id, version, message_count, created_at, updated_at, run_state FROM reins_sessions s \
           WHERE COALESCE(s.run_state #>> '{phase,phase}', '') = $6 AND s.updated_at <= $1 AND (s.updated_at < $1 OR s.id COLLATE \"C\" > $2) \
           AND ($3::text IS NULL OR starts_with(s.id, $3)) \
           AND ($4::text IS NULL OR (SELECT 1 FROM reins_requirements q \
             WHERE q.session_id = s.id AND q.is_open AND q.tool = $4 LIMIT 1) IS NOT NULL) \
           ORDER BY s.updated_at DESC, s.id COLLATE \"C\" LIMIT $5) p \
         LEFT JOIN reins_requirements r ON r.session_id = p.id AND r.is_open \
         ORDER BY p.updated_at DESC, p.id COLLATE \"C\", r.seq",
    unindexed_requirements: "SELECT session_id, id, body::text FROM reins_requirements WHERE is_open AND open_order IS NULL",
    index_requirement: "UPDATE reins_requirements SET open_order = $3, tool = $4 WHERE session_id = $1 AND id = $2",
    decide_requirement: "UPDATE reins_requirements SET is_open = FALSE, body = $3::jsonb WHERE session_id = $1 AND id = $2",
    insert_decision: "INSERT INTO reins_decisions (session_id, requirement_id, at, record) \
         VALUES ($1, $2, LEAST($3, now()), $4::jsonb)",
    decisions: "SELECT requirement_id, at, record::text FROM reins_decisions WHERE session_id = $1 ORDER BY seq",
    list_sessions: "SELECT s.id, s.version, s.message_count, s.updated_at, \
         EXISTS (SELECT 1 FROM reins_requirements r WHERE r.session_id = s.id AND r.is_open) \
         FROM reins_sessions s ORDER BY s.id COLLATE \"C\"",
    list_session_heads: "SELECT id, version, message_count, created_at, updated_at, run_state::text \
         FROM reins_sessions ORDER BY id COLLATE \"C\"",
    open_requirements: "SELECT session_id, id, body::text FROM reins_requirements WHERE is_open \
         ORDER BY session_id, seq",
    delete_session: &[
        "DELETE FROM reins_messages WHERE session_id = $1",
        "DELETE FROM reins_requirements WHERE session_id = $1",
        "DELETE FROM reins_ledger WHERE session_id = $1",
        "DELETE FROM reins_session_locks WHERE session_id = $1",
        "DELETE FROM reins_decisions WHERE session_id = $1",
        "DELETE FROM reins_evidence WHERE session_id = $1",
        "DELETE FROM reins_evidence_heads WHERE session_id = $1",
        "DELETE FROM reins_sessions WHERE id = $1",
    ],
    claim_insert: "INSERT INTO reins_ledger (session_id, tool_use_id, fingerprint, state, lease_until, result, attempts) \
         VALUES ($1, $2, $3, 'running', now() + make_interval(secs => $5), NULL, 1) \
         ON CONFLICT (session_id, tool_use_id) DO NOTHING",
    // The row lock makes the decision and the takeover one step.
    claim_select: "SELECT fingerprint, state, lease_until, result::text, lease_until <= now() \
         FROM reins_ledger WHERE session_id = $1 AND tool_use_id = $2 FOR UPDATE",
    claim_takeover: "UPDATE reins_ledger SET lease_until = now() + make_interval(secs => $4), \
         attempts = attempts + 1 WHERE session_id = $1 AND tool_use_id = $2",
    finish: "UPDATE reins_ledger SET state = 'finished', result = $3::jsonb \
         WHERE session_id = $1 AND tool_use_id = $2 AND state = 'running'",
    ledger_entry: "SELECT fingerprint, state, lease_until, result::text, attempts FROM reins_ledger \
         WHERE session_id = $1 AND tool_use_id = $2",
    try_lock: "INSERT INTO reins_session_locks (session_id, owner, lease_until) \
         VALUES ($1, $2, now() + make_interval(secs => $4)) \
         ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until, \
         interrupt_requested = reins_session_locks.interrupt_requested AND reins_session_locks.owner = EXCLUDED.owner \
         WHERE reins_session_locks.owner = EXCLUDED.owner OR reins_session_locks.lease_until <= now()",
    try_lock_version: Some(
        "WITH l AS (INSERT INTO reins_session_locks (session_id, owner, lease_until) \
         VALUES ($1, $2, now() + make_interval(secs => $4)) \
         ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until, \
         interrupt_requested = reins_session_locks.interrupt_requested AND reins_session_locks.owner = EXCLUDED.owner \
         WHERE reins_session_locks.owner = EXCLUDED.owner OR reins_session_locks.lease_until <= now() \
         RETURNING 1) \
         SELECT (SELECT COUNT(*) FROM l), (SELECT version FROM reins_sessions WHERE id = $1)",
    ),
    unlock: "DELETE FROM reins_session_locks WHERE session_id = $1 AND owner = $2",
    request_interrupt: "UPDATE reins_session_locks SET interrupt_requested = TRUE \
         WHERE session_id = $1 AND lease_until > now()",
    interrupt_requests: "SELECT session_id FROM reins_session_locks WHERE owner = $1 AND interrupt_requested \
         ORDER BY session_id COLLATE \"C\"",
    // The key spells "reins1" (0x7265_696e_7331): racing workers migrate one at a time.
    migration_lock: Some("SELECT pg_advisory_xact_lock(125779886109489)::text"),
    create_version_table: "CREATE TABLE IF NOT EXISTS reins_schema_version (version BIGINT NOT NULL)",
    schema_version: "SELECT MAX(version) FROM reins_schema_version",
    record_version: "INSERT INTO reins_schema_version (version) VALUES ($1)",
};

/// The SQL of the evidence chain steps.
pub(super) const EVIDENCE: flow::EvidenceSql = flow::EvidenceSql {
    head: "INSERT INTO reins_evidence_heads (session_id, seq, hash) VALUES ($1, 0, $2) \
         ON CONFLICT (session_id) DO UPDATE SET seq = reins_evidence_heads.seq RETURNING seq, hash",
    advance: "UPDATE reins_evidence_heads SET seq = $2, hash = $3 WHERE session_id = $1",
    insert: "INSERT INTO reins_evidence (session_id, seq, hash, entry) VALUES ($1, $2, $3, $4)",
    chain: "SELECT entry FROM reins_evidence WHERE session_id = $1 ORDER BY seq",
};
