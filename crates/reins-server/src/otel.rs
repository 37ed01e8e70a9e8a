//! OTLP export of reins's spans (feature `otel`): the `invoke_agent`, `chat` and
//! `execute_tool` spans and the `reins.*` events that `reins_agent::telemetry`
//! records, sent over OTLP/HTTP (protobuf) or OTLP/gRPC to a collector or a backend
//! (Arize Phoenix, Jaeger, an OpenTelemetry Collector, ...).
//!
//! ```no_run
//! # async fn run() -> Result<(), reins_server::otel::OtlpError> {
//! use reins_server::otel::{Otlp, OtlpProtocol};
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::util::SubscriberInitExt;
//!
//! // Inside the Tokio runtime: the exporter runs on it.
//! let otlp = Otlp::new("http://127.0.0.1:4318", OtlpProtocol::Http, "my-agents")?;
//! tracing_subscriber::registry().with(otlp.layer()).init();
//! // ... serve ...
//! otlp.shutdown(); // flushes what is buffered
//! # Ok(()) }
//! ```
//!
//! Only reins's own spans go out (target `reins`): the HTTP layer's request spans and
//! the logs stay with whatever other layer the application installs.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies (a collector's port 4318; `/v1/traces` is added to
    /// an endpoint without a path).
    Http,
    /// OTLP/gRPC (a collector's port 4317).
    Grpc,
}

/// Why the exporter could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtlpError {
    /// The endpoint is not an `http://` or `https://` URL.
    #[error("the OTLP endpoint `{0}` is not an http:// or https:// URL")]
    Endpoint(String),
    /// The exporter refused its configuration.
    #[error("cannot set up the OTLP exporter: {0}")]
    Exporter(String),
    /// Not called inside a Tokio runtime (the exporter runs on it).
    #[error("the OTLP exporter must be set up inside a Tokio runtime")]
    NoRuntime,
}

/// An OTLP span exporter and the tracer provider that feeds it.
#[derive(Debug)]
pub struct Otlp {
    provider: SdkTracerProvider,
}

impl Otlp {
    /// An exporter to `endpoint` over `protocol`, its spans carrying `service.name =
    /// service`. Must be called inside a Tokio runtime.
    ///
    /// # Errors
    /// [`OtlpError`]: a malformed endpoint, a refused configuration, no runtime.
    pub fn new(endpoint: &str, protocol: OtlpProtocol, service: &str) -> Result<Self, OtlpError> {
        let Some(rest) = endpoint
            .strip_prefix("http://")
            .or_else(|| endpoint.strip_prefix("https://"))
        else {
            return Err(OtlpError::Endpoint(endpoint.to_owned()));
        };
        if rest.is_empty() || rest.starts_with('/') {
            return Err(OtlpError::Endpoint(endpoint.to_owned()));
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(OtlpError::NoRuntime);
        }
        // The exporter's HTTPS client needs a process-wide crypto provider: ring, as
        // the rest of the workspace (a provider installed before is kept).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let exporter = match protocol {
            OtlpProtocol::Http => {
                let url = if rest.contains('/') && !rest.ends_with('/') {
                    endpoint.to_owned()
                } else {
                    format!("{}/v1/traces", endpoint.trim_end_matches('/'))
                };
                opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_endpoint(url)
                    .build()
            }
            OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .build(),
        }
        .map_err(|e| OtlpError::Exporter(e.to_string()))?;
        let processor =
            BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(
                Resource::builder()
                    .with_service_name(service.to_owned())
                    .build(),
            )
            .build();
        Ok(Self { provider })
    }

    /// The `tracing` layer that turns reins's spans (target `reins`) into OpenTelemetry
    /// spans for this exporter.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("reins"))
            .with_filter(Targets::new().with_target("reins", tracing::Level::INFO))
    }

    /// Flushes the buffered spans and stops the exporter.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "the OTLP exporter did not shut down cleanly");
        }
    }
}
