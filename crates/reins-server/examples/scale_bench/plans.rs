//! The query plans of the inbox's and the session list's statements on the seeded store (the
//! statements of reins-memory's dialects with their parameters filled in), printed
//! before the measurement: `EXPLAIN QUERY PLAN` on SQLite, `EXPLAIN ANALYZE` on
//! PostgreSQL.

use crate::seed::Raw;

/// Prints each plan under a heading.
pub(crate) async fn print(raw: &Raw, kind: &str) -> Result<(), String> {
    let sqlite = kind == "sqlite";
    let c = if sqlite { "" } else { " COLLATE \"C\"" };
    let open = if sqlite { "is_open = 1" } else { "is_open" };
    let prefix = if sqlite {
        "substr(session_id, 1, length('u3/')) = 'u3/'"
    } else {
        "starts_with(session_id, 'u3/')"
    };
    let head =
        format!("SELECT session_id, id, tool, open_order FROM reins_requirements WHERE {open}");
    let order = format!("ORDER BY open_order, session_id{c}, id{c} LIMIT 51");
    // A key in the middle of the seeded times.
    let after = format!(
        "(open_order, session_id{c}, id{c}) > (-1767725600000000000, 'u0/s0500000', 'call_scale')"
    );
    let first = format!(
        "(open_order, session_id{c}, id{c}) > ({}, '', '')",
        i64::MIN
    );
    let cases = [
        ("inbox, first page", format!("{head} AND {first} {order}")),
        (
            "inbox, after a deep cursor",
            format!("{head} AND {after} {order}"),
        ),
        (
            "inbox, one tool",
            format!("{head} AND tool = 'delete_file' AND {first} {order}"),
        ),
        (
            "inbox, one user's sessions",
            format!("{head} AND {first} AND {prefix} {order}"),
        ),
    ];
    // The session list narrowed to paused runs (and to a pending tool): the inner
    // query of `session_heads_page_phase`, first page.
    let phase = if sqlite {
        "COALESCE(json_extract(CASE WHEN json_valid(s.run_state) THEN s.run_state END, '$.phase.phase'), '')"
    } else {
        "COALESCE(s.run_state #>> '{phase,phase}', '')"
    };
    let sessions = format!(
        "SELECT id, updated_at FROM reins_sessions s WHERE {phase} = 'paused' \
         AND s.updated_at <= '9999-12-31T23:59:59.999999Z' \
         AND (s.updated_at < '9999-12-31T23:59:59.999999Z' OR s.id{c} > '')"
    );
    // PostgreSQL: a sub-select with a LIMIT, which the planner keeps as a probe per
    // session of the walk (an `EXISTS` becomes a join over every paused session).
    let tool_exists = if sqlite {
        format!(
            "EXISTS (SELECT 1 FROM reins_requirements q WHERE q.session_id = s.id AND q.{open} AND q.tool = 'delete_file')"
        )
    } else {
        format!(
            "(SELECT 1 FROM reins_requirements q WHERE q.session_id = s.id AND q.{open} AND q.tool = 'delete_file' LIMIT 1) IS NOT NULL"
        )
    };
    let by_activity = format!("ORDER BY s.updated_at DESC, s.id{c} LIMIT 51");
    let ids = if sqlite {
        "(SELECT value FROM json_each('[\"u0/s0000000\",\"u1/s0000010\"]'))".to_owned()
    } else {
        "ANY(ARRAY['u0/s0000000', 'u1/s0000010'])".to_owned()
    };
    let in_ids = if sqlite {
        format!("IN {ids}")
    } else {
        format!("= {ids}")
    };
    let cases = cases.into_iter().chain([
        (
            "sessions, status=paused",
            format!("{sessions} {by_activity}"),
        ),
        (
            "sessions, tool=delete_file",
            format!("{sessions} AND {tool_exists} {by_activity}"),
        ),
        (
            "inbox, the deliveries of a page's sessions",
            format!("SELECT id FROM reins_deliveries WHERE session_id {in_ids} ORDER BY seq DESC"),
        ),
    ]);
    for (what, sql) in cases {
        println!("plan ({kind}): {what}\n  {sql}");
        for line in raw.plan(&sql).await? {
            println!("    {line}");
        }
    }
    Ok(())
}
