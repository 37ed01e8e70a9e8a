//! The calls of a process that asked a person a question and stay in flight while
//! their run pauses ([`LiveCalls`]), by (session, tool use id): the effects put a call
//! here when it asks (`effects::ask`), take it back to hand it the answer, and drop the
//! calls a run moved on from. A driver lends its registry to the effects: the local
//! driver the agent's, reins-restate its service process's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use reins_tool::{PendingQuestion, QuestionAnswer, ToolCallOutcome, ToolChunk};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// A call in flight that waits for the answer to its question.
pub(crate) struct LiveCall {
    /// The call's task.
    pub(crate) task: tokio::task::JoinHandle<ToolCallOutcome>,
    /// Its next questions.
    pub(crate) questions: UnboundedReceiver<PendingQuestion>,
    /// Its partial output.
    pub(crate) chunks: UnboundedReceiver<ToolChunk>,
    /// Where the answer to its question goes.
    pub(crate) reply: oneshot::Sender<QuestionAnswer>,
    /// Cancels the call.
    pub(crate) cancel: CancellationToken,
    /// Stops the watcher that cancels the call when it is settled elsewhere.
    pub(crate) watch: CancellationToken,
}

type Calls = Mutex<HashMap<(String, String), LiveCall>>;

/// The calls of a process that wait for the answer to their question, by session and
/// tool use id. Cheap to clone: clones share the calls.
#[derive(Clone, Default)]
pub struct LiveCalls(Arc<Calls>);

impl std::fmt::Debug for LiveCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LiveCalls")
            .field(&lock(&self.0).len())
            .finish()
    }
}

/// A handle on [`LiveCalls`] that does not keep the calls alive (for watchers).
pub(crate) struct WeakLiveCalls(Weak<Calls>);

fn lock(calls: &Calls) -> MutexGuard<'_, HashMap<(String, String), LiveCall>> {
    calls.lock().unwrap_or_else(PoisonError::into_inner)
}

fn take_from(calls: &Calls, session: &str, id: &str) -> Option<LiveCall> {
    let call = lock(calls).remove(&(session.to_owned(), id.to_owned()));
    if let Some(c) = &call {
        c.watch.cancel();
    }
    call
}

impl LiveCalls {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn insert(&self, session: &str, id: &str, call: LiveCall) {
        lock(&self.0).insert((session.to_owned(), id.to_owned()), call);
    }

    /// Takes the live call `id` of `session` (its watcher stops).
    pub(crate) fn take(&self, session: &str, id: &str) -> Option<LiveCall> {
        take_from(&self.0, session, id)
    }

    pub(crate) fn downgrade(&self) -> WeakLiveCalls {
        WeakLiveCalls(Arc::downgrade(&self.0))
    }

    /// Stops the live calls of `session` that no longer wait for an answer (the run
    /// moved on: a new message, an interrupt): they are cancelled, their results
    /// dropped (the run already gave them one). `asking`: the calls the run still
    /// waits on.
    pub fn keep_only(&self, session: &str, asking: &[String]) {
        let mut calls = lock(&self.0);
        if calls.is_empty() {
            return;
        }
        calls.retain(|(s, id), call| {
            let keep = s != session || asking.contains(id);
            if !keep {
                call.cancel.cancel();
                call.watch.cancel();
            }
            keep
        });
    }
}

impl WeakLiveCalls {
    pub(crate) fn take(&self, session: &str, id: &str) -> Option<LiveCall> {
        self.0.upgrade().and_then(|c| take_from(&c, session, id))
    }
}
