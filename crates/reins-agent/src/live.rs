//! The calls of an agent's sessions that asked a person a question and stay in flight
//! while their run pauses: the agent's registry of live calls, by (session, tool use
//! id). The driver (`drive::ask`) puts a call here when it asks, takes it back to hand
//! it the answer, and drops the calls a run moved on from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use reins_tool::{PendingQuestion, QuestionAnswer, ToolCallOutcome};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

type Calls = Mutex<HashMap<(String, String), LiveCall>>;

/// A call in flight that waits for the answer to its question.
pub(crate) struct LiveCall {
    /// The call's task.
    pub(crate) task: tokio::task::JoinHandle<ToolCallOutcome>,
    /// Its next questions.
    pub(crate) questions: UnboundedReceiver<PendingQuestion>,
    /// Where the answer to its question goes.
    pub(crate) reply: oneshot::Sender<QuestionAnswer>,
    /// Cancels the call.
    pub(crate) cancel: CancellationToken,
    /// Stops the watcher that cancels the call when it is settled elsewhere.
    pub(crate) watch: CancellationToken,
}

/// The calls of an agent's sessions that wait for answers. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct LiveCalls(Arc<Calls>);

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
    /// Keeps `call` of `session` until its answer comes.
    pub(crate) fn insert(&self, session: &str, id: &str, call: LiveCall) {
        lock(&self.0).insert((session.to_owned(), id.to_owned()), call);
    }

    /// Takes the live call `id` of `session` (its watcher stops).
    pub(crate) fn take(&self, session: &str, id: &str) -> Option<LiveCall> {
        take_from(&self.0, session, id)
    }

    /// A handle that does not keep the calls alive.
    pub(crate) fn downgrade(&self) -> WeakLiveCalls {
        WeakLiveCalls(Arc::downgrade(&self.0))
    }

    /// Stops the live calls of `session` that no longer wait for an answer (the run
    /// moved on: a new message, an interrupt): they are cancelled, their results
    /// dropped (the run already gave them one).
    pub(crate) fn keep_only(&self, session: &str, asking: &[String]) {
        lock(&self.0).retain(|(s, id), call| {
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
    /// Takes the live call `id` of `session`, while the registry lives.
    pub(crate) fn take(&self, session: &str, id: &str) -> Option<LiveCall> {
        self.0.upgrade().and_then(|c| take_from(&c, session, id))
    }
}
