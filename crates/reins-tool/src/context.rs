//! [`ToolContext`]: what a tool knows about the call it is serving.

use reins_message::ContentBlock;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// A question a running tool asks a person, mid-call (an MCP server's elicitation,
/// or any tool that needs one more answer before it can finish).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolQuestion {
    /// What to ask, for a person.
    pub message: String,
    /// A JSON Schema (an object schema) of the answer's fields.
    pub schema: Value,
}

/// A person's answer to a [`ToolQuestion`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "answer", content = "values", rename_all = "snake_case")]
pub enum QuestionAnswer {
    /// The fields, matching the question's schema.
    Accept(Value),
    /// The person declined to answer.
    Decline,
    /// The question was withdrawn without an answer (the run was interrupted, moved
    /// on, or nobody could be asked).
    Cancel,
}

/// A question on its way from a tool to whoever runs it, with where the answer goes.
#[derive(Debug)]
pub struct PendingQuestion {
    /// The id of the tool use asking.
    pub tool_use_id: String,
    /// The question.
    pub question: ToolQuestion,
    /// Where the answer goes.
    pub reply: oneshot::Sender<QuestionAnswer>,
}

/// A piece of partial output a tool emitted while running.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolChunk {
    /// The id of the tool use being served.
    pub tool_use_id: String,
    /// The partial output.
    pub block: ContentBlock,
}

/// What a tool is given with each call: who is calling, a cancellation token, and a
/// way to stream partial output.
///
/// ```
/// use reins_message::ContentBlock;
/// use reins_tool::ToolContext;
/// use tokio_util::sync::CancellationToken;
///
/// let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
/// let token = CancellationToken::new();
/// let ctx = ToolContext::new("session-1", "call_1")
///     .with_cancel(token.clone())
///     .with_chunk_sender(tx);
/// ctx.emit(ContentBlock::text("10% done"));
/// assert_eq!(rx.try_recv().unwrap().tool_use_id, "call_1");
/// token.cancel();
/// assert!(ctx.is_cancelled());
/// ```
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The session the call belongs to.
    pub session_id: String,
    /// The id of the tool use being served.
    pub tool_use_id: String,
    /// Fires when the run is interrupted (or the call timed out). A cooperative tool
    /// watches it and returns early; one that does not is aborted after a grace period.
    pub cancel: CancellationToken,
    chunks: Option<UnboundedSender<ToolChunk>>,
    questions: Option<UnboundedSender<PendingQuestion>>,
    idempotency_key: IdempotencyKey,
    trace_parent: Option<String>,
}

/// A context's idempotency key: none, given, or derived on first use from the
/// arguments' fingerprint (most tools never ask, and the SHA-256 was 6 % of a
/// tool-call run's instructions).
#[derive(Debug, Clone, Default)]
enum IdempotencyKey {
    #[default]
    None,
    Given(String),
    Derived {
        fingerprint: String,
        key: std::sync::OnceLock<String>,
    },
}

impl ToolContext {
    /// A context with a fresh (never cancelled) token and no chunk receiver.
    pub fn new(session_id: impl Into<String>, tool_use_id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            tool_use_id: tool_use_id.into(),
            cancel: CancellationToken::new(),
            chunks: None,
            questions: None,
            idempotency_key: IdempotencyKey::None,
            trace_parent: None,
        }
    }

    /// The W3C `traceparent` of the span the call runs in (its `execute_tool` span,
    /// set by the agent when an OpenTelemetry layer records spans): a tool that calls
    /// another service passes it on (an HTTP `traceparent` header, an MCP request's
    /// `_meta.traceparent`), so that the service's spans join the run's trace.
    #[must_use]
    pub fn with_trace_parent(mut self, traceparent: Option<String>) -> Self {
        self.trace_parent = traceparent;
        self
    }

    /// The call's W3C `traceparent`, when the agent records traces (see
    /// [`ToolContext::with_trace_parent`]).
    pub fn trace_parent(&self) -> Option<&str> {
        self.trace_parent.as_deref()
    }

    /// Uses this idempotency key (see [`ToolContext::idempotency_key`]).
    #[must_use]
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = IdempotencyKey::Given(key.into());
        self
    }

    /// Derives the idempotency key, when a tool asks for it, from the session, the tool
    /// use id and `args_fingerprint` (the [`fingerprint`](reins_message::fingerprint)
    /// of the arguments that run): the same key as
    /// [`idempotency_key`](crate::idempotency_key) gives, computed at most once.
    ///
    /// ```
    /// use reins_tool::ToolContext;
    ///
    /// let fp = reins_message::fingerprint(&serde_json::json!({"to": "a@example.com"}));
    /// let ctx = ToolContext::new("s", "call_1").with_args_fingerprint(fp.clone());
    /// assert_eq!(ctx.idempotency_key(), Some(reins_tool::idempotency_key("s", "call_1", &fp).as_str()));
    /// ```
    #[must_use]
    pub fn with_args_fingerprint(mut self, args_fingerprint: impl Into<String>) -> Self {
        self.idempotency_key = IdempotencyKey::Derived {
            fingerprint: args_fingerprint.into(),
            key: std::sync::OnceLock::new(),
        };
        self
    }

    /// The call's idempotency key: the same for every attempt at this execution, in
    /// any process, and different when the arguments were edited before it ran (see
    /// [`idempotency_key`](crate::idempotency_key) for the derivation). Send it to an
    /// API that dedupes retries (the [`ToolContext::idempotency_header`]), or use it to
    /// look the effect up in [`Tool::reconcile`](crate::Tool::reconcile).
    ///
    /// Always set inside a call made by [`Toolkit::execute`](crate::Toolkit::execute)
    /// (and so in every call an agent makes): the agent sets it from the ledger's
    /// fingerprint of the arguments that run, the toolkit derives it from the call's
    /// arguments when the context has none. `None` only in a context made by hand.
    pub fn idempotency_key(&self) -> Option<&str> {
        match &self.idempotency_key {
            IdempotencyKey::None => None,
            IdempotencyKey::Given(k) => Some(k),
            IdempotencyKey::Derived { fingerprint, key } => Some(key.get_or_init(|| {
                crate::idempotency_key(&self.session_id, &self.tool_use_id, fingerprint)
            })),
        }
    }

    /// The `Idempotency-Key` HTTP header (name, value) for this call, ready for an
    /// HTTP client's `.header(name, value)`.
    ///
    /// ```
    /// use reins_tool::ToolContext;
    ///
    /// let ctx = ToolContext::new("s", "call_1").with_idempotency_key("k-1");
    /// assert_eq!(ctx.idempotency_header(), Some(("Idempotency-Key", "k-1")));
    /// // With reqwest: `client.post(url).header(name, value)`.
    /// ```
    pub fn idempotency_header(&self) -> Option<(&'static str, &str)> {
        self.idempotency_key()
            .map(|k| (crate::idempotency::IDEMPOTENCY_KEY_HEADER, k))
    }

    /// Uses this cancellation token.
    #[must_use]
    pub fn with_cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Sends partial output ([`ToolContext::emit`]) to this channel.
    #[must_use]
    pub fn with_chunk_sender(mut self, tx: UnboundedSender<ToolChunk>) -> Self {
        self.chunks = Some(tx);
        self
    }

    /// Sends a piece of partial output to whoever listens (the agent turns it into an
    /// `ActingChunk` hook event). Does nothing when nobody listens.
    pub fn emit(&self, block: impl Into<ContentBlock>) {
        if let Some(tx) = &self.chunks {
            // A closed receiver means nobody listens any more; partial output is optional.
            let _ = tx.send(ToolChunk {
                tool_use_id: self.tool_use_id.clone(),
                block: block.into(),
            });
        }
    }

    /// Sends the questions this call asks ([`ToolContext::ask`]) to this channel.
    #[must_use]
    pub fn with_question_sender(mut self, tx: UnboundedSender<PendingQuestion>) -> Self {
        self.questions = Some(tx);
        self
    }

    /// Whether someone can answer [`ToolContext::ask`] (an agent's run does: the
    /// question pauses the run as a user-input requirement).
    pub fn can_ask(&self) -> bool {
        self.questions.as_ref().is_some_and(|tx| !tx.is_closed())
    }

    /// Asks a person a question and waits for the answer, while the call stays in
    /// flight. In an agent's run the question becomes a requirement (kind user input,
    /// the schema as its fields): the run pauses, and `resolve(Decision::input(..))`
    /// answers ([`QuestionAnswer::Accept`]) or a rejection declines
    /// ([`QuestionAnswer::Decline`]). The answer is [`QuestionAnswer::Cancel`] when the
    /// call is cancelled meanwhile, and [`QuestionAnswer::Decline`] when nobody can be
    /// asked ([`ToolContext::can_ask`] is false).
    pub async fn ask(&self, question: ToolQuestion) -> QuestionAnswer {
        let Some(tx) = &self.questions else {
            return QuestionAnswer::Decline;
        };
        let (reply, answer) = oneshot::channel();
        let pending = PendingQuestion {
            tool_use_id: self.tool_use_id.clone(),
            question,
            reply,
        };
        if tx.send(pending).is_err() {
            return QuestionAnswer::Decline;
        }
        tokio::select! {
            a = answer => a.unwrap_or(QuestionAnswer::Cancel),
            () = self.cancel.cancelled() => QuestionAnswer::Cancel,
        }
    }

    /// Whether the call has been asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Completes when the call is asked to stop; use in `tokio::select!`.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// Whether partial output has somewhere to go.
    pub fn has_chunk_sender(&self) -> bool {
        self.chunks.as_ref().is_some_and(|tx| !tx.is_closed())
    }

    /// A copy for the executor, with a child token so a timeout can stop this call
    /// without cancelling the caller's token.
    /// Whether a key is set or derivable (without deriving it).
    pub(crate) fn has_idempotency_key(&self) -> bool {
        !matches!(self.idempotency_key, IdempotencyKey::None)
    }

    pub(crate) fn child(&self) -> Self {
        Self {
            cancel: self.cancel.child_token(),
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_without_a_receiver_is_a_no_op() {
        let ctx = ToolContext::new("s", "c");
        ctx.emit("nobody listens");
        assert!(!ctx.has_chunk_sender());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let ctx = ctx.with_chunk_sender(tx);
        assert!(ctx.has_chunk_sender());
        drop(rx);
        ctx.emit("receiver gone");
        assert!(!ctx.has_chunk_sender());
    }

    #[tokio::test]
    async fn a_question_reaches_the_asker_and_the_answer_comes_back() {
        let ctx = ToolContext::new("s", "c");
        let q = ToolQuestion {
            message: "which seat?".into(),
            schema: serde_json::json!({"type": "object"}),
        };
        assert!(!ctx.can_ask());
        assert_eq!(ctx.ask(q.clone()).await, QuestionAnswer::Decline);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let ctx = ctx.with_question_sender(tx);
        assert!(ctx.can_ask());
        let asker = tokio::spawn({
            let ctx = ctx.clone();
            let q = q.clone();
            async move { ctx.ask(q).await }
        });
        let pending = rx.recv().await.unwrap();
        assert_eq!(pending.tool_use_id, "c");
        assert_eq!(pending.question, q);
        pending
            .reply
            .send(QuestionAnswer::Accept(serde_json::json!({"seat": "12A"})))
            .unwrap();
        assert_eq!(
            asker.await.unwrap(),
            QuestionAnswer::Accept(serde_json::json!({"seat": "12A"}))
        );
        // An unanswered question is cancelled with the call.
        let asker = tokio::spawn({
            let ctx = ctx.clone();
            async move { ctx.ask(q).await }
        });
        let _pending = rx.recv().await.unwrap();
        ctx.cancel.cancel();
        assert_eq!(asker.await.unwrap(), QuestionAnswer::Cancel);
    }

    #[test]
    fn child_tokens_follow_the_parent_but_not_back() {
        let ctx = ToolContext::new("s", "c");
        let child = ctx.child();
        child.cancel.cancel();
        assert!(!ctx.is_cancelled());
        let child = ctx.child();
        ctx.cancel.cancel();
        assert!(child.is_cancelled());
    }
}
