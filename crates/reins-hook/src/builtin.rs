//! Hooks that come with reins: [`ToolConfirmationHook`] and [`TracingHook`].

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;
use tracing::Span;

use crate::control::Control;
use crate::event::{HookContext, HookEvent, HookEventKind};
use crate::hook::{Hook, HookError};

/// Stops the run after reasoning when the model calls any of the listed tools, so a
/// person can approve or reject the calls before they run.
///
/// ```
/// use reins_hook::ToolConfirmationHook;
/// let hook = ToolConfirmationHook::new(["delete_file", "send_email"]);
/// assert!(hook.covers("send_email"));
/// assert!(!hook.covers("search_web"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct ToolConfirmationHook {
    tools: BTreeSet<String>,
}

impl ToolConfirmationHook {
    /// Stops when any of these tools is called.
    pub fn new(tools: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            tools: tools.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether calls to this tool stop the run.
    pub fn covers(&self, tool: &str) -> bool {
        self.tools.contains(tool)
    }
}

#[async_trait]
impl Hook for ToolConfirmationHook {
    fn name(&self) -> &str {
        "ToolConfirmationHook"
    }

    fn interested(&self, kind: HookEventKind) -> bool {
        kind == HookEventKind::PostReasoning
    }

    async fn on_event(
        &self,
        event: &mut HookEvent,
        _ctx: &HookContext,
        control: &mut Control,
    ) -> Result<(), HookError> {
        if let HookEvent::PostReasoning { message } = event {
            if message.tool_uses().any(|u| self.covers(&u.name)) {
                control.stop_agent();
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum SpanKey {
    Call(String),
    Reasoning(String),
    Acting(String, String),
}

/// Traces the run with `tracing`: an `agent.call` span from `PreCall` to `PostCall`,
/// an `agent.reasoning` span from `PreReasoning` (or `PreSummary`) to `PostReasoning`
/// (or `PostSummary`), and an `agent.acting` span per tool call from `PreActing` to
/// `PostActing`, with events inside them. Chunks are traced only when asked for
/// ([`TracingHook::with_chunks`]); errors are logged at `warn` and close the session's
/// open spans.
///
/// It never changes the run and never fails.
#[derive(Debug, Default)]
pub struct TracingHook {
    chunks: bool,
    spans: Mutex<HashMap<SpanKey, Span>>,
}

impl TracingHook {
    /// A tracing hook that skips chunk events.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also traces `ReasoningChunk` and `ActingChunk` events (at `trace` level).
    #[must_use]
    pub fn with_chunks(mut self, chunks: bool) -> Self {
        self.chunks = chunks;
        self
    }

    /// How many spans are open (calls, reasoning steps and tool calls in progress).
    pub fn open_spans(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SpanKey, Span>> {
        // A poisoned map only holds spans; keep using it.
        self.spans
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn open(&self, key: SpanKey, span: Span) -> Span {
        self.lock().insert(key, span.clone());
        span
    }

    fn close(&self, key: &SpanKey) -> Span {
        self.lock().remove(key).unwrap_or_else(Span::none)
    }

    fn current(&self, key: &SpanKey) -> Span {
        self.lock().get(key).cloned().unwrap_or_else(Span::none)
    }
}

#[async_trait]
impl Hook for TracingHook {
    fn name(&self) -> &str {
        "TracingHook"
    }

    fn interested(&self, kind: HookEventKind) -> bool {
        self.chunks || !kind.is_chunk()
    }

    async fn on_event(
        &self,
        event: &mut HookEvent,
        ctx: &HookContext,
        _control: &mut Control,
    ) -> Result<(), HookError> {
        let session = ctx.session_id.clone();
        let agent = ctx.agent_name.as_str();
        let summary = event.kind() == HookEventKind::PreSummary;
        match &*event {
            HookEvent::PreCall { input } => {
                let span = tracing::info_span!("agent.call", agent, session_id = %session);
                let span = self.open(SpanKey::Call(session), span);
                tracing::info!(parent: &span, resume = input.is_none(), "call started");
            }
            HookEvent::PostCall { output } => {
                let span = self.close(&SpanKey::Call(session));
                tracing::info!(parent: &span, chars = output.text().len(), "call finished");
            }
            HookEvent::PreReasoning { request } | HookEvent::PreSummary { request, .. } => {
                let parent = self.current(&SpanKey::Call(session.clone()));
                let span = tracing::debug_span!(parent: &parent, "agent.reasoning", iteration = ctx.iteration, summary);
                let span = self.open(SpanKey::Reasoning(session), span);
                tracing::debug!(parent: &span, messages = request.messages.len(), tools = request.tools.len(), "model request");
            }
            HookEvent::ReasoningChunk { chunk, .. } => {
                let span = self.current(&SpanKey::Reasoning(session));
                tracing::trace!(parent: &span, ?chunk, "model chunk");
            }
            HookEvent::PostReasoning { message } | HookEvent::PostSummary { message, .. } => {
                let span = self.close(&SpanKey::Reasoning(session));
                tracing::debug!(parent: &span, tool_uses = message.tool_uses().count(), chars = message.text().len(), "model answered");
            }
            HookEvent::PreActing { tool_use } => {
                let parent = self.current(&SpanKey::Call(session.clone()));
                let span = tracing::debug_span!(parent: &parent, "agent.acting", tool = %tool_use.name, tool_use_id = %tool_use.id);
                let span = self.open(SpanKey::Acting(session, tool_use.id.clone()), span);
                tracing::debug!(parent: &span, "tool call started");
            }
            HookEvent::ActingChunk { tool_use_id, chunk } => {
                let span = self.current(&SpanKey::Acting(session, tool_use_id.clone()));
                tracing::trace!(parent: &span, ?chunk, "tool chunk");
            }
            HookEvent::PostActing { tool_use, result } => {
                let span = self.close(&SpanKey::Acting(session, tool_use.id.clone()));
                tracing::debug!(parent: &span, outcome = result.outcome.label(), "tool call finished");
            }
            HookEvent::ToolReplayed { result } => {
                let parent = self.current(&SpanKey::Call(session));
                tracing::debug!(parent: &parent, tool = %result.name, tool_use_id = %result.id, "tool call served from the fork's record");
            }
            HookEvent::Reconciled {
                tool_use, verdict, ..
            } => {
                let parent = self.current(&SpanKey::Call(session));
                tracing::info!(parent: &parent, tool = %tool_use.name, tool_use_id = %tool_use.id, %verdict, "a call whose outcome was unknown was reconciled");
            }
            HookEvent::Forked {
                source,
                at,
                recorded_calls,
            } => {
                tracing::info!(session_id = %session, %source, at, recorded_calls, "session forked");
            }
            HookEvent::Error { message } => {
                let parent = self.current(&SpanKey::Call(session.clone()));
                tracing::warn!(parent: &parent, error = %message, "run failed");
                self.lock().retain(|k, _| match k {
                    SpanKey::Call(s) | SpanKey::Reasoning(s) | SpanKey::Acting(s, _) => {
                        *s != session
                    }
                });
            }
        }
        Ok(())
    }
}
