//! A2A push notifications: a task's push notification configurations
//! (`CreateTaskPushNotificationConfig`, `GetTaskPushNotificationConfig`,
//! `ListTaskPushNotificationConfigs`, `DeleteTaskPushNotificationConfig`, and
//! `configuration.taskPushNotificationConfig` on `SendMessage`), kept in the store, and
//! their delivery through the notification outbox.
//!
//! Every state change of a task is a notice in the outbox (written with the change):
//! a requirement waiting is `TASK_STATE_INPUT_REQUIRED`, a decision `TASK_STATE_WORKING`,
//! a run that completed `TASK_STATE_COMPLETED`, one that failed `TASK_STATE_FAILED`.
//! Each is POSTed to every configuration of the task as a `StreamResponse` with a
//! `statusUpdate`, with the configuration's `token` in `X-A2A-Notification-Token` and its
//! `authentication` as `Authorization: <scheme> <credentials>`, and retried like any
//! delivery. A notice belongs to the task (the turn) of its session that had begun when
//! it was written.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use reins_memory::{MemoryStore, Notice, NoticeKind, Subscription};
use reins_message::Role;
use serde_json::{Value, json};

use super::task::{TASK_MARK, parse_task_id, task_id};
use super::{RpcError, load_task};
use crate::auth::Principal;
use crate::error::ServerError;
use crate::notify::{Attempt, DeliveryError, Source};
use crate::state::AppState;

/// The store's subscription kind of push configurations.
const KIND: &str = "a2a";
/// The destination prefix of push deliveries.
const PREFIX: &str = "a2a:";

/// The stored id of a task's configuration.
fn stored_id(task: &str, config: &str) -> String {
    format!("{task}/{config}")
}

/// Reads and checks a `TaskPushNotificationConfig` (without its `taskId`, which the
/// caller checked): its wire form as stored, with an id.
fn config_of(task: &str, session: &str, owner: &str, params: &Value) -> Result<Value, RpcError> {
    let url = params
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::params("a push notification config needs a `url`"))?;
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {}
        _ => {
            return Err(RpcError::params(format!(
                "`url` must be an http or https URL with a host, not `{url}`"
            )));
        }
    }
    let id = match params.get("id").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => {
            if id.len() > 200 || id.contains('/') || id.chars().any(char::is_control) {
                return Err(RpcError::params(
                    "a config `id` is 1 to 200 characters without `/` or control characters",
                ));
            }
            id.to_owned()
        }
        _ => uuid::Uuid::new_v4().to_string(),
    };
    let text = |k: &str| params.get(k).and_then(Value::as_str).map(str::to_owned);
    let auth = match params.get("authentication") {
        None | Some(Value::Null) => None,
        Some(a) => {
            let scheme = a.get("scheme").and_then(Value::as_str).unwrap_or_default();
            if scheme.is_empty() || scheme.contains(char::is_whitespace) {
                return Err(RpcError::params(
                    "`authentication.scheme` must be an HTTP authentication scheme such as `Bearer`",
                ));
            }
            Some(json!({
                "scheme": scheme,
                "credentials": a.get("credentials").and_then(Value::as_str).unwrap_or_default(),
            }))
        }
    };
    let mut config = json!({"id": id, "taskId": task, "url": url});
    if let Some(t) = text("token") {
        config["token"] = json!(t);
    }
    if let Some(a) = auth {
        config["authentication"] = a;
    }
    if let Some(t) = text("tenant") {
        config["tenant"] = json!(t);
    }
    Ok(json!({"config": config, "session": session, "owner": owner}))
}

/// Stores a configuration for a task the caller may read.
pub(super) async fn save(
    state: &AppState,
    who: &Principal,
    task: &str,
    session: &str,
    params: &Value,
) -> Result<Value, RpcError> {
    let body = config_of(task, session, &who.name, params)?;
    let config = body["config"].clone();
    let id = config["id"].as_str().unwrap_or_default().to_owned();
    let sub = Subscription {
        id: stored_id(task, &id),
        kind: KIND.to_owned(),
        body,
        created_at: Utc::now(),
    };
    state
        .sessions
        .record()
        .put_subscription(&sub)
        .await
        .map_err(ServerError::from)?;
    Ok(config)
}

fn task_param(params: &Value) -> Result<String, RpcError> {
    params
        .get("taskId")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| RpcError::params("`taskId` is required"))
}

/// The configurations of a task, oldest first.
async fn configs(state: &AppState, task: &str) -> Result<Vec<Value>, RpcError> {
    let prefix = format!("{task}/");
    Ok(state
        .sessions
        .record()
        .subscriptions(KIND)
        .await
        .map_err(ServerError::from)?
        .into_iter()
        .filter(|s| s.id.starts_with(&prefix))
        .map(|s| s.body["config"].clone())
        .collect())
}

/// `CreateTaskPushNotificationConfig`.
pub(super) async fn create(
    state: &AppState,
    who: &Principal,
    params: &Value,
) -> Result<Value, RpcError> {
    let task = task_param(params)?;
    let view = load_task(state, who, &task).await?;
    save(state, who, &task, &view.context_id, params).await
}

/// `GetTaskPushNotificationConfig`.
pub(super) async fn get(
    state: &AppState,
    who: &Principal,
    params: &Value,
) -> Result<Value, RpcError> {
    let task = task_param(params)?;
    load_task(state, who, &task).await?;
    let id = params.get("id").and_then(Value::as_str).unwrap_or_default();
    configs(state, &task)
        .await?
        .into_iter()
        .find(|c| c["id"] == id)
        .ok_or_else(|| {
            RpcError::params(format!(
                "task `{task}` has no push notification config `{id}`"
            ))
        })
}

/// `ListTaskPushNotificationConfigs` (one page: a task has few).
pub(super) async fn list(
    state: &AppState,
    who: &Principal,
    params: &Value,
) -> Result<Value, RpcError> {
    let task = task_param(params)?;
    load_task(state, who, &task).await?;
    Ok(json!({"configs": configs(state, &task).await?, "nextPageToken": ""}))
}

/// `DeleteTaskPushNotificationConfig`.
pub(super) async fn delete(
    state: &AppState,
    who: &Principal,
    params: &Value,
) -> Result<Value, RpcError> {
    let task = task_param(params)?;
    load_task(state, who, &task).await?;
    let id = params.get("id").and_then(Value::as_str).unwrap_or_default();
    let gone = state
        .sessions
        .record()
        .delete_subscription(&stored_id(&task, id))
        .await
        .map_err(ServerError::from)?;
    if !gone {
        return Err(RpcError::params(format!(
            "task `{task}` has no push notification config `{id}`"
        )));
    }
    Ok(json!({}))
}

/// The task state a notice reports, for the kinds that change one.
fn state_of(kind: NoticeKind) -> Option<&'static str> {
    match kind {
        NoticeKind::RequirementWaiting => Some("TASK_STATE_INPUT_REQUIRED"),
        NoticeKind::RequirementDecided => Some("TASK_STATE_WORKING"),
        NoticeKind::RunCompleted => Some("TASK_STATE_COMPLETED"),
        NoticeKind::RunFailed => Some("TASK_STATE_FAILED"),
        _ => None,
    }
}

/// Routes task state changes to push configurations and delivers them.
pub(crate) struct Pushes {
    pub(crate) store: Arc<dyn MemoryStore>,
    pub(crate) http: reqwest::Client,
}

impl Pushes {
    pub(crate) fn new(store: Arc<dyn MemoryStore>) -> Self {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self { store, http }
    }

    /// The task of `session` that had begun at `at`: its last A2A message up to then.
    async fn task_at(
        &self,
        session: &str,
        at: DateTime<Utc>,
    ) -> reins_memory::Result<Option<String>> {
        let s = match self.store.load_session(session).await {
            Ok(s) => s,
            Err(reins_memory::Error::SessionNotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(s.messages
            .iter()
            .rfind(|m| {
                m.role == Role::User && m.metadata.contains_key(TASK_MARK) && m.created_at <= at
            })
            .map(|m| task_id(session, &m.id)))
    }
}

#[async_trait::async_trait]
impl Source for Pushes {
    async fn route(&self, notice: &Notice) -> reins_memory::Result<Vec<String>> {
        let (Some(session), Some(_)) = (&notice.session, state_of(notice.kind)) else {
            return Ok(Vec::new());
        };
        let subs = self.store.subscriptions(KIND).await?;
        if !subs.iter().any(|s| s.body["session"] == session.as_str()) {
            return Ok(Vec::new());
        }
        let Some(task) = self.task_at(session, notice.created_at).await? else {
            return Ok(Vec::new());
        };
        let prefix = format!("{task}/");
        Ok(subs
            .into_iter()
            .filter(|s| s.id.starts_with(&prefix))
            .map(|s| format!("{PREFIX}{}", s.id))
            .collect())
    }

    async fn deliver(
        &self,
        destination: &str,
        notice: &Notice,
        _attempt: &Attempt,
    ) -> Option<Result<(), DeliveryError>> {
        let id = destination.strip_prefix(PREFIX)?;
        Some(self.post(id, notice).await)
    }
}

impl Pushes {
    async fn post(&self, id: &str, notice: &Notice) -> Result<(), DeliveryError> {
        let subs = self
            .store
            .subscriptions(KIND)
            .await
            .map_err(|e| DeliveryError::Retryable(e.to_string()))?;
        let Some(sub) = subs.into_iter().find(|s| s.id == id) else {
            return Err(DeliveryError::Permanent(format!(
                "push notification config `{id}` was deleted"
            )));
        };
        let config = &sub.body["config"];
        let (Some(url), Some(task), Some(state)) = (
            config["url"].as_str(),
            config["taskId"].as_str(),
            state_of(notice.kind),
        ) else {
            return Err(DeliveryError::Permanent(format!(
                "push notification config `{id}` is incomplete"
            )));
        };
        let context = parse_task_id(task).map(|(s, _)| s).unwrap_or_default();
        let body = json!({"statusUpdate": {
            "taskId": task,
            "contextId": context,
            "status": {
                "state": state,
                "timestamp": notice.created_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            },
            "metadata": {"noticeId": notice.id, "event": notice.kind.as_str()},
        }});
        let mut req = self.http.post(url).json(&body);
        if let Some(t) = config["token"].as_str() {
            req = req.header("X-A2A-Notification-Token", t);
        }
        if let (Some(scheme), Some(creds)) = (
            config["authentication"]["scheme"].as_str(),
            config["authentication"]["credentials"].as_str(),
        ) {
            if !creds.is_empty() {
                req = req.header("Authorization", format!("{scheme} {creds}"));
            }
        }
        let resp = req.send().await.map_err(|e| {
            DeliveryError::Retryable(format!(
                "POST {url} failed ({})",
                if e.is_timeout() {
                    "timed out"
                } else {
                    "could not connect"
                }
            ))
        })?;
        let status = resp.status();
        if status.is_success() {
            Ok(())
        } else if status.is_server_error() || matches!(status.as_u16(), 408 | 429) {
            Err(DeliveryError::Retryable(format!(
                "POST {url} answered HTTP {status}"
            )))
        } else {
            Err(DeliveryError::Permanent(format!(
                "POST {url} answered HTTP {status}"
            )))
        }
    }
}
