//! `GET /metrics`: the process's metrics in the Prometheus text format.
//!
//! reins records its metrics through the [`metrics`] facade (the run's, in
//! `reins_agent::telemetry`; names in docs/observability.md), so the crates that
//! record them depend on no exporter. This module installs the facade's Prometheus
//! recorder, `metrics-exporter-prometheus`, as the process's recorder the first time a
//! router is built, and renders it on each scrape. Chosen over the `prometheus` crate
//! because the facade lets every crate record without a registry handed down to it,
//! and because the exporter is maintained with the facade (metrics-rs) and renders the
//! text format without its own HTTP listener (its default features are off). The
//! endpoint needs no token, as `/healthz` does: it carries no session data, and its
//! labels take values from bounded sets only (no session or call ids).
//!
//! A process that installed another recorder first keeps it: `/metrics` then answers
//! 503 with a note saying so.

use std::sync::OnceLock;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The process's Prometheus recorder, when this module installed it.
static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the Prometheus recorder as the process's `metrics` recorder, once; returns
/// its handle, or `None` when another recorder was installed first.
pub fn install() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(&[
                    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    300.0, 900.0, 3600.0, 14_400.0, 86_400.0,
                ])
                .ok()?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            Some(handle)
        })
        .as_ref()
}

/// The `/metrics` route.
pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    install();
    Router::new().route("/metrics", get(scrape))
}

async fn scrape() -> Response {
    match install() {
        Some(h) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            h.render(),
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "another metrics recorder was installed in this process before reins-server's; \
             export its metrics from there\n",
        )
            .into_response(),
    }
}
