//! JSON-RPC 2.0 as ACP uses it over stdio: one message per line (UTF-8 JSON, no
//! embedded newlines), no batches. Parsing what arrives, and the [`Peer`] that writes
//! what this side sends and pairs the client's responses with this side's requests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// The error codes ACP names (schema `ErrorCode`).
pub(crate) mod code {
    /// Invalid JSON.
    pub(crate) const PARSE_ERROR: i64 = -32700;
    /// Not a request object (a batch, a missing `method`, a wrong `jsonrpc`).
    pub(crate) const INVALID_REQUEST: i64 = -32600;
    /// An unknown method.
    pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
    /// Parameters the method cannot take.
    pub(crate) const INVALID_PARAMS: i64 = -32602;
    /// Something failed inside this agent.
    pub(crate) const INTERNAL_ERROR: i64 = -32603;
    /// A session (or another resource) that does not exist.
    pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
    pub(crate) data: Option<Value>,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub(crate) fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_PARAMS, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(code::INTERNAL_ERROR, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(code::RESOURCE_NOT_FOUND, message)
    }

    /// With `data` (what the client can read besides the message).
    pub(crate) fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    fn to_json(&self) -> Value {
        let mut e = json!({ "code": self.code, "message": self.message });
        if let Some(d) = &self.data {
            e["data"] = d.clone();
        }
        e
    }

    fn from_json(v: &Value) -> Self {
        Self {
            code: v
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or(code::INTERNAL_ERROR),
            message: v
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("(no message)")
                .to_owned(),
            data: v.get("data").cloned(),
        }
    }
}

/// One message from the client.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Incoming {
    /// A request: answer it with the same id.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification: no answer.
    Notification { method: String, params: Value },
    /// The answer to one of this side's requests.
    Response {
        id: Value,
        result: Result<Value, RpcError>,
    },
}

/// The text of one line read from the wire (its `\n` or `\r\n` cut off). Bytes that
/// are not UTF-8 are a parse error: JSON-RPC over ACP is UTF-8 JSON.
pub(crate) fn line(bytes: &[u8]) -> Result<&str, RpcError> {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    std::str::from_utf8(bytes).map_err(|e| {
        RpcError::new(
            code::PARSE_ERROR,
            format!(
                "not JSON: the line is not valid UTF-8 ({e}); send one UTF-8 JSON-RPC message per line"
            ),
        )
    })
}

/// Reads one line. A line that is no JSON-RPC message is an error to send back, with
/// the id when one could be read (`null` otherwise, as JSON-RPC says).
#[allow(
    clippy::result_large_err,
    reason = "one value per incoming line, answered at once: boxing would only add an allocation"
)]
pub(crate) fn parse(line: &str) -> Result<Incoming, (Value, RpcError)> {
    let v: Value = serde_json::from_str(line).map_err(|e| {
        (
            Value::Null,
            RpcError::new(code::PARSE_ERROR, format!("not JSON: {e}")),
        )
    })?;
    let Value::Object(o) = v else {
        let what = if v.is_array() {
            "a batch (ACP sends one message per line, never an array)"
        } else {
            "not an object"
        };
        return Err((
            Value::Null,
            RpcError::new(code::INVALID_REQUEST, format!("invalid message: {what}")),
        ));
    };
    let id = o.get("id").cloned();
    let bad = |why: &str| {
        (
            id.clone().filter(valid_id).unwrap_or(Value::Null),
            RpcError::new(code::INVALID_REQUEST, format!("invalid message: {why}")),
        )
    };
    if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(bad("`jsonrpc` must be \"2.0\""));
    }
    if let Some(id) = &id {
        if !valid_id(id) {
            return Err(bad("`id` must be a string, a number or null"));
        }
    }
    let params = o.get("params").cloned().unwrap_or(Value::Null);
    match (o.get("method"), &id) {
        (Some(Value::String(m)), Some(id)) => Ok(Incoming::Request {
            id: id.clone(),
            method: m.clone(),
            params,
        }),
        (Some(Value::String(m)), None) => Ok(Incoming::Notification {
            method: m.clone(),
            params,
        }),
        (Some(_), _) => Err(bad("`method` must be a string")),
        (None, Some(id)) => {
            let result = match (o.get("result"), o.get("error")) {
                (Some(r), None) => Ok(r.clone()),
                (None, Some(e)) => Err(RpcError::from_json(e)),
                _ => {
                    return Err(bad(
                        "a response carries exactly one of `result` and `error`",
                    ));
                }
            };
            Ok(Incoming::Response {
                id: id.clone(),
                result,
            })
        }
        (None, None) => Err(bad("no `method` and no `id`")),
    }
}

fn valid_id(id: &Value) -> bool {
    matches!(id, Value::String(_) | Value::Number(_) | Value::Null)
}

type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>>>;

/// This side of the connection: sends responses, notifications and requests (one line
/// each, in the order they are handed over), and routes the client's responses back to
/// the requests waiting for them.
#[derive(Clone)]
pub(crate) struct Peer {
    out: mpsc::UnboundedSender<String>,
    waiting: Waiting,
    next: Arc<AtomicU64>,
}

impl Peer {
    /// A peer and the lines it sends (for the writer task).
    pub(crate) fn new() -> (Self, mpsc::UnboundedReceiver<String>) {
        let (out, rx) = mpsc::unbounded_channel();
        (
            Self {
                out,
                waiting: Arc::default(),
                next: Arc::new(AtomicU64::new(0)),
            },
            rx,
        )
    }

    fn send(&self, msg: &Value) {
        // A closed writer means the client is gone; what it would have read is moot.
        let _ = self.out.send(msg.to_string());
    }

    /// Answers a request.
    pub(crate) fn respond(&self, id: Value, result: Result<Value, RpcError>) {
        let msg = match result {
            Ok(r) => json!({ "jsonrpc": "2.0", "id": id, "result": r }),
            Err(e) => json!({ "jsonrpc": "2.0", "id": id, "error": e.to_json() }),
        };
        self.send(&msg);
    }

    /// Sends a notification.
    pub(crate) fn notify(&self, method: &str, params: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// Sends a request and waits for its answer. A closed connection is an error.
    pub(crate) async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock().insert(id, tx);
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        rx.await.unwrap_or_else(|_| {
            Err(RpcError::internal(format!(
                "the client closed the connection before answering `{method}`"
            )))
        })
    }

    /// Hands a response from the client to the request waiting for it (an answer to
    /// nothing, or to an id this side never used, is dropped).
    pub(crate) fn complete(&self, id: &Value, result: Result<Value, RpcError>) {
        let Some(n) = id.as_u64() else {
            tracing::debug!(id = %id, "a response to an id this agent never sent");
            return;
        };
        if let Some(tx) = self.lock().remove(&n) {
            let _ = tx.send(result);
        }
    }

    /// Fails every request still waiting (the connection closed).
    pub(crate) fn close(&self) {
        self.lock().clear();
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    #[test]
    fn parses_the_three_kinds_and_refuses_the_rest() {
        let r = parse(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#).unwrap();
        assert!(matches!(r, Incoming::Request { ref method, .. } if method == "initialize"));
        let n = parse(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{}}"#).unwrap();
        assert!(matches!(n, Incoming::Notification { .. }));
        let ok = parse(r#"{"jsonrpc":"2.0","id":3,"result":{"x":1}}"#).unwrap();
        assert!(matches!(ok, Incoming::Response { result: Ok(_), .. }));
        let err =
            parse(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32800,"message":"no"}}"#).unwrap();
        assert!(matches!(
            err,
            Incoming::Response {
                result: Err(RpcError { code: -32800, .. }),
                ..
            }
        ));

        let (id, e) = parse("{not json").unwrap_err();
        assert_eq!((id, e.code), (Value::Null, code::PARSE_ERROR));
        let (id, e) = parse(r#"[{"jsonrpc":"2.0","id":1,"method":"x"}]"#).unwrap_err();
        assert_eq!((id, e.code), (Value::Null, code::INVALID_REQUEST));
        let (id, e) = parse(r#"{"jsonrpc":"1.0","id":7,"method":"x"}"#).unwrap_err();
        assert_eq!((id, e.code), (json!(7), code::INVALID_REQUEST));
        let (id, e) = parse(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#).unwrap_err();
        assert_eq!((id, e.code), (Value::Null, code::INVALID_REQUEST));
        let (_, e) = parse(r#"{"jsonrpc":"2.0","id":1,"method":5}"#).unwrap_err();
        assert_eq!(e.code, code::INVALID_REQUEST);
        let (_, e) = parse(r#"{"jsonrpc":"2.0"}"#).unwrap_err();
        assert_eq!(e.code, code::INVALID_REQUEST);
    }

    #[test]
    fn a_line_is_utf8_without_its_line_end() {
        assert_eq!(line(b"{}\r\n").unwrap(), "{}");
        assert_eq!(line(b"{}\n").unwrap(), "{}");
        assert_eq!(line(b"{}").unwrap(), "{}");
        let e = line(b"{\"a\":\"\xff\xfe\"}\n").unwrap_err();
        assert_eq!(e.code, code::PARSE_ERROR);
        assert!(e.message.contains("UTF-8"), "{}", e.message);
    }

    #[tokio::test]
    async fn a_response_reaches_its_request_and_a_closed_peer_fails_it() {
        let (peer, mut rx) = Peer::new();
        let p = peer.clone();
        let asked = tokio::spawn(async move { p.request("fs/read_text_file", json!({})).await });
        let line = rx.recv().await.unwrap();
        let sent: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(sent["method"], "fs/read_text_file");
        peer.complete(&json!(999), Ok(json!("stray")));
        peer.complete(&sent["id"], Ok(json!({"content": "hi"})));
        assert_eq!(asked.await.unwrap().unwrap(), json!({"content": "hi"}));

        let p = peer.clone();
        let asked = tokio::spawn(async move { p.request("x", json!({})).await });
        let _ = rx.recv().await.unwrap();
        peer.close();
        assert_eq!(asked.await.unwrap().unwrap_err().code, code::INTERNAL_ERROR);
    }
}
