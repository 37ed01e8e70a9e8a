//! What a run tells an observability stack: `tracing` spans named and attributed after
//! the OpenTelemetry GenAI semantic conventions, `reins.*` events for the people's
//! side of a run, and metrics through the [`metrics`] facade.
//!
//! Everything here is recorded in the code every driver runs (the `effects`
//! functions and the sans-IO `Run`), so the local driver and the Restate
//! driver report the same. Nothing is exported from here: an application installs a
//! `tracing-opentelemetry` layer for the spans (reins-server's `otel` feature does) and
//! a `metrics` recorder for the metrics (reins-server's `/metrics`); without them the
//! spans and metrics cost next to nothing.
//!
//! | span (`otel.name`) | where | attributes |
//! |---|---|---|
//! | `invoke_agent {agent}` | one per turn (a call of the session, to its pause or end; [`turn`], on both drivers) | `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.agent.name`, `gen_ai.conversation.id`, `gen_ai.request.model`, `reins.run.status`, `reins.resumed`, `reins.resumes` (the paused turn's `traceparent`, also a span link) |
//! | `chat {model}` | one per model call (`effects::reason`) | `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, `gen_ai.response.finish_reasons`; `gen_ai.input.messages` / `gen_ai.output.messages` only when [`capture_content`] |
//! | `execute_tool {tool}` | one per tool call | `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type`, `reins.tool.outcome`, `error.type` |
//!
//! The events (`reins.requirement.pending`, `reins.requirement.decided`,
//! `reins.decision.automatic`, `reins.interrupt`, `reins.reconcile`,
//! `reins.tool.replayed`) are listed in docs/observability.md with their attributes,
//! as are the metric names ([`metric`]).
//!
//! A turn that pauses stores its W3C `traceparent` in the run state (with the `otel`
//! feature and an OpenTelemetry layer installed); the turn that resumes it, in this
//! process or another, a day later or at once, starts a new trace linked to it. A
//! caller's `traceparent` that comes with an input
//! ([`Session::with_trace_parent`](crate::Session::with_trace_parent)) makes the turn a
//! child of the caller's span; a tool gets its `execute_tool` span's context
//! (`ToolContext::trace_parent`) to pass on.

mod hitl;
mod keys;
mod trace;

pub use hitl::door_of;
pub(crate) use hitl::{
    decided, decided_without_asking, interrupted, reconciled, replayed, requirement_pending,
};
pub use trace::{current_traceparent, link_to_traceparent, set_remote_parent, traceparent_of};

use std::time::{Duration, Instant};

use reins_message::{ToolOutcome, Usage};
use reins_model::FinishReason;
use tracing::Span;
use tracing::field::Empty;

use crate::output::RunStatus;

/// The metric names (Prometheus style; labels in brackets). Every label takes values
/// from a bounded set: a status, an outcome kind, a door, a verdict, the agent's own
/// model and tool names — never a session or call id.
pub mod metric {
    /// Counter: turns ended, by `status` (`completed`, `paused`, `cancelled`,
    /// `max_iterations`, `failed`).
    pub const RUNS: &str = "reins_runs_total";
    /// Histogram (seconds): model calls, by `model`.
    pub const MODEL_CALL_DURATION: &str = "reins_model_call_duration_seconds";
    /// Counter: model tokens, by `model` and `type` (`input`, `output`).
    pub const MODEL_TOKENS: &str = "reins_model_tokens_total";
    /// Histogram (seconds): tool calls that ran, by `tool`.
    pub const TOOL_CALL_DURATION: &str = "reins_tool_call_duration_seconds";
    /// Counter: tool calls, by `tool` and `outcome` (`success`, `error`, `rejected`,
    /// `cancelled`, `unknown`, `suspended`, `asking`, `failed`).
    pub const TOOL_CALLS: &str = "reins_tool_calls_total";
    /// Gauge: requirements waiting for a person, by `tool` (per process: a requirement
    /// that pauses in one process and is decided in another moves each process's
    /// value; their sum is the number waiting).
    pub const REQUIREMENTS_PENDING: &str = "reins_requirements_pending";
    /// Histogram (seconds): a requirement's wait from pending to decided, by `door`.
    pub const APPROVAL_WAIT: &str = "reins_approval_wait_seconds";
    /// Counter: decisions, by `door` (`inbox`/`api`, `ag-ui`, `a2a`, `mcp`, `acp`,
    /// `policy`, `grant`, `recovery`, `other`) and `verdict` (`approve`, `reject`,
    /// `edit`, `input`, `external_result`, ...).
    pub const DECISIONS: &str = "reins_decisions_total";
    /// Counter: interrupts that stopped a turn.
    pub const INTERRUPTS: &str = "reins_interrupts_total";
    /// Counter: reconcile verdicts after a crash, by `verdict`.
    pub const RECONCILES: &str = "reins_reconciles_total";
    /// Counter: results served from a fork's record instead of running the tool.
    pub const REPLAYED: &str = "reins_tool_results_replayed_total";
    /// Histogram (seconds): store calls the run makes, by `op` (`commit`, `claim`,
    /// `finish`).
    pub const STORE_CALL_DURATION: &str = "reins_store_call_duration_seconds";
    /// Counter: notices (webhooks, mail) delivered or not, by `channel` and `result`
    /// (`delivered`, `retry`, `dead`), incremented by reins-server's notice dispatcher.
    pub const NOTICES: &str = "reins_notices_total";
}

/// Whether message content goes on the spans (`gen_ai.input.messages`,
/// `gen_ai.output.messages`): only when the user opts in with
/// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`. Read once.
pub fn capture_content() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            .is_ok_and(|v| v.eq_ignore_ascii_case("true"))
    })
}

/// What names the model a span is about: `gen_ai.request.model` and
/// `gen_ai.provider.name` ([`ChatModel::provider_name`](reins_model::ChatModel::provider_name);
/// a model that names no provider leaves the attribute out).
#[derive(Debug, Clone, Copy)]
pub struct ModelId<'a> {
    /// The model's name.
    pub model: &'a str,
    /// Its provider, when known.
    pub provider: Option<&'a str>,
}

impl<'a> ModelId<'a> {
    /// The name and provider `model` reports.
    pub fn of(model: &'a dyn reins_model::ChatModel) -> Self {
        Self {
            model: model.model_name(),
            provider: model.provider_name(),
        }
    }
}

/// The `invoke_agent` span of one turn of `agent` on `session` (kind internal: the
/// agent runs in this process), with the model it calls.
pub fn invoke_agent(agent: &str, session: &str, model: ModelId<'_>, resumed: bool) -> Span {
    let span = tracing::info_span!(
        target: "reins",
        "invoke_agent",
        otel.name = %format_args!("invoke_agent {agent}"),
        otel.kind = "internal",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.provider.name = Empty,
        gen_ai.agent.name = %agent,
        gen_ai.conversation.id = %session,
        gen_ai.request.model = %model.model,
        reins.resumed = resumed,
        reins.resumes = Empty,
        reins.run.status = Empty,
        otel.status_code = Empty,
        error.type = Empty,
    );
    if let Some(p) = model.provider {
        span.record("gen_ai.provider.name", p);
    }
    span
}

/// The `invoke_agent` span of one turn of `agent` on `session`, as every driver opens
/// it: the agent's name and model, the caller's `traceparent` (when one came with the
/// input) as its parent, and for a turn that resumes a paused one (`resumed_from`: the
/// paused turn's stored `traceparent`) a link to that turn.
pub fn turn(
    agent: &crate::Agent,
    session: &str,
    resumed: bool,
    trace_parent: Option<&str>,
    resumed_from: Option<&str>,
) -> Span {
    let span = invoke_agent(
        agent.name(),
        session,
        ModelId::of(agent.runtime.model.as_ref()),
        resumed,
    );
    if let Some(tp) = trace_parent {
        set_remote_parent(&span, tp);
    }
    if resumed && let Some(tp) = resumed_from {
        link_to_traceparent(&span, tp);
    }
    span
}

/// Records how a turn ended, on its span and in [`metric::RUNS`].
pub fn run_ended(span: &Span, status: Result<RunStatus, &str>) {
    let label = match status {
        Ok(s) => status_label(s),
        Err(error) => {
            span.record("otel.status_code", "error");
            span.record("error.type", error);
            "failed"
        }
    };
    span.record("reins.run.status", label);
    match keys::RUNS.get(label) {
        Some(key) => keys::count(key, 1),
        None => metrics::counter!(metric::RUNS, "status" => label).increment(1),
    }
}

/// A [`RunStatus`] as a label.
pub fn status_label(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Completed => "completed",
        RunStatus::Paused => "paused",
        RunStatus::Cancelled => "cancelled",
        RunStatus::MaxIterations => "max_iterations",
    }
}

/// The `chat` span of one model call (kind client).
pub fn chat(model: ModelId<'_>) -> Span {
    let span = tracing::info_span!(
        target: "reins",
        "chat",
        otel.name = %format_args!("chat {}", model.model),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = Empty,
        gen_ai.request.model = %model.model,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        otel.status_code = Empty,
        error.type = Empty,
    );
    if let Some(p) = model.provider {
        span.record("gen_ai.provider.name", p);
    }
    span
}

/// Records the end of a model call on its span and in the metrics.
pub fn chat_ended(
    span: &Span,
    model: &str,
    elapsed: Duration,
    usage: Option<&Usage>,
    finish: Option<&FinishReason>,
) {
    keys::CHAT.with(model, |k| {
        keys::observe(&k.duration, elapsed.as_secs_f64());
        if let Some(u) = usage {
            keys::count(&k.input_tokens, u.input_tokens);
            keys::count(&k.output_tokens, u.output_tokens);
        }
    });
    if let Some(u) = usage {
        // As i64: the OpenTelemetry layer writes a u64 as a string, the conventions
        // type token counts int.
        span.record("gen_ai.usage.input_tokens", as_int(u.input_tokens));
        span.record("gen_ai.usage.output_tokens", as_int(u.output_tokens));
    }
    // Nothing is made for a span nobody records (no subscriber, or one that leaves
    // `reins` spans out).
    if let Some(f) = finish.filter(|_| !span.is_disabled()) {
        let reason = match f {
            FinishReason::Stop => "stop",
            FinishReason::ToolUse => "tool_call",
            FinishReason::Length => "length",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Other(o) => o.as_str(),
        };
        trace::finish_reasons(span, reason);
    }
}

/// A count as an OpenTelemetry int (i64; a larger one is clamped).
pub(crate) fn as_int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The `execute_tool` span of one tool call, and when it started.
#[derive(Debug)]
pub struct ToolSpan {
    span: Span,
    tool: String,
    started: Instant,
}

impl ToolSpan {
    /// Starts the span of the call `id` of `tool`.
    pub fn start(tool: &str, id: &str) -> Self {
        let span = tracing::info_span!(
            target: "reins",
            "execute_tool",
            otel.name = %format_args!("execute_tool {tool}"),
            otel.kind = "internal",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %tool,
            gen_ai.tool.call.id = %id,
            gen_ai.tool.type = "function",
            reins.tool.outcome = Empty,
            otel.status_code = Empty,
            error.type = Empty,
        );
        Self {
            span,
            tool: tool.to_owned(),
            started: Instant::now(),
        }
    }

    /// The span, to instrument the call's future with.
    pub fn span(&self) -> &Span {
        &self.span
    }

    /// Records how the call ended: its outcome kind (the run's
    /// `ExecOutcome::label`) or its error, the outcome count and (for a call that ran)
    /// its duration.
    pub fn end(&self, outcome: Result<&'static str, &str>) {
        match outcome {
            Ok(kind) => self.record(kind, None),
            Err(e) => self.record("failed", Some(e)),
        }
    }

    /// Records an outcome kind (see [`metric::TOOL_CALLS`]) and an error type.
    pub fn record(&self, kind: &'static str, error: Option<&str>) {
        self.span.record("reins.tool.outcome", kind);
        if matches!(kind, "error" | "failed" | "unknown" | "interrupted") {
            self.span.record("otel.status_code", "error");
            self.span.record("error.type", error.unwrap_or(kind));
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        keys::TOOL.with(&self.tool, |k| {
            k.calls(kind, |key| keys::count(key, 1));
            keys::observe(&k.duration, elapsed);
        });
    }
}

/// A tool outcome as a label (its wire label: `success`, `error`, `rejected`,
/// `cancelled`, `interrupted`, `unknown`).
pub fn outcome_label(o: &ToolOutcome) -> &'static str {
    o.label()
}

/// An error's `error.type`: a low-cardinality name of its kind.
pub fn error_type(e: &crate::error::AgentError) -> &'static str {
    use crate::error::AgentError as E;
    match e {
        E::Model(_) => "model",
        E::Hook(_) => "hook",
        E::Store(_) => "store",
        E::Summarization(_) => "summarization",
        E::ToolInFlight { .. } => "tool_in_flight",
        E::SessionBusy { .. } => "session_busy",
        E::InvalidOutput { .. } => "invalid_output",
        E::CorruptRunState { .. } => "corrupt_run_state",
        E::Backend(_) => "backend",
        _ => "_OTHER",
    }
}

/// Records the time a store call took (`op`: `commit`, `claim`, `finish`).
pub fn store_call(op: &'static str, elapsed: Duration) {
    match keys::STORE_CALLS.get(op) {
        Some(key) => keys::observe(key, elapsed.as_secs_f64()),
        None => metrics::histogram!(metric::STORE_CALL_DURATION, "op" => op)
            .record(elapsed.as_secs_f64()),
    }
}

#[cfg(test)]
mod tests;
