//! [`HookEvent`]: one variant per point of an agent's run.

use reins_message::{ContentBlock, Msg, ToolResult, ToolUse};
use reins_model::{ChatChunk, ChatRequest};

/// Something that happened in an agent's run, handed to each [`Hook`](crate::Hook) in
/// turn. Hooks change the run by mutating the event's data (where the variant says it
/// is mutable) and by calling [`Control`](crate::Control) methods.
#[derive(Debug, Clone, PartialEq)]
pub enum HookEvent {
    /// A call begins. `input` (mutable) is the new message, `None` for a resume.
    PreCall {
        /// The caller's message.
        input: Option<Msg>,
    },
    /// A call ends. `output` (mutable) is the message returned to the caller.
    PostCall {
        /// The final message.
        output: Msg,
    },
    /// The model is about to be called. The request (messages, tools, options) is
    /// mutable.
    PreReasoning {
        /// What will be sent.
        request: ChatRequest,
    },
    /// A streamed piece of the model's answer. Read-only: changes are discarded.
    ReasoningChunk {
        /// The new piece.
        chunk: ChatChunk,
        /// The answer's text so far, this chunk included.
        accumulated_text: String,
    },
    /// The model answered. The message is mutable; `stop_agent()` pauses before its
    /// tools run, `goto_reasoning(msgs)` calls the model again with `msgs` added.
    PostReasoning {
        /// The model's message.
        message: Msg,
    },
    /// A tool is about to run. The tool use is mutable; `reject(note)` refuses the call
    /// (the model is told the note).
    PreActing {
        /// The call.
        tool_use: ToolUse,
    },
    /// A tool streamed partial output. Read-only: changes are discarded.
    ActingChunk {
        /// The id of the call.
        tool_use_id: String,
        /// The partial output.
        chunk: ContentBlock,
    },
    /// A tool finished. The result is mutable (the tool use is for reference);
    /// `stop_agent()` pauses after the results are stored.
    PostActing {
        /// The call.
        tool_use: ToolUse,
        /// Its result.
        result: ToolResult,
    },
    /// The model is about to be asked for a summary: the run hit its iteration limit
    /// ([`SummaryReason::IterationLimit`]), or older turns are being compressed to keep
    /// the request within the context budget ([`SummaryReason::Context`]). The request
    /// is mutable.
    PreSummary {
        /// What will be sent.
        request: ChatRequest,
        /// Why a summary is asked for.
        reason: SummaryReason,
    },
    /// The summary arrived. The message is mutable (for a context summary, its text
    /// becomes the stored summary).
    PostSummary {
        /// The summary.
        message: Msg,
        /// Why it was asked for.
        reason: SummaryReason,
    },
    /// A fork's call was served from the record of the session it was forked from
    /// instead of running again (read-only).
    ToolReplayed {
        /// The result, addressed to the fork's tool use; its metadata names the
        /// source's call (`replayed_from`) and session (`replayed_session`).
        result: ToolResult,
    },
    /// A call whose outcome was unknown (the process running it died mid-call) was
    /// reconciled: its tool was asked whether the effect happened (read-only). The
    /// verdict is `happened`, `not_run` (the call runs again) or `cannot_tell` (it
    /// stays unknown).
    Reconciled {
        /// The call.
        tool_use: ToolUse,
        /// `happened`, `not_run` or `cannot_tell`.
        verdict: String,
        /// The call's idempotency key, the one the tool was asked about.
        idempotency_key: String,
    },
    /// A session was forked from another one (read-only; the context's session is
    /// the new fork).
    Forked {
        /// The session it was forked from.
        source: String,
        /// How many of the source's messages it kept.
        at: usize,
        /// How many of the source's finished calls it may serve from the record.
        recorded_calls: usize,
    },
    /// The run failed.
    Error {
        /// What went wrong.
        message: String,
    },
}

impl HookEvent {
    /// Which kind of event this is.
    pub fn kind(&self) -> HookEventKind {
        match self {
            Self::PreCall { .. } => HookEventKind::PreCall,
            Self::PostCall { .. } => HookEventKind::PostCall,
            Self::PreReasoning { .. } => HookEventKind::PreReasoning,
            Self::ReasoningChunk { .. } => HookEventKind::ReasoningChunk,
            Self::PostReasoning { .. } => HookEventKind::PostReasoning,
            Self::PreActing { .. } => HookEventKind::PreActing,
            Self::ActingChunk { .. } => HookEventKind::ActingChunk,
            Self::PostActing { .. } => HookEventKind::PostActing,
            Self::PreSummary { .. } => HookEventKind::PreSummary,
            Self::PostSummary { .. } => HookEventKind::PostSummary,
            Self::ToolReplayed { .. } => HookEventKind::ToolReplayed,
            Self::Reconciled { .. } => HookEventKind::Reconciled,
            Self::Forked { .. } => HookEventKind::Forked,
            Self::Error { .. } => HookEventKind::Error,
        }
    }
}

/// Why the model is asked for a summary ([`HookEvent::PreSummary`],
/// [`HookEvent::PostSummary`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SummaryReason {
    /// The run reached its iteration limit: a last call without tools, whose answer
    /// ends the run.
    IterationLimit,
    /// The request was over the agent's context budget: older turns are summarized
    /// into a stored summary message that stands in for them in requests.
    Context,
}

/// The kind of a [`HookEvent`], without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HookEventKind {
    /// [`HookEvent::PreCall`].
    PreCall,
    /// [`HookEvent::PostCall`].
    PostCall,
    /// [`HookEvent::PreReasoning`].
    PreReasoning,
    /// [`HookEvent::ReasoningChunk`].
    ReasoningChunk,
    /// [`HookEvent::PostReasoning`].
    PostReasoning,
    /// [`HookEvent::PreActing`].
    PreActing,
    /// [`HookEvent::ActingChunk`].
    ActingChunk,
    /// [`HookEvent::PostActing`].
    PostActing,
    /// [`HookEvent::PreSummary`].
    PreSummary,
    /// [`HookEvent::PostSummary`].
    PostSummary,
    /// [`HookEvent::ToolReplayed`].
    ToolReplayed,
    /// [`HookEvent::Forked`].
    Forked,
    /// [`HookEvent::Reconciled`].
    Reconciled,
    /// [`HookEvent::Error`].
    Error,
}

impl HookEventKind {
    /// Every kind, in the order they occur in a run.
    pub const ALL: [Self; 14] = [
        Self::Forked,
        Self::PreCall,
        Self::PreReasoning,
        Self::ReasoningChunk,
        Self::PostReasoning,
        Self::PreActing,
        Self::Reconciled,
        Self::ActingChunk,
        Self::PostActing,
        Self::PreSummary,
        Self::PostSummary,
        Self::ToolReplayed,
        Self::PostCall,
        Self::Error,
    ];

    /// Whether hooks may only look: changes to these events are discarded.
    pub fn is_read_only(self) -> bool {
        matches!(
            self,
            Self::ReasoningChunk
                | Self::ActingChunk
                | Self::ToolReplayed
                | Self::Reconciled
                | Self::Forked
                | Self::Error
        )
    }

    /// Whether this is a streamed chunk (frequent; skip it when nobody listens).
    pub fn is_chunk(self) -> bool {
        matches!(self, Self::ReasoningChunk | Self::ActingChunk)
    }

    /// The snake_case name, e.g. `post_reasoning`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PreCall => "pre_call",
            Self::PostCall => "post_call",
            Self::PreReasoning => "pre_reasoning",
            Self::ReasoningChunk => "reasoning_chunk",
            Self::PostReasoning => "post_reasoning",
            Self::PreActing => "pre_acting",
            Self::ActingChunk => "acting_chunk",
            Self::PostActing => "post_acting",
            Self::PreSummary => "pre_summary",
            Self::PostSummary => "post_summary",
            Self::ToolReplayed => "tool_replayed",
            Self::Forked => "forked",
            Self::Reconciled => "reconciled",
            Self::Error => "error",
        }
    }
}

impl std::fmt::Display for HookEventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an event happened: which agent, which session, which iteration of the
/// reasoning/acting loop (0 before the first model call).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HookContext {
    /// The agent's name.
    pub agent_name: String,
    /// The session's id.
    pub session_id: String,
    /// The loop iteration.
    pub iteration: u32,
}

impl HookContext {
    /// A context for this agent and session, at iteration 0.
    pub fn new(agent_name: impl Into<String>, session_id: impl Into<String>) -> Self {
        Self {
            agent_name: agent_name.into(),
            session_id: session_id.into(),
            iteration: 0,
        }
    }

    /// Sets the iteration.
    #[must_use]
    pub fn with_iteration(mut self, iteration: u32) -> Self {
        self.iteration = iteration;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_mirror_variants() {
        let e = HookEvent::Error {
            message: "x".into(),
        };
        assert_eq!(e.kind(), HookEventKind::Error);
        assert_eq!(HookEventKind::PostReasoning.to_string(), "post_reasoning");
        let chunks: Vec<_> = HookEventKind::ALL
            .into_iter()
            .filter(|k| k.is_chunk())
            .collect();
        assert_eq!(
            chunks,
            [HookEventKind::ReasoningChunk, HookEventKind::ActingChunk]
        );
        assert!(HookEventKind::ActingChunk.is_read_only());
        assert!(!HookEventKind::PreActing.is_read_only());
    }
}
