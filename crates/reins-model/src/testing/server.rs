//! [`TestServer`]: a real HTTP/1.1 server on 127.0.0.1 that records what it
//! receives and answers with scripted [`Reply`]s, faults included.
//!
//! Written here on tokio's sockets rather than on a mock-server crate (wiremock) or
//! hyper: the faults a provider must survive — a connection reset mid-body, a stream
//! that goes silent, a body cut off — need control of the raw connection, which mock
//! servers do not give; and the `testing` feature, which crates also turn on for
//! `ScriptedModel`, then adds only tokio's `net` and `io-util`, not an HTTP stack.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinSet};

/// Where a provider sends its requests: the method, the path and the headers it
/// must carry. A request that misses any of them is answered with HTTP 404 and a
/// body saying what did not match (and is still recorded), so a provider that posts
/// to the wrong place or forgets a header fails its tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
}

impl Endpoint {
    /// `POST path`, e.g. `Endpoint::post("/v1/chat/completions")`.
    pub fn post(path: impl Into<String>) -> Self {
        Self {
            method: "POST".to_owned(),
            path: path.into(),
            headers: Vec::new(),
        }
    }

    /// Requires a header with this value (names compare case-insensitively).
    #[must_use]
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    /// The path requests must go to.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Why `request` is not for this endpoint, or `None` when it is.
    fn mismatch(&self, request: &ReceivedRequest) -> Option<String> {
        if request.method != self.method || request.path != self.path {
            return Some(format!(
                "the test server serves {} {}, not {} {}",
                self.method, self.path, request.method, request.path
            ));
        }
        self.headers
            .iter()
            .find_map(|(name, want)| match request.header(name) {
                Some(got) if got == want => None,
                Some(_) => Some(format!("header `{name}` has the wrong value")),
                None => Some(format!("header `{name}` is missing")),
            })
    }
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceivedRequest {
    /// The method, e.g. `POST`.
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// The query string, without the `?` (empty when there was none).
    pub query: String,
    /// The headers in the order they came, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked when it was sent chunked).
    pub body: Vec<u8>,
}

impl ReceivedRequest {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON.
    ///
    /// # Errors
    /// When the body is not JSON.
    pub fn json(&self) -> serde_json::Result<Value> {
        serde_json::from_slice(&self.body)
    }
}

/// How a [`Reply`] ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// A whole response with its `content-length`; the connection closes.
    Complete,
    /// Status, headers and body (chunked), then nothing until the client hangs up.
    Silence,
    /// Status, headers and body (chunked), then a connection reset.
    Reset,
    /// No response at all: the connection is reset once the request is read.
    ResetFirst,
}

/// What the server answers one request with: an HTTP response, or a fault no
/// well-behaved server makes (a reset, a stream that goes silent).
///
/// ```
/// use reins_model::testing::Reply;
///
/// let rate_limited = Reply::json(429, r#"{"error":{"message":"slow down"}}"#)
///     .with_header("retry-after", "2");
/// let cut_off = Reply::sse("data: {\"partial\":true}\n\n").then_reset();
/// # let _ = (rate_limited, cut_off);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    ending: Ending,
}

impl Reply {
    /// A response with this status, no headers and an empty body.
    pub fn new(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            ending: Ending::Complete,
        }
    }

    /// HTTP 200 with `content-type: text/event-stream` and this body (see
    /// [`sse_data`](super::sse_data) and [`sse_typed`](super::sse_typed)).
    pub fn sse(body: impl Into<String>) -> Self {
        Self::new(200)
            .with_header("content-type", "text/event-stream")
            .with_body(body.into())
    }

    /// A response with this status, `content-type: application/json` and this body.
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        Self::new(status)
            .with_header("content-type", "application/json")
            .with_body(body.into())
    }

    /// No response: the server reads the request, then resets the connection
    /// (TCP RST), as a crashing proxy does.
    pub fn reset() -> Self {
        Self {
            ending: Ending::ResetFirst,
            ..Self::new(0)
        }
    }

    /// Adds a header.
    #[must_use]
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// Replaces the body.
    #[must_use]
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sends the status, the headers and the body (chunked), then nothing more,
    /// holding the connection open until the client hangs up: a stream that goes
    /// silent (with an empty body, one that never starts).
    #[must_use]
    pub fn then_silence(mut self) -> Self {
        self.ending = Ending::Silence;
        self
    }

    /// Sends the status, the headers and the body (chunked), then resets the
    /// connection: a stream that breaks off.
    #[must_use]
    pub fn then_reset(mut self) -> Self {
        self.ending = Ending::Reset;
        self
    }
}

type Matcher = Box<dyn Fn(&ReceivedRequest) -> bool + Send + Sync>;

#[derive(Default)]
struct Routes {
    endpoint: Option<Endpoint>,
    when: Vec<(Matcher, Reply)>,
    once: VecDeque<Reply>,
    always: Option<Reply>,
    received: Vec<ReceivedRequest>,
}

impl Routes {
    /// Records `request` and picks its reply.
    fn answer(&mut self, request: ReceivedRequest) -> Reply {
        let reply = match self.endpoint.as_ref().and_then(|e| e.mismatch(&request)) {
            Some(why) => Reply::new(404)
                .with_header("content-type", "text/plain")
                .with_body(why),
            None => self
                .when
                .iter()
                .find(|(matches, _)| matches(&request))
                .map(|(_, reply)| reply.clone())
                .or_else(|| self.once.pop_front())
                .or_else(|| self.always.clone())
                .unwrap_or_else(|| {
                    Reply::new(404)
                        .with_header("content-type", "text/plain")
                        .with_body("the test server has no reply set")
                }),
        };
        self.received.push(request);
        reply
    }
}

/// A real HTTP/1.1 server on 127.0.0.1 for provider tests: it records every
/// request and answers with the [`Reply`]s it was given. It stops when dropped
/// (its listener and open connections with it).
///
/// Replies are chosen in this order: the first [`reply_when`](Self::reply_when)
/// rule whose test the request passes; else the next [`reply_once`](Self::reply_once)
/// reply; else the [`reply`](Self::reply) for every request; else HTTP 404. A
/// request that misses the server's [`Endpoint`] gets HTTP 404 whatever was set.
/// Each connection carries one exchange (`connection: close`).
///
/// ```
/// use reins_model::testing::{Endpoint, Reply, TestServer};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let server = TestServer::start(Endpoint::post("/v1/generate"));
/// server
///     .reply(Reply::sse("data: hello\n\n"))
///     .reply_once(Reply::json(503, r#"{"error":"busy"}"#));
/// // ... point a model at `server.url()` and call it ...
/// assert_eq!(server.request_count(), 0);
/// # }
/// ```
pub struct TestServer {
    url: String,
    routes: Arc<Mutex<Routes>>,
    accept: AbortHandle,
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer")
            .field("url", &self.url)
            .field("requests", &self.request_count())
            .finish_non_exhaustive()
    }
}

fn lock(routes: &Mutex<Routes>) -> MutexGuard<'_, Routes> {
    routes.lock().unwrap_or_else(PoisonError::into_inner)
}

impl TestServer {
    /// Starts a server on a free port of 127.0.0.1 that serves `endpoint` (and
    /// answers anything else with HTTP 404).
    ///
    /// # Panics
    /// Outside a Tokio runtime with I/O enabled, or when no loopback port can be
    /// bound.
    pub fn start(endpoint: Endpoint) -> Self {
        Self::start_with(Routes {
            endpoint: Some(endpoint),
            ..Routes::default()
        })
    }

    /// Starts a server that answers requests to any method and path.
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_any() -> Self {
        Self::start_with(Routes::default())
    }

    // A test kit that cannot bind a loopback port cannot run its test: saying so
    // loudly is its only useful answer.
    #[allow(clippy::expect_used)]
    fn start_with(routes: Routes) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("TestServer: bind a port on 127.0.0.1");
        listener
            .set_nonblocking(true)
            .expect("TestServer: make the listener non-blocking");
        let addr = listener
            .local_addr()
            .expect("TestServer: read the listener's address");
        let listener = TcpListener::from_std(listener)
            .expect("TestServer::start must run inside a Tokio runtime with I/O enabled");
        let routes = Arc::new(Mutex::new(routes));
        let accept = tokio::spawn(accept_loop(listener, routes.clone())).abort_handle();
        Self {
            url: format!("http://{addr}"),
            routes,
            accept,
        }
    }

    /// The base URL, `http://127.0.0.1:<port>` (no trailing slash).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Answers every request no other rule takes with `reply` (replacing an
    /// earlier one).
    pub fn reply(&self, reply: Reply) -> &Self {
        lock(&self.routes).always = Some(reply);
        self
    }

    /// Answers the next request no [`reply_when`](Self::reply_when) rule takes with
    /// `reply`, once; several are used in the order they were given.
    pub fn reply_once(&self, reply: Reply) -> &Self {
        lock(&self.routes).once.push_back(reply);
        self
    }

    /// Answers every request that passes `test` with `reply`, before any other
    /// rule (rules are tried in the order they were given).
    pub fn reply_when(
        &self,
        test: impl Fn(&ReceivedRequest) -> bool + Send + Sync + 'static,
        reply: Reply,
    ) -> &Self {
        lock(&self.routes).when.push((Box::new(test), reply));
        self
    }

    /// [`reply_when`](Self::reply_when) for a test on the JSON body; a request
    /// whose body is not JSON does not pass.
    pub fn reply_when_json(
        &self,
        test: impl Fn(&Value) -> bool + Send + Sync + 'static,
        reply: Reply,
    ) -> &Self {
        self.reply_when(move |r| r.json().is_ok_and(|v| test(&v)), reply)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ReceivedRequest> {
        lock(&self.routes).received.clone()
    }

    /// How many requests were received so far.
    pub fn request_count(&self) -> usize {
        lock(&self.routes).received.len()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // Ends the accept loop; its `JoinSet` ends every open connection with it.
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, routes: Arc<Mutex<Routes>>) {
    let mut connections = JoinSet::new();
    while let Ok((socket, _)) = listener.accept().await {
        while connections.try_join_next().is_some() {}
        connections.spawn(exchange(socket, routes.clone()));
    }
}

/// One connection: read a request, record it, answer it.
async fn exchange(mut socket: TcpStream, routes: Arc<Mutex<Routes>>) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    let reply = lock(&routes).answer(request);
    // A client that leaves early is not the server's failure: write errors end
    // the exchange quietly.
    let _ = write_reply(socket, reply).await;
}

/// Reads more bytes into `buf`; `None` at the end of the stream or on an error.
async fn fill(socket: &mut TcpStream, buf: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 8192];
    match socket.read(&mut chunk).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Some(())
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads one request: the head, then a body of `content-length` bytes or a
/// chunked one. `None` when the client leaves first or sends no HTTP.
async fn read_request(socket: &mut TcpStream) -> Option<ReceivedRequest> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            break end;
        }
        fill(socket, &mut buf).await?;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let target = request_line.next()?;
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_owned(), q.to_owned()),
        None => (target.to_owned(), String::new()),
    };
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut rest = buf.split_off(head_end + 4);
    let mut request = ReceivedRequest {
        method,
        path,
        query,
        headers,
        body: Vec::new(),
    };
    let chunked = request
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    request.body = if chunked {
        read_chunked(socket, rest).await?
    } else {
        let len: usize = request
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while rest.len() < len {
            fill(socket, &mut rest).await?;
        }
        rest.truncate(len);
        rest
    };
    Some(request)
}

/// Decodes a chunked body whose first bytes are `buf`.
async fn read_chunked(socket: &mut TcpStream, mut buf: Vec<u8>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(end) = find(&buf, b"\r\n") {
                break end;
            }
            fill(socket, &mut buf).await?;
        };
        let size_text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
        let size_hex = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16).ok()?;
        buf.drain(..line_end + 2);
        if size == 0 {
            // Trailers (usually none), then the blank line that ends the body.
            while !buf.starts_with(b"\r\n") && find(&buf, b"\r\n\r\n").is_none() {
                fill(socket, &mut buf).await?;
            }
            return Some(body);
        }
        while buf.len() < size + 2 {
            fill(socket, &mut buf).await?;
        }
        body.extend_from_slice(&buf[..size]);
        buf.drain(..size + 2);
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    }
}

fn head(reply: &Reply, framing: &str) -> String {
    let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(framing);
    head.push_str("connection: close\r\n\r\n");
    head
}

async fn write_reply(mut socket: TcpStream, reply: Reply) -> std::io::Result<()> {
    match reply.ending {
        Ending::ResetFirst => reset(socket),
        Ending::Complete => {
            let framing = format!("content-length: {}\r\n", reply.body.len());
            socket.write_all(head(&reply, &framing).as_bytes()).await?;
            socket.write_all(&reply.body).await?;
            socket.shutdown().await?;
        }
        Ending::Silence | Ending::Reset => {
            let framing = "transfer-encoding: chunked\r\n";
            socket.write_all(head(&reply, framing).as_bytes()).await?;
            // An empty chunk would end the body: send none for an empty body.
            if !reply.body.is_empty() {
                socket
                    .write_all(format!("{:x}\r\n", reply.body.len()).as_bytes())
                    .await?;
                socket.write_all(&reply.body).await?;
                socket.write_all(b"\r\n").await?;
            }
            socket.flush().await?;
            if reply.ending == Ending::Reset {
                // Let the client read what was sent before the reset discards it.
                tokio::time::sleep(Duration::from_millis(20)).await;
                reset(socket);
            } else {
                // Silence: wait for the client to hang up (or the server to stop).
                let mut sink = [0u8; 1024];
                while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
            }
        }
    }
    Ok(())
}

/// Closes with a reset (RST) rather than a clean end (FIN).
#[allow(deprecated)] // SO_LINGER 0 is how a reset is sent; with 0 the drop does not block.
fn reset(socket: TcpStream) {
    // Without the option the close is a clean one: the client then sees the body end
    // early, which it reports as well; a test of resets would notice.
    let _ = socket.set_linger(Some(Duration::ZERO));
    drop(socket);
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn raw(server: &TestServer, request: &[u8]) -> String {
        let addr = server.url().trim_start_matches("http://");
        let mut socket = TcpStream::connect(addr).await.unwrap();
        socket.write_all(request).await.unwrap();
        let mut out = Vec::new();
        socket.read_to_end(&mut out).await.unwrap();
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn routes_replies_and_records_requests() {
        let server = TestServer::start(Endpoint::post("/v1/x").with_header("X-Key", "k"));
        server
            .reply(Reply::json(200, "{}"))
            .reply_once(Reply::new(503).with_body("busy"))
            .reply_when_json(|v| v["special"] == true, Reply::new(201));

        let post = |body: &str, key: &str| {
            format!(
                "POST /v1/x?q=1 HTTP/1.1\r\nhost: h\r\nx-key: {key}\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        let first = raw(&server, post("{}", "k").as_bytes()).await;
        assert!(first.starts_with("HTTP/1.1 503 "), "{first}");
        assert!(first.ends_with("busy"), "{first}");
        let special = raw(&server, post(r#"{"special":true}"#, "k").as_bytes()).await;
        assert!(special.starts_with("HTTP/1.1 201 "), "{special}");
        let normal = raw(&server, post("{}", "k").as_bytes()).await;
        assert!(
            normal.contains("content-type: application/json"),
            "{normal}"
        );
        let wrong_key = raw(&server, post("{}", "nope").as_bytes()).await;
        assert!(wrong_key.starts_with("HTTP/1.1 404 "), "{wrong_key}");
        assert!(
            wrong_key.contains("`x-key` has the wrong value"),
            "{wrong_key}"
        );
        let wrong_path = raw(&server, b"GET /v2 HTTP/1.1\r\n\r\n").await;
        assert!(wrong_path.contains("not GET /v2"), "{wrong_path}");

        let received = server.requests();
        assert_eq!(received.len(), 5);
        assert_eq!(received[0].path, "/v1/x");
        assert_eq!(received[0].header("X-KEY"), Some("k"));
        assert_eq!(received[1].json().unwrap()["special"], true);
        assert_eq!(server.request_count(), 5);
    }

    #[tokio::test]
    async fn reads_a_chunked_body() {
        let server = TestServer::start_any();
        server.reply(Reply::new(204));
        let reply = raw(
            &server,
            b"POST /a HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3;ext=1\r\n:1}\r\n0\r\n\r\n",
        )
        .await;
        assert!(reply.starts_with("HTTP/1.1 204 "), "{reply}");
        assert_eq!(server.requests()[0].body, b"{\"a\":1}");
    }

    #[tokio::test]
    async fn without_a_reply_it_answers_404_and_stops_when_dropped() {
        let server = TestServer::start_any();
        let reply = raw(&server, b"POST / HTTP/1.1\r\n\r\n").await;
        assert!(reply.contains("no reply set"), "{reply}");
        let addr = server.url().trim_start_matches("http://").to_owned();
        drop(server);
        // The accept loop ends at its next poll; give the runtime a turn.
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(TcpStream::connect(addr).await.is_err());
    }

    #[tokio::test]
    async fn faults_reset_or_go_silent() {
        let server = TestServer::start_any();
        server.reply(Reply::reset());
        let addr = server.url().trim_start_matches("http://").to_owned();
        let mut socket = TcpStream::connect(&addr).await.unwrap();
        socket.write_all(b"POST / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut out = Vec::new();
        let err = socket.read_to_end(&mut out).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);

        server.reply(Reply::sse("data: x\n\n").then_silence());
        let mut socket = TcpStream::connect(&addr).await.unwrap();
        socket.write_all(b"POST / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut head = vec![0u8; 512];
        let mut got = Vec::new();
        while find(&got, b"data: x\n\n").is_none() {
            let n = socket.read(&mut head).await.unwrap();
            assert!(n > 0);
            got.extend_from_slice(&head[..n]);
        }
        let text = String::from_utf8(got).unwrap();
        assert!(text.contains("transfer-encoding: chunked"), "{text}");
        // Nothing more arrives.
        let more = tokio::time::timeout(Duration::from_millis(50), socket.read(&mut head)).await;
        assert!(more.is_err(), "{more:?}");
    }
}
