//! Context compression, the driver's half: a [`Step::Compress`](crate::run::Step)
//! gets its summary of the oldest turns from [`crate::effects::summarize`] and feeds
//! it back; a [`Reason`](crate::run::Reason) step's
//! [`ContextCheck`] is announced as events. Where to cut and what a request carries
//! are the run's (`compression::plan`, `run::request`); the policy and the
//! summarizer's prompt are [`crate::compression`]'s.

use super::Driver;
use crate::effects::Summarized;
use crate::error::Result;
use crate::output::{RunEvent, RunStatus};
use crate::run::{Compress, ContextCheck};
use crate::state::SessionCore;

impl Driver {
    /// Performs a [`Compress`] step ([`crate::effects::summarize`]). `Some(status)`
    /// when the run ended meanwhile (interrupted during the summarizer call: nothing
    /// is stored).
    pub(super) async fn compress(
        &self,
        core: &mut SessionCore,
        step: Compress,
    ) -> Result<Option<RunStatus>> {
        let summarized =
            crate::effects::summarize(&self.agent, &self.session, step, &self.cancel).await?;
        if summarized == Summarized::Interrupted {
            return self.interrupt(core, Vec::new()).await.map(Some);
        }
        for event in summarized.events() {
            core.run.apply(event)?;
        }
        // Stored by the run loop before the model call.
        Ok(None)
    }

    /// Announces a request's context check: the summary made for it, and a request
    /// that stays over budget (sent anyway).
    pub(super) fn announce_context(&self, check: ContextCheck) {
        if let Some(c) = check.compressed {
            tracing::debug!(
                session = %self.session,
                covered = c.summary.messages,
                before = c.tokens_before,
                after = check.tokens,
                "context compressed"
            );
            self.emit(|| RunEvent::ContextCompressed {
                summary: c.summary,
                tokens_before: c.tokens_before,
                tokens_after: check.tokens,
            });
        }
        if check.over_budget {
            tracing::warn!(
                session = %self.session,
                tokens = check.tokens,
                budget = check.budget,
                "the request is over the context budget even after compression; sending it anyway"
            );
            self.emit(|| RunEvent::ContextOverBudget {
                tokens: check.tokens,
                budget: check.budget,
            });
        }
    }
}
