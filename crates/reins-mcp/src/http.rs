//! The streamable HTTP transport (rmcp's reqwest client).

use std::collections::HashMap;

use http::{HeaderName, HeaderValue};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use crate::connection::Handler;
use crate::error::{Error, Result};

/// Opens a session with `url` (`lifecycle`: how it opens), sending `headers` (and `bearer` as
/// `Authorization: Bearer ..`) with every request.
pub(crate) async fn serve(
    handler: Handler,
    lifecycle: ClientLifecycleMode,
    server: &str,
    url: &str,
    headers: &[(String, String)],
    bearer: Option<&str>,
) -> Result<RunningService<RoleClient, Handler>> {
    // rmcp's reqwest client is built without a TLS crypto provider of its own (so the
    // workspace does not compile aws-lc); install ring's unless the program already
    // chose one. `Err` only means one is installed.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let mut map = HashMap::new();
    for (name, value) in headers {
        let config = |what: &str| Error::Config {
            server: server.to_owned(),
            // The value may be a secret: only the header's name is shown.
            message: format!("the {what} of HTTP header `{name}` is not valid"),
        };
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| config("name"))?;
        let v = HeaderValue::from_str(value).map_err(|_| config("value"))?;
        map.insert(n, v);
    }
    let mut config =
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).custom_headers(map);
    if let Some(token) = bearer {
        config = config.auth_header(token.to_owned());
    }
    handler
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(config),
            lifecycle,
        )
        .await
        .map_err(|e| Error::Handshake {
            server: server.to_owned(),
            message: e.to_string(),
        })
}
