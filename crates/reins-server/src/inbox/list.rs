//! `GET /v1/sessions`: the sessions the caller may read with their status, owner and
//! pending tools, filtered by status, principal and tool, newest activity first,
//! paginated with a [`cursor`](super::cursor).
//!
//! The store is read a page at a time without transcripts
//! ([`MemoryStore::session_heads_page`]: an index walk from the cursor on, narrowed by
//! the caller's or the `principal`'s id prefix, by the pending tool, and for
//! `status=paused` or a tool by the stored run's phase); each session's
//! status comes from the same view `GET /v1/sessions/{id}` shows, so the list and
//! the session never disagree.
//!
//! [`MemoryStore::session_heads_page`]: reins_memory::MemoryStore::session_heads_page

use std::cmp::Reverse;
use std::collections::BTreeSet;

use axum::Json;
use axum::extract::State;

use super::cursor;
use reins_memory::SessionFilter;

use crate::auth::{AccessRole, Principal};
use crate::error::{ErrorBody, Result, ServerError};
use crate::extract::{ApiQuery, Caller};
use crate::state::AppState;
use crate::types::{SessionRow, SessionStatus, SessionsPage, SessionsQuery};
use crate::view;

/// What the third part of a sessions cursor says (a requirements cursor is refused).
const CURSOR_TAG: &str = "sessions";

/// The checked filters of a request.
struct Filters {
    statuses: Option<Vec<SessionStatus>>,
    principal: Option<String>,
    tool: Option<String>,
    limit: usize,
    after: Option<cursor::Key>,
}

fn bad(message: impl Into<String>) -> ServerError {
    ServerError::BadRequest(message.into())
}

/// A filter value that is a name: 1 to 256 characters, no control characters.
fn name_filter(what: &str, v: Option<String>) -> Result<Option<String>> {
    match v {
        None => Ok(None),
        Some(v) if v.trim().is_empty() || v.len() > 256 || v.chars().any(char::is_control) => {
            Err(bad(format!(
                "`{what}` must be 1 to 256 characters without control characters"
            )))
        }
        Some(v) => Ok(Some(v)),
    }
}

fn check(state: &AppState, q: SessionsQuery) -> Result<Filters> {
    let statuses = match q.status.as_deref() {
        None => None,
        Some(list) => {
            let mut set = Vec::new();
            for s in list.split(',').map(str::trim) {
                set.push(match s {
                    "paused" => SessionStatus::Paused,
                    "running" => SessionStatus::Running,
                    "idle" => SessionStatus::Idle,
                    other => {
                        return Err(bad(format!(
                            "status `{other}` is not one of paused, running, idle"
                        )));
                    }
                });
            }
            Some(set)
        }
    };
    let principal = name_filter("principal", q.principal)?;
    if let Some(p) = &principal {
        let users = state.auth.user_names();
        if !users.contains(p) {
            return Err(bad(format!(
                "principal `{p}` owns no sessions: it is not a user; users: {}",
                if users.is_empty() {
                    "none".to_owned()
                } else {
                    users.join(", ")
                }
            )));
        }
    }
    let tool = name_filter("tool", q.tool)?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(bad("limit must be between 1 and 200"));
    }
    let after = match q.cursor.as_deref() {
        None => None,
        Some(c) => Some(
            cursor::decode(c)
                .filter(|k| k.2 == CURSOR_TAG)
                .ok_or_else(|| bad("`cursor` is not a sessions cursor this server gave out"))?,
        ),
    };
    Ok(Filters {
        statuses,
        principal,
        tool,
        limit,
        after,
    })
}

/// The phase a paused run is stored in (`phase.phase` of reins-agent's run state).
const PAUSED_PHASE: &str = "paused";

/// The most sessions the list reads from the store at once.
const MAX_BATCH: usize = 1000;

/// The id prefix that narrows the store's walk to sessions the caller may read and the
/// `principal` filter admits (the list checks each session exactly after); `None`
/// inside: no narrowing. `None`: the caller may read no session.
fn scope(state: &AppState, who: &Principal, principal: Option<&str>) -> Option<Option<String>> {
    let reads_all = who.has(AccessRole::Admin) || who.has(AccessRole::Approver);
    if !reads_all && !who.has(AccessRole::User) {
        return None;
    }
    let own = (!reads_all).then(|| who.prefix());
    let theirs = principal.and_then(|p| state.auth.user_prefix(p));
    Some(match (own, theirs) {
        // The narrower of two nested prefixes; otherwise the caller's own.
        (Some(o), Some(t)) if t.starts_with(&o) => Some(t),
        (Some(o), _) => Some(o),
        (None, t) => t,
    })
}

/// The sessions the caller may read, with their status, newest activity first.
#[utoipa::path(
    get, path = "/v1/sessions", tag = "sessions",
    params(SessionsQuery),
    responses(
        (status = 200, description = "One page of sessions, newest activity first", body = SessionsPage),
        (status = 400, description = "A bad filter, limit or cursor", body = ErrorBody),
        (status = 401, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_sessions(
    State(state): State<AppState>,
    Caller(who): Caller,
    ApiQuery(q): ApiQuery<SessionsQuery>,
) -> Result<Json<SessionsPage>> {
    let f = check(&state, q)?;
    let key = |updated_at, id: &str| -> cursor::Key {
        (Reverse(updated_at), id.to_owned(), CURSOR_TAG.to_owned())
    };
    let Some(session_prefix) = scope(&state, &who, f.principal.as_deref()) else {
        return Ok(Json(SessionsPage {
            sessions: Vec::new(),
            next_cursor: None,
        }));
    };
    // The store walks the sessions in the list's order from the cursor on, narrowed by
    // prefix and pending tool; each one is then checked as the session view shows it.
    // A session shows as paused, and lists pending tools, only while its stored run is
    // paused: the store narrows to those with its index on the run's phase.
    let only_paused = f.tool.is_some()
        || f.statuses
            .as_ref()
            .is_some_and(|s| !s.is_empty() && s.iter().all(|x| *x == SessionStatus::Paused));
    let mut filter = SessionFilter {
        session_prefix,
        open_tool: f.tool.clone(),
        phase: only_paused.then(|| PAUSED_PHASE.to_owned()),
        after: f.after.clone().map(|(at, id, _)| (at.0, id)),
        limit: f.limit + 1,
    };
    let mut rows = Vec::new();
    let mut more = false;
    'pages: loop {
        let heads = state.sessions.record().session_heads_page(&filter).await?;
        let full = heads.len() == filter.limit;
        let last = heads.last().map(|h| (h.updated_at, h.id.clone()));
        for head in heads {
            if !who.may_read(&head.id) {
                continue;
            }
            let principal = state.auth.owner_of(&head.id).map(|p| p.name.clone());
            if f.principal.is_some() && principal != f.principal {
                continue;
            }
            let running_here = state.hub.local_run(&head.id).is_some();
            let (id, version, message_count, created_at, updated_at) = (
                head.id.clone(),
                head.version,
                head.message_count,
                head.created_at,
                head.updated_at,
            );
            let read = view::of_head(&*state.sessions, head, running_here).await;
            let Some((detail, pending)) = ServerError::or_skip(read, &id, "the session list")?
            else {
                continue;
            };
            if f.statuses
                .as_ref()
                .is_some_and(|s| !s.contains(&detail.status))
            {
                continue;
            }
            let tools: BTreeSet<String> = pending.iter().map(|r| r.tool_use.name.clone()).collect();
            if f.tool.as_ref().is_some_and(|t| !tools.contains(t)) {
                continue;
            }
            if rows.len() == f.limit {
                more = true;
                break 'pages;
            }
            rows.push(SessionRow {
                id,
                status: detail.status,
                principal,
                pending_tools: tools.into_iter().collect(),
                pending_count: pending.len(),
                version,
                message_count,
                created_at,
                updated_at,
            });
        }
        match last {
            Some(last) if full => {
                filter.after = Some(last);
                filter.limit = (filter.limit * 2).min(MAX_BATCH);
            }
            _ => break,
        }
    }
    let next_cursor = if more {
        rows.last()
            .map(|r| cursor::encode(&key(r.updated_at, &r.id)))
    } else {
        None
    };
    Ok(Json(SessionsPage {
        sessions: rows,
        next_cursor,
    }))
}
