//! W3C trace context: a paused turn's, taken from its span when the turn pauses
//! (stored in the run state) and made a link of the span of the turn that resumes it;
//! a caller's, made the parent of the turn's span; a tool call's, handed to the tool.
//! Without the `otel` feature, or without an OpenTelemetry layer, there is no trace
//! context: nothing is stored, linked or parented.

use tracing::Span;

/// The current span's W3C `traceparent` (`00-<trace id>-<span id>-<flags>`), when an
/// OpenTelemetry layer records it (`otel` feature).
pub fn current_traceparent() -> Option<String> {
    traceparent_of(&Span::current())
}

/// `span`'s W3C `traceparent`, when an OpenTelemetry layer records it (`otel`
/// feature).
#[cfg(feature = "otel")]
pub fn traceparent_of(span: &Span) -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let cx = span.context();
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

/// A span's W3C `traceparent`: `None` without the `otel` feature.
#[cfg(not(feature = "otel"))]
pub fn traceparent_of(_span: &Span) -> Option<String> {
    None
}

/// The span context a W3C `traceparent` names (version `00`), marked remote; `None`
/// for a malformed or all-zero one.
#[cfg(feature = "otel")]
fn parse_traceparent(traceparent: &str) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    let mut parts = traceparent.trim().split('-');
    let (Some("00"), Some(trace), Some(span_id), Some(flags), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    // The W3C form: lowercase hex of fixed widths.
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !(hex(trace, 32) && hex(span_id, 16) && hex(flags, 2)) {
        return None;
    }
    let (Ok(trace), Ok(span_id), Ok(flags)) = (
        TraceId::from_hex(trace),
        SpanId::from_hex(span_id),
        u8::from_str_radix(flags, 16),
    ) else {
        return None;
    };
    let cx = SpanContext::new(
        trace,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    cx.is_valid().then_some(cx)
}

/// Links `span` to the span a `traceparent` names, and records it as the span's
/// `reins.resumes` attribute (for backends that show no links). A malformed one is
/// ignored: it came from a store, and a missing link is better than a failed turn.
/// Returns whether the link was made.
#[cfg(feature = "otel")]
pub fn link_to_traceparent(span: &Span, traceparent: &str) -> bool {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let Some(cx) = parse_traceparent(traceparent) else {
        return false;
    };
    span.record("reins.resumes", traceparent);
    span.add_link_with_attributes(
        cx,
        vec![opentelemetry::KeyValue::new("reins.link", "resumes")],
    );
    true
}

/// Makes the span a `traceparent` names the parent of `span`, which must not have
/// been entered yet: the caller's trace context (W3C Trace Context) that came with a
/// request — an HTTP `traceparent` header, an MCP request's `_meta.traceparent` —
/// so that the turn's spans join the caller's trace. A malformed one is ignored, as
/// the W3C text asks (the span starts a trace of its own). Returns whether the parent
/// was set.
#[cfg(feature = "otel")]
pub fn set_remote_parent(span: &Span, traceparent: &str) -> bool {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let Some(sc) = parse_traceparent(traceparent) else {
        return false;
    };
    span.set_parent(opentelemetry::Context::new().with_remote_span_context(sc))
        .is_ok()
}

/// Sets the caller's trace context as `span`'s parent: nothing without the `otel`
/// feature.
#[cfg(not(feature = "otel"))]
pub fn set_remote_parent(_span: &Span, _traceparent: &str) -> bool {
    false
}

/// Records `gen_ai.response.finish_reasons`: a string array, as the conventions type
/// it (with the `otel` feature, straight onto the OpenTelemetry span).
#[cfg(feature = "otel")]
pub(super) fn finish_reasons(span: &Span, reason: &str) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    span.set_attribute(
        "gen_ai.response.finish_reasons",
        opentelemetry::Value::Array(
            vec![opentelemetry::StringValue::from(reason.to_owned())].into(),
        ),
    );
}

/// Records `gen_ai.response.finish_reasons`, without the `otel` feature as the JSON of
/// the one-element array.
#[cfg(not(feature = "otel"))]
pub(super) fn finish_reasons(span: &Span, reason: &str) {
    span.record(
        "gen_ai.response.finish_reasons",
        serde_json::json!([reason]).to_string(),
    );
}

/// Links `span` to a `traceparent`: nothing without the `otel` feature.
#[cfg(not(feature = "otel"))]
pub fn link_to_traceparent(_span: &Span, _traceparent: &str) -> bool {
    false
}
