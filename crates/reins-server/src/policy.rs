//! `GET /v1/policy/shadow` (admin role): where the shadow policy set would have
//! answered differently from the active one (see reins-policy's shadow mode), newest
//! first, paginated with the inbox's [`cursor`](crate::inbox::cursor). The inbox's
//! **Policy shadow** view reads it.

use std::cmp::Reverse;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use reins_policy::{Answer, Question, ShadowDifference, Verdict};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ErrorBody, Result, ServerError};
use crate::extract::{Admin, ApiQuery};
use crate::inbox::cursor;
use crate::state::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/v1/policy/shadow", get(get_shadow))
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
