//! The caller's W3C trace context on every HTTP door: a request's `traceparent`
//! header (W3C Trace Context) is kept for the time the request is served, and the
//! input it sends ([`begin`](crate::sessions::backend::begin)) carries it, so the
//! turn's `invoke_agent` span becomes a child of the caller's span — on the REST API,
//! A2A's JSON-RPC endpoint and AG-UI alike. A malformed header is ignored (the turn
//! starts a trace of its own), as the W3C text asks; nothing is refused for it.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

tokio::task_local! {
    static TRACE_PARENT: String;
}

/// The longest `traceparent` kept: version `00` is 55 characters; a future version
/// may append fields, which are ignored.
const MAX_LEN: usize = 256;

/// Middleware: serves the request with its `traceparent` header kept (see
/// [`current`]).
pub(crate) async fn keep(req: Request, next: Next) -> Response {
    let tp = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.len() <= MAX_LEN)
        .map(str::to_owned);
    match tp {
        Some(tp) => TRACE_PARENT.scope(tp, next.run(req)).await,
        None => next.run(req).await,
    }
}

/// The `traceparent` of the request being served, if it came with one.
pub(crate) fn current() -> Option<String> {
    TRACE_PARENT.try_with(Clone::clone).ok()
}
