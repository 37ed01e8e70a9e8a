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
    /// `initialize`.
    ///
    /// Against DNS rebinding (the transport's security rules), the `Host` header must
    /// be a loopback name, and a request with an `Origin` header must come from a
    /// loopback origin (any port, http or https) or one added with
    /// [`allowed_origins`](crate::McpAgentServerBuilder::allowed_origins); anything else
    /// is refused with 403 before it is read. Requests without `Origin` (programs rather
    /// than browser pages) pass. Behind a proxy, use
    /// [`http_service_for_hosts`](Self::http_service_for_hosts).
    #[cfg(feature = "http")]
    pub fn http_service(&self) -> HttpService {
        self.http_service_for_hosts(["localhost", "127.0.0.1", "::1"])
    }

    /// [`http_service`](Self::http_service) accepting these `Host` names (`name` or
    /// `name:port`; an empty list accepts any `Host`). Browser origins on these hosts
    /// (http or https; any port unless the entry names one) and the
    /// [`allowed_origins`](crate::McpAgentServerBuilder::allowed_origins) may call it;
    /// other origins get 403.
    #[cfg(feature = "http")]
    pub fn http_service_for_hosts(
        &self,
        hosts: impl IntoIterator<Item = impl Into<String>>,
    ) -> HttpService {
        let me = self.clone();
        let hosts: Vec<String> = hosts.into_iter().map(Into::into).collect();
        let mut origins: Vec<String> = hosts.iter().flat_map(|h| same_host_origins(h)).collect();
        origins.extend(self.inner.allowed_origins.iter().cloned());
        // Checked even when the list is empty: then every request carrying an Origin
        // is refused (rmcp turns the check off for an empty list unless told).
        let config = rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default()
            .with_allowed_hosts(hosts)
            .with_allowed_origins(origins)
            .enforce_origin_validation()
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

/// The browser origins of a served host: `http` and `https`, on the port the entry
/// names or any port.
#[cfg(feature = "http")]
fn same_host_origins(host: &str) -> Vec<String> {
    let host = host.trim();
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        // `[::1]` or `[::1]:8080`
        match rest.split_once(']') {
            Some((ip, tail)) => (format!("[{ip}]"), tail.strip_prefix(':').map(str::to_owned)),
            None => return Vec::new(),
        }
    } else if host.matches(':').count() > 1 {
        // A bare IPv6 address.
        (format!("[{host}]"), None)
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port.to_owned())),
            None => (host.to_owned(), None),
        }
    };
    if name.is_empty() {
        return Vec::new();
    }
    let port = port.unwrap_or_else(|| "*".to_owned());
    ["http", "https"]
        .iter()
        .map(|scheme| format!("{scheme}://{name}:{port}"))
        .collect()
}

#[cfg(all(test, feature = "http"))]
mod tests {
    use super::same_host_origins;

    #[test]
    fn a_served_host_allows_its_own_origins() {
        assert_eq!(
            same_host_origins("localhost"),
            ["http://localhost:*", "https://localhost:*"]
        );
        assert_eq!(
            same_host_origins("::1"),
            ["http://[::1]:*", "https://[::1]:*"]
        );
        assert_eq!(
            same_host_origins("[::1]:8080"),
            ["http://[::1]:8080", "https://[::1]:8080"]
        );
        assert_eq!(
            same_host_origins("mcp.example.com:443"),
            ["http://mcp.example.com:443", "https://mcp.example.com:443"]
        );
        assert!(same_host_origins("").is_empty());
    }
}
