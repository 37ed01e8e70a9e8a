//! Sub-agent calls on the Restate driver: where their child sessions run. Each child
//! session is a virtual object of its own — the same `ReinsSession` service, keyed by
//! the child session's id (`parent/tool_use_id`) — called by its parent's turn
//! through Restate's journaled object client. What a dispatch means is the run's and
//! the effects' (`reins_agent::effects::delegate`), as on the local driver:
//!
//! - **The parent** claims the calls in its ledger (`subagent <ids>`), calls every
//!   child object's exclusive handler `child` at once (request-response: the answers
//!   are journaled in the parent's invocation, so a replayed parent never calls
//!   twice), then makes their answers the calls' outcomes (`subagent-finish <ids>`:
//!   the routed answers audited, a finished call's result in its ledger).
//! - **The child** (`child`) serves one dispatch with
//!   `reins_agent::effects::delegate::serve_child`: it reads the child session
//!   (`child-state`), starts it with the task, hands it the answers routed from the
//!   parent (through the child's own checks), resumes it, or reads it, and runs the
//!   child's turn *until it pauses or ends*: then it answers, and no invocation waits
//!   on the child meanwhile. A pause bubbles up: the parent's call is delegated with
//!   the child's requirements and the parent pauses on them.
//! - **Interrupts flow down**: an interrupt cancels the parent's invocation, and
//!   Restate passes the cancellation on to the child invocations it waits for; the
//!   parent waits for each child's answer (the child ends `cancelled`).

use reins_agent::effects::delegate::{ChildAnswer, ChildCall};
use restate_sdk::prelude::*;

use super::TurnDriver;
use crate::object::{CLOSING, Inner, SessionObjectClient, TURN, is_cancel, refused, retry};

/// Calls the child object of each call at once, and waits for their answers (in the
/// calls' order). An interrupt (Restate passes it on to each child invocation, and
/// this process stops their running calls) waits for the children's answers (each
/// ends `cancelled`).
pub(super) async fn call_children(
    d: &mut TurnDriver<'_, '_>,
    calls: Vec<ChildCall>,
) -> Result<Vec<ChildAnswer>, TerminalError> {
    let mut handles = Vec::with_capacity(calls.len());
    let mut children = DurableFuturesUnordered::new();
    for call in calls {
        let child = call.child();
        let call = d
            .ctx
            .object_client::<SessionObjectClient>(child)
            .child(Json(call))
            .call();
        handles.push(call.invocation_handle().await?);
        children.push(call);
    }
    let mut answers: Vec<Option<ChildAnswer>> = vec![None; handles.len()];
    loop {
        match children.next().await {
            Ok(None) => break,
            Ok(Some((i, Ok(Json(answer))))) => answers[i] = Some(answer),
            Ok(Some((_, Err(e)))) | Err(e) if is_cancel(&e) => {
                d.cancelled = true;
                d.token.cancel();
                break;
            }
            Ok(Some((_, Err(e)))) | Err(e) => return Err(e),
        }
    }
    let mut out = Vec::with_capacity(answers.len());
    for (answer, handle) in answers.into_iter().zip(&handles) {
        out.push(match answer {
            Some(a) => a,
            None => attach(handle).await?,
        });
    }
    Ok(out)
}

/// Waits for the answer of the child invocation `handle` after this turn was
/// interrupted (the child ends `cancelled` and answers).
async fn attach(handle: &InvocationHandle) -> Result<ChildAnswer, TerminalError> {
    loop {
        match handle.attach::<Json<ChildAnswer>>().await {
            Ok(Json(answer)) => return Ok(answer),
            Err(e) if is_cancel(&e) => {}
            Err(e) => return Err(e),
        }
    }
}

/// The `child` handler: one dispatch of a sub-agent call, on the child session's
/// object (exclusive: one at a time with its own turns), with the sub-agent the
/// parent's stored call names.
pub(crate) async fn serve(
    inner: &std::sync::Arc<Inner>,
    ctx: &ObjectContext<'_>,
    call: ChildCall,
) -> HandlerResult<ChildAnswer> {
    let session = ctx.key().to_owned();
    let parent = inner.agent.owner_of(&call.parent).await.map_err(retry)?;
    let Some(sub) = parent.subagent(&call.tool_use.name).cloned() else {
        return Err(TerminalError::new(format!(
            "`{}` is not a sub-agent of agent `{}`",
            call.tool_use.name,
            parent.name()
        ))
        .into());
    };
    ctx.set(TURN, ctx.invocation_id().to_owned());
    ctx.clear(CLOSING);
    let token = inner.register(&session);
    let mut driver = TurnDriver::new(inner, ctx, session.clone(), token, sub);
    driver.until_pause = true;
    let result = reins_agent::effects::delegate::serve_child(&mut driver, call).await;
    inner.unregister(&session);
    // `turn`, `waiting` and `closing` are all the object's state: one entry.
    ctx.clear_all();
    Ok(result.map_err(|e| refused(&session, &e))?)
}
