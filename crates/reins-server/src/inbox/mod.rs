//! The approval inbox: the page a person decides on (`/`, `/inbox`, its scripts under
//! `/inbox/js/`), the pending
//! requirements across sessions (`GET /v1/requirements`, newest first, paginated with
//! a [`cursor`]), the sessions with their status ([`list`], `GET /v1/sessions`), the stream of inbox changes (`GET /v1/events`) and who the caller is
//! (`GET /v1/me`).

pub(crate) mod cursor;
pub(crate) mod list;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::Event;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use reins_agent::RequirementKind;
use reins_agent::port::SessionEvent;
use reins_memory::{PendingFilter, PendingKey};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use crate::auth::Principal;
use crate::error::{ErrorBody, Result, ServerError};
use crate::extract::{ApiQuery, Caller};
use crate::hub::Notice;
use crate::sse::{CLIENT_BUFFER, respond};
use crate::state::AppState;
use crate::types::{InboxChange, InboxItem, InboxPage, InboxQuery, Me, SessionDetail};
use crate::view;

/// The inbox page (plain HTML, CSS and JavaScript; no build step).
const INBOX_HTML: &str = include_str!("inbox.html");

/// The page's scripts, by name, in the order the page loads them (each file says what
/// it does).
const SCRIPTS: [(&str, &str); 9] = [
    ("core.js", include_str!("js/core.js")),
    ("schema.js", include_str!("js/schema.js")),
    ("form.js", include_str!("js/form.js")),
    ("cards.js", include_str!("js/cards.js")),
    ("session.js", include_str!("js/session.js")),
    ("lists.js", include_str!("js/lists.js")),
    ("webhooks.js", include_str!("js/webhooks.js")),
    ("policy.js", include_str!("js/policy.js")),
    ("start.js", include_str!("js/start.js")),
];

/// The inbox's routes: its page and `/v1/requirements`, `/v1/events`, `/v1/me`.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(inbox_page))
        .route("/inbox", get(inbox_page))
        .route("/inbox/js/{name}", get(inbox_script))
        .route("/v1/me", get(get_me))
        .route("/v1/requirements", get(get_requirements))
        .route("/v1/sessions", get(list::get_sessions))
        .route("/v1/events", get(get_inbox_events))
}

async fn inbox_page() -> Response {
    let mut res = Html(INBOX_HTML).into_response();
    res.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'unsafe-inline' 'self'",
        ),
    );
    res
}

/// One of the page's scripts; 404 for any other name.
async fn inbox_script(Path(name): Path<String>) -> Response {
    let Some((_, body)) = SCRIPTS.iter().find(|(n, _)| *n == name) else {
        let message = format!(
            "no inbox script `{name}`; the page has: {}",
            SCRIPTS.map(|(n, _)| n).join(", ")
        );
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": {"code": "not_found", "message": message}})),
        )
            .into_response();
    };
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/javascript; charset=utf-8"),
            ),
            // Revalidated on every load, so a page never runs scripts of two versions.
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        *body,
    )
        .into_response()
}

/// The inbox: pending requirements across the sessions the caller may see, newest
/// first.
#[utoipa::path(
    get, path = "/v1/requirements", tag = "inbox",
    params(InboxQuery),
    responses(
        (status = 200, description = "One page of pending requirements", body = InboxPage),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_requirements(
    State(state): State<AppState>,
    Caller(who): Caller,
    ApiQuery(q): ApiQuery<InboxQuery>,
) -> Result<Json<InboxPage>> {
    if let Some(s) = q.status.as_deref()
        && s != "pending"
    {
        return Err(ServerError::BadRequest(format!(
            "status `{s}` is not supported (only `pending`)"
        )));
    }
    let limit = q.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(ServerError::BadRequest(
            "limit must be between 1 and 200".to_owned(),
        ));
    }
    let after = match q.cursor.as_deref() {
        None => None,
        Some(c) => Some(cursor::decode(c).ok_or_else(|| {
            ServerError::BadRequest("`cursor` is not a cursor this server gave out".to_owned())
        })?),
    };
    let assigned = match q.assigned.as_deref() {
        None => false,
        Some("me") => true,
        Some(other) => {
            return Err(ServerError::BadRequest(format!(
                "assigned `{other}` is not supported (only `me`)"
            )));
        }
    };
    let Some(scope) = who.pending_scope() else {
        return Ok(Json(InboxPage {
            items: Vec::new(),
            next_cursor: None,
        }));
    };
    // The store lists open requirements in the inbox's order from the cursor on; each
    // session they belong to is read once, and its view says what is shown.
    let mut views: HashMap<String, Option<Shown>> = HashMap::new();
    let mut items = Vec::new();
    let mut filter = PendingFilter {
        after: after.map(|(at, session, id)| PendingKey {
            created_at: at.0,
            session_id: session,
            requirement_id: id,
        }),
        limit: limit + 1,
        ..scope
    };
    'pages: loop {
        let rows = state
            .sessions
            .record()
            .pending_requirements(&filter)
            .await?;
        // The sessions of this batch not read yet, read at once (without transcripts).
        let new: BTreeSet<&String> = rows
            .iter()
            .map(|r| &r.key.session_id)
            .filter(|s| who.may_read(s) && !views.contains_key(*s))
            .collect();
        let new: Vec<String> = new.into_iter().cloned().collect();
        for head in state.sessions.record().session_heads(&new).await? {
            let id = head.id.clone();
            let shown = shown(&state, head).await?;
            views.insert(id, shown);
        }
        for id in new {
            // Deleted since it was listed.
            views.entry(id).or_insert(None);
        }
        // What the caller sees of this batch; then the deliveries of its sessions'
        // notices, in one store call.
        let mut shown_rows = Vec::new();
        for row in &rows {
            let session = &row.key.session_id;
            if !who.may_read(session) {
                continue;
            }
            let Some(Some((detail, pending))) = views.get(session) else {
                continue;
            };
            let Some(r) = pending.iter().find(|r| r.id == row.key.requirement_id) else {
                continue;
            };
            if !(who.may_decide(&r.tool_use.name) || who.owns(session)) {
                continue;
            }
            shown_rows.push((session, detail, r));
        }
        let sessions: BTreeSet<&String> = shown_rows.iter().map(|(s, _, _)| *s).collect();
        let deliveries = if sessions.is_empty() {
            HashMap::new()
        } else {
            crate::approvals::deliveries_of(&state, sessions).await
        };
        for (session, detail, r) in shown_rows {
            let sent = deliveries
                .get(&(session.clone(), r.id.clone()))
                .map_or(&[][..], Vec::as_slice);
            let item = item(&state, session, detail, r, sent);
            if assigned && !item.notified.iter().any(|n| n.to.contains(&who.name)) {
                continue;
            }
            items.push(item);
            if items.len() > limit {
                break 'pages;
            }
        }
        match rows.last() {
            Some(last) if rows.len() == filter.limit => {
                filter.after = Some(last.key.clone());
                filter.limit = (filter.limit * 2).min(MAX_BATCH);
            }
            _ => break,
        }
    }
    // Newest first; ties by session, then id, so that pages are stable (the store's
    // order; sorted again in case a view's time differs from its record's).
    let key = |i: &InboxItem| -> cursor::Key {
        (
            std::cmp::Reverse(i.created_at),
            i.session_id.clone(),
            i.requirement_id.clone(),
        )
    };
    items.sort_by_key(key);
    let more = items.len() > limit;
    items.truncate(limit);
    let next_cursor = if more {
        items.last().map(|i| cursor::encode(&key(i)))
    } else {
        None
    };
    Ok(Json(InboxPage { items, next_cursor }))
}

/// The most open requirements the inbox reads from the store at once.
const MAX_BATCH: usize = 1000;

/// A session's view and the requirements it shows.
type Shown = (SessionDetail, Vec<reins_agent::Requirement>);

/// What the inbox shows of a session read without its transcript (its view reads
/// only the run state, as the session list's does): `None` when its stored state
/// cannot be read (left out, so that one such session does not hide the others).
async fn shown(state: &AppState, head: reins_memory::SessionHead) -> Result<Option<Shown>> {
    let id = head.id.clone();
    let running = state.hub.local_run(&id).is_some();
    ServerError::or_skip(
        view::of_head(&*state.sessions, head, running).await,
        &id,
        "the inbox",
    )
}

/// The inbox item of requirement `r` of `session`, with the deliveries of its notices.
fn item(
    state: &AppState,
    session: &str,
    detail: &SessionDetail,
    r: &reins_agent::Requirement,
    sent: &[reins_memory::Delivery],
) -> InboxItem {
    let (kind, fields) = match &r.kind {
        RequirementKind::Confirmation => ("confirmation", None),
        RequirementKind::UserInput { fields } => ("user_input", Some(fields.clone())),
        RequirementKind::External => ("external", None),
        // The arguments show the spend, the limit and a suggested one; the page's
        // form approves with a new limit (`edited_args`), or plain approve takes
        // the suggested one.
        RequirementKind::Budget { .. } => ("budget", None),
    };
    InboxItem {
        session_id: session.to_owned(),
        requirement_id: r.id.clone(),
        tool: r.tool_use.name.clone(),
        tool_schema: state
            .sessions
            .card()
            .tools
            .iter()
            .find(|spec| spec.name == r.tool_use.name)
            .map(|spec| spec.parameters.clone()),
        arguments: r.tool_use.input.clone(),
        fingerprint: r.fingerprint(),
        kind: kind.to_owned(),
        fields,
        reason: r.reason.clone(),
        created_at: r.created_at,
        expires_at: r.expires_at,
        view_token: detail.view_token.clone(),
        quorum: r.quorum.as_ref().map(Into::into),
        notified: crate::approvals::notified(state, sent, r),
    }
}

/// Inbox changes (SSE): a `changed` event whenever a session the caller may see
/// changes, on any instance, with what the store holds now (an `InboxChange`: its
/// version, whether it waits, its open requirements).
#[utoipa::path(
    get, path = "/v1/events", tag = "inbox",
    responses(
        (status = 200, description = "An SSE stream of `changed` events, each an `InboxChange` (the session, its stored version and open requirements)", content_type = "text/event-stream", body = String),
        (status = 401, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_inbox_events(
    State(state): State<AppState>,
    Caller(who): Caller,
) -> Result<Response> {
    Ok(inbox_stream(state, who))
}

/// Who the token belongs to.
#[utoipa::path(
    get, path = "/v1/me", tag = "inbox",
    responses((status = 200, body = Me), (status = 401, body = ErrorBody)),
    security(("bearer" = []))
)]
pub(crate) async fn get_me(Caller(who): Caller) -> Json<Me> {
    Json(Me {
        session_prefix: who.prefix(),
        principal: (*who).clone(),
    })
}

/// The `changed` event of notice `n` about session `id`: what the store holds now,
/// when the notice carries it.
fn change_of(n: &Notice, id: &str) -> InboxChange {
    match n {
        Notice::Stored(SessionEvent::Changed(c)) => InboxChange::of(c),
        Notice::Stored(SessionEvent::Removed { session }) => InboxChange::removed(session.clone()),
        _ => InboxChange::named(Some(id.to_owned())),
    }
}

/// The inbox stream: `changed` events for the sessions the caller may read.
fn inbox_stream(state: AppState, who: Arc<Principal>) -> Response {
    let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
    let keep_alive = state.limits.keep_alive;
    tokio::spawn(async move {
        let mut notices = state.hub.notices();
        state.hub.ensure_poller(&state.sessions).await;
        if tx
            .send(Event::default().event("ready").data("{}"))
            .await
            .is_err()
        {
            return;
        }
        loop {
            tokio::select! {
                () = tx.closed() => return,
                n = notices.recv() => {
                    let change = match n {
                        Ok(n) => match n.session() {
                            Some(id) if who.may_read(id) => change_of(&n, id),
                            Some(_) => continue,
                            // The store could not be read: tell the client to reload.
                            None => InboxChange::unknown(),
                        },
                        // Fell behind: tell the client to reload everything.
                        Err(RecvError::Lagged(_)) => InboxChange::unknown(),
                        Err(RecvError::Closed) => return,
                    };
                    let Ok(data) = serde_json::to_string(&change) else {
                        continue;
                    };
                    if tx.send(Event::default().event("changed").data(data)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    respond(rx, keep_alive)
}
