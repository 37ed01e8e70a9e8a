//! Serving a router over TCP with timeouts against slow clients.
//!
//! `axum::serve` gives hyper no timer, so a client that sends its request head one
//! byte at a time holds a connection (and a task) for as long as it likes. This accept
//! loop serves each connection with hyper's HTTP/1.1 server and a header read timeout:
//! the request line and headers must arrive within it, or the connection is closed.
//! The same timeout bounds how long an idle keep-alive connection waits for its next
//! request. Bodies are bounded by the router's own layers (see
//! [`Server::body_timeout`](crate::Server::body_timeout)); responses, SSE streams
//! included, are never cut by either.

use std::future::Future;
use std::io;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How connections are served (see [`serve`]).
#[derive(Debug, Clone)]
#[must_use]
pub struct ServeOptions {
    header_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(15),
        }
    }
}

impl ServeOptions {
    /// The defaults: a 15 s header timeout.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long a client has to send a request's line and headers, counted from when
    /// the server starts waiting for them (default 15 s); it also bounds how long an
    /// idle keep-alive connection is kept. The connection is closed when it runs out.
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }
}

/// Serves `app` on `listener` until the process ends (HTTP/1.1, with the header
/// timeout of `options`). Use it for a router from [`Server::router`](crate::Server::router)
/// nested in a larger application; [`Server::serve`](crate::Server::serve) does this for
/// a server on its own.
///
/// # Errors
///
/// Never returns under normal operation; accept errors (e.g. too many open files) are
/// logged and retried after a second.
pub async fn serve(listener: TcpListener, app: Router, options: ServeOptions) -> io::Result<()> {
    serve_with_shutdown(listener, app, options, std::future::pending()).await
}

/// Like [`serve`], until `signal` completes: then it stops accepting, lets each
/// connection finish the response it is writing (an SSE stream ends when its client
/// leaves), and returns when all connections are closed.
///
/// # Errors
///
/// As [`serve`].
pub async fn serve_with_shutdown<F>(
    listener: TcpListener,
    app: Router,
    options: ServeOptions,
    signal: F,
) -> io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    // Dropping `stop_tx` tells the connections to finish; each holds a `done_rx`
    // clone, so `done_tx.closed()` completes when the last one is gone.
    let (stop_tx, stop_rx) = watch::channel(());
    let (done_tx, done_rx) = watch::channel(());
    let mut signal = std::pin::pin!(signal);
    loop {
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "accept failed; retrying in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
            () = &mut signal => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let mut stop = stop_rx.clone();
        let done = done_rx.clone();
        let header_timeout = options.header_timeout;
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%remote, error = %e, "connection closed with an error");
            }
            drop(done);
        });
    }
    drop(listener);
    drop(stop_tx);
    drop(done_rx);
    done_tx.closed().await;
    Ok(())
}

/// Errors of one connection that are no reason to stop accepting.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}
