//! `GET /v1/policy/shadow` (admin role): where the shadow policy set would have
//! answered differently from the active one (see reins-policy's shadow mode), newest
//! first, paginated with the inbox's [`cursor`](crate::inbox::cursor). The inbox's
//! **Policy shadow** view reads it.
//!
//! With the policies in directories ([`reins_policy::PolicyDir`], from the
//! configuration's `[policies]`), `GET /v1/policy` (admin role) shows the sets in use
//! (directories, SHA-256 digests, policy ids), when they were loaded and the last
//! refused reload; `POST /v1/policy/reload` (admin role) reloads them now, and the
//! triggers of [`Reloads`] — SIGHUP, a look at the directories every interval —
//! reload them on their own. A refused reload keeps the sets in use.

use std::cmp::Reverse;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use reins_policy::{
    Answer, LoadedSet, PolicyDir, Question, ReloadStatus, ShadowDifference, Verdict,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ErrorBody, Result, ServerError};
use crate::extract::{Admin, ApiQuery};
use crate::inbox::cursor;
use crate::state::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/policy/shadow", get(get_shadow))
        .route("/v1/policy", get(get_policy))
        .route("/v1/policy/reload", post(post_reload))
}

/// What reloads policies kept in directories, besides `POST /v1/policy/reload`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Reloads {
    /// On SIGHUP (Unix).
    pub(crate) on_sighup: bool,
    /// A look at the directories this often; a change reloads.
    pub(crate) watch: Option<Duration>,
}

/// The reload triggers' tasks, stopped when the last clone of the state is dropped.
#[derive(Debug)]
pub(crate) struct ReloadTasks(Vec<tokio::task::JoinHandle<()>>);

impl Drop for ReloadTasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Starts the triggers of `reloads` for `dir`. The SIGHUP handler is installed before
/// this returns: a signal sent after it reloads.
pub(crate) fn spawn_reloads(dir: &Arc<PolicyDir>, reloads: Reloads) -> ReloadTasks {
    let mut tasks = Vec::new();
    #[cfg(unix)]
    if reloads.on_sighup {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::hangup()) {
            Ok(mut hangups) => {
                let dir = Arc::clone(dir);
                tasks.push(tokio::spawn(async move {
                    while hangups.recv().await.is_some() {
                        // Refusals are kept in the status (and logged).
                        let _ = dir.reload("signal");
                    }
                }));
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; policies reload on file changes and at POST /v1/policy/reload")
            }
        }
    }
    if let Some(every) = reloads.watch {
        let dir = Arc::clone(dir);
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let _ = dir.reload_if_changed("file change");
            }
        }));
    }
    ReloadTasks(tasks)
}

/// One policy set in use.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PolicySetStatus {
    /// Its directory.
    pub directory: String,
    /// SHA-256 (hex) of its files' names and contents, in name order.
    pub sha256: String,
    /// The set's hash as the audit trail (`policy_hash`) and evidence receipts carry it
    /// for each call it decided (see docs/policy.md, "The set's hash").
    pub policy_hash: String,
    /// Its policies' ids.
    pub policies: Vec<String>,
    /// Its files.
    pub files: Vec<String>,
}

impl From<&LoadedSet> for PolicySetStatus {
    fn from(s: &LoadedSet) -> Self {
        Self {
            directory: s.directory.display().to_string(),
            sha256: s.sha256.clone(),
            policy_hash: s.hash.clone(),
            policies: s.policies.clone(),
            files: s.files.iter().map(|f| f.display().to_string()).collect(),
        }
    }
}

/// A refused reload.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PolicyReloadError {
    /// When.
    pub at: DateTime<Utc>,
    /// `signal`, `file change` or `endpoint`.
    pub trigger: String,
    /// Why (each problem with its file, line and reason).
    pub message: String,
}

/// `GET /v1/policy`: the policy sets in use and the last refused reload.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PolicyStatus {
    /// `ok`, `error` (the last reload was refused; the older sets answer) or
    /// `unconfigured` (no policies from directories).
    pub state: String,
    /// The active set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<PolicySetStatus>,
    /// The shadow set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<PolicySetStatus>,
    /// When the sets in use were loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_at: Option<DateTime<Utc>>,
    /// Successful reloads since start.
    pub reloads: u64,
    /// The last refused reload, when none succeeded since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<PolicyReloadError>,
}

impl From<&ReloadStatus> for PolicyStatus {
    fn from(s: &ReloadStatus) -> Self {
        Self {
            state: s.state().to_owned(),
            active: Some((&s.active).into()),
            shadow: s.shadow.as_ref().map(Into::into),
            loaded_at: Some(s.loaded_at),
            reloads: s.reloads,
            last_error: s.last_error.as_ref().map(|e| PolicyReloadError {
                at: e.at,
                trigger: e.trigger.clone(),
                message: e.message.clone(),
            }),
        }
    }
}

fn unconfigured() -> PolicyStatus {
    PolicyStatus {
        state: "unconfigured".to_owned(),
        active: None,
        shadow: None,
        loaded_at: None,
        reloads: 0,
        last_error: None,
    }
}

/// The policy sets in use, their digests, and the last refused reload (admin role).
#[utoipa::path(
    get, path = "/v1/policy", tag = "policy",
    responses(
        (status = 200, description = "The policy sets in use", body = PolicyStatus),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_policy(State(state): State<AppState>, _: Admin) -> Json<PolicyStatus> {
    Json(
        state
            .policy_dir
            .as_ref()
            .map_or_else(unconfigured, |d| (&d.status()).into()),
    )
}

/// Reloads the policy directories now (admin role); a refused set keeps the sets in
/// use (422, the problems in the message; `GET /v1/policy` shows it too).
#[utoipa::path(
    post, path = "/v1/policy/reload", tag = "policy",
    responses(
        (status = 200, description = "Reloaded: the sets now in use", body = PolicyStatus),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 422, description = "Refused (`policy_refused`; the sets in use stay), or no policies from directories (`policy_not_configured`)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn post_reload(
    State(state): State<AppState>,
    _: Admin,
) -> Result<Json<PolicyStatus>> {
    let Some(dir) = state.policy_dir.clone() else {
        return Err(ServerError::Invalid {
            code: "policy_not_configured",
            message: "this server has no policies from directories to reload".to_owned(),
        });
    };
    match dir.reload("endpoint") {
        Ok(s) => Ok(Json((&s).into())),
        Err(e) => Err(ServerError::Invalid {
            code: "policy_refused",
            message: format!("{e}; the sets in use stay"),
        }),
    }
}

/// `GET /v1/policy/shadow` query.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ShadowQuery {
    /// Page size, 1–200 (default 50).
    #[serde(default)]
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Only the differences of this session.
    #[serde(default)]
    pub session: Option<String>,
    /// Only the differences about this tool.
    #[serde(default)]
    pub tool: Option<String>,
}

/// One policy set's answer, as the shadow list shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ShadowAnswer {
    /// `allow`, `deny` or `ask`.
    pub verdict: String,
    /// The ids of the policies that produced it (empty: no policy applied).
    pub policies: Vec<String>,
    /// The `@reason` of the first rejecting policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl From<&Answer> for ShadowAnswer {
    fn from(a: &Answer) -> Self {
        Self {
            verdict: match a.verdict {
                Verdict::Allow => "allow",
                Verdict::Deny => "deny",
                Verdict::Ask => "ask",
            }
            .to_owned(),
            policies: a.policies.clone(),
            note: a.note.clone(),
        }
    }
}

/// One question the two sets answered differently; only `active` was acted on.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ShadowItem {
    /// When it was asked.
    pub at: DateTime<Utc>,
    /// `call` (may it run without asking?), `decide` (may this person decide it?) or
    /// `grant` (may this person create this grant?).
    pub question: String,
    /// The session ("" for a grant not scoped to one).
    pub session_id: String,
    /// The tool.
    pub tool: String,
    /// The tool use / requirement id ("" for a grant).
    pub call: String,
    /// The call's arguments as compact JSON, cut at 200 characters (a grant's
    /// argument conditions).
    pub arguments: String,
    /// Who: the session's principal, the decider, or the grant's author ("" unnamed).
    pub principal: String,
    /// What the active set answered, and what happened.
    pub active: ShadowAnswer,
    /// What the shadow set would have answered.
    pub shadow: ShadowAnswer,
}

impl From<&ShadowDifference> for ShadowItem {
    fn from(d: &ShadowDifference) -> Self {
        Self {
            at: d.at,
            question: match d.question {
                Question::Call => "call",
                Question::Decide => "decide",
                Question::Grant => "grant",
            }
            .to_owned(),
            session_id: d.session.clone(),
            tool: d.tool.clone(),
            call: d.call.clone(),
            arguments: d.arguments.clone(),
            principal: d.principal.clone(),
            active: (&d.active).into(),
            shadow: (&d.shadow).into(),
        }
    }
}

/// `GET /v1/policy/shadow`: one page, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ShadowPage {
    /// Whether the server was given the policies (`Server::policy`); without them
    /// the list is always empty.
    pub configured: bool,
    /// The ids of the active set's policies.
    pub active_policies: Vec<String>,
    /// The ids of the shadow set's policies (absent: no shadow set now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow_policies: Option<Vec<String>>,
    /// The differences.
    pub differences: Vec<ShadowItem>,
    /// Pass as `cursor` for the next page (absent on the last page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Where the shadow policy set would have answered differently, newest first
/// (admin role).
#[utoipa::path(
    get, path = "/v1/policy/shadow", tag = "policy",
    params(ShadowQuery),
    responses(
        (status = 200, description = "One page of shadow differences", body = ShadowPage),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_shadow(
    State(state): State<AppState>,
    _: Admin,
    ApiQuery(q): ApiQuery<ShadowQuery>,
) -> Result<Json<ShadowPage>> {
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
    let Some(policy) = state.policy.as_ref() else {
        return Ok(Json(ShadowPage {
            configured: false,
            active_policies: Vec::new(),
            shadow_policies: None,
            differences: Vec::new(),
            next_cursor: None,
        }));
    };
    let mut items: Vec<ShadowItem> = policy
        .differences()
        .iter()
        .filter(|d| q.session.as_deref().is_none_or(|s| d.session == s))
        .filter(|d| q.tool.as_deref().is_none_or(|t| d.tool == t))
        .map(ShadowItem::from)
        .collect();
    // Newest first; ties by session, then call and question, so that pages are stable.
    let key = |i: &ShadowItem| -> cursor::Key {
        (
            Reverse(i.at),
            i.session_id.clone(),
            format!("{}/{}", i.call, i.question),
        )
    };
    items.sort_by_key(key);
    if let Some(after) = after {
        items.retain(|i| key(i) > after);
    }
    let more = items.len() > limit;
    items.truncate(limit);
    let next_cursor = if more {
        items.last().map(|i| cursor::encode(&key(i)))
    } else {
        None
    };
    Ok(Json(ShadowPage {
        configured: true,
        active_policies: policy.active().ids().map(str::to_owned).collect(),
        shadow_policies: policy
            .shadow()
            .map(|s| s.ids().map(str::to_owned).collect()),
        differences: items,
        next_cursor,
    }))
}
