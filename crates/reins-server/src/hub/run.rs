//! A run executing on this instance ([`LocalRun`]): what interrupts it, and the wait
//! for its output, which the hub's pump ([`Hub::start_run`](super::Hub::start_run))
//! sends when the run ends.

use std::sync::Arc;

use reins_agent::{Interrupter, RunOutput};
use tokio::sync::watch;

use crate::error::{Result, ServerError};

/// The final answer of a run executing here (the output shared with the event that
/// published it: no copy per reader).
pub(super) type Done = Option<Result<Arc<RunOutput>, ServerError>>;

/// A run executing on this instance.
pub(crate) struct LocalRun {
    pub(crate) run_id: String,
    pub(crate) interrupter: Interrupter,
    done: watch::Receiver<Done>,
}

impl LocalRun {
    /// A run with this id, and the sender of its final answer.
    pub(super) fn new(run_id: String, interrupter: Interrupter) -> (Self, watch::Sender<Done>) {
        let (done_tx, done) = watch::channel::<Done>(None);
        let run = Self {
            run_id,
            interrupter,
            done,
        };
        (run, done_tx)
    }

    /// Waits for the run's output (or the error it ended with).
    pub(crate) async fn wait(&self) -> Result<Arc<RunOutput>> {
        let mut rx = self.done.clone();
        let done = rx
            .wait_for(Option::is_some)
            .await
            .map_err(|_| ServerError::Internal("the run ended without an answer".to_owned()))?
            .clone();
        match done {
            Some(Ok(out)) => Ok(out),
            Some(Err(e)) => Err(e),
            None => Err(ServerError::Internal(
                "the run ended without an answer".to_owned(),
            )),
        }
    }
}
