//! Standing grants made, listed and revoked through an [`Agent`]: validated against
//! its tools, stored, and recorded in the grant itself.

use super::Agent;
use crate::error::{AgentError, Result};

impl Agent {
    /// Creates a standing grant (see [`Grant`](crate::approval::Grant)) made by `by`: validated, stored, and
    /// returned with its id. Creation is recorded in the grant itself (`created_by`,
    /// `created_at`).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use std::time::Duration;
    /// use reins_agent::Agent;
    /// use reins_agent::approval::{ArgCondition, GrantFilter, NewGrant};
    /// use reins_model::ScriptedModel;
    ///
    /// let agent = Agent::builder().model(ScriptedModel::new([])).build()?;
    /// let g = agent
    ///     .create_grant(
    ///         NewGrant {
    ///             session: Some("user-7/chat-1".into()),
    ///             conditions: vec![ArgCondition::ends_with("/to", "@example.com")],
    ///             ttl: Some(Duration::from_secs(3600)),
    ///             ..NewGrant::tool("send_email")
    ///         },
    ///         Some("ana"),
    ///     )
    ///     .await?;
    /// assert_eq!(agent.grants(&GrantFilter::all()).await?, vec![g.clone()]);
    /// let revoked = agent.revoke_grant(&g.id, Some("ana")).await?;
    /// assert!(revoked.is_revoked());
    /// assert!(agent.grants(&GrantFilter::all()).await?.is_empty());
    /// # Ok::<(), reins_agent::AgentError>(()) }).unwrap();
    /// ```
    pub async fn create_grant(
        &self,
        new: crate::approval::NewGrant,
        by: Option<&str>,
    ) -> Result<crate::approval::Grant> {
        let actor = crate::Actor::new(by.unwrap_or_default());
        self.check_grant(&new, &actor)?;
        self.insert_grant(new, by).await
    }

    fn check_grant(&self, new: &crate::approval::NewGrant, actor: &crate::Actor) -> Result<()> {
        if let Some(rules) = &self.config.eligibility {
            let ask = crate::eligibility::GrantRequest::new(new, actor);
            if let crate::eligibility::Eligibility::Refused { reason } = rules.0.may_grant(ask) {
                return Err(AgentError::NotEligible {
                    id: format!("grant of `{}`", new.tool),
                    reason: format!(
                        "{} may not create a grant for `{}`: {reason}",
                        if actor.principal.is_empty() {
                            "a caller who names no one".to_owned()
                        } else {
                            format!("`{}`", actor.principal)
                        },
                        new.tool
                    ),
                });
            }
        }
        Ok(())
    }

    async fn insert_grant(
        &self,
        new: crate::approval::NewGrant,
        by: Option<&str>,
    ) -> Result<crate::approval::Grant> {
        let now = chrono::Utc::now();
        let expires_at = match new.ttl {
            None => None,
            Some(ttl) => Some(
                chrono::Duration::from_std(ttl)
                    .ok()
                    .filter(|d| *d > chrono::Duration::zero())
                    .and_then(|d| now.checked_add_signed(d))
                    .ok_or_else(|| {
                        AgentError::InvalidInput(
                            "a grant's ttl must be a positive, representable duration".to_owned(),
                        )
                    })?,
            ),
        };
        let grant = crate::approval::Grant {
            id: reins_message::new_id(),
            tool: new.tool,
            effect: new.effect,
            principal: new.principal,
            session: new.session,
            conditions: new.conditions,
            expires_at,
            note: new.note,
            created_at: now,
            created_by: by.map(str::to_owned),
            revoked_at: None,
            revoked_by: None,
        };
        self.runtime.store.create_grant(&grant).await?;
        tracing::info!(grant = %grant.id, tool = %grant.tool, effect = ?grant.effect, by = ?by, "standing grant created");
        Ok(grant)
    }

    /// [`Agent::create_grant`] on behalf of `actor` (its roles and metadata are what the
    /// policy sees), after the agent's eligibility
    /// policy ([`AgentBuilder::eligibility_policy`](crate::AgentBuilder::eligibility_policy)) agreed that `actor` may create it;
    /// a refusal is [`AgentError::NotEligible`] and nothing is stored.
    pub async fn create_grant_as(
        &self,
        new: crate::approval::NewGrant,
        actor: &crate::Actor,
    ) -> Result<crate::approval::Grant> {
        self.check_grant(&new, actor)?;
        self.insert_grant(new, Some(&actor.principal)).await
    }

    /// The grants `filter` admits, oldest first.
    pub async fn grants(
        &self,
        filter: &crate::approval::GrantFilter,
    ) -> Result<Vec<crate::approval::Grant>> {
        Ok(self.runtime.store.list_grants(filter).await?)
    }

    /// Revokes a grant (recording who and when); it never matches again.
    pub async fn revoke_grant(&self, id: &str, by: Option<&str>) -> Result<crate::approval::Grant> {
        let g = self
            .runtime
            .store
            .revoke_grant(id, by, chrono::Utc::now())
            .await?;
        tracing::info!(grant = %g.id, by = ?by, "standing grant revoked");
        Ok(g)
    }
}
