//! Approvals by email: a message to each approver of a waiting call (the tool, the
//! arguments, a link), and the confirmation page the link opens.
//!
//! The link never decides on `GET` — mail scanners and link previews fetch links — it
//! shows the call and two forms; the page's `POST` decides, as the approver the link
//! was sent to, through the same checks as every door ([`decide_as`]) and recorded in
//! the audit trail with `via: email` and the link's nonce in the actor's metadata. That
//! record is what makes a link single use: a link whose nonce has an applied decision
//! is refused. A link is also refused when its signature does not verify (tampered),
//! when it expired (with the requirement, or after the configured lifetime), when its
//! approver may not decide on the tool, and when the requirement was decided or now
//! shows other arguments; each gets a page that says so, and nothing changes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::Utc;
use lettre::message::{Mailbox, header::ContentType};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use reins_agent::{Requirement, RequirementKind, Verdict};
use serde::Deserialize;
use serde_json::{Value, json};

use super::ApprovalsState;
use super::link::{LinkClaims, LinkKey, nonce};
use super::page::{esc, outcome, page};
use super::{ApprovalConfigError, enc_path};
use crate::auth::{Auth, Principal};
use crate::error::ServerError;
use crate::sessions::decide::decide_as;
use crate::types::{Action, DecisionItem};
use crate::view;

/// Email approvals: where mail goes out, who gets it, and how links are signed. Built
/// with [`EmailApprovals::builder`]; given to the server with
/// [`Server::email_approvals`](crate::Server::email_approvals).
#[derive(Clone)]
pub struct EmailApprovals {
    pub(crate) mailer: AsyncSmtpTransport<Tokio1Executor>,
    pub(crate) from: Mailbox,
    pub(crate) base_url: String,
    pub(crate) key: LinkKey,
    pub(crate) approvers: BTreeMap<String, Mailbox>,
    pub(crate) link_ttl: Duration,
}

impl std::fmt::Debug for EmailApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailApprovals")
            .field("from", &self.from.to_string())
            .field("base_url", &self.base_url)
            .field("approvers", &self.approvers.keys().collect::<Vec<_>>())
            .field("link_ttl", &self.link_ttl)
            .finish_non_exhaustive()
    }
}

/// Builds [`EmailApprovals`]; every setter but [`approver`](EmailApprovalsBuilder::approver)
/// and [`link_ttl`](EmailApprovalsBuilder::link_ttl) is required.
#[derive(Default)]
#[must_use]
pub struct EmailApprovalsBuilder {
    smtp_url: Option<String>,
    from: Option<String>,
    base_url: Option<String>,
    secret: Option<Vec<u8>>,
    approvers: Vec<(String, String)>,
    link_ttl: Option<Duration>,
}

impl std::fmt::Debug for EmailApprovalsBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailApprovalsBuilder")
            .field("from", &self.from)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl EmailApprovals {
    /// A builder.
    pub fn builder() -> EmailApprovalsBuilder {
        EmailApprovalsBuilder::default()
    }
}

impl EmailApprovalsBuilder {
    /// The SMTP server, as a URL: `smtps://user:password@host` (TLS),
    /// `smtp://host:587?tls=required` (STARTTLS), or `smtp://127.0.0.1:2525` (plain, for a
    /// relay on the same host).
    pub fn smtp_url(mut self, url: impl Into<String>) -> Self {
        self.smtp_url = Some(url.into());
        self
    }

    /// The sender (`reins <approvals@example.com>`).
    pub fn from(mut self, from: impl Into<String>) -> Self {
        self.from = Some(from.into());
        self
    }

    /// Where people reach this server (`https://reins.example.com`): the links in the
    /// mail start with it.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }

    /// The secret links are signed with (HMAC-SHA256; at least 32 bytes). Every
    /// instance of the server needs the same one; changing it voids every link sent.
    pub fn secret(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.secret = Some(secret.as_ref().to_vec());
        self
    }

    /// Mails `principal` (a name in the server's [`Auth`]) at `address` about the calls
    /// it may decide on.
    pub fn approver(mut self, principal: impl Into<String>, address: impl Into<String>) -> Self {
        self.approvers.push((principal.into(), address.into()));
        self
    }

    /// How long a link works when its requirement has no expiry of its own (default
    /// 24 h); a requirement that expires sooner takes its link with it.
    pub fn link_ttl(mut self, ttl: Duration) -> Self {
        self.link_ttl = Some(ttl);
        self
    }

    /// Checks the configuration.
    ///
    /// # Errors
    ///
    /// [`ApprovalConfigError`] naming the missing or invalid setting.
    pub fn build(self) -> Result<EmailApprovals, ApprovalConfigError> {
        let missing = |what: &str| ApprovalConfigError(format!("email approvals need {what}"));
        let url = self.smtp_url.ok_or_else(|| missing("an SMTP URL"))?;
        let mailer = AsyncSmtpTransport::<Tokio1Executor>::from_url(&url)
            .map_err(|e| ApprovalConfigError(format!("the SMTP URL is not valid: {e}")))?
            .timeout(Some(Duration::from_secs(30)))
            .build();
        let from = self.from.ok_or_else(|| missing("a sender address"))?;
        let from: Mailbox = from.parse().map_err(|e| {
            ApprovalConfigError(format!("the sender `{from}` is not an address: {e}"))
        })?;
        let base_url = self
            .base_url
            .ok_or_else(|| missing("the server's base URL"))?;
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(ApprovalConfigError(format!(
                "the base URL `{base_url}` must start with http:// or https://"
            )));
        }
        let secret = self.secret.ok_or_else(|| missing("a link secret"))?;
        if secret.len() < 32 {
            return Err(ApprovalConfigError(
                "the link secret must be at least 32 bytes".to_owned(),
            ));
        }
        let mut approvers = BTreeMap::new();
        for (principal, address) in self.approvers {
            let mailbox: Mailbox = address.parse().map_err(|e| {
                ApprovalConfigError(format!(
                    "the address `{address}` of `{principal}` is not an address: {e}"
                ))
            })?;
            approvers.insert(principal, mailbox);
        }
        Ok(EmailApprovals {
            mailer,
            from,
            base_url: base_url.trim_end_matches('/').to_owned(),
            key: LinkKey::new(&secret),
            approvers,
            link_ttl: self.link_ttl.unwrap_or(Duration::from_secs(24 * 3600)),
        })
    }
}

impl EmailApprovals {
    /// The `email` notification channel, for a [`Dispatcher`](crate::notify::Dispatcher)
    /// a program runs itself (a server registers it on its own): it mails each
    /// approver in `auth` who may decide on a waiting or escalated call a link to
    /// decide on it, reading the call through `sessions`.
    pub fn notify_channel(
        &self,
        sessions: Arc<dyn reins_agent::port::Sessions>,
        auth: Auth,
    ) -> impl crate::notify::Channel + use<> {
        super::channel::EmailChannel {
            email: self.clone(),
            lookup: super::channel::Lookup::new(sessions, auth),
        }
    }

    /// The links' routes (`GET`/`POST /inbox/email/{token}`) as a router a program
    /// mounts at the root of the base URL the links were made with, without a
    /// [`Server`](crate::Server): the confirmation page, and its form that decides as
    /// the link's approver (a principal of `auth`) through `sessions`, with the checks
    /// of every door. The mail's link to the inbox (`{base_url}/?session=…`) works only
    /// where a server serves it.
    pub fn router(
        &self,
        sessions: Arc<dyn reins_agent::port::Sessions>,
        auth: Auth,
    ) -> axum::Router {
        let approvals = super::Approvals {
            email: Some(self.clone()),
            ..super::Approvals::default()
        };
        axum::Router::new()
            .route(
                "/inbox/email/{token}",
                axum::routing::get(get_link).post(post_link),
            )
            .with_state(ApprovalsState::standalone(sessions, auth, approvals))
    }
}

/// Why mail could not go out.
#[derive(Debug)]
pub(crate) struct SendError {
    pub(crate) message: String,
    /// The server refused for good (a rejected address): retrying will not help.
    pub(crate) permanent: bool,
}

impl EmailApprovals {
    /// Mails every configured approver who may decide on `req`'s tool (of `only`, when
    /// it names any: an escalation's group) a link to decide on it. Returns who was
    /// mailed. Only confirmations are mailed: input and external results need the
    /// inbox.
    pub(crate) async fn announce(
        &self,
        auth: &Auth,
        session: &str,
        req: &Requirement,
        only: &[String],
    ) -> Result<Vec<String>, SendError> {
        let mut sent = Vec::new();
        if !matches!(req.kind, RequirementKind::Confirmation) {
            return Ok(sent);
        }
        for (name, mailbox) in &self.approvers {
            if !only.is_empty() && !only.contains(name) {
                continue;
            }
            let Some(who) = auth.by_name(name) else {
                continue;
            };
            if !who.may_decide(&req.tool_use.name) {
                continue;
            }
            let msg = self
                .message(&who, mailbox, session, req)
                .map_err(|message| SendError {
                    message,
                    permanent: true,
                })?;
            self.mailer.send(msg).await.map_err(|e| SendError {
                message: format!("mail to `{name}` failed: {e}"),
                permanent: e.is_permanent(),
            })?;
            sent.push(name.clone());
        }
        Ok(sent)
    }

    /// The link for `who` to decide on `req`.
    pub(crate) fn link(&self, who: &Principal, session: &str, req: &Requirement) -> String {
        let ttl = chrono::Duration::from_std(self.link_ttl).unwrap_or(chrono::Duration::days(1));
        let mut expires = Utc::now() + ttl;
        if let Some(at) = req.expires_at {
            expires = expires.min(at);
        }
        let claims = LinkClaims {
            session: session.to_owned(),
            requirement: req.id.clone(),
            fingerprint: req.fingerprint(),
            principal: who.name.clone(),
            expires: expires.timestamp(),
            nonce: nonce(),
        };
        format!("{}/inbox/email/{}", self.base_url, self.key.sign(&claims))
    }

    fn message(
        &self,
        who: &Principal,
        to: &Mailbox,
        session: &str,
        req: &Requirement,
    ) -> Result<Message, String> {
        let link = self.link(who, session, req);
        let args = serde_json::to_string_pretty(&req.tool_use.input).unwrap_or_default();
        let expires = req
            .expires_at
            .map(|t| format!("Expires:   {}\n", t.to_rfc3339()))
            .unwrap_or_default();
        let what = match req.kind {
            RequirementKind::Confirmation => "waits for your approval",
            RequirementKind::UserInput { .. } => "waits for your input",
            RequirementKind::External => "waits for its result",
            RequirementKind::Budget { .. } => "reached its budget",
        };
        let body = format!(
            "{name}, a call {what}.\n\n\
             Session:   {session}\n\
             Tool:      {tool}\n\
             Why:       {reason}\n\
             {expires}\
             Arguments:\n{args}\n\n\
             Review it and decide (the page asks before anything happens):\n{link}\n\n\
             The link is yours alone and works once. Or open the inbox:\n{inbox}/?session={sid}\n",
            name = who.name,
            tool = req.tool_use.name,
            reason = req.reason,
            inbox = self.base_url,
            sid = enc_path(session),
        );
        Message::builder()
            .from(self.from.clone())
            .to(to.clone())
            .subject(format!(
                "[reins] `{}` {what} ({session})",
                req.tool_use.name
            ))
            .header(ContentType::TEXT_PLAIN)
            .body(body)
            .map_err(|e| format!("the mail to `{}` could not be built: {e}", who.name))
    }
}

/// What the confirmation page posts.
#[derive(Debug, Deserialize)]
pub(crate) struct LinkForm {
    action: String,
    #[serde(default)]
    note: Option<String>,
}

/// A link that passed every check: whom it acts for, and the call it decides on.
struct Ready {
    claims: LinkClaims,
    who: Arc<Principal>,
    req: Requirement,
}

/// `GET /inbox/email/{token}`: the confirmation page, or why the link no longer works.
/// Decides nothing.
pub(crate) async fn get_link(
    State(state): State<ApprovalsState>,
    Path(token): Path<String>,
) -> Response {
    match check(&state, &token).await {
        Ok(ready) => confirm_page(&ready, &token),
        Err(refused) => refused,
    }
}

/// `POST /inbox/email/{token}`: decides as the link's approver, after the same checks
/// as the page, and says what happened.
pub(crate) async fn post_link(
    State(state): State<ApprovalsState>,
    Path(token): Path<String>,
    form: Result<Form<LinkForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    // The link itself: valid, not expired, not used, its approver still one. What the
    // call waits for, who decided it, whether it changed, whether this approver may
    // decide it: the run checks, on the one decision path.
    let link = match verify(&state, &token).await {
        Ok(l) => l,
        Err(refused) => return refused,
    };
    let Ok(Form(form)) = form else {
        return outcome(
            StatusCode::BAD_REQUEST,
            false,
            "Nothing was decided",
            "The form did not say what to do; open the link again and use its buttons.",
        );
    };
    let (action, note) = match form.action.as_str() {
        "approve" => (Action::Approve, None),
        "reject" => (
            Action::Reject,
            Some(
                form.note
                    .filter(|n| !n.trim().is_empty())
                    .unwrap_or_else(|| format!("rejected by {} by email", link.who.name)),
            ),
        ),
        other => {
            return outcome(
                StatusCode::BAD_REQUEST,
                false,
                "Nothing was decided",
                &format!("`{other}` is not something this page does (approve or reject)."),
            );
        }
    };
    let claims = &link.claims;
    let item = DecisionItem {
        requirement_id: claims.requirement.clone(),
        shown_fingerprint: (action == Action::Approve).then(|| claims.fingerprint.clone()),
        action,
        edited_args: None,
        note,
        values: None,
        output: None,
        is_error: None,
    };
    let actor = super::actor(&link.who, "email", json!({"link": claims.nonce}));
    if let Err(e) = decide_as(&state.app, &link.who, actor, &claims.session, &[item]).await {
        return refusal(&e);
    }
    if action == Action::Reject {
        return outcome(
            StatusCode::OK,
            true,
            "Rejected",
            "The call will not run; the agent is told.",
        );
    }
    // An approval a quorum counted leaves the call waiting for more approvers.
    let counted = view::load(&*state.app.sessions, &claims.session, false, false)
        .await
        .ok()
        .and_then(|(_, pending)| pending.into_iter().find(|r| r.id == claims.requirement))
        .and_then(|r| r.quorum.map(|q| (r.tool_use.name, q)));
    match counted {
        Some((tool, q)) => outcome(
            StatusCode::OK,
            true,
            "Approval counted",
            &format!(
                "Your approval of `{tool}` is counted ({} of {} needed); the call runs once enough approvers agree.",
                q.approvals.len(),
                q.needed
            ),
        ),
        None => outcome(
            StatusCode::OK,
            true,
            "Approved",
            "The call runs now, as you were shown it.",
        ),
    }
}

/// The page for a decision the run refused. A call that a new message (or the end of
/// its run) closed was decided by no one: nothing waits for it any more (410).
pub(crate) fn refusal(e: &ServerError) -> Response {
    if let ServerError::AlreadyDecided { decided, .. } = e {
        if let Some(by) = super::closed_by(decided) {
            return outcome(
                StatusCode::GONE,
                false,
                "Nothing waits for this any more",
                &format!(
                    "The call this link was for was closed by {by}; no one decided on it. Nothing changed."
                ),
            );
        }
    }
    match e {
        // Not pending, and nobody decided it (the run found nothing to decide).
        ServerError::UnknownRequirement(_) | ServerError::NotPaused(_) => {
            return outcome(
                StatusCode::GONE,
                false,
                "Nothing waits for this any more",
                "The call this link was for no longer waits for a decision. Nothing changed.",
            );
        }
        ServerError::NotEligible(why) => {
            return outcome(
                StatusCode::FORBIDDEN,
                false,
                "This link is not yours to use",
                &format!("{why}. Nothing was decided."),
            );
        }
        ServerError::FingerprintMismatch(_) => {
            return outcome(
                StatusCode::CONFLICT,
                false,
                "The call changed",
                "The call now shows other arguments than the email did. Open the inbox to see it as it is now.",
            );
        }
        _ => {}
    }
    let title = match e {
        ServerError::AlreadyDecided { .. } => "Already decided",
        ServerError::Busy(_) => "Someone is deciding right now",
        _ => "Nothing was decided",
    };
    let detail = match e {
        ServerError::AlreadyDecided { decided, .. } => already(decided),
        other => other.to_string(),
    };
    outcome(e.status(), false, title, &detail)
}

/// "approve by ana at …": the decision that took effect.
fn already(decided: &Value) -> String {
    let s = |k: &str| {
        decided
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let by = decided
        .get("by")
        .and_then(Value::as_str)
        .unwrap_or("someone");
    format!(
        "This call was already decided: {} by {by} at {}. Nothing changed.",
        s("decision"),
        s("at")
    )
}

/// A link that passed its own checks: whom it acts for, and what it names.
struct Link {
    claims: LinkClaims,
    who: Arc<Principal>,
}

/// What the confirmation page shows: the link's checks, then the call as it waits now
/// (a read for the page; the form's decision is checked by the run); the page of the
/// first that fails.
async fn check(state: &ApprovalsState, token: &str) -> Result<Ready, Response> {
    let Link { claims, who } = verify(state, token).await?;
    let page_error = |e: ServerError| {
        outcome(
            e.status(),
            false,
            "This link cannot be used",
            &e.to_string(),
        )
    };
    let (_, pending) = view::load(&*state.app.sessions, &claims.session, false, false)
        .await
        .map_err(page_error)?;
    let Some(req) = pending.into_iter().find(|r| r.id == claims.requirement) else {
        let decided = state
            .app
            .sessions
            .decided(&claims.session, &claims.requirement)
            .await
            .map_err(|e| page_error(e.into()))?;
        return Err(match decided {
            Some(d) => refusal(&ServerError::already_decided(&claims.requirement, &d)),
            None => outcome(
                StatusCode::GONE,
                false,
                "Nothing waits for this any more",
                "The call this link was for no longer waits for a decision. Nothing changed.",
            ),
        });
    };
    if !who.may_decide(&req.tool_use.name) {
        return Err(outcome(
            StatusCode::FORBIDDEN,
            false,
            "This link is not yours to use",
            &format!(
                "`{}` may not decide on `{}` calls. Nothing was decided.",
                who.name, req.tool_use.name
            ),
        ));
    }
    if req.fingerprint() != claims.fingerprint {
        return Err(outcome(
            StatusCode::CONFLICT,
            false,
            "The call changed",
            "The call now shows other arguments than the email did. Open the inbox to see it as it is now.",
        ));
    }
    Ok(Ready { claims, who, req })
}

/// The link's own checks: approvals by email are on, the token is this server's, it
/// has not expired nor been used (its nonce has no applied decision in the audit
/// trail), and its approver may still decide; the page of the first that fails.
async fn verify(state: &ApprovalsState, token: &str) -> Result<Link, Response> {
    let Some(email) = state.approvals.email.as_ref() else {
        return Err(outcome(
            StatusCode::NOT_FOUND,
            false,
            "Email approvals are off",
            "This server does not take decisions by email.",
        ));
    };
    let Ok(claims) = email.key.verify(token) else {
        return Err(outcome(
            StatusCode::BAD_REQUEST,
            false,
            "This link is not valid",
            "The link is damaged or was not made by this server. Use the link from the email as it came, or open the inbox.",
        ));
    };
    if Utc::now() >= claims.expires_at() {
        return Err(outcome(
            StatusCode::GONE,
            false,
            "This link expired",
            &format!(
                "The link to decide on `{}` expired at {}. Nothing was decided.",
                claims.requirement,
                claims.expires_at().to_rfc3339()
            ),
        ));
    }
    let page_error = |e: ServerError| {
        outcome(
            e.status(),
            false,
            "This link cannot be used",
            &e.to_string(),
        )
    };
    let trail = state
        .app
        .sessions
        .audit(&claims.session)
        .await
        .map_err(|e| page_error(e.into()))?;
    if let Some(used) = trail.iter().find(|r| {
        r.verdict == Verdict::Applied
            && r.actor.as_ref().is_some_and(|a| {
                a.metadata
                    .as_ref()
                    .and_then(|m| m.get("link"))
                    .and_then(Value::as_str)
                    == Some(claims.nonce.as_str())
            })
    }) {
        return Err(outcome(
            StatusCode::CONFLICT,
            false,
            "This link was used",
            &format!(
                "The link was used at {} ({}); a link works once. Nothing changed.",
                used.at.to_rfc3339(),
                used.decision
            ),
        ));
    }
    let who = match state.app.auth.by_name(&claims.principal) {
        Some(p) if p.is_decider() => p,
        _ => {
            return Err(outcome(
                StatusCode::FORBIDDEN,
                false,
                "This link is not yours to use",
                &format!(
                    "The link was made for `{}`, who may not decide here any more. Nothing was decided.",
                    claims.principal
                ),
            ));
        }
    };
    Ok(Link { claims, who })
}

fn confirm_page(ready: &Ready, token: &str) -> Response {
    let req = &ready.req;
    let args = serde_json::to_string_pretty(&req.tool_use.input).unwrap_or_default();
    let expires = req
        .expires_at
        .map(|t| format!("<dt>Expires</dt><dd>{}</dd>", esc(&t.to_rfc3339())))
        .unwrap_or_default();
    let quorum = req
        .quorum
        .as_ref()
        .map(|q| {
            format!(
                "<dt>Approvals</dt><dd>{} of {} so far</dd>",
                q.approvals.len(),
                q.needed
            )
        })
        .unwrap_or_default();
    let action = format!("/inbox/email/{}", esc(token));
    let body = format!(
        "<div class=\"card\" id=\"confirm\"><h1>Decide on <code>{tool}</code></h1>\
         <dl><dt>For</dt><dd id=\"for\">{who}</dd><dt>Session</dt><dd>{session}</dd>\
         <dt>Why</dt><dd>{reason}</dd>{expires}{quorum}</dl>\
         <div>Arguments</div><pre id=\"args\">{args}</pre>\
         <form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"action\" value=\"approve\">\
         <button class=\"approve\" id=\"approve\" type=\"submit\">Approve</button></form>\
         <form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"action\" value=\"reject\">\
         <textarea name=\"note\" id=\"note\" rows=\"2\" placeholder=\"Why not (told to the agent)\"></textarea>\
         <button class=\"reject\" id=\"reject\" type=\"submit\">Reject</button></form>\
         <p class=\"muted\">Nothing happens until you press a button. The link works once and is yours alone.</p></div>",
        tool = esc(&req.tool_use.name),
        who = esc(&ready.who.name),
        session = esc(&ready.claims.session),
        reason = esc(&req.reason),
        args = esc(&args),
    );
    page(
        StatusCode::OK,
        &format!("Decide on {}", req.tool_use.name),
        &body,
    )
}
