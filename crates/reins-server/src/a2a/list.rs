//! `ListTasks`: the caller's tasks, newest status first (ties by task id), filtered by
//! context, state and `statusTimestampAfter` (a task whose status time is at or after
//! it), in pages of at most 100.
//!
//! A page token is a keyset cursor ([`crate::inbox::cursor`]): the sort key of the last
//! task given, bound to the caller and the filters. The next page starts after that
//! key, so tasks added between pages (they sort first) neither repeat nor push tasks
//! off. A token that does not decode, or was given to another caller or for other
//! filters, is refused with `-32602`.

use std::cmp::Reverse;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::task::{TaskState, parse_task_id, task_json, tasks_of};
use super::{RpcError, history_length};
use crate::auth::Principal;
use crate::error::ServerError;
use crate::inbox::cursor;
use crate::state::AppState;

/// The filters of a listing.
struct Filters<'a> {
    context: Option<&'a str>,
    status: Option<TaskState>,
    after: Option<DateTime<Utc>>,
}

impl Filters<'_> {
    fn read(params: &Value) -> Result<Filters<'_>, RpcError> {
        let context = params
            .get("contextId")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty());
        let status = match params.get("status").and_then(Value::as_str) {
            None | Some("") | Some("TASK_STATE_UNSPECIFIED") => None,
            Some(s) => Some(TaskState::from_wire(s).ok_or_else(|| {
                RpcError::params(format!(
                    "`status` `{s}` is not a task state this agent uses"
                ))
            })?),
        };
        let after = match params.get("statusTimestampAfter") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(
                DateTime::parse_from_rfc3339(s)
                    .map_err(|e| {
                        RpcError::params(format!(
                            "`statusTimestampAfter` `{}` is not an RFC 3339 time such as 2026-01-31T09:30:00.000Z ({e})",
                            s.chars().take(60).collect::<String>()
                        ))
                    })?
                    .with_timezone(&Utc),
            ),
            Some(other) => {
                return Err(RpcError::params(format!(
                    "`statusTimestampAfter` must be an RFC 3339 time string such as 2026-01-31T09:30:00.000Z, not {other}"
                )));
            }
        };
        Ok(Filters {
            context,
            status,
            after,
        })
    }

    /// The tag of this caller's listing with these filters, which its page tokens carry.
    fn tag(&self, who: &Principal) -> String {
        let what = json!([
            who.name,
            self.context,
            self.status.map(TaskState::wire),
            self.after.map(|t| t.to_rfc3339()),
        ]);
        let digest = Sha256::digest(what.to_string().as_bytes());
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        format!("a2a-tasks/{hex}")
    }
}

/// `ListTasks`.
pub(super) async fn list_tasks(
    state: &AppState,
    who: &Principal,
    params: &Value,
) -> Result<Value, RpcError> {
    let filters = Filters::read(params)?;
    let page_size = match params.get("pageSize") {
        None | Some(Value::Null) => 50,
        Some(v) => match v.as_u64() {
            Some(n @ 1..=100) => n as usize,
            _ => return Err(RpcError::params("`pageSize` must be between 1 and 100")),
        },
    };
    let tag = filters.tag(who);
    let start = match params.get("pageToken") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) if t.is_empty() => None,
        Some(t) => Some(
            t.as_str()
                .and_then(cursor::decode)
                .filter(|k| k.2 == tag && parse_task_id(&k.1).is_some())
                .ok_or_else(|| {
                    RpcError::params(
                        "`pageToken` is not a page token this agent gave you for this listing (tokens are bound to the caller and the filters); list again without one",
                    )
                })?,
        ),
    };
    let history = history_length(params)?;
    let artifacts = params
        .get("includeArtifacts")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let sessions = state
        .sessions
        .list()
        .await
        .map_err(|e| RpcError::from(ServerError::from(e)))?;
    let mut all = Vec::new();
    for s in sessions {
        if !who.may_read(&s.id) || filters.context.is_some_and(|c| c != s.id) {
            continue;
        }
        let Ok(stored) = state.sessions.read(&s.id, true).await else {
            continue;
        };
        let running = state.hub.local_run(&s.id).is_some();
        let read = tasks_of(&s.id, stored, running).await;
        let Some(tasks) =
            ServerError::or_skip(read, &s.id, "tasks/list").map_err(RpcError::from)?
        else {
            continue;
        };
        all.extend(
            tasks
                .into_iter()
                .filter(|t| filters.status.is_none_or(|st| t.state == st))
                .filter(|t| filters.after.is_none_or(|after| t.timestamp >= after)),
        );
    }
    let key =
        |t: &super::TaskView| -> cursor::Key { (Reverse(t.timestamp), t.id.clone(), tag.clone()) };
    all.sort_by_key(|t| key(t));
    let total = all.len();
    let rest: Vec<_> = all
        .iter()
        .filter(|t| start.as_ref().is_none_or(|s| key(t) > *s))
        .collect();
    let page = &rest[..rest.len().min(page_size)];
    let next = if rest.len() > page_size {
        page.last()
            .map(|t| cursor::encode(&key(t)))
            .unwrap_or_default()
    } else {
        String::new()
    };
    Ok(json!({
        "tasks": page.iter().map(|t| task_json(t, history, artifacts)).collect::<Vec<_>>(),
        "nextPageToken": next,
        "pageSize": page_size,
        "totalSize": total,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn status_timestamp_after_is_an_rfc_3339_time() {
        for bad in [
            json!("-1"),
            json!("not-a-time"),
            json!(12),
            json!(""),
            json!({}),
        ] {
            let e = Filters::read(&json!({"statusTimestampAfter": bad}))
                .err()
                .unwrap();
            assert_eq!(e.code, -32602, "{bad}");
            assert!(e.message.contains("statusTimestampAfter"), "{}", e.message);
        }
        let p = json!({"statusTimestampAfter": "2026-01-31T11:30:00.000+02:00"});
        let f = Filters::read(&p).unwrap();
        assert_eq!(f.after.unwrap().to_rfc3339(), "2026-01-31T09:30:00+00:00");
        assert!(Filters::read(&json!({})).unwrap().after.is_none());
    }

    #[test]
    fn a_listing_tag_is_bound_to_the_caller_and_the_filters() {
        let carol = Principal::new("carol", [crate::auth::AccessRole::User]);
        let bob = Principal::new("bob", [crate::auth::AccessRole::User]);
        let all = json!({});
        let ctx = json!({"contextId": "carol/x"});
        let tag = |who: &Principal, p: &Value| Filters::read(p).unwrap().tag(who);
        assert_eq!(tag(&carol, &all), tag(&carol, &all));
        assert_ne!(tag(&carol, &all), tag(&bob, &all));
        assert_ne!(tag(&carol, &all), tag(&carol, &ctx));
    }
}
