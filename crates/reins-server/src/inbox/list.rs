//! `GET /v1/sessions`: the sessions the caller may read with their status, owner and
//! pending tools, filtered by status, principal and tool, newest activity first,
//! paginated with a [`cursor`](super::cursor).
//!
//! The store is read once without transcripts ([`MemoryStore::list_session_heads`]:
//! two queries on the SQL stores however many sessions there are); each session's
//! status comes from the same view `GET /v1/sessions/{id}` shows, so the list and
//! the session never disagree.
//!
//! [`MemoryStore::list_session_heads`]: reins_memory::MemoryStore::list_session_heads

use std::cmp::Reverse;
use std::collections::BTreeSet;

use axum::Json;
use axum::extract::State;

use super::cursor;
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
    let mut heads: Vec<_> = state
        .agent
        .store()
        .list_session_heads()
        .await?
        .into_iter()
        .filter(|h| who.may_read(&h.id))
        .filter(|h| {
            f.after
                .as_ref()
                .is_none_or(|a| key(h.updated_at, &h.id) > *a)
        })
        .map(|h| {
            let owner = state.auth.owner_of(&h.id).map(|p| p.name.clone());
            (h, owner)
        })
        .filter(|(_, owner)| f.principal.is_none() || *owner == f.principal)
        .collect();
    heads.sort_by_key(|(h, _)| key(h.updated_at, &h.id));

    let mut rows = Vec::new();
    let mut more = false;
    for (head, principal) in heads {
        let running_here = state.hub.local_run(&head.id).is_some();
        let (id, version, message_count, created_at, updated_at) = (
            head.id.clone(),
            head.version,
            head.message_count,
            head.created_at,
            head.updated_at,
        );
        let (detail, pending) = match view::of_head(&state.agent, head, running_here).await {
            Ok(v) => v,
            Err(e) if e.skippable_in_list() => {
                tracing::warn!(session = %id, error = %e, "the session list leaves out a session it cannot read");
                continue;
            }
            Err(e) => return Err(e),
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
            break;
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
