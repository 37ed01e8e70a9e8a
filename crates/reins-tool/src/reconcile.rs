//! Reconciling a call whose outcome is unknown: [`Reconciliation`] and
//! [`Toolkit::reconcile`].
//!
//! When the process running a side-effecting call dies mid-call, nobody knows whether
//! the effect happened. Instead of guessing, the agent that finds such a call asks the
//! tool ([`Tool::reconcile`](crate::Tool::reconcile), or the closure given to
//! [`FunctionTool::reconcile`](crate::FunctionTool::reconcile)), which may be able to
//! look the effect up at the far end, typically by the call's idempotency key.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use reins_message::ToolUse;

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::output::ToolOutput;
use crate::toolkit::Toolkit;

/// What a tool found out about a call whose outcome was unknown.
/// The three answers are all there is to know about an effect (it happened, it did
/// not, or nobody can tell), so the enum is exhaustive.
#[derive(Debug, Clone, PartialEq)]
pub enum Reconciliation {
    /// The effect happened; this is the call's result, as the tool reports it (the
    /// model sees it as the call's successful output).
    Happened(ToolOutput),
    /// The effect did not happen (the far end has no trace of the call): it is safe
    /// to run the call again, and the agent does.
    NotRun,
    /// The tool cannot tell (the default for tools that do not reconcile); the call
    /// stays `Unknown`. The text, when given, says why.
    CannotTell(Option<String>),
}

impl Reconciliation {
    /// [`Reconciliation::CannotTell`] with a reason.
    pub fn cannot_tell(reason: impl Into<String>) -> Self {
        Self::CannotTell(Some(reason.into()))
    }

    /// `happened`, `not_run` or `cannot_tell`: the verdict's name as reins records it.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Happened(_) => "happened",
            Self::NotRun => "not_run",
            Self::CannotTell(_) => "cannot_tell",
        }
    }
}

/// A started reconciliation.
pub(crate) type ReconcileFuture = BoxFuture<'static, Result<Reconciliation, ToolError>>;

/// A tool's way to reconcile, with its types erased.
pub(crate) type Reconciler = dyn Fn(ToolContext) -> ReconcileFuture + Send + Sync;

/// The longest a reconciliation may take when the tool's policy sets no timeout.
pub const DEFAULT_RECONCILE_TIMEOUT: Duration = Duration::from_secs(30);

impl Toolkit {
    /// Asks the tool `tool_use` names whether the call took effect (see
    /// [`Tool::reconcile`](crate::Tool::reconcile)). Never fails: an unknown tool, a
    /// tool that does not reconcile, an error, a panic, or no answer within the
    /// tool's timeout (or [`DEFAULT_RECONCILE_TIMEOUT`]) is
    /// [`Reconciliation::CannotTell`] with the reason (without one for a tool that
    /// does not reconcile). When `ctx` carries no
    /// idempotency key, the key of `tool_use` is set (as [`Toolkit::execute`] sets it).
    ///
    /// ```
    /// use reins_message::ToolUse;
    /// use reins_tool::{NoArgs, Reconciliation, ToolContext, ToolError, ToolOutput, Toolkit};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), reins_tool::Error> {
    /// let mut tk = Toolkit::new();
    /// tk.add(
    ///     Toolkit::function("send_email", "Send an email", |_: NoArgs, _ctx| async {
    ///         Ok::<_, ToolError>("sent")
    ///     })
    ///     // A real tool asks its mail API about `ctx.idempotency_key()`.
    ///     .reconcile(|ctx: ToolContext| async move {
    ///         assert!(ctx.idempotency_key().is_some());
    ///         Ok(Reconciliation::Happened(ToolOutput::text("sent (found by its key)")))
    ///     }),
    /// )?;
    /// let call = ToolUse::new("call_1", "send_email", serde_json::json!({}));
    /// let verdict = tk.reconcile(&call, ToolContext::new("s", &call.id)).await;
    /// assert_eq!(verdict.label(), "happened");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn reconcile(&self, tool_use: &ToolUse, ctx: ToolContext) -> Reconciliation {
        let name = tool_use.name.as_str();
        let Some(entry) = self.entry(name).cloned() else {
            return Reconciliation::cannot_tell(self.unknown_tool_message(name));
        };
        let Some(reconciler) = entry.reconciler.clone() else {
            return Reconciliation::CannotTell(None);
        };
        let ctx = if ctx.idempotency_key().is_none() {
            let key = crate::idempotency::key_for_use(&ctx.session_id, tool_use);
            ctx.with_idempotency_key(key)
        } else {
            ctx
        };
        let limit = entry.policy.timeout.unwrap_or(DEFAULT_RECONCILE_TIMEOUT);
        let mut task = crate::exec::AbortOnDrop(tokio::spawn(run(reconciler, ctx)));
        match tokio::time::timeout(limit, &mut task.0).await {
            Ok(Ok(Ok(verdict))) => verdict,
            Ok(Ok(Err(e))) => {
                Reconciliation::cannot_tell(format!("`{name}` could not reconcile: {e}"))
            }
            Ok(Err(e)) if e.is_panic() => Reconciliation::cannot_tell(format!(
                "`{name}` crashed while reconciling: {}",
                crate::exec::panic_message(e.into_panic().as_ref())
            )),
            Ok(Err(_)) => Reconciliation::cannot_tell(format!("`{name}`'s reconcile was stopped")),
            Err(_) => Reconciliation::cannot_tell(format!(
                "`{name}` did not answer within {}",
                crate::exec::human_duration(limit)
            )),
        }
    }
}

async fn run(reconciler: Arc<Reconciler>, ctx: ToolContext) -> Result<Reconciliation, ToolError> {
    reconciler(ctx).await
}
