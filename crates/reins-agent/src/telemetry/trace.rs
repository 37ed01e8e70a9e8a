//! The W3C trace context of a paused turn: taken from the current span when the turn
//! pauses (stored in the run state), and made a link of the span of the turn that
//! resumes it. Without the `otel` feature, or without an OpenTelemetry layer, there is
//! no trace context: nothing is stored and nothing is linked.

use tracing::Span;

/// The current span's W3C `traceparent` (`00-<trace id>-<span id>-<flags>`), when an
/// OpenTelemetry layer records it (`otel` feature).
#[cfg(feature = "otel")]
pub fn current_traceparent() -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let cx = Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// The current span's W3C `traceparent`: `None` without the `otel` feature.
#[cfg(not(feature = "otel"))]
pub fn current_traceparent() -> Option<String> {
    None
}

/// Links `span` to the span a `traceparent` names, and records it as the span's
/// `reins.resumes` attribute (for backends that show no links). A malformed one is
/// ignored: it came from a store, and a missing link is better than a failed turn.
/// Returns whether the link was made.
#[cfg(feature = "otel")]
pub fn link_to_traceparent(span: &Span, traceparent: &str) -> bool {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let mut parts = traceparent.split('-');
    let (Some("00"), Some(trace), Some(span_id), Some(flags), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    let (Ok(trace), Ok(span_id), Ok(flags)) = (
        TraceId::from_hex(trace),
        SpanId::from_hex(span_id),
        u8::from_str_radix(flags, 16),
    ) else {
        return false;
    };
    let cx = SpanContext::new(
        trace,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    if !cx.is_valid() {
        return false;
    }
    span.record("reins.resumes", traceparent);
    span.add_link_with_attributes(
        cx,
        vec![opentelemetry::KeyValue::new("reins.link", "resumes")],
    );
    true
}

/// Links `span` to a `traceparent`: nothing without the `otel` feature.
#[cfg(not(feature = "otel"))]
pub fn link_to_traceparent(_span: &Span, _traceparent: &str) -> bool {
    false
}
