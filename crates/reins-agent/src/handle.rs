//! [`RunHandle`]: a run in flight — its events, and the way to interrupt it.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::error::{AgentError, Result};
use crate::output::{RunEvent, RunOutput};

/// A run in flight, from `.start()` on the builder of [`Session::send`],
/// [`Session::resume`] or [`Session::resolve`].
///
/// [`Session::send`]: crate::Session::send
/// [`Session::resume`]: crate::Session::resume
/// [`Session::resolve`]: crate::Session::resolve
///
/// Read its [`events`](RunHandle::events), [`interrupt`](RunHandle::interrupt) it, and
/// [`wait`](RunHandle::wait) for its output. Dropping the handle interrupts the run
/// (it still stops at a checkpoint and stores a sanitized turn); call
/// [`detach`](RunHandle::detach) to let it go on unobserved instead.
#[must_use = "dropping a RunHandle interrupts the run"]
pub struct RunHandle {
    session_id: String,
    cancel: CancellationToken,
    guard: DropGuard,
    events: RunEvents,
    task: JoinHandle<Result<RunOutput>>,
}

impl std::fmt::Debug for RunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("session_id", &self.session_id)
            .field("interrupted", &self.cancel.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// Interrupts a run from anywhere (e.g. a task that watches for the ESC key). Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct Interrupter(CancellationToken);

impl Interrupter {
    /// Interrupts the run (a no-op when it already ended).
    pub fn interrupt(&self) {
        self.0.cancel();
    }
}

impl RunHandle {
    pub(crate) fn new(
        session_id: String,
        cancel: CancellationToken,
        rx: UnboundedReceiver<RunEvent>,
        task: JoinHandle<Result<RunOutput>>,
    ) -> Self {
        Self {
            session_id,
            guard: cancel.clone().drop_guard(),
            cancel,
            events: RunEvents(rx),
            task,
        }
    }

    /// The session id.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The run's events, in order; the stream ends when the run ends.
    pub fn events(&mut self) -> &mut RunEvents {
        &mut self.events
    }

    /// The next event, or `None` when the run has ended.
    pub async fn next_event(&mut self) -> Option<RunEvent> {
        self.events.0.recv().await
    }

    /// Asks the run to stop at its next checkpoint.
    pub fn interrupt(&self) {
        self.cancel.cancel();
    }

    /// A handle that interrupts this run from another task.
    pub fn interrupter(&self) -> Interrupter {
        Interrupter(self.cancel.clone())
    }

    /// Waits for the run's output. Dropping this future before it completes
    /// interrupts the run, as dropping the handle does.
    pub async fn wait(self) -> Result<RunOutput> {
        let Self { guard, task, .. } = self;
        let out = task
            .await
            .map_err(|e| AgentError::Internal(format!("the run's task ended abnormally: {e}")));
        // The run is over: nothing left to interrupt.
        guard.disarm();
        out?
    }

    /// Lets the run go on without this handle (dropping the handle no longer
    /// interrupts it).
    pub fn detach(self) {
        self.guard.disarm();
    }
}

/// The stream of a run's events.
#[derive(Debug)]
pub struct RunEvents(UnboundedReceiver<RunEvent>);

impl Stream for RunEvents {
    type Item = RunEvent;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RunEvent>> {
        self.0.poll_recv(cx)
    }
}
