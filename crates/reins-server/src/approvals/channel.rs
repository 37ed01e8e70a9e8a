//! The approval doors as notification channels: the dispatcher hands them the
//! notices of waiting (and escalated) requirements from the outbox, with retries, and
//! they mail the approvers or post to Slack.

use std::sync::Arc;

use async_trait::async_trait;
use reins_agent::Requirement;
use reins_agent::port::Sessions;

#[cfg(feature = "email")]
use super::EmailApprovals;
#[cfg(feature = "slack")]
use super::SlackApprovals;
use crate::auth::Auth;
use crate::notify::{Attempt, Channel, DeliveryError, Notice, NoticeKind};

/// What both channels need to find the call a notice is about.
#[derive(Clone)]
pub(crate) struct Lookup {
    pub(crate) sessions: Arc<dyn Sessions>,
    /// Whom the email channel mails (the Slack channel posts to its channel).
    #[cfg_attr(not(feature = "email"), allow(dead_code))]
    pub(crate) auth: Arc<Auth>,
}

impl Lookup {
    pub(crate) fn new(sessions: Arc<dyn Sessions>, auth: Auth) -> Self {
        Self {
            sessions,
            auth: Arc::new(auth),
        }
    }

    /// The requirement a notice names, while it is still pending (`None` when it was
    /// decided meanwhile: nothing to ask any more).
    async fn pending(
        &self,
        notice: &Notice,
    ) -> Result<Option<(String, Requirement)>, DeliveryError> {
        let (Some(session), Some(id)) = (&notice.session, &notice.requirement) else {
            return Ok(None);
        };
        match crate::view::load(&*self.sessions, session, false, false).await {
            Ok((_, pending)) => Ok(pending
                .into_iter()
                .find(|r| r.id == *id)
                .map(|r| (session.clone(), r))),
            Err(crate::ServerError::UnknownSession(_)) => Ok(None),
            Err(e) => Err(DeliveryError::Retryable(format!(
                "the session `{session}` could not be read: {e}"
            ))),
        }
    }
}

fn wanted(notice: &Notice) -> bool {
    matches!(
        notice.kind,
        NoticeKind::RequirementWaiting | NoticeKind::RequirementEscalated
    )
}

/// Email approvals as the `email` channel.
#[cfg(feature = "email")]
pub(crate) struct EmailChannel {
    pub(crate) email: EmailApprovals,
    pub(crate) lookup: Lookup,
}

#[cfg(feature = "email")]
#[async_trait]
impl Channel for EmailChannel {
    fn name(&self) -> &str {
        "email"
    }

    fn wants(&self, notice: &Notice) -> bool {
        wanted(notice)
    }

    async fn deliver(&self, notice: &Notice, _attempt: &Attempt) -> Result<(), DeliveryError> {
        let Some((session, req)) = self.lookup.pending(notice).await? else {
            return Ok(());
        };
        self.email
            .announce(&self.lookup.auth, &session, &req, &notice.principals)
            .await
            .map(|_| ())
            .map_err(|e| {
                if e.permanent {
                    DeliveryError::Permanent(e.message)
                } else {
                    DeliveryError::Retryable(e.message)
                }
            })
    }
}

/// Slack approvals as the `slack` channel.
#[cfg(feature = "slack")]
pub(crate) struct SlackChannel {
    pub(crate) slack: SlackApprovals,
    pub(crate) lookup: Lookup,
}

#[cfg(feature = "slack")]
#[async_trait]
impl Channel for SlackChannel {
    fn name(&self) -> &str {
        "slack"
    }

    fn wants(&self, notice: &Notice) -> bool {
        wanted(notice)
    }

    async fn deliver(&self, notice: &Notice, _attempt: &Attempt) -> Result<(), DeliveryError> {
        let Some((session, req)) = self.lookup.pending(notice).await? else {
            return Ok(());
        };
        self.slack
            .announce(&session, &req)
            .await
            .map(|_| ())
            .map_err(|e| {
                if e.permanent {
                    DeliveryError::Permanent(e.message)
                } else {
                    DeliveryError::Retryable(e.message)
                }
            })
    }
}
