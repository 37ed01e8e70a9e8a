//! One `tools/call`: sending it, cancelling it, mapping its result, and what a lost
//! connection means for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use reins_message::{ContentBlock, MediaSource};
use reins_tool::{ToolContext, ToolError, ToolOutput};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, InputResponses, RequestId, RequestMetaObject, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::{Map, Value};

use crate::connection::{Connection, Live, ProgressRoute};

/// The `_meta` key a `tools/call` request carries the call's idempotency key under
/// ([`ToolContext::idempotency_key`]). The prefix `reins/` follows the MCP rules for
/// `_meta` names (a prefix of dot-separated labels and a slash; nothing that MCP
/// reserves), so servers that know nothing of it ignore it.
pub const IDEMPOTENCY_KEY_META: &str = "reins/idempotencyKey";

/// How one attempt ended.
enum Attempt {
    /// The call has an answer (or failed in a way that says nothing about effects).
    Done(Result<ToolOutput, ToolError>),
    /// The request never left: the connection was already gone. Safe to retry.
    NotSent(String),
    /// The connection was lost while the server had the request: it may have acted.
    Lost(String),
    /// The server needs input first (MRTR): the answers, and the state to echo, for
    /// the retry (a new request).
    Retry {
        responses: InputResponses,
        state: Option<String>,
    },
}

/// Sends `notifications/cancelled` for a request still in flight when dropped (the
/// executor aborts a call that timed out, or did not stop within its grace period).
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
    counter: Arc<Connection>,
}

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.peer = None;
    }

    async fn send_now(&mut self, reason: &str) {
        if let Some(peer) = self.peer.take() {
            send_cancelled(&peer, self.id.clone(), reason, &self.counter.cancellations).await;
        }
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(peer) = self.peer.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let id = self.id.clone();
            let conn = self.counter.clone();
            rt.spawn(async move {
                send_cancelled(
                    &peer,
                    id,
                    "the call was stopped by the client",
                    &conn.cancellations,
                )
                .await;
            });
        }
    }
}

async fn send_cancelled(peer: &Peer<RoleClient>, id: RequestId, reason: &str, counter: &AtomicU64) {
    let param = CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
    match peer.notify_cancelled(param).await {
        Ok(()) => {
            counter.fetch_add(1, Ordering::AcqRel);
        }
        Err(e) => tracing::debug!(error = %e, "could not send notifications/cancelled"),
    }
}

/// Runs `mcp_name` with `args`: connects (or reconnects) first, follows the server's
/// tool list, and applies the fault rules (a lost call is `Unknown` unless
/// `idempotent`, then it is retried once on a fresh connection).
pub(crate) async fn call_tool(
    conn: Arc<Connection>,
    mcp_name: String,
    args: Value,
    ctx: ToolContext,
    idempotent: bool,
) -> Result<ToolOutput, ToolError> {
    let server = conn.name().to_owned();
    if conn.routes.tools_changed.load(Ordering::Acquire) {
        if let Err(e) = conn.list_tools().await {
            tracing::warn!(server = %server, error = %e, "could not re-list tools after a change");
        }
        let current = crate::connection::lock(&conn.tools)
            .iter()
            .find(|t| t.name == mcp_name)
            .cloned();
        match current {
            None => {
                return Err(ToolError::failed(format!(
                    "MCP server `{server}` no longer offers the tool `{mcp_name}` (its tool list changed); use another tool"
                )));
            }
            Some(tool) => {
                let schema = Value::Object((*tool.input_schema).clone());
                if let Err(problems) = reins_tool::validate(&schema, &args) {
                    return Err(ToolError::invalid_args(format!(
                        "{} (the server changed the tool's schema)",
                        problems.join("; ")
                    )));
                }
            }
        }
    }
    let arguments = match args {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => {
            return Err(ToolError::invalid_args(format!(
                "expected a JSON object, got {other}"
            )));
        }
    };

    let mut retried = false;
    let mut rounds = 0usize;
    let mut mrtr: Option<(InputResponses, Option<String>)> = None;
    loop {
        if ctx.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        // A failure to connect happens before anything reached the server: an error.
        let live = conn
            .live()
            .await
            .map_err(|e| ToolError::failed(e.to_string()))?;
        match attempt(
            &conn,
            &live,
            &mcp_name,
            arguments.clone(),
            mrtr.clone(),
            &ctx,
        )
        .await
        {
            Attempt::Done(r) => return r,
            Attempt::Retry { responses, state } => {
                rounds += 1;
                if rounds > crate::modern::MAX_ROUNDS {
                    return Err(ToolError::failed(format!(
                        "MCP server `{server}` kept asking for input on `{mcp_name}` ({rounds} rounds); gave up"
                    )));
                }
                mrtr = Some((responses, state));
            }
            Attempt::NotSent(why) => {
                conn.forget(live.generation).await;
                if retried {
                    return Err(ToolError::failed(format!(
                        "could not reach MCP server `{server}` to call `{mcp_name}`: {why}{}",
                        conn.stderr_tail()
                    )));
                }
                retried = true;
            }
            Attempt::Lost(why) => {
                conn.forget(live.generation).await;
                if idempotent && !retried {
                    tracing::warn!(server = %server, tool = %mcp_name, "connection lost mid-call; retrying the idempotent call once");
                    retried = true;
                    continue;
                }
                return Err(ToolError::Unknown(format!(
                    "the connection to MCP server `{server}` was lost while `{mcp_name}` ran ({why}{}); \
                     the call may or may not have taken effect. Check before calling it again.",
                    conn.stderr_tail()
                )));
            }
        }
    }
}

async fn attempt(
    conn: &Arc<Connection>,
    live: &Live,
    mcp_name: &str,
    arguments: Map<String, Value>,
    mrtr: Option<(InputResponses, Option<String>)>,
    ctx: &ToolContext,
) -> Attempt {
    let server = conn.name();
    let mut params = CallToolRequestParams::new(mcp_name.to_owned()).with_arguments(arguments);
    if let Some((responses, state)) = mrtr {
        params = params.with_input_responses(responses);
        if let Some(state) = state {
            params = params.with_request_state(state);
        }
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let peer = live.service.peer();
    let mut options = PeerRequestOptions::no_options();
    // The call's idempotency key travels in the request's `_meta`, so a server that
    // dedupes can recognize a retry (the same key on every attempt, in any process).
    // So does the trace context of the call's span (`_meta.traceparent`, where
    // OpenTelemetry's MCP conventions and SEP-414 put it): the server's spans join
    // the run's trace.
    if ctx.idempotency_key().is_some() || ctx.trace_parent().is_some() {
        let mut meta = RequestMetaObject::new();
        if let Some(key) = ctx.idempotency_key() {
            meta.insert(IDEMPOTENCY_KEY_META.to_owned(), Value::from(key));
        }
        if let Some(tp) = ctx.trace_parent() {
            meta.set_traceparent(tp);
        }
        options.meta = Some(meta);
    }
    let handle = match peer.send_request_with_option(request, options).await {
        Ok(h) => h,
        Err(e) => return Attempt::NotSent(e.to_string()),
    };
    let _route = ProgressRoute::new(&conn.routes, &handle.progress_token, ctx.clone());
    let mut guard = CancelOnDrop {
        peer: Some(handle.peer.clone()),
        id: handle.id.clone(),
        counter: conn.clone(),
    };
    let response = tokio::select! {
        biased;
        r = handle.await_response() => r,
        () = ctx.cancelled() => {
            guard.send_now("the run was interrupted").await;
            return Attempt::Done(Err(ToolError::Cancelled));
        }
    };
    guard.disarm();
    match response {
        Ok(ServerResult::CallToolResult(result)) => {
            Attempt::Done(to_output(server, mcp_name, result))
        }
        Ok(ServerResult::InputRequiredResult(asked)) => {
            match crate::modern::answer(
                conn,
                mcp_name,
                asked.input_requests.unwrap_or_default(),
                ctx,
            )
            .await
            {
                Ok(responses) if !ctx.is_cancelled() => Attempt::Retry {
                    responses,
                    state: asked.request_state,
                },
                Ok(_) => Attempt::Done(Err(ToolError::Cancelled)),
                Err(e) => Attempt::Done(Err(e)),
            }
        }
        Ok(ServerResult::CreateTaskResult(created)) => {
            Attempt::Done(crate::modern::follow(conn, mcp_name, created.task, ctx).await)
        }
        Ok(other) => Attempt::Done(Err(ToolError::failed(format!(
            "MCP server `{server}` answered the call to `{mcp_name}` with something that is not a tool result ({}); \
             the server may be broken",
            result_kind(&other)
        )))),
        Err(ServiceError::McpError(e)) => {
            let text = format!(
                "MCP server `{server}` refused the call to `{mcp_name}`: {} (JSON-RPC error {})",
                e.message, e.code.0
            );
            Attempt::Done(Err(if e.code.0 == -32602 {
                ToolError::invalid_args(text)
            } else {
                ToolError::failed(text)
            }))
        }
        Err(ServiceError::Cancelled { .. }) => Attempt::Done(Err(ToolError::Cancelled)),
        Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
            Attempt::Lost(e.to_string())
        }
        Err(e) => Attempt::Done(Err(ToolError::failed(format!(
            "the call to `{mcp_name}` on MCP server `{server}` failed: {e}"
        )))),
    }
}

fn result_kind(r: &ServerResult) -> String {
    serde_json::to_value(r)
        .ok()
        .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()))
        .map_or_else(
            || "unreadable".to_owned(),
            |keys| format!("fields: {}", keys.join(", ")),
        )
}

/// Maps a `tools/call` result to reins output: content blocks for the model; the
/// structured content and the result's `_meta` as metadata; `isError` as an error.
pub(crate) fn to_output(
    server: &str,
    tool: &str,
    result: CallToolResult,
) -> Result<ToolOutput, ToolError> {
    let value = serde_json::to_value(&result).unwrap_or(Value::Null);
    let mut blocks: Vec<ContentBlock> = value["content"]
        .as_array()
        .map(|items| items.iter().map(content_block).collect())
        .unwrap_or_default();
    let structured = value.get("structuredContent").cloned();
    if blocks.is_empty()
        && let Some(s) = &structured
    {
        blocks.push(ContentBlock::text(s.to_string()));
    }
    if result.is_error == Some(true) {
        let texts: Vec<String> = blocks
            .iter()
            .map(|b| {
                b.as_text()
                    .map_or_else(|| "[non-text content]".to_owned(), str::to_owned)
            })
            .collect();
        let text = if texts.is_empty() {
            format!("MCP tool `{tool}` on server `{server}` reported an error without details")
        } else {
            texts.join("\n")
        };
        return Err(ToolError::failed(text));
    }
    let mut out = ToolOutput::new(blocks)
        .with_metadata("mcp_server", Value::from(server))
        .with_metadata("mcp_tool", Value::from(tool));
    if let Some(s) = structured {
        out = out.with_metadata("structured_content", s);
    }
    if let Some(meta) = value.get("_meta") {
        out = out.with_metadata("mcp_meta", meta.clone());
    }
    Ok(out)
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// One MCP content item as a reins block.
fn content_block(item: &Value) -> ContentBlock {
    let media = |v: &Value| MediaSource::Base64 {
        media_type: str_of(v, "mimeType").to_owned(),
        data: str_of(v, "data").to_owned(),
    };
    match str_of(item, "type") {
        "text" => ContentBlock::text(str_of(item, "text")),
        "image" => ContentBlock::Image {
            source: media(item),
        },
        "audio" => ContentBlock::Audio {
            source: media(item),
        },
        "resource" => {
            let r = &item["resource"];
            let uri = str_of(r, "uri");
            let mime = str_of(r, "mimeType");
            if let Some(text) = r.get("text").and_then(Value::as_str) {
                ContentBlock::text(format!("[resource {uri}]\n{text}"))
            } else if mime.starts_with("image/") {
                ContentBlock::Image {
                    source: MediaSource::Base64 {
                        media_type: mime.to_owned(),
                        data: str_of(r, "blob").to_owned(),
                    },
                }
            } else {
                ContentBlock::text(format!(
                    "[binary resource {uri} ({}), {} base64 characters not shown]",
                    if mime.is_empty() {
                        "unknown type"
                    } else {
                        mime
                    },
                    str_of(r, "blob").len()
                ))
            }
        }
        "resource_link" => {
            let mut text = format!(
                "[resource link: {} <{}>]",
                str_of(item, "name"),
                str_of(item, "uri")
            );
            if let Some(d) = item.get("description").and_then(Value::as_str) {
                text.push(' ');
                text.push_str(d);
            }
            ContentBlock::text(text)
        }
        _ => ContentBlock::text(item.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(v: Value) -> CallToolResult {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn content_maps_to_blocks_and_structured_content_is_kept() {
        let r = result(json!({
            "content": [
                { "type": "text", "text": "hi" },
                { "type": "image", "data": "AAAA", "mimeType": "image/png" },
                { "type": "resource", "resource": { "uri": "file:///a.txt", "text": "body" } },
                { "type": "resource", "resource": { "uri": "file:///b.bin", "blob": "AAAA", "mimeType": "application/zip" } },
                { "type": "resource_link", "uri": "file:///c", "name": "c" }
            ],
            "structuredContent": { "sum": 3 }
        }));
        let out = to_output("s", "t", r).unwrap();
        assert_eq!(out.content[0], ContentBlock::text("hi"));
        assert_eq!(
            out.content[1],
            ContentBlock::Image {
                source: MediaSource::Base64 {
                    media_type: "image/png".into(),
                    data: "AAAA".into()
                }
            }
        );
        assert_eq!(
            out.content[2],
            ContentBlock::text("[resource file:///a.txt]\nbody")
        );
        assert!(
            out.content[3]
                .as_text()
                .unwrap()
                .contains("application/zip")
        );
        assert_eq!(
            out.content[4],
            ContentBlock::text("[resource link: c <file:///c>]")
        );
        assert_eq!(out.metadata["structured_content"], json!({ "sum": 3 }));
        assert_eq!(out.metadata["mcp_server"], "s");
    }

    #[test]
    fn structured_only_results_are_shown_and_errors_are_errors() {
        let out = to_output(
            "s",
            "t",
            result(json!({ "content": [], "structuredContent": { "a": 1 } })),
        )
        .unwrap();
        assert_eq!(out.content[0], ContentBlock::text(r#"{"a":1}"#));
        let e = to_output(
            "s",
            "t",
            result(
                json!({ "content": [{ "type": "text", "text": "no such file" }], "isError": true }),
            ),
        )
        .unwrap_err();
        assert_eq!(e, ToolError::failed("no such file"));
        let e = to_output("s", "t", result(json!({ "content": [], "isError": true }))).unwrap_err();
        assert!(e.to_string().contains("without details"));
    }
}
