//! Approvals in Slack: a message per waiting call with Approve / Reject / Edit
//! buttons, posted with the Web API's `chat.postMessage`, and the interactivity
//! endpoint Slack calls when a button is pressed (`POST /v1/slack/interactions`).
//!
//! The endpoint verifies Slack's request signature (`v0=` HMAC-SHA256 of
//! `v0:<timestamp>:<body>` under the app's signing secret, the timestamp within five
//! minutes) before it reads anything (401 otherwise), maps the Slack user to a
//! principal of the server (403 for a user it does not know), and decides through the
//! same checks as every door ([`decide_as`]): eligibility, quorum, the arguments'
//! fingerprint (the button carries the one the message showed), staleness. The audit
//! trail records `via: slack` and the Slack user id. The message is then updated
//! (`chat.update`) with the outcome, or with the decision that took effect first when
//! someone decided elsewhere. Edit opens the call in the inbox, where arguments can be
//! edited.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use reins_agent::{Requirement, RequirementKind};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Sha256;

use super::ApprovalsState;
use super::{ApprovalConfigError, enc_path};
use crate::error::ServerError;
use crate::sessions::decide::decide_as;
use crate::types::{Action, DecisionItem};

impl SlackApprovals {
    /// The `slack` notification channel, for a [`Dispatcher`](crate::notify::Dispatcher)
    /// a program runs itself (a server registers it on its own): it posts each waiting
    /// or escalated call, read through `sessions`, with its buttons.
    pub fn notify_channel(
        &self,
        sessions: Arc<dyn reins_agent::port::Sessions>,
        auth: crate::auth::Auth,
    ) -> impl crate::notify::Channel + use<> {
        super::channel::SlackChannel {
            slack: self.clone(),
            lookup: super::channel::Lookup::new(sessions, auth),
        }
    }

    /// The interactivity endpoint (`POST /v1/slack/interactions`) as a router a program
    /// mounts without a [`Server`](crate::Server): Slack's signature checked, the Slack
    /// user mapped to a principal of `auth`, the press decided through `sessions` with
    /// the checks of every door, the message updated.
    pub fn router(
        &self,
        sessions: Arc<dyn reins_agent::port::Sessions>,
        auth: crate::auth::Auth,
    ) -> axum::Router {
        let approvals = super::Approvals {
            slack: Some(self.clone()),
            ..super::Approvals::default()
        };
        axum::Router::new()
            .route(
                "/v1/slack/interactions",
                axum::routing::post(post_interaction),
            )
            .with_state(ApprovalsState::standalone(sessions, auth, approvals))
    }
}

/// How far a request's timestamp may be from now (Slack's recommendation).
const WINDOW_SECS: i64 = 300;

/// Slack approvals: the app's credentials, the channel messages go to, and who the
/// Slack users are. Built with [`SlackApprovals::builder`]; given to the server with
/// [`Server::slack_approvals`](crate::Server::slack_approvals).
#[derive(Clone)]
pub struct SlackApprovals {
    bot_token: String,
    signing_secret: Vec<u8>,
    channel: String,
    api_base: String,
    inbox_url: Option<String>,
    users: BTreeMap<String, String>,
    http: reqwest::Client,
}

impl std::fmt::Debug for SlackApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackApprovals")
            .field("channel", &self.channel)
            .field("api_base", &self.api_base)
            .field("inbox_url", &self.inbox_url)
            .field("users", &self.users)
            .finish_non_exhaustive()
    }
}

/// Builds [`SlackApprovals`]; the bot token, the signing secret and the channel are
/// required.
#[derive(Default)]
#[must_use]
pub struct SlackApprovalsBuilder {
    bot_token: Option<String>,
    signing_secret: Option<Vec<u8>>,
    channel: Option<String>,
    api_base: Option<String>,
    inbox_url: Option<String>,
    users: BTreeMap<String, String>,
}

impl std::fmt::Debug for SlackApprovalsBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackApprovalsBuilder")
            .field("channel", &self.channel)
            .field("users", &self.users)
            .finish_non_exhaustive()
    }
}

impl SlackApprovals {
    /// A builder.
    pub fn builder() -> SlackApprovalsBuilder {
        SlackApprovalsBuilder::default()
    }
}

impl SlackApprovalsBuilder {
    /// The app's bot token (`xoxb-…`), with the `chat:write` scope.
    pub fn bot_token(mut self, token: impl Into<String>) -> Self {
        self.bot_token = Some(token.into());
        self
    }

    /// The app's signing secret (Basic Information → App Credentials).
    pub fn signing_secret(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.signing_secret = Some(secret.as_ref().to_vec());
        self
    }

    /// The channel the messages go to (an id such as `C0123456789`).
    pub fn channel(mut self, channel: impl Into<String>) -> Self {
        self.channel = Some(channel.into());
        self
    }

    /// The Web API's base URL (default `https://slack.com/api`).
    pub fn api_base(mut self, url: impl Into<String>) -> Self {
        self.api_base = Some(url.into());
        self
    }

    /// Where people reach this server's inbox (`https://reins.example.com`): the Edit
    /// button opens the call there. Without it the message has no Edit button.
    pub fn inbox_url(mut self, url: impl Into<String>) -> Self {
        self.inbox_url = Some(url.into());
        self
    }

    /// The Slack user `slack_user` (an id such as `U0123456789`) decides as
    /// `principal` (a name in the server's [`Auth`](crate::Auth)). Presses by users
    /// not mapped are refused.
    pub fn user(mut self, slack_user: impl Into<String>, principal: impl Into<String>) -> Self {
        self.users.insert(slack_user.into(), principal.into());
        self
    }

    /// Checks the configuration.
    ///
    /// # Errors
    ///
    /// [`ApprovalConfigError`] naming the missing or invalid setting.
    pub fn build(self) -> Result<SlackApprovals, ApprovalConfigError> {
        let missing = |what: &str| ApprovalConfigError(format!("Slack approvals need {what}"));
        let bot_token = self.bot_token.ok_or_else(|| missing("a bot token"))?;
        let signing_secret = self
            .signing_secret
            .filter(|s| !s.is_empty())
            .ok_or_else(|| missing("the app's signing secret"))?;
        let channel = self.channel.ok_or_else(|| missing("a channel"))?;
        let api_base = self
            .api_base
            .unwrap_or_else(|| "https://slack.com/api".to_owned());
        for url in std::iter::once(&api_base).chain(self.inbox_url.as_ref()) {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ApprovalConfigError(format!(
                    "`{url}` must start with http:// or https://"
                )));
            }
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ApprovalConfigError(format!("no HTTP client: {e}")))?;
        Ok(SlackApprovals {
            bot_token,
            signing_secret,
            channel,
            api_base: api_base.trim_end_matches('/').to_owned(),
            inbox_url: self.inbox_url.map(|u| u.trim_end_matches('/').to_owned()),
            users: self.users,
            http,
        })
    }
}

/// Why a Web API call failed; `permanent` when retrying will not help (a bad token, an
/// unknown channel).
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) message: String,
    pub(crate) permanent: bool,
}

/// What a button carries: the call it decides on and the arguments it showed.
#[derive(Debug, serde::Serialize, Deserialize)]
struct ButtonValue {
    s: String,
    r: String,
    f: String,
}

impl SlackApprovals {
    /// The channel the messages go to.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// Posts the message for a waiting call (`confirmation` calls only: the others
    /// need the inbox). Returns the message's `ts`, `None` when nothing was posted.
    pub(crate) async fn announce(
        &self,
        session: &str,
        req: &Requirement,
    ) -> Result<Option<String>, ApiError> {
        if !matches!(req.kind, RequirementKind::Confirmation) {
            return Ok(None);
        }
        let value = serde_json::to_string(&ButtonValue {
            s: session.to_owned(),
            r: req.id.clone(),
            f: req.fingerprint(),
        })
        .unwrap_or_default();
        if value.len() > 2000 {
            return Err(ApiError {
                message: format!("the ids of `{}` are too long for a Slack button", req.id),
                permanent: true,
            });
        }
        let mut buttons = vec![
            json!({"type": "button", "action_id": "approve", "style": "primary", "value": value,
                   "text": {"type": "plain_text", "text": "Approve"}}),
            json!({"type": "button", "action_id": "reject", "style": "danger", "value": value,
                   "text": {"type": "plain_text", "text": "Reject"}}),
        ];
        if let Some(inbox) = &self.inbox_url {
            buttons.push(
                json!({"type": "button", "action_id": "edit", "value": value,
                "text": {"type": "plain_text", "text": "Edit"},
                "url": format!("{inbox}/?session={}", enc_path(session))}),
            );
        }
        let mut blocks = call_blocks(session, req);
        blocks.push(json!({"type": "actions", "block_id": "decide", "elements": buttons}));
        let body = json!({
            "channel": self.channel,
            "text": format!("`{}` waits for a decision ({session})", req.tool_use.name),
            "blocks": blocks,
        });
        let answer = self.call("chat.postMessage", &body).await?;
        Ok(answer.get("ts").and_then(Value::as_str).map(str::to_owned))
    }

    /// Calls a Web API method with a JSON body; its answer when `ok`.
    async fn call(&self, method: &str, body: &Value) -> Result<Value, ApiError> {
        let res = self
            .http
            .post(format!("{}/{method}", self.api_base))
            .bearer_auth(&self.bot_token)
            .json(body)
            .send()
            .await
            .map_err(|e| ApiError {
                message: format!("Slack's {method} could not be reached: {e}"),
                permanent: false,
            })?;
        let status = res.status();
        if !status.is_success() {
            return Err(ApiError {
                message: format!("Slack's {method} answered {status}"),
                permanent: status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS,
            });
        }
        let answer: Value = res.json().await.map_err(|e| ApiError {
            message: format!("Slack's {method} answered something that is not JSON: {e}"),
            permanent: false,
        })?;
        if answer.get("ok") == Some(&Value::Bool(true)) {
            return Ok(answer);
        }
        let error = answer
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned();
        Err(ApiError {
            permanent: !matches!(
                error.as_str(),
                "ratelimited"
                    | "internal_error"
                    | "fatal_error"
                    | "service_unavailable"
                    | "request_timeout"
            ),
            message: format!("Slack's {method} refused: {error}"),
        })
    }

    /// Whether `signature` is Slack's for `body` sent at `timestamp`, and the timestamp
    /// is within five minutes of `now`.
    pub(crate) fn verify(
        &self,
        timestamp: &str,
        signature: &str,
        body: &[u8],
        now: i64,
    ) -> Result<(), &'static str> {
        let ts: i64 = timestamp
            .parse()
            .map_err(|_| "the request timestamp is not a number")?;
        if (now - ts).abs() > WINDOW_SECS {
            return Err("the request timestamp is more than five minutes from now");
        }
        let hex = signature
            .strip_prefix("v0=")
            .ok_or("the signature is not a v0 signature")?;
        let sig = unhex(hex).ok_or("the signature is not hex")?;
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.signing_secret)
            .map_err(|_| "the signing secret is unusable")?;
        mac.update(b"v0:");
        mac.update(timestamp.as_bytes());
        mac.update(b":");
        mac.update(body);
        mac.verify_slice(&sig)
            .map_err(|_| "the signature does not match")
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Text for Slack's mrkdwn (`&`, `<`, `>` escaped).
fn mrkdwn(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Cuts `s` to at most `max` characters.
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The blocks that show a call: its tool, session, why, and its arguments.
fn call_blocks(session: &str, req: &Requirement) -> Vec<Value> {
    let args = serde_json::to_string_pretty(&req.tool_use.input).unwrap_or_default();
    let mut about = format!(
        "*Session:* `{}`\n*Why:* {}",
        mrkdwn(session),
        mrkdwn(&req.reason)
    );
    if let Some(at) = req.expires_at {
        about.push_str(&format!("\n*Expires:* {}", at.to_rfc3339()));
    }
    if let Some(q) = &req.quorum {
        about.push_str(&format!(
            "\n*Approvals:* {} of {}",
            q.approvals.len(),
            q.needed
        ));
    }
    vec![
        json!({"type": "header", "text": {"type": "plain_text",
            "text": clip(&format!("{} waits for a decision", req.tool_use.name), 150)}}),
        json!({"type": "section", "text": {"type": "mrkdwn", "text": clip(&about, 3000)}}),
        json!({"type": "section", "text": {"type": "mrkdwn",
            "text": format!("```{}```", clip(&mrkdwn(&args), 2990))}}),
    ]
}

/// The parts of a `block_actions` payload the endpoint reads.
#[derive(Debug, Deserialize)]
struct Interaction {
    #[serde(rename = "type")]
    kind: String,
    user: SlackUser,
    #[serde(default)]
    actions: Vec<SlackAction>,
    #[serde(default)]
    container: Option<Container>,
    #[serde(default)]
    message: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct SlackUser {
    id: String,
}

#[derive(Debug, Deserialize)]
struct SlackAction {
    action_id: String,
    #[serde(default)]
    value: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Container {
    #[serde(default)]
    channel_id: Option<String>,
    #[serde(default)]
    message_ts: Option<String>,
}

#[derive(Debug, Deserialize)]
struct InteractionForm {
    payload: String,
}

fn refuse(status: StatusCode, code: &'static str, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": message.into()}})),
    )
        .into_response()
}

/// `POST /v1/slack/interactions`: a button pressed in Slack.
pub(crate) async fn post_interaction(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(slack) = state.approvals.slack.clone() else {
        return refuse(
            StatusCode::NOT_FOUND,
            "not_found",
            "this server does not take decisions from Slack",
        );
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (Some(ts), Some(sig)) = (
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
    ) else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "invalid_signature",
            "the request has no X-Slack-Request-Timestamp or X-Slack-Signature header",
        );
    };
    if let Err(why) = slack.verify(ts, sig, &body, chrono::Utc::now().timestamp()) {
        return refuse(StatusCode::UNAUTHORIZED, "invalid_signature", why);
    }
    let Ok(form) = serde_urlencoded::from_bytes::<InteractionForm>(&body) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the body is not a form with a `payload` field",
        );
    };
    let interaction: Interaction = match serde_json::from_str(&form.payload) {
        Ok(i) => i,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("the payload is not an interaction: {e}"),
            );
        }
    };
    if interaction.kind != "block_actions" {
        // Nothing this app asked for: acknowledged, ignored.
        return StatusCode::OK.into_response();
    }
    let Some(name) = slack.users.get(&interaction.user.id) else {
        return refuse(
            StatusCode::FORBIDDEN,
            "unknown_user",
            format!(
                "Slack user `{}` is not mapped to a principal of this server",
                interaction.user.id
            ),
        );
    };
    let Some(who) = state.app.auth.by_name(name) else {
        return refuse(
            StatusCode::FORBIDDEN,
            "unknown_user",
            format!(
                "Slack user `{}` maps to `{name}`, whom this server does not know",
                interaction.user.id
            ),
        );
    };
    let Some(action) = interaction.actions.first() else {
        return StatusCode::OK.into_response();
    };
    let decision = match action.action_id.as_str() {
        "approve" => Action::Approve,
        "reject" => Action::Reject,
        // Edit is a link to the inbox: Slack tells us it was opened; nothing to do.
        _ => return StatusCode::OK.into_response(),
    };
    let Some(value) = action
        .value
        .as_deref()
        .and_then(|v| serde_json::from_str::<ButtonValue>(v).ok())
    else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the button does not name a call",
        );
    };
    let item = DecisionItem {
        requirement_id: value.r.clone(),
        shown_fingerprint: (decision == Action::Approve).then(|| value.f.clone()),
        action: decision,
        edited_args: None,
        note: (decision == Action::Reject).then(|| format!("rejected by {} in Slack", who.name)),
        values: None,
        output: None,
        is_error: None,
    };
    let actor = super::actor(&who, "slack", json!({"slack_user": interaction.user.id}));
    let result = decide_as(&state.app, &who, actor, &value.s, &[item]).await;
    let line = match &result {
        Ok(_) if decision == Action::Approve => {
            format!(
                ":white_check_mark: Approved by *{}* in Slack",
                mrkdwn(&who.name)
            )
        }
        Ok(_) => format!(":no_entry: Rejected by *{}* in Slack", mrkdwn(&who.name)),
        Err(ServerError::AlreadyDecided { decided, .. }) if super::closed_by(decided).is_some() => {
            format!(
                ":information_source: Nothing waits for this any more: the call was closed by {}; no one decided on it. {} pressed too late; nothing changed.",
                super::closed_by(decided).unwrap_or_default(),
                mrkdwn(&who.name)
            )
        }
        Err(ServerError::AlreadyDecided { decided, .. }) => {
            let s = |k: &str| {
                decided
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            format!(
                ":information_source: Already decided: *{}* by *{}* at {}. {} pressed too late; nothing changed.",
                s("decision"),
                mrkdwn(
                    decided
                        .get("by")
                        .and_then(Value::as_str)
                        .unwrap_or("someone")
                ),
                s("at"),
                mrkdwn(&who.name)
            )
        }
        Err(e) => format!(
            ":warning: {} could not decide: {}",
            mrkdwn(&who.name),
            mrkdwn(&e.to_string())
        ),
    };
    // A press refused for who pressed (403: not an approver of this tool) leaves the
    // message alone: Slack shows that user the error; the others may still decide.
    let told = match &result {
        Ok(_) => true,
        Err(e) => matches!(
            e.status(),
            StatusCode::CONFLICT | StatusCode::UNPROCESSABLE_ENTITY | StatusCode::NOT_FOUND
        ),
    };
    let keep_buttons =
        matches!(&result, Err(e) if !matches!(e, ServerError::AlreadyDecided { .. }));
    if let Some(c) = interaction.container.filter(|_| told) {
        if let (Some(channel), Some(ts)) = (c.channel_id, c.message_ts) {
            let blocks = updated_blocks(interaction.message.as_ref(), &line, keep_buttons);
            let body = json!({"channel": channel, "ts": ts, "text": line, "blocks": blocks});
            // Slack wants the answer within 3 s: the update goes on its own.
            tokio::spawn(async move {
                if let Err(e) = slack.call("chat.update", &body).await {
                    tracing::warn!(error = %e.message, "the Slack message could not be updated");
                }
            });
        }
    }
    match result {
        Ok(_) => StatusCode::OK.into_response(),
        // Refused decisions are told in the message; Slack gets its acknowledgement.
        Err(_) if told => StatusCode::OK.into_response(),
        Err(e) => {
            let status = e.status();
            let body = e.body();
            (status, Json(body)).into_response()
        }
    }
}

/// The message's blocks with the outcome line in place of the buttons (or below them,
/// when the press changed nothing and another may still work).
fn updated_blocks(message: Option<&Value>, line: &str, keep_buttons: bool) -> Vec<Value> {
    let mut blocks: Vec<Value> = message
        .and_then(|m| m.get("blocks"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|b| keep_buttons || b.get("type").and_then(Value::as_str) != Some("actions"))
        .filter(|b| b.get("block_id").and_then(Value::as_str) != Some("outcome"))
        .collect();
    blocks.push(json!({"type": "context", "block_id": "outcome",
        "elements": [{"type": "mrkdwn", "text": clip(line, 3000)}]}));
    blocks
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn slack() -> SlackApprovals {
        SlackApprovals::builder()
            .bot_token("xoxb-test")
            .signing_secret("8f742231b10e8888abcd99yyyzzz85a5")
            .channel("C1")
            .build()
            .unwrap()
    }

    fn sign(secret: &[u8], ts: &str, body: &[u8]) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).unwrap();
        mac.update(format!("v0:{ts}:").as_bytes());
        mac.update(body);
        let bytes = mac.finalize().into_bytes();
        format!(
            "v0={}",
            bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
        )
    }

    #[test]
    fn signatures_are_checked_with_their_timestamp_window() {
        let s = slack();
        let body = b"payload=%7B%7D";
        let good = sign(b"8f742231b10e8888abcd99yyyzzz85a5", "1000", body);
        assert_eq!(s.verify("1000", &good, body, 1000), Ok(()));
        assert_eq!(s.verify("1000", &good, body, 1300), Ok(()));
        assert!(s.verify("1000", &good, body, 1301).is_err(), "too old");
        assert!(
            s.verify("1000", &good, body, 699).is_err(),
            "from the future"
        );
        assert!(
            s.verify("1000", &good, b"payload=x", 1000).is_err(),
            "another body"
        );
        assert!(
            s.verify("1001", &good, body, 1000).is_err(),
            "another timestamp"
        );
        let other = sign(b"another secret", "1000", body);
        assert!(s.verify("1000", &other, body, 1000).is_err());
        assert!(s.verify("1000", "v0=zz", body, 1000).is_err());
        assert!(s.verify("x", &good, body, 1000).is_err());
    }
}
