//! Serving: stdio (this process's stdin/stdout) and streamable HTTP (a tower service
//! to mount, or a loopback listener).

#[cfg(feature = "http")]
use std::sync::Arc;

use crate::config::McpAgentServer;
#[cfg(any(feature = "stdio", feature = "http"))]
use crate::error::{Error, Result};

/// The streamable HTTP service type [`McpAgentServer::http_service`] returns.
#[cfg(feature = "http")]
pub type HttpService = rmcp::transport::streamable_http_server::StreamableHttpService<
    McpAgentServer,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
>;

impl McpAgentServer {
    /// Serves MCP over this process's stdin and stdout until the client closes stdin
    /// (a desktop host starts the program and talks to it this way). Logs must go to
    /// stderr.
    #[cfg(feature = "stdio")]
    pub async fn serve_stdio(self) -> Result<()> {
        use rmcp::ServiceExt;
        let running = match self.serve(rmcp::transport::stdio()).await {
            Ok(r) => r,
            // A client that only probed (`server/discover`) and left: a clean end.
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
            Err(e) => return Err(Error::Transport(e.to_string())),
        };
        running
            .waiting()
            .await
            .map_err(|e| Error::Transport(e.to_string()))?;
        Ok(())
    }

    /// Serves MCP over any byte stream pair (a socket, a pipe, an in-memory duplex).
    pub async fn serve_stream<R, W>(self, read: R, write: W) -> Result<(), std::io::Error>
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        use rmcp::ServiceExt;
        let running = self
            .serve((read, write))
            .await
            .map_err(std::io::Error::other)?;
        running.waiting().await.map_err(std::io::Error::other)?;
        Ok(())
    }

    /// The streamable HTTP endpoint as a tower service (mount it at `/mcp` in an axum
    /// router, beside reins-server's routes if you like). Revision 2026-07-28 requests
    /// are served statelessly; older clients get a session (`Mcp-Session-Id`) per
    /// `initialize`. Host-header validation accepts loopback names only; widen it with
    /// [`http_service_for_hosts`](Self::http_service_for_hosts) behind a proxy.
    #[cfg(feature = "http")]
    pub fn http_service(&self) -> HttpService {
        self.http_service_for_hosts(["localhost", "127.0.0.1", "::1"])
    }

    /// [`http_service`](Self::http_service) accepting these `Host` names.
    #[cfg(feature = "http")]
    pub fn http_service_for_hosts(
        &self,
        hosts: impl IntoIterator<Item = impl Into<String>>,
    ) -> HttpService {
        let me = self.clone();
        let config = rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default()
            .with_allowed_hosts(hosts)
            .with_legacy_session_mode(true);
        rmcp::transport::streamable_http_server::StreamableHttpService::new(
            move || Ok(me.clone()),
            Arc::default(),
            config,
        )
    }

    /// An axum router with the endpoint at `/mcp`.
    #[cfg(feature = "http")]
    pub fn router(&self) -> axum::Router {
        axum::Router::new().route_service("/mcp", self.http_service())
    }

    /// Serves [`router`](Self::router) on `listener` until the task is dropped or the
    /// listener fails.
    #[cfg(feature = "http")]
    pub async fn serve_http(self, listener: tokio::net::TcpListener) -> Result<()> {
        axum::serve(listener, self.router())
            .await
            .map_err(|e| Error::Transport(e.to_string()))
    }
}
