//! The model call, the driver's half of a [`Reason`] step: the request is finished
//! ([`crate::effects::request`]) and the model called through
//! [`crate::effects::reason`] (hooks, the stream turned into a message, its events),
//! then the answer goes through the tool gates before it is fed back to the run.

use chrono::Utc;

use super::Driver;
use crate::effects::{self, ModelCall, Reasoning};
use crate::error::Result;
use crate::output::{RunEvent, RunStatus};
use crate::run::{AfterReasoning, Event, Reason};
use crate::state::SessionCore;

impl Driver {
    /// Performs a [`Reason`] step: the request, the model call (events, hooks,
    /// interrupt checkpoints), the answer's gates, fed back to the run. `Some(status)`
    /// when the run ended meanwhile.
    pub(super) async fn reason(
        &self,
        core: &mut SessionCore,
        mut step: Reason,
    ) -> Result<Option<RunStatus>> {
        if let Some(check) = step.context.take() {
            self.announce_context(check);
        }
        let repairs = std::mem::take(&mut step.repairs);
        if !repairs.is_empty() {
            tracing::warn!(session = %self.session, report = ?repairs, "transcript repaired before the model request");
            self.emit(|| RunEvent::Repaired { report: repairs });
        }
        let call = ModelCall::from(step);
        let reasoned =
            effects::reason(&self.agent, &self.session, call, &self.cancel, self).await?;
        let Reasoning::Reasoned {
            message,
            usage,
            verdict,
            gates,
        } = reasoned
        else {
            // The partially streamed message is dropped (never stored).
            return self.interrupt(core, Vec::new()).await.map(Some);
        };
        let after = AfterReasoning {
            stop: verdict.stop,
            goto: verdict.goto,
        };
        core.run.apply(Event::Reasoned {
            message,
            gates,
            after,
            usage,
            now: Utc::now(),
        })?;
        // Committed by the run loop, before the next step (with the lock's release when
        // the run ends here).
        Ok(None)
    }
}
