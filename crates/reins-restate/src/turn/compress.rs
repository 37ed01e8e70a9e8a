//! Context compression on a Restate turn: a `Step::Compress` is the journaled step
//! `compress`, which makes the summary through the local driver's function
//! (`reins_agent::effects::summarize`: the summarizer chunk by chunk, its hooks) and
//! journals it; the summary is stored with the turn's next commit, before the model
//! call it was made for. A finished summary is never made again; one cut by a crash is.

use reins_agent::RunStatus;
use reins_agent::effects::{self, Summarized};
use reins_agent::run::{Compress, Run};
use restate_sdk::prelude::*;

use super::{OnCancel, TurnDriver, effect_error};
use crate::object::{is_cancel, refused};

impl TurnDriver<'_, '_> {
    /// Performs a [`Compress`] step. `Some(status)` when an interrupt ended the run
    /// meanwhile (nothing of the summary is kept).
    pub(super) async fn compress(
        &mut self,
        run: &mut Run,
        step: Compress,
    ) -> Result<Option<RunStatus>, TerminalError> {
        let (agent, session, token) = (
            self.agent().clone(),
            self.session.clone(),
            self.token.clone(),
        );
        let out = self
            .journal("compress", OnCancel::Fail, move || {
                let (agent, session, token, step) =
                    (agent.clone(), session.clone(), token.clone(), step.clone());
                async move {
                    effects::summarize(&agent, &session, step, &token)
                        .await
                        .map(Json)
                        .map_err(effect_error)
                }
            })
            .await;
        let summarized = match out {
            Ok(s) => s,
            Err(e) if is_cancel(&e) => Summarized::Interrupted,
            Err(e) => return Err(e),
        };
        if summarized == Summarized::Interrupted {
            return self.interrupt(run).await.map(Some);
        }
        for event in summarized.events() {
            run.apply(event)
                .map_err(|r| refused(&self.session, &r.error))?;
        }
        Ok(None)
    }
}
