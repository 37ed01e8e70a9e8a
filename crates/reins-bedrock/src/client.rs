//! [`BedrockChat`]: the provider, its credentials, SigV4 signing and the HTTP exchange.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use reins_model::http::{BodyStream, HttpSettings, WireFormat, preview};
use reins_model::{
    ChatModel, ChatRequest, ChatStream, ModelCapabilities, ModelError, Result, RetryPolicy,
};

use crate::decode::{BedrockDecoder, exception, frames_as_events};
use crate::wire::request_body;

/// AWS credentials for signing (the secret is held by the HTTP settings as the
/// "key", so that it is redacted from every error).
#[derive(Clone, Default)]
struct Access {
    key_id: String,
    session_token: Option<String>,
}

/// A model on Amazon Bedrock, spoken to with the ConverseStream API
/// (`POST {base}/model/{modelId}/converse-stream`), each request signed with AWS
/// Signature Version 4 (service `bedrock`).
///
/// Reasoning blocks come back with their signatures (or as redacted content) and
/// are kept in the assistant message as thinking blocks whose signature is sealed
/// for [`PROVIDER`](crate::PROVIDER); every later request sends them back exactly,
/// before the tool calls they led to — after a pause of any length, in another
/// process, after an edit or a rejection.
///
/// The secret key and the session token never appear in `Debug` output or errors.
#[derive(Clone)]
pub struct BedrockChat {
    model: String,
    region: String,
    http: HttpSettings,
    access: Access,
    path: String,
}

impl std::fmt::Debug for BedrockChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BedrockChat")
            .field("model", &self.model)
            .field("region", &self.region)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

/// Percent-encodes a model id (or ARN) as one path segment.
fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn stream_path(model: &str) -> String {
    format!("/model/{}/converse-stream", path_segment(model))
}

/// Bedrock Runtime's endpoint in `region`.
pub fn endpoint_for(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

struct Exchange<'a> {
    url: String,
    path: &'a str,
    region: &'a str,
    access: &'a Access,
    body: Vec<u8>,
}

impl Exchange<'_> {
    fn signature_headers(
        &self,
        secret: &str,
    ) -> std::result::Result<Vec<(String, String)>, String> {
        let identity = Credentials::new(
            self.access.key_id.clone(),
            secret.to_owned(),
            self.access.session_token.clone(),
            None,
            "reins-bedrock",
        )
        .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(self.region)
            .name("bedrock")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| e.to_string())?
            .into();
        let headers = [("content-type", "application/json")];
        let signable = SignableRequest::new(
            "POST",
            self.url.as_str(),
            headers.into_iter(),
            SignableBody::Bytes(&self.body),
        )
        .map_err(|e| e.to_string())?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| e.to_string())?
            .into_parts();
        Ok(instructions
            .headers()
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect())
    }
}

impl WireFormat for Exchange<'_> {
    type Decoder = BedrockDecoder;

    fn path(&self) -> &str {
        self.path
    }

    fn decoder(&self) -> BedrockDecoder {
        BedrockDecoder::new()
    }

    fn accept(&self) -> &str {
        "application/vnd.amazon.eventstream"
    }

    fn authorize(&self, request: reqwest::RequestBuilder, secret: &str) -> reqwest::RequestBuilder {
        match self.signature_headers(secret) {
            Ok(headers) => headers
                .into_iter()
                .fold(request, |r, (name, value)| r.header(name, value)),
            Err(e) => {
                // Unsigned, the request is refused with 403 (an auth error).
                tracing::warn!("could not sign the Bedrock request: {e}");
                request
            }
        }
    }

    fn body_stream(&self, body: BodyStream) -> BodyStream {
        frames_as_events(body)
    }

    fn http_error(&self, status: u16, body: &str, retry_after: Option<Duration>) -> ModelError {
        let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
        let message = parsed
            .as_ref()
            .and_then(|v| v.get("message").or_else(|| v.get("Message")))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| {
                let text = preview(body.trim());
                if text.is_empty() {
                    format!("HTTP {status}")
                } else {
                    text
                }
            });
        match status {
            429 => ModelError::from_http_status(status, message, retry_after),
            _ if (400..600).contains(&status) => {
                ModelError::from_http_status(status, message, retry_after)
            }
            _ => exception("unknown", message, false),
        }
    }
}

impl BedrockChat {
    fn build(http: HttpSettings, region: String, access: Access, model: String) -> Self {
        Self {
            path: stream_path(&model),
            model,
            region,
            http,
            access,
        }
    }

    /// Credentials from the environment: `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` (optional), the region from
    /// `AWS_REGION` (else `AWS_DEFAULT_REGION`, else `us-east-1`), the endpoint from
    /// `BEDROCK_BASE_URL` or `https://bedrock-runtime.{region}.amazonaws.com`; e.g.
    /// `BedrockChat::new("anthropic.claude-3-7-sonnet-20250219-v1:0")`.
    pub fn new(model: impl Into<String>) -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let region = var("AWS_REGION")
            .or_else(|| var("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".to_owned());
        let http = HttpSettings::new("bedrock", endpoint_for(&region))
            .with_base_url_from_env("BEDROCK_BASE_URL")
            .with_api_key_from_env("AWS_SECRET_ACCESS_KEY");
        let access = Access {
            key_id: var("AWS_ACCESS_KEY_ID").unwrap_or_default(),
            session_token: var("AWS_SESSION_TOKEN"),
        };
        Self::build(http, region, access, model.into())
    }

    /// A model in `region` signed with these credentials, through these HTTP
    /// settings (their key is replaced by `secret_access_key`; their base URL is the
    /// part before `/model/...`).
    pub fn from_settings(
        http: HttpSettings,
        region: impl Into<String>,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        model: impl Into<String>,
    ) -> Self {
        let access = Access {
            key_id: access_key_id.into(),
            session_token: None,
        };
        Self::build(
            http.with_api_key(secret_access_key),
            region.into(),
            access,
            model.into(),
        )
    }

    /// Uses these credentials.
    #[must_use]
    pub fn with_credentials(
        mut self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        self.access = Access {
            key_id: access_key_id.into(),
            session_token,
        };
        self.http = self.http.with_api_key(secret_access_key);
        self
    }

    /// Signs for this region (the base URL is not changed).
    #[must_use]
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = region.into();
        self
    }

    /// Uses this base URL (the part before `/model/...`), e.g. a VPC endpoint or a
    /// test server.
    #[must_use]
    pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
        self.http = self.http.with_base_url(url);
        self
    }

    /// Uses this model id (or inference profile / ARN).
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self.path = stream_path(&self.model);
        self
    }

    /// Retries failures before the first chunk with this policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.http = self.http.with_retry(retry);
        self
    }

    /// The time allowed for the first chunk, and for each silence after it.
    #[must_use]
    pub fn with_timeout(mut self, d: Duration) -> Self {
        self.http = self.http.with_timeout(d);
        self
    }

    /// Whether both halves of the credentials are configured.
    pub fn has_credentials(&self) -> bool {
        self.http.has_api_key() && !self.access.key_id.is_empty()
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The base URL requests go to.
    pub fn base_url(&self) -> &str {
        self.http.base_url()
    }

    /// The path of the non-streamed Converse call for this model
    /// (`/model/{modelId}/converse`, the id percent-encoded).
    pub fn converse_path(&self) -> String {
        format!("/model/{}/converse", path_segment(&self.model))
    }

    /// The SigV4 headers (`authorization`, `x-amz-date`, and
    /// `x-amz-security-token` with a session token) for a `POST` of `body` as
    /// `application/json` to `url`, signed now for this region and service
    /// `bedrock` — for calls this type does not make itself, such as the
    /// non-streamed Converse.
    ///
    /// # Errors
    /// [`ModelError::Auth`] when the credentials are missing or cannot sign.
    pub fn sign_headers(&self, url: &str, body: &[u8]) -> Result<Vec<(String, String)>> {
        let secret = self.http.api_key()?.unwrap_or_default();
        if self.access.key_id.is_empty() || secret.is_empty() {
            return Err(ModelError::Auth {
                message: "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
                    .into(),
            });
        }
        let exchange = Exchange {
            url: url.to_owned(),
            path: &self.path,
            region: &self.region,
            access: &self.access,
            body: body.to_vec(),
        };
        exchange
            .signature_headers(secret)
            .map_err(|message| ModelError::Auth { message })
    }

    /// The JSON body this provider would send for `request`.
    ///
    /// # Errors
    /// [`ModelError::InvalidRequest`] when the request cannot be expressed (a named
    /// tool choice without tools, tool calls in the history without tools offered,
    /// structured output, an image type Converse does not take).
    pub fn request_body(&self, request: &ChatRequest) -> Result<serde_json::Value> {
        request_body(request)
    }
}

#[async_trait::async_trait]
impl ChatModel for BedrockChat {
    fn model_name(&self) -> &str {
        &self.model
    }

    /// `aws.bedrock`: Amazon Bedrock's Converse API.
    fn provider_name(&self) -> Option<&str> {
        Some("aws.bedrock")
    }

    fn capabilities(&self) -> ModelCapabilities {
        ModelCapabilities::new(true, true)
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream> {
        self.http.api_key()?;
        if self.access.key_id.is_empty() {
            return Err(ModelError::Auth {
                message: "no AWS access key id: set AWS_ACCESS_KEY_ID".into(),
            });
        }
        let body = self.request_body(&request)?;
        let bytes =
            serde_json::to_vec(&body).map_err(|e| ModelError::InvalidRequest(e.to_string()))?;
        let exchange = Exchange {
            url: self.http.endpoint(&self.path),
            path: &self.path,
            region: &self.region,
            access: &self.access,
            body: bytes,
        };
        self.http.stream(&exchange, &body).await
    }
}
