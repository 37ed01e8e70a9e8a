//! The query plans of the pending-requirements listing on the seeded store (the
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
    for (what, sql) in cases {
        println!("plan ({kind}): {what}\n  {sql}");
        for line in raw.plan(&sql).await? {
            println!("    {line}");
        }
    }
    Ok(())
}
