//! The local driver as the port: an [`Agent`] runs the sessions in this process.

use std::sync::Arc;

use async_trait::async_trait;
use reins_memory::MemoryStore;
use tokio::sync::mpsc::UnboundedSender;

use super::{AgentCard, ForkRequest, Interrupted, Sessions};
use crate::agent::Agent;
use crate::approval::{Grant, NewGrant};
use crate::backend::{SessionBackend, Started, Submission};
use crate::error::{AgentError, Result};
use crate::fork::{ForkOrigin, ReplayReport, ReplayTurn};
use crate::handle::RunHandle;
use crate::view::Actor;

/// Runs execute in this process: a started run's [`RunHandle`] is the run's own.
#[async_trait]
impl Sessions for Agent {
    fn card(&self) -> &AgentCard {
        Agent::card(self)
    }

    fn evidence_keys(&self) -> reins_evidence::Keyring {
        Agent::evidence_keys(self)
    }

    fn record(&self) -> &Arc<dyn MemoryStore> {
        self.store()
    }

    async fn start(&self, session: &str, submission: Submission) -> Result<RunHandle> {
        match SessionBackend::start(self, session, submission).await? {
            Started::Here(handle) => Ok(handle),
            Started::Relayed => Err(AgentError::Internal(
                "the local driver relayed a run it should run here".to_owned(),
            )),
        }
    }

    async fn interrupt(&self, session: &str) -> Result<Interrupted> {
        // 404 for an unknown session (opening one would create it).
        super::stored(self.store().as_ref(), session).await?;
        if self.runtime.remote.interrupt_local(session) {
            // Stored too, in case the run is between this process's checkpoints and
            // another worker takes it over.
            let _ = self.store().request_interrupt(session).await;
            return Ok(Interrupted::Here);
        }
        Ok(if self.store().request_interrupt(session).await? {
            Interrupted::Stored
        } else {
            Interrupted::Idle
        })
    }

    async fn replay(
        &self,
        session: &str,
        turns: Option<UnboundedSender<ReplayTurn>>,
    ) -> Result<ReplayReport> {
        SessionBackend::replay(self, session, turns).await
    }

    async fn fork(&self, session: &str, request: ForkRequest) -> Result<ForkOrigin> {
        // An unknown source is refused (opening it would create it).
        super::stored(self.store().as_ref(), session).await?;
        let source = self.owner_of(session).await?.session(session).await?;
        let mut fork = source.fork(request.at, request.new_session.clone());
        if request.rerun_side_effects {
            fork = fork.rerun_side_effects();
        }
        let fork = fork.await?;
        fork.forked_from()
            .await?
            .ok_or_else(|| AgentError::Internal("the fork lost its origin".to_owned()))
    }

    async fn create_grant(&self, grant: NewGrant, actor: &Actor) -> Result<Grant> {
        self.create_grant_as(grant, actor).await
    }

    async fn revoke_grant(&self, id: &str, by: &Actor) -> Result<Grant> {
        Agent::revoke_grant(self, id, Some(&by.principal)).await
    }

    fn runs_here(&self) -> bool {
        true
    }
}
